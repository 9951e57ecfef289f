// Owns the loaded BPF object (skeleton), its maps and the ring buffer.
// RAII: destroying the session detaches every program and closes every fd,
// so no probe outlives the daemon's process (the kernel also drops them when
// the fds close on a crash).
// Thread-safety: not thread-safe. One thread polls; map reads from other
// threads go through the (thread-safe) bpf syscalls but share no state here.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/core/heap_tracker.h"
#include "daemon/core/result.h"
#include "leakwatch_abi.h"

struct leakwatch_bpf;
struct ring_buffer;
struct bpf_link;
struct bpf_program;

namespace lw {

struct BpfOptions {
  uint32_t ringbuf_bytes = 8u << 20;  // power of two, >= 4096
  uint32_t live_max_entries = 262144;
  uint32_t stack_max_entries = 16384;
  uint32_t ctx_max_entries = 65536;
  uint32_t max_targets = 4096;
  bool collect_stacks = true;
  bool trace_syscalls = true;  // mmap/munmap/mremap/brk tracepoints
  bool report_all_execs = false;  // daemon: discover new processes at exec
};

// Which BPF program a uprobe runs.
enum class ProbeProgram {
  kMallocEnter,
  kNewEnter,
  kCallocEnter,
  kReallocEnter,
  kReallocarrayEnter,
  kPosixMemalignEnter,
  kAlignedEnter,
  kAllocReturn,
  kFreeEnter,
  kSbrkEnter,
};

using Counters = std::array<uint64_t, LW_CNT_MAX>;

struct StoredStack {
  uint32_t flags = 0;          // LW_STACK_*
  std::vector<uint64_t> ips;   // leaf first
};

// Move-only owner of one attached probe.
class Link {
 public:
  Link() = default;
  explicit Link(bpf_link* link) : link_(link) {}
  Link(Link&& o) noexcept : link_(o.link_) { o.link_ = nullptr; }
  Link& operator=(Link&& o) noexcept;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;
  ~Link();

 private:
  bpf_link* link_ = nullptr;
};

class BpfSession {
 public:
  // Opens, sizes and loads the BPF object and attaches the process-lifecycle
  // (and, if enabled, syscall) tracepoints. Errors say what the kernel lacks.
  static Result<std::unique_ptr<BpfSession>> create(const BpfOptions& options);
  ~BpfSession();

  // Attaches `program` to `pid` at `file_offset` in the file `path` (a
  // /proc/self/fd/N path of an fd the caller holds, so no symlink in the
  // target's root can redirect the kernel's lookup).
  Result<Link> attach_uprobe(ProbeProgram program, pid_t pid, const std::string& path,
                             uint64_t file_offset, bool retprobe);

  // Per-target state in the kernel.
  Status set_target(pid_t tgid, uint32_t flags, uint64_t start_ns);
  Status remove_target(pid_t tgid);
  std::optional<lw_target> get_target(pid_t tgid) const;

  // Reads every live record of `tgid` from the kernel map.
  Result<std::vector<KernelRecord>> read_live(pid_t tgid) const;
  // Deletes every live record of `tgid` (exit, exec, re-attach).
  Status purge_live(pid_t tgid);
  // The user stack stored under `stack_hash` (leaf first), or empty.
  StoredStack read_stack(uint64_t stack_hash) const;

  // Sum over CPUs of the per-CPU counters.
  Counters read_counters() const;

  // Ring buffer: `handler` gets each record's bytes. poll() returns the
  // number of records consumed or an Error.
  using RecordHandler = std::function<void(const void* data, size_t len)>;
  void set_record_handler(RecordHandler handler) { handler_ = std::move(handler); }
  Result<int> poll(int timeout_ms);
  // Consumes everything already in the buffer without waiting.
  Result<int> drain();

  BpfSession(const BpfSession&) = delete;
  BpfSession& operator=(const BpfSession&) = delete;

 private:
  BpfSession() = default;
  static int on_record(void* ctx, void* data, size_t len);
  bpf_program* program(ProbeProgram p) const;

  leakwatch_bpf* skel_ = nullptr;
  ring_buffer* ringbuf_ = nullptr;
  RecordHandler handler_;
};

// Human-readable name of a counter, as used in JSON and metrics.
const char* counter_name(size_t index);

}  // namespace lw
