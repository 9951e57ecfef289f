/* SPDX-License-Identifier: Apache-2.0 */
// The daemon's hard memory bound (decision daemon-memory-bound): the budget
// `limits.max_daemon_memory_bytes` is turned into a cap on the live records
// the daemon holds across all processes, checked on every insert, and when
// the cap is reached the process holding the most heap records is shed
// (its heap tracing suspended, its per-address records dropped, its
// per-site figures frozen). Pure and unit-tested; the tracer and daemon
// carry the decisions out. Thread-safety: plain functions, no state.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace lw {

// What one live record may cost the daemon at its worst: a FlatMap slot is
// 32 bytes (8-byte key + 24-byte LiveRecord) and the map doubles at a load
// of 3/4, so while it rehashes it holds the old and the new arrays at once:
// (1 + 2) * 32 bytes per 3/4 record = 128 bytes. Measured steady state is
// about 65 bytes (decision daemon-memory-bound).
inline constexpr uint64_t kBytesPerLiveRecord = 128;
// Room kept for what is not records: symbolizer caches, resolved stacks,
// per-site analysis, the published snapshot and its JSON/metrics rendering.
inline constexpr uint64_t kMemoryReserveBytes = 16ull << 20;
// Room kept for the HTTP front's connections and the responses it holds
// for slow clients, both bounded (exporter/http/http_server.h: 256 connections
// of at most a 16 KiB request head and a TLS session, 16 MiB of responses;
// checked there at compile time). Without it, a flood of requests could
// take the daemon past its budget without any record being counted.
inline constexpr uint64_t kHttpFrontReserveBytes = 32ull << 20;
// The cap never drops below this, so a budget smaller than the daemon's own
// baseline still tracks something (and is reported as such, not as 0).
inline constexpr uint64_t kMinLiveRecordCap = 4096;

// Live records the daemon may hold across all processes: what the budget
// leaves after the daemon's baseline RSS (measured at start, BPF loaded and
// the ring buffer mapped) and the reserves (kMemoryReserveBytes and
// kHttpFrontReserveBytes), at kBytesPerLiveRecord each.
uint64_t live_record_cap(uint64_t budget_bytes, uint64_t baseline_rss_bytes);

// Whether the kernel live map, full, fits within the cap: when it does not,
// the daemon warns at start that the budget, not the map, bounds tracking.
inline bool live_map_fits(uint64_t live_map_entries, uint64_t record_cap) {
  return live_map_entries <= record_cap;
}

// The process to shed: the one with the most heap records among
// (pid, heap records) candidates; ties go to the lower pid. nullopt when no
// candidate holds a record (there is nothing to shed).
std::optional<pid_t> pick_shed_victim(const std::vector<std::pair<pid_t, uint64_t>>& heap_records);

// /proc/self/statm's resident field in bytes, or nullopt for malformed text.
std::optional<uint64_t> parse_statm_resident(const char* statm, uint64_t page_size);

}  // namespace lw
