/* SPDX-License-Identifier: Apache-2.0 */
// `leakwatch run`: the system-wide daemon. Targets come from the config's
// selectors; processes are found at start (/proc), at exec (BPF exec
// events, within one poll interval), when a target forks (follow_forks),
// and by a periodic /proc reconciliation that catches anything missed.
// The config reloads on SIGHUP and when the file changes, without restart.
//
// Threads: everything here runs on the thread that calls run() (the
// consumer). Other threads (the HTTP server) only read the published
// DaemonSnapshot through snapshot(), which is thread-safe.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/latency_histogram.h"
#include "core/overhead_policy.h"
#include "core/process_identity.h"
#include "core/analyzer.h"
#include "engine/snapshot.h"
#include "engine/tracer.h"
#include "view/daemon_view.h"

namespace lw {

using Clock = std::chrono::steady_clock;

struct TrackedProcess {
  ProcessIdentity identity;
  std::string target;       // TargetConfig::name
  TargetMode mode = TargetMode::kAuto;
  pid_t parent = 0;         // the target it was forked from, 0 if matched itself
  std::chrono::system_clock::time_point attached_at;
  // ---- overhead: light/full, escalation, governor ----
  bool full = false;             // heap probes wanted (mode full, or auto escalated)
  double full_until_s = 0;       // auto: when an escalation steps down (daemon clock)
  double cooldown_until_s = 0;   // auto: no escalation before this
  double last_check_s = -1e18;   // last statm read
  GrowthWatch growth;           // VmData
  GrowthWatch growth_resident;  // anonymous resident
  GovernorState governor;
  // The heap probes are attached now: wanted, not suspended, no kill switch.
  bool heap_attached = false;
};

// What readers see of a tracked process (view/daemon_view.h).
ProcessInfo process_info(const TrackedProcess& t);

struct DaemonOptions {
  std::string config_path;
  std::optional<LogLevel> log_level_override;
  PodDirectoryOptions pods;
};

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> create(DaemonOptions options, Config config);
  ~Daemon();

  // Runs until request_stop() (SIGTERM/SIGINT). `on_ready` runs once the
  // processes present at start are attached (the caller then starts HTTP
  // and notifies systemd).
  Status run(const std::function<void()>& on_ready);
  void request_stop() { stop_.store(true); }
  void request_reload() { reload_.store(true); }
  // SIGUSR2: toggles the kill switch (async-signal-safe).
  void request_kill_switch_toggle() { kill_toggle_.store(true); }

  std::shared_ptr<const DaemonSnapshot> snapshot() const;
  const Config& config() const { return config_; }

  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

 private:
  Daemon(DaemonOptions options, Config config, std::unique_ptr<Tracer> tracer);
  // event_ns: the exec/fork event's CLOCK_MONOTONIC time (0: found by a
  // /proc scan), for the attach latency.
  void consider(pid_t pid, pid_t parent, uint64_t event_ns = 0);
  void attach(pid_t pid, const ProcessIdentity& id, const TargetConfig& target, pid_t parent,
              uint64_t event_ns = 0);
  void detach(pid_t pid, const char* why);
  void reconcile();
  void reload();
  void handle_discoveries();
  void reap_exited();
  void publish();
  void sample_analysis();
  AnalysisParams analysis_params() const;
  bool config_file_changed();
  // ---- overhead ----
  void overhead_tick();
  void apply_kill_switch(bool engage, const char* why);
  // Attaches or detaches pid's heap probes to match what is wanted now.
  void sync_heap(pid_t pid, TrackedProcess& t, const char* why);
  GovernorParams governor_params() const;
  // ---- memory budget (architecture.md, 28) ----
  // Sets the tracer's live-record cap from the budget and baseline_rss_.
  void apply_memory_budget();
  // Suspends the heap tracing of processes the tracer shed for the budget.
  void handle_budget_sheds();
  double now_s() const;

  DaemonOptions options_;
  Config config_;
  std::unique_ptr<Tracer> tracer_;
  PodDirectory pods_;
  std::map<pid_t, TrackedProcess> tracked_;
  std::map<pid_t, ProcessAnalyzer> analyzers_;
  bool dirty_ = false;
  uint64_t rescans_seen_ = 0;
  uint64_t baseline_rss_ = 0;    // the daemon's RSS once the BPF session is up
  uint64_t tracked_memory_ = 0;  // trackers and analysis, as of the last publish  // tracked set changed: publish now, not at the next tick
  Clock::time_point started_ = Clock::now();
  // Processes looked at and not matched, by (pid, start time): skipped by
  // the reconciliation until the config changes.
  std::set<std::pair<pid_t, uint64_t>> unmatched_;
  DaemonCounters counters_;
  int inotify_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<bool> reload_{false};
  std::atomic<bool> kill_toggle_{false};
  double last_overhead_tick_s_ = -1e18;
  mutable std::mutex snapshot_mu_;
  std::shared_ptr<const DaemonSnapshot> snapshot_;
};

// The configuration `leakwatch run` uses without --config: every process on
// the host, in `auto` mode (docs/config.md).
Config default_daemon_config();

}  // namespace lw
