// SPDX-License-Identifier: Apache-2.0
// What the daemon's parts share: the configuration in force, the tracked
// processes with their overhead state, their leak analysis, the daemon's
// counters and the "publish now" flag. One DaemonState per daemon, owned by
// Daemon and lent by reference to its parts (discovery, config watch,
// overhead controller, publisher).
// Thread-safety: not thread-safe. Only the consumer thread (Daemon::run)
// touches it; readers on other threads see the published DaemonSnapshot.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/analysis/analyzer.h"
#include "core/config/config.h"
#include "core/policy/bursts.h"
#include "core/policy/escalation.h"
#include "core/policy/live_map_size.h"
#include "core/policy/overhead_policy.h"
#include "core/proc/process_identity.h"
#include "view/daemon_view.h"

namespace lw {

struct TrackedProcess {
  // Identity, matching target, mode, parent, attach time, and whether the
  // heap probes are attached now (wanted, not suspended, no kill switch).
  // `full` and `tracing_suspended` are filled from the state below when
  // published (process_info).
  ProcessInfo info;
  // ---- overhead: escalation (mode auto only), governor ----
  EscalationState escalation;
  GovernorState governor;
  // The tensor tier's own governor (governor.max_tensor_hits_per_second;
  // decision tensor-tier).
  GovernorState tensor_governor;
  // Over the governor's budget: the heap in bursts (decision busy-processes).
  BurstState bursts;
  // When its free side alone was last over the budget between bursts: the
  // governor then suspends it at once for an hour, without trying bursts
  // again (each try costs the drain's check). -1: never.
  double drain_over_budget_at = -1;
  // Windows (decision busy-processes): when the heap was last walked while
  // parked (daemon seconds).
  double parked_walk_at = -1;
  // Its threads, read once a second where uprobe hits serialize across
  // them (kernels before 6.14): the governor's budget is divided by them
  // (thread_scaled_budget; 1 elsewhere).
  uint64_t threads = 1;
  // Heap probes wanted: mode full, or auto and escalated.
  bool full() const { return info.mode == TargetMode::kFull || escalation.full(); }
};

// What readers see of a tracked process (view/daemon_view.h).
ProcessInfo process_info(const TrackedProcess& t);

struct DaemonState {
  Config config;
  std::string config_path;  // "" without --config
  std::map<pid_t, TrackedProcess> tracked;
  std::map<pid_t, ProcessAnalyzer> analyzers;
  DaemonCounters counters;
  // The kernel live map's size, chosen at start (decision live-map-sizing).
  LiveMapSizing live_map;
  // The tracked set or a process's probes changed: publish now, not at the
  // next tick.
  bool dirty = false;
  // Trackers and analysis, as of the last publish.
  uint64_t tracked_memory = 0;
  // OOM kill reports, newest first (service/oom_recorder.h); replaced, never
  // changed in place, so snapshots share it.
  std::shared_ptr<const std::vector<StoredOomReport>> oom_reports =
      std::make_shared<const std::vector<StoredOomReport>>();
};

// Seconds since the epoch (the view's timestamps).
double unix_now();

}  // namespace lw
