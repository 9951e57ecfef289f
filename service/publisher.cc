// SPDX-License-Identifier: Apache-2.0
#include "service/publisher.h"

#include <chrono>
#include <utility>

#include "core/platform/log.h"
#include "core/proc/procfs.h"

namespace lw {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

void Publisher::publish() {
  const auto t0 = std::chrono::steady_clock::now();
  const Config& config = state_.config;
  auto snap = std::make_shared<DaemonSnapshot>();
  snap->timestamp = unix_now();
  snap->kernel_counters = tracer_.counters();
  snap->tracer_stats = tracer_.stats();
  snap->max_processes = config.limits.max_processes;
  snap->live_map_capacity = state_.live_map.entries;
  snap->live_map = state_.live_map;
  snap->stack_map_capacity = config.limits.stack_map_entries;
  snap->config_path = state_.config_path;
  for (const TargetConfig& t : config.targets) snap->targets.push_back(t.name);
  snap->oom_reports = state_.oom_reports;
  snap->self = read_self_stats();
  snap->processes.reserve(state_.tracked.size());
  uint64_t memory = 0;
  const auto t_snapshots = std::chrono::steady_clock::now();
  std::vector<pid_t> rss_pids;
  for (auto& [pid, t] : state_.tracked) {
    auto an = state_.analyzers.find(pid);
    const ProcessAnalyzer* analyzer = an == state_.analyzers.end() ? nullptr : &an->second;
    std::optional<ProcessSnapshot> view = tracer_.snapshot(
        pid, config.top_sites_per_process, analyzer, snap->kernel_counters, snap->tracer_stats);
    if (!view) continue;
    ProcessEntry e;
    e.process = process_info(t);
    e.snapshot = std::move(*view);
    if (config.rss_interval_seconds > 0 && !e.snapshot.final) {
      rss_.set_min_interval(config.rss_interval_seconds);
      e.snapshot.rss = rss_.sample(pid, e.snapshot.timestamp, rss_tracked_bytes(e.snapshot));
      rss_pids.push_back(pid);
    }
    if (analyzer) memory += analyzer->memory_bytes();
    snap->live_map_entries += e.snapshot.live_allocations;
    if (const HeapTracker* heap = tracer_.heap(pid)) memory += heap->memory_bytes();
    // What else the engine holds for it (decision process-cost; the sites
    // are in the heap tracker's figure already).
    memory += e.snapshot.cost.capped() - e.snapshot.cost.sites;
    tracer_.append_probe_reports(pid, &snap->probes);
    snap->processes.push_back(std::move(e));
  }
  rss_.retain(rss_pids);
  const double snapshots_ms = ms_since(t_snapshots);
  state_.tracked_memory = memory;
  if (memory > config.limits.max_daemon_memory_bytes) {
    ++state_.counters.daemon_memory_over_budget;
    log_once("daemon_memory", "tracked state exceeds limits.max_daemon_memory_bytes");
  }
  snap->counters = state_.counters;
  last_timing_.processes = snap->processes.size();
  std::shared_ptr<const DaemonSnapshot> previous;
  {
    std::lock_guard<std::mutex> lock(mu_);
    previous = std::exchange(latest_, std::move(snap));
  }
  // The previous snapshot, if no reader holds it, is freed here, outside
  // the lock.
  const auto t_release = std::chrono::steady_clock::now();
  previous.reset();
  last_timing_.release_ms = ms_since(t_release);
  last_timing_.snapshots_ms = snapshots_ms;
  last_timing_.total_ms = ms_since(t0);
  LW_LOG_DEBUG("publish: %zu processes in %.2f ms (per-process views %.2f ms, freeing the "
               "previous snapshot %.2f ms)",
               last_timing_.processes, last_timing_.total_ms, last_timing_.snapshots_ms,
               last_timing_.release_ms);
}

bool publish_due(bool dirty, double since_last_ms, double last_cost_ms) {
  if (since_last_ms >= 1000) return true;
  return dirty && since_last_ms >= 4 * last_cost_ms;
}

std::shared_ptr<const DaemonSnapshot> Publisher::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

}  // namespace lw
