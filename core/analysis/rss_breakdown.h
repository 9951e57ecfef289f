// SPDX-License-Identifier: Apache-2.0
// "RSS explained" (docs/analysis.md, "RSS explained";
// decision rss-explained): a traced process's anonymous resident memory broken
// down into what leakwatch tracks (live heap, tracked mmap), the rest of the
// heap regions (held before attach, or retained by the allocator), thread
// stacks and the rest (untracked), plus file-backed RSS. The
// parsers and the arithmetic are pure; RssSampler reads /proc, bounded in size
// and in rate (smaps walks the page tables under the mmap lock). Every /proc
// text may be hostile or racy: parsers skip what they do not understand and
// never fail hard. Thread-safety: free functions are reentrant; RssSampler is
// not thread-safe (one per owner thread).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/proc/proc_maps.h"

namespace lw {

// /proc/PID/smaps_rollup's totals, in bytes.
struct SmapsRollup {
  uint64_t rss = 0;
  uint64_t anonymous = 0;
  uint64_t swap = 0;
  bool has_rss = false, has_anonymous = false;
};
// Parses smaps_rollup text; nullopt unless both Rss and Anonymous are read.
std::optional<SmapsRollup> parse_smaps_rollup(std::string_view text);

// One mapping of /proc/PID/smaps with the figures the breakdown needs.
struct SmapsMapping {
  MapEntry map;
  uint64_t rss = 0;        // bytes
  uint64_t anonymous = 0;  // bytes
};
struct ParsedSmaps {
  std::vector<SmapsMapping> mappings;  // ascending, disjoint
  size_t malformed_lines = 0;
};
// Parses /proc/PID/smaps. Lines that are neither a mapping header nor a
// "Key: N kB" field, out-of-order headers and overflowing numbers are
// skipped and counted; at most kMaxSmapsMappings mappings are kept.
constexpr size_t kMaxSmapsMappings = 1u << 18;
ParsedSmaps parse_smaps(std::string_view text);
// The same one line at a time (read_smaps() feeds it as it reads); the
// headers' paths are stored once (MapsParser).
class SmapsParser {
 public:
  void feed(std::string_view line);
  ParsedSmaps take();

 private:
  ParsedSmaps out_;
  MapsParser headers_;
  bool have_ = false;  // a header was accepted; its fields follow
};

// The user stack pointer in /proc/PID/task/TID/syscall ("nr a1..a6 sp pc",
// or "-1 sp pc" outside a syscall); nullopt for "running" or malformed text.
std::optional<uint64_t> parse_syscall_sp(std::string_view text);

// Whether an anonymous mapping holds malloc's heap: "[heap]" (brk), or a
// glibc non-main arena heap: anonymous, private, read-write, starting on a
// 64 MiB boundary (HEAP_MAX_SIZE on 64-bit) and at most 64 MiB long.
bool is_heap_region(const MapEntry& m);

// What the process's mappings say (bytes of anonymous resident memory).
struct RssRegions {
  uint64_t anon_total = 0;   // smaps_rollup Anonymous
  uint64_t file_rss = 0;     // smaps_rollup Rss - Anonymous (file and shmem pages)
  uint64_t heap_regions = 0; // anonymous resident bytes in is_heap_region() mappings
  uint64_t stacks = 0;       // anonymous resident bytes in thread stack mappings
  uint32_t threads = 0;           // threads listed
  uint32_t stacks_located = 0;    // stack mappings found ([stack] or by stack pointer)
};
// Sums the regions from smaps: a mapping is a thread stack when it is
// "[stack]" or contains one of `stack_pointers`.
RssRegions classify_smaps(const SmapsRollup& rollup, const ParsedSmaps& smaps,
                          const std::vector<uint64_t>& stack_pointers);

// The breakdown (bytes). anon_total == live_heap + held_or_retained + tracked_mmap
// + stacks + untracked, always (every part is clamped so they add up).
struct RssBreakdown {
  bool valid = false;
  double read_at = 0;          // unix seconds of the smaps read
  uint64_t anon_total = 0;
  uint64_t live_heap = 0;      // tracked live heap, counted as chunk bytes (see heap_chunk_bytes)
  // Heap/arena resident bytes not in the tracked live heap: blocks allocated
  // before attach and still held (never seen, so never live), or freed
  // memory the allocator keeps (retention, fragmentation). smaps cannot
  // tell them apart; traced from its first instruction (top -c), a process
  // has only the latter (and its libraries' constructors' blocks).
  // Exported as part "held_before_attach_or_retained" (docs/analysis.md).
  uint64_t held_or_retained = 0;
  uint64_t tracked_mmap = 0;   // live anonymous mmap leakwatch records (kind mmap)
  uint64_t stacks = 0;         // thread stacks
  uint64_t untracked = 0;      // the rest: allocated before attach, or by unprobed code
  uint64_t file_rss = 0;       // file-backed (and shmem) resident bytes, not part of anon_total
  // Tracked mmap address space mapped PROT_NONE (decision reserved-address-space):
  // never resident, not part of anon_total, shown beside it.
  uint64_t reserved = 0;
  uint32_t threads = 0, stacks_located = 0;
  // Tracked figures above what the mappings hold (sampling estimates,
  // pages not yet touched, swapped-out memory): clamped away, shown here.
  uint64_t unattributed_tracked = 0;
};

// What leakwatch's accounting gives for one process.
struct TrackedBytes {
  uint64_t live_heap_requested = 0;  // sum of requested sizes (what HeapTracker records)
  uint64_t live_heap_allocations = 0;
  bool glibc = false;                // the allocator family is glibc malloc
  uint64_t live_mmap = 0;            // kind mmap, live (committed) bytes
  uint64_t reserved_mmap = 0;        // kind mmap, reserved (PROT_NONE) bytes
};

// The bytes live heap blocks occupy in the allocator: for glibc,
// requested + 16 B per block (the 8-byte chunk header plus alignment to
// 16: exact for requests that are multiples of 16, within 8 B otherwise;
// 64 B -> 80 B chunk). Other allocators: the requested bytes.
uint64_t heap_chunk_bytes(const TrackedBytes& t);

RssBreakdown compute_rss_breakdown(const RssRegions& r, const TrackedBytes& t);

// Reads /proc/PID/smaps_rollup, /proc/PID/smaps and every thread's
// /proc/PID/task/TID/syscall; nullopt when the process is gone or unreadable.
std::optional<RssRegions> read_rss_regions(pid_t pid);

// Reads and parses /proc/PID/smaps alone (bounded like read_rss_regions);
// nullopt when the process is gone or unreadable.
std::optional<ParsedSmaps> read_smaps(pid_t pid);

// Bounds how often a process's smaps is read: at most once per
// `min_interval_s` per pid; between reads, the last regions are reused with
// the current tracked figures. Only processes someone asks about are read.
class RssSampler {
 public:
  explicit RssSampler(double min_interval_s) : min_interval_s_(min_interval_s) {}
  // `now` in unix seconds. Invalid breakdown when unreadable and never read.
  RssBreakdown sample(pid_t pid, double now, const TrackedBytes& t);
  void forget(pid_t pid) { cache_.erase(pid); }
  void set_min_interval(double s) { min_interval_s_ = s; }
  // Drops every pid not in `keep` (exited processes).
  void retain(const std::vector<pid_t>& keep);
  uint64_t reads() const { return reads_; }

 private:
  struct Entry {
    RssRegions regions;
    double read_at = 0;
    bool ok = false;
  };
  double min_interval_s_;
  std::unordered_map<pid_t, Entry> cache_;
  uint64_t reads_ = 0;
};

}  // namespace lw
