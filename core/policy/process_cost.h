/* SPDX-License-Identifier: Apache-2.0 */
// What the daemon spends because of one traced process, and what is done
// when that is too much (decision process-cost): each process has a hard
// cap on what the daemon holds for it beside its live records
// (`limits.max_process_memory_bytes`), and the daemon's budget
// (`limits.max_daemon_memory_bytes`) covers those costs and the records
// together. Pure and unit-tested; the engine measures and carries it out.
// Thread-safety: plain data and functions, no state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lw {

// Bytes the daemon holds for one process, by what holds them.
struct ProcessCost {
  uint64_t records = 0;  // per-address live records (bounded by the record budget)
  uint64_t sites = 0;    // per-site figures and their index
  uint64_t stacks = 0;   // resolved stacks: frames, names, addresses
  uint64_t maps = 0;     // parsed /proc/PID/maps and the build-ids read from them
  uint64_t python = 0;   // its CPython's code-object and line caches
  uint64_t jit = 0;      // its runtime's perf map (JIT names)
  // What the per-process cap bounds: everything but the records.
  uint64_t capped() const { return sites + stacks + maps + python + jit; }
  uint64_t total() const { return records + capped(); }
};

// Why a process was shed (its tracing stopped for good, its figures frozen).
enum class ShedReason : uint8_t {
  kNone = 0,
  kProcessCap,    // its own cost over limits.max_process_memory_bytes
  kDaemonBudget,  // the daemon's costs over limits.max_daemon_memory_bytes; it cost the most
  kCount,
};
// "process_memory_cap", "daemon_memory_budget"; "" for kNone.
const char* shed_reason_name(ShedReason r);

// Whether `cost` passes `cap` (0: no cap).
inline bool over_process_cap(const ProcessCost& cost, uint64_t cap) { return cap > 0 && cost.capped() > cap; }

// The live-record cap left once the costs beside the records (`capped_total`,
// all processes) are taken from the room the record cap stands for
// (`record_cap` records of `bytes_per_record`): the daemon's budget covers
// both. Never under `floor` (the record budget's own minimum), and 0 stays
// 0 (no cap).
uint64_t record_cap_after_costs(uint64_t record_cap, uint64_t bytes_per_record, uint64_t capped_total,
                                uint64_t floor);

// Whether the costs beside the records alone fill the room the record cap
// stands for (less the floor's records): the process that costs the most is
// then shed (kDaemonBudget).
inline bool over_daemon_budget(uint64_t record_cap, uint64_t bytes_per_record, uint64_t capped_total,
                               uint64_t floor) {
  return record_cap > 0 && capped_total > (record_cap > floor ? record_cap - floor : 0) * bytes_per_record;
}

// The index of the candidate with the largest capped() cost not yet shed;
// nullopt when none costs anything.
std::optional<size_t> pick_costliest(const std::vector<ProcessCost>& costs, const std::vector<bool>& shed);

// Prunes entries of `cache` that `in_use(key)` says nothing uses any more,
// visiting at most `budget` entries a call, bucket by bucket from `cursor`
// (kept between calls, so that every entry is visited in turn however the
// table grows); on_erase(value) runs before each erase. Returns the count
// erased.
template <typename V, typename InUse, typename OnErase>
size_t prune_unused(std::unordered_map<uint64_t, V>& cache, size_t& cursor, size_t budget, InUse&& in_use,
                    OnErase&& on_erase) {
  size_t erased = 0, visited = 0;
  const size_t buckets = cache.bucket_count();
  std::vector<uint64_t> doomed;
  for (size_t n = 0; n < buckets && visited < budget && !cache.empty(); ++n) {
    const size_t b = cursor++ % buckets;
    doomed.clear();
    for (auto it = cache.begin(b); it != cache.end(b); ++it) {
      ++visited;
      if (!in_use(it->first)) doomed.push_back(it->first);
    }
    for (uint64_t key : doomed) {
      auto it = cache.find(key);
      on_erase(it->second);
      cache.erase(it);
      ++erased;
    }
  }
  return erased;
}

}  // namespace lw
