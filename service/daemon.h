/* SPDX-License-Identifier: Apache-2.0 */
// `leakwatch run`: the system-wide daemon. Targets come from the config's
// selectors; processes are found at start (/proc), at exec (BPF exec
// events, within one poll interval), when a target forks (follow_forks),
// and by a periodic /proc reconciliation that catches anything missed.
// The config reloads on SIGHUP and when the file changes, without restart.
//
// Daemon is the loop that wires the parts
// (decision daemon-in-parts): ProcessDiscovery (service/discovery.h),
// ConfigWatcher (service/config_watch.h), OverheadController
// (service/overhead_controller.h) and Publisher (service/publisher.h), all on
// one DaemonState (service/daemon_state.h) and one TracerControl
// (service/tracer_control.h): the engine in production, a fake in the unit
// tests.
//
// Threads: run() and everything it calls run on the thread that calls
// run() (the consumer). Other threads only read the published
// DaemonSnapshot through snapshot(), which is thread-safe, and call the
// request_*() functions, which are async-signal-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/config/config.h"
#include "core/platform/log.h"
#include "core/proc/process_identity.h"
#include "service/config_watch.h"
#include "service/daemon_state.h"
#include "service/discovery.h"
#include "service/oom_recorder.h"
#include "service/overhead_controller.h"
#include "service/publisher.h"
#include "service/tracer_control.h"
#include "view/daemon_view.h"

namespace lw {

using Clock = std::chrono::steady_clock;

struct DaemonOptions {
  std::string config_path;
  std::optional<LogLevel> log_level_override;
  std::optional<LogFormat> log_format_override;  // --log.format
  PodDirectoryOptions pods;
  // The live map's size as the engine created it (Daemon::create); left
  // empty, the constructor derives it from the config and this host.
  LiveMapSizing live_map;
  // LW_BENCH_LIVE_PREALLOC (cli/bench_switches.h, benchmarks only): the
  // live map preallocated or not, whatever live_map says.
  std::optional<bool> bench_live_prealloc;
  bool bench_uprobe_sessions = true;  // LW_BENCH_NO_UPROBE_SESSIONS clears it
};

class Daemon {
 public:
  // The daemon on the BPF engine (service/daemon_create.cc, lw_service_engine).
  static Result<std::unique_ptr<Daemon>> create(DaemonOptions options, Config config);
  // The daemon on any tracer (the unit tests give a fake).
  Daemon(DaemonOptions options, Config config, std::unique_ptr<TracerControl> tracer);
  ~Daemon();

  // Runs until request_stop() (SIGTERM/SIGINT). `on_ready` runs once the
  // processes present at start are attached (the caller then starts HTTP
  // and notifies systemd).
  Status run(const std::function<void()>& on_ready);
  void request_stop() { stop_.store(true); }
  void request_reload() { reload_.store(true); }
  // SIGUSR2: toggles the kill switch (async-signal-safe).
  void request_kill_switch_toggle() { kill_toggle_.store(true); }

  // Any thread.
  std::shared_ptr<const DaemonSnapshot> snapshot() const { return publisher_.latest(); }
  // The consumer thread only (or before run()).
  const Config& config() const { return state_.config; }

  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

 private:
  void reload();
  // Engages or releases the kill switch, then publishes at once.
  void set_kill_switch(bool engage, const char* why);
  void sample_analysis();
  double now_s() const;

  DaemonOptions options_;
  DaemonState state_;
  std::unique_ptr<TracerControl> tracer_;
  ProcessDiscovery discovery_;
  ConfigWatcher watcher_;
  OverheadController overhead_;
  Publisher publisher_;
  OomRecorder oom_;
  uint64_t probe_changes_seen_ = 0;
  uint64_t baseline_rss_ = 0;  // the daemon's RSS once the tracer is up
  Clock::time_point started_ = Clock::now();
  std::atomic<bool> stop_{false};
  std::atomic<bool> reload_{false};
  std::atomic<bool> kill_toggle_{false};
};

// The configuration `leakwatch run` uses without --config: every process on
// the host, in `auto` mode (docs/config.md).
Config default_daemon_config();

}  // namespace lw
