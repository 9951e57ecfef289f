/* SPDX-License-Identifier: Apache-2.0 */
// The kernel live-allocation map's size when `limits.live_map_entries` is
// automatic (decision live-map-sizing): a share of RAM, bounded by what the
// memory cgroup leaves after the daemon's own budget (kernel map memory is
// charged to the cgroup of the process that creates the map). Pure and
// unit-tested, apart from the two readers of /proc and /sys at the end.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "core/config/config.h"

namespace lw {

// What one entry of the (not preallocated) live map costs the kernel when
// used: the hash element (48-byte header + 16-byte key + 24-byte value = 88)
// from bpf_mem_alloc's 96-byte size class. Plus one 16-byte bucket per slot
// of the bucket array, a power of two at or above max_entries, allocated
// when the map is created. Measured against bpftool's figures in
// tests/integration/live_map_size_test.cc.
inline constexpr uint64_t kLiveMapEntryBytes = 96;
inline constexpr uint64_t kLiveMapBucketBytes = 16;
// The automatic size never goes below this (a tight envelope is warned
// about instead) nor above the map's hard maximum.
inline constexpr uint32_t kLiveMapMinAutoEntries = 65536;
// What else the kernel charges to the daemon's cgroup, besides the live
// map, the ring buffer and the unwind tables (deploy/systemd's MemoryMax
// arithmetic, measured at the defaults): the stack, per-thread and small
// maps and programs (10 MiB), kernel objects per attached probe and socket
// buffers (32 MiB), page cache and slack (48 MiB).
inline constexpr uint64_t kLiveMapEnvelopeReserveBytes = 90ull << 20;

// Kernel memory of a live map of `entries` entries: at creation (buckets
// only) and full.
uint64_t live_map_bucket_bytes(uint64_t entries);
uint64_t live_map_worst_bytes(uint64_t entries);

struct LiveMapHost {
  uint64_t ram_bytes = 0;           // MemTotal
  uint64_t cgroup_limit_bytes = 0;  // memory.max of our cgroup; 0 = none
};

struct LiveMapSizing {
  uint32_t entries = 0;
  bool automatic = false;
  uint64_t worst_bytes = 0;    // full
  uint64_t bucket_bytes = 0;   // at creation
  uint64_t ram_bytes = 0;
  uint64_t cgroup_limit_bytes = 0;  // 0 = none
  // Set when the automatic size was raised to kLiveMapMinAutoEntries
  // because the envelope left less: the map may then not fit it.
  bool envelope_too_small = false;
  // Decision live-map-sizing: not preallocated (BPF_F_NO_PREALLOC).
  bool preallocated = false;
};

// configured_entries != 0 wins. Otherwise the largest entry count whose
// worst-case bytes fit min(percent% of RAM, cgroup limit - reserved_bytes)
// (the cgroup bound only when there is a limit), clamped to
// [kLiveMapMinAutoEntries, kLiveMapMaxEntries].
LiveMapSizing size_live_map(uint32_t configured_entries, uint32_t percent_of_ram,
                            uint64_t reserved_bytes, const LiveMapHost& host);

// One line for the log: entries, worst bytes and where they came from.
std::string describe(const LiveMapSizing& s);

// Parsers, for the readers below and the tests.
std::optional<uint64_t> parse_meminfo_total(const std::string& meminfo);
// memory.max (v2: a number or "max") or memory.limit_in_bytes (v1: a
// number, near 2^63 when unlimited): 0 when unlimited.
std::optional<uint64_t> parse_cgroup_limit(const std::string& text);
// The cgroup path of the memory controller in /proc/self/cgroup's text
// (the v1 "memory" line, else the v2 "0::" line), and which version.
std::optional<std::pair<std::string, bool>> parse_memory_cgroup(const std::string& proc_cgroup);

// The tightest memory limit on the way from `cgroup` (a path from
// /proc/self/cgroup) up to the root under `mount` (v2: memory.max; v1:
// memory.limit_in_bytes): a unit's limit may sit on its slice. 0 = none.
uint64_t cgroup_memory_limit(const std::string& mount, const std::string& cgroup, bool v2);

// This host: MemTotal and this process's memory cgroup limit.
LiveMapHost read_live_map_host();

// The daemon's size on this host: `limits.live_map_entries`, or automatic
// with `limits.live_map_memory_percent` and the cgroup limit less
// `limits.max_daemon_memory_bytes`, `ringbuf_bytes`,
// `unwind.max_table_bytes` and kLiveMapEnvelopeReserveBytes.
LiveMapSizing live_map_sizing(const Config& config);
// `leakwatch top`'s: --live-max (0: automatic) with the default percent,
// and at most half its cgroup's limit (the other half: top's own records).
LiveMapSizing top_live_map_sizing(uint32_t live_max);

// Logs the choice at info (warns when the envelope was too small).
void log_live_map(const LiveMapSizing& s);

}  // namespace lw
