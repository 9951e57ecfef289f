/* SPDX-License-Identifier: Apache-2.0 */
// A point-in-time view of one traced process: its sites merged by stable
// stack id and symbolized. Built by the consumer thread; plain data after.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/kernel/analyzer.h"
#include "daemon/kernel/tracer.h"

namespace lw {

struct SiteSnapshot {
  uint64_t stack_id = 0;
  uint32_t kind = 0;
  uint64_t live_bytes = 0;
  uint64_t live_allocations = 0;
  uint64_t allocated_bytes = 0;
  uint64_t allocations = 0;
  uint64_t freed_bytes = 0;
  uint64_t frees = 0;
  std::vector<Frame> frames;
  // Leak analysis (zero/unknown until the analyzer has enough samples).
  AgeBuckets ages;
  double leak_rate_bytes_per_second = 0;
  Trend trend = Trend::kUnknown;
  bool suspected_leak = false;
};

// Totals of one kind of memory over every site of a process.
struct KindTotals {
  uint64_t live_bytes = 0;
  uint64_t live_allocations = 0;
  uint64_t allocated_bytes = 0;
  uint64_t allocations = 0;
  uint64_t freed_bytes = 0;
  uint64_t frees = 0;
};

struct ProcessSnapshot {
  pid_t pid = 0;
  std::string comm;
  double timestamp = 0;        // unix seconds
  bool final = false;          // the process has exited; last snapshot
  uint64_t live_bytes = 0;
  uint64_t live_allocations = 0;
  std::array<KindTotals, LW_KIND_MAX> kinds{};  // every site, not only the top
  std::array<LeakVerdict, LW_KIND_MAX> kind_verdicts{};  // process-level, per kind
  std::array<AgeBuckets, LW_KIND_MAX> kind_ages{};
  std::vector<SiteSnapshot> sites;  // live_bytes descending, top `max_sites`
  size_t sites_total = 0;           // sites holding memory before truncation
  Counters kernel_counters{};
  HeapCounters heap_counters;
  TracerStats tracer_stats;
  int64_t kernel_live_bytes = -1;   // -1 when not read
  // Byte sampling: > 0 means every heap figure is an estimate from
  // allocations sampled at this mean (daemon/core/sampling.h).
  uint64_t sample_mean_bytes = 0;
  // > 0 (unix seconds): the heap probes were detached then (step-down from
  // `full`, governor, kill switch), so the heap figures are frozen as of
  // that time and stale; the next attach re-baselines them.
  double heap_stale_since = 0;
  std::vector<CudaDeviceTotal> cuda_devices;  // live CUDA bytes per (device, kind)
  AllocatorInfo allocator;          // which allocator is probed, and how well
};

// Sites with live allocations, merged by (stack_id, kind): the top
// `max_sites` by live bytes and, with an analyzer, also the top `max_sites`
// by leak rate; only those are symbolized and returned, sorted by live bytes.
ProcessSnapshot take_snapshot(Tracer& tracer, TracedProcess& proc, size_t max_sites,
                              bool read_kernel_live, const ProcessAnalyzer* analyzer = nullptr);

const char* kind_name(uint32_t kind);
nlohmann::json to_json(const ProcessSnapshot& snap);
nlohmann::json to_json(const AllocatorInfo& a);
// Totals per kind over every site, kinds with no allocation left out (API, top).
nlohmann::json kinds_to_json(const ProcessSnapshot& snap);

}  // namespace lw
