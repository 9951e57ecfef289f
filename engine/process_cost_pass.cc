// SPDX-License-Identifier: Apache-2.0
#include "engine/process_cost_pass.h"

#include <malloc.h>

#include <vector>

#include "core/platform/clock.h"
#include "core/platform/log.h"
#include "core/policy/memory_budget.h"
#include "core/symbols/stack_frames.h"

namespace lw {

namespace {

// An unordered_map node around a (key, value) pair: the pair, the next
// pointer and the cached hash, rounded to malloc's 16-byte chunks.
constexpr uint64_t kNodeOverhead = 32;

// The first costs come out of the reserve decision daemon-memory-bound keeps
// beside the records (half of it: the rest is the symbolizer's, the
// analysis's and the snapshot's); only what passes it takes records' room.
constexpr uint64_t kCostReserveBytes = kMemoryReserveBytes / 2;
uint64_t beyond_reserve(uint64_t capped_total) {
  return capped_total > kCostReserveBytes ? capped_total - kCostReserveBytes : 0;
}

uint64_t frames_bytes(const std::vector<Frame>& frames) {
  uint64_t bytes = (frames.capacity() - frames.size()) * sizeof(Frame);
  for (const Frame& f : frames) bytes += frame_memory_bytes(f);
  return bytes;
}

}  // namespace

uint64_t resolved_stack_bytes(const ResolvedStack& rs) {
  uint64_t bytes = sizeof(uint64_t) + sizeof(ResolvedStack) + kNodeOverhead + frames_bytes(rs.frames) +
                   frames_bytes(rs.python) + string_heap_bytes(rs.symbols_missing) + string_heap_bytes(rs.end) +
                   rs.python_entry.capacity() / 8 + rs.is_eval.capacity() / 8;
  bytes += rs.addresses.capacity() * sizeof(StackAddress);
  for (const StackAddress& a : rs.addresses)
    bytes += string_heap_bytes(a.module.path) + string_heap_bytes(a.module.open_path) +
             string_heap_bytes(a.module.build_id) + string_heap_bytes(a.module.root) +
             string_heap_bytes(a.unwound) + frame_memory_bytes(a.unmapped) - sizeof(Frame);
  return bytes;
}

ProcessCostPass::ProcessCostPass(BpfSession& session, ProcessTable& procs, TracerStats& stats,
                                 RecordBudget& budget)
    : session_(session), procs_(procs), stats_(stats), budget_(budget) {}

void ProcessCostPass::set_live_record_cap(uint64_t cap) {
  base_cap_ = cap;
  applied_cap_ = record_cap_after_costs(cap, kBytesPerLiveRecord, beyond_reserve(stats_.process_cost_bytes),
                                        kMinLiveRecordCap);
  budget_.set_live_record_cap(applied_cap_);
}

ProcessCost ProcessCostPass::measure(const TracedProcess& p) {
  ProcessCost c;
  const uint64_t heap = p.heap.memory_bytes(), sites = p.heap.site_memory_bytes();
  c.sites = sites;
  c.records = heap > sites ? heap - sites : 0;
  c.stacks = p.stacks_bytes + p.stacks.bucket_count() * sizeof(void*);
  c.maps = p.maps.memory_bytes();
  for (const auto& [key, build_id] : p.build_ids)
    c.maps += sizeof(key) + sizeof(build_id) + kNodeOverhead + string_heap_bytes(build_id);
  if (p.python) c.python = p.python->cache().bytes();
  if (p.perf_map) c.jit = p.perf_map->map().memory_bytes();
  return c;
}

size_t ProcessCostPass::prune_stacks(TracedProcess& p, size_t budget) {
  if (p.stacks.empty() || budget == 0) return 0;
  // Visits are counted by the buckets walked: at most `budget` entries.
  const size_t before = p.stacks.size();
  const size_t erased = prune_unused(
      p.stacks, p.stacks_prune_cursor, budget, [&](uint64_t hash) { return p.heap.stack_live(hash); },
      [&](const ResolvedStack& rs) { p.stacks_bytes -= std::min(p.stacks_bytes, resolved_stack_bytes(rs)); });
  p.stacks_pruned += erased;
  stats_.stacks_pruned += erased;
  return std::min(before, budget);
}

// Its accounting off for good (kernel flags), its records, sites and
// caches dropped, and every kind frozen as the memory budget freezes one
// (decision daemon-memory-bound), so that events still queued add nothing:
// what the daemon holds for it afterwards is next to nothing. Per-site
// figures are not kept: they are what the cap bounds (a site each stack).
void ProcessCostPass::shed(TracedProcess& p, ShedReason why) {
  p.shed = why;
  p.shed_since = unix_seconds_now();
  (void)session_.set_target(p.pid, current_flags(p), 0, heap_mean(p));
  p.heap.clear();
  for (uint32_t k = 0; k < LW_KIND_MAX; ++k) p.heap.shed_kind(k);
  p.cuda_devices.clear();
  (void)session_.purge_live(p.pid);
  if (p.heap_stale_since == 0) p.heap_stale_since = p.shed_since;
  p.maps = ParsedMaps{};
  p.build_ids.clear();
  p.perf_map.reset();
  if (p.python) p.python->reset(session_);
  p.stacks_pruned += p.stacks.size();
  p.stacks = {};
  p.stacks_bytes = 0;
  p.sites_checked = 0;
  budget_.recount_records();
  ++stats_.processes_shed[static_cast<size_t>(why)];
  LW_LOG_WARN("pid %d (%s) shed (%s): the daemon held %llu bytes for it beside its records (stacks %llu, "
              "maps %llu, python %llu, jit %llu, sites %llu); its tracing stops and its figures are dropped",
              p.pid, p.comm.c_str(), shed_reason_name(why), static_cast<unsigned long long>(p.cost.capped()),
              static_cast<unsigned long long>(p.cost.stacks), static_cast<unsigned long long>(p.cost.maps),
              static_cast<unsigned long long>(p.cost.python), static_cast<unsigned long long>(p.cost.jit),
              static_cast<unsigned long long>(p.cost.sites));
  p.cost = measure(p);
  malloc_trim(0);  // the freed caches' pages back to the kernel now
}

// The daemon's budget covers the costs beside the records too: when they
// alone fill the room the record cap stands for, the costliest process is
// shed, then the next, until they fit.
void ProcessCostPass::enforce_daemon_budget(uint64_t& capped_total) {
  while (over_daemon_budget(base_cap_, kBytesPerLiveRecord, beyond_reserve(capped_total), kMinLiveRecordCap)) {
    std::vector<ProcessCost> costs;
    std::vector<bool> was_shed;
    std::vector<TracedProcess*> ps;
    for (auto& [pid, p] : procs_) {
      costs.push_back(p->cost);
      was_shed.push_back(p->shed != ShedReason::kNone);
      ps.push_back(p.get());
    }
    std::optional<size_t> victim = pick_costliest(costs, was_shed);
    if (!victim) return;
    TracedProcess& p = *ps[*victim];
    const uint64_t was = p.cost.capped();
    shed(p, ShedReason::kDaemonBudget);
    capped_total = capped_total - was + p.cost.capped();
  }
}

void ProcessCostPass::run() {
  const uint64_t now = monotonic_ns();
  if (now < due_ns_) return;
  due_ns_ = now + kPassIntervalNs;
  size_t visits = kStacksVisitedPerPass;
  uint64_t capped_total = 0;
  for (auto& [pid, p] : procs_) {
    visits -= prune_stacks(*p, visits);
    p->cost = measure(*p);
    if (p->shed == ShedReason::kNone && over_process_cap(p->cost, p->options.max_process_memory_bytes))
      shed(*p, ShedReason::kProcessCap);
    capped_total += p->cost.capped();
  }
  enforce_daemon_budget(capped_total);
  stats_.process_cost_bytes = capped_total;
  const uint64_t cap =
      record_cap_after_costs(base_cap_, kBytesPerLiveRecord, beyond_reserve(capped_total), kMinLiveRecordCap);
  if (cap != applied_cap_) {
    applied_cap_ = cap;
    budget_.set_live_record_cap(cap);
  }
}

void ProcessCostPass::fill(ProcessSnapshot& snap, const TracedProcess& p) {
  snap.cost = p.cost;
  snap.cost_cap = p.options.max_process_memory_bytes;
  snap.shed_reason = shed_reason_name(p.shed);
  snap.shed_since = p.shed_since;
  snap.stacks_resolved = p.stacks.size();
  snap.stacks_pruned = p.stacks_pruned;
  snap.maps_entries = p.maps.entries.size();
  snap.maps_entries_dropped = p.maps.entries_dropped;
  snap.maps_paths_dropped = p.maps.paths_dropped;
}

}  // namespace lw
