// SPDX-License-Identifier: Apache-2.0
// Discovery: which processes the daemon traces. Processes are found at start
// and by the periodic /proc reconciliation (reconcile), at exec and when a
// target forks (handle_events: the tracer's process events), matched against
// the config's selectors, attached through the tracer, and detached when
// they exit (reap_exited), stop matching or are dropped by a reload. The
// pid-reuse guards of decision pid-reuse live here: an exec
// of a traced pid whose start time differs, and an attach that finds the
// pid's start time changed under it, drop the old state and match the
// newcomer afresh.
//
// Thread-safety: not thread-safe; only the consumer thread (Daemon::run)
// calls it, with the DaemonState and TracerControl it was built on.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <utility>

#include "core/config/config.h"
#include "core/policy/discovery_budget.h"
#include "core/proc/process_identity.h"
#include "service/daemon_state.h"
#include "service/tracer_control.h"

namespace lw {

class ProcessDiscovery {
 public:
  ProcessDiscovery(DaemonState& state, TracerControl& tracer, PodDirectoryOptions pods);

  // Looks at one process: matched (or forked from a tracked `parent` that
  // follows forks), it is attached. event_ns: the exec/fork event's
  // CLOCK_MONOTONIC time (0: found by a /proc scan), for the attach latency.
  // Nothing is attached while the kill switch is engaged.
  void consider(pid_t pid, pid_t parent, uint64_t event_ns = 0);
  void detach(pid_t pid, const char* why);
  // Scans /proc: detaches tracked processes that are gone (or whose pid now
  // holds another process) and considers every process not yet looked at.
  void reconcile();
  // The tracer's execs and forks since the last call, and the deferred ones
  // whose user's budget allows them now.
  void handle_events();
  const DiscoveryBudget& budget() const { return budget_; }
  // Detaches every process whose exit the tracer saw, in one teardown.
  void reap_exited();
  // Processes looked at and not matched are skipped by the reconciliation
  // until the config changes: forget them (after a reload).
  void forget_unmatched() { unmatched_.clear(); }

 private:
  void attach(pid_t pid, const ProcessIdentity& id, const TargetConfig& target, pid_t parent,
              uint64_t event_ns);
  // An exec or fork event of a process not tracked: looked at now if its
  // user's budget allows, else deferred (or dropped when the queue is full).
  void consider_event(pid_t pid, pid_t parent, uint64_t event_ns);

  DaemonState& state_;
  TracerControl& tracer_;
  PodDirectory pods_;
  // Exec and fork events per non-root uid (issue 32).
  DiscoveryBudget budget_;
  static constexpr uint64_t kDueIntervalNs = 50'000'000;
  uint64_t due_checked_ns_ = 0;  // the last look at the deferred events
  // (pid, start time) of processes looked at and not matched.
  std::set<std::pair<pid_t, uint64_t>> unmatched_;
  uint64_t consider_ns_ = 0;  // when consider() began (attach stage timing)
};

// What the config's selectors see of a process.
ProcessFacts facts_of(const ProcessIdentity& id);

// /proc/PID/stat's start time (clock ticks since boot), or 0.
uint64_t read_start_ticks(pid_t pid);

}  // namespace lw
