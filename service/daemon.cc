// SPDX-License-Identifier: Apache-2.0
#include "core/platform/clock.h"
#include "service/daemon.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "core/policy/memory_budget.h"
#include "core/proc/procfs.h"
#include "core/platform/sd_notify.h"

namespace lw {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

ProcessInfo process_info(const TrackedProcess& t) {
  ProcessInfo p = t.info;
  p.full = t.full();
  p.tracing_suspended = t.governor.suspended();
  p.bursts = t.info.bursts;
  p.bursts.active = t.bursts.active();
  p.bursts.in_burst = t.bursts.in_burst();
  p.bursts.bursts = t.bursts.bursts();
  p.bursts.burst_rate = t.bursts.burst_rate();
  p.bursts.drain_rate = t.bursts.drain_rate();
  p.bursts.windows = t.bursts.windowed();
  p.bursts.parked = t.bursts.parked();
  return p;
}

Daemon::Daemon(DaemonOptions options, Config config, std::unique_ptr<TracerControl> tracer)
    : options_(std::move(options)),
      state_{std::move(config), options_.config_path},
      tracer_(std::move(tracer)),
      discovery_(state_, *tracer_, options_.pods),
      watcher_(options_.config_path),
      overhead_(state_, *tracer_),
      publisher_(state_, *tracer_),
      oom_(state_, *tracer_) {
  state_.counters.last_reload_success_timestamp = unix_now();
  state_.live_map = options_.live_map.entries != 0 ? options_.live_map : live_map_sizing(state_.config);
  baseline_rss_ = own_rss_bytes();
  overhead_.apply_memory_budget(baseline_rss_);
}

Daemon::~Daemon() = default;

double Daemon::now_s() const {
  return std::chrono::duration<double>(Clock::now() - started_).count();
}

void Daemon::set_kill_switch(bool engage, const char* why) {
  overhead_.apply_kill_switch(engage, why);
  publisher_.publish();
}

void Daemon::reload() {
  std::optional<ConfigReload> r = watcher_.reload(state_);
  if (!r) return;
  state_.config = std::move(r->next);
  tracer_->configure_symbols(state_.config.symbols);  // a new symbol thread only if `symbols` changed
  set_log_level(options_.log_level_override.value_or(state_.config.log_level));
  set_log_format(options_.log_format_override.value_or(state_.config.log_format));
  overhead_.apply_memory_budget(baseline_rss_);
  if (state_.config.kill_switch != state_.counters.kill_switch_engaged)
    set_kill_switch(state_.config.kill_switch, "config reload");
  for (pid_t pid : r->drop) discovery_.detach(pid, "target removed or changed by reload");
  discovery_.forget_unmatched();
  state_.counters.last_reload_successful = true;
  state_.counters.last_reload_success_timestamp = unix_now();
  LW_LOG_INFO("config reloaded from %s: %zu targets", options_.config_path.c_str(),
              state_.config.targets.size());
  discovery_.reconcile();
}

void Daemon::sample_analysis() {
  const double t = now_s();
  const uint64_t now_ns = monotonic_ns();
  for (auto& [pid, analyzer] : state_.analyzers)
    if (const HeapTracker* heap = tracer_->heap(pid)) analyzer.sample(*heap, t, now_ns);
}

Config default_daemon_config() {
  static const char* kDefault =
      "targets:\n"
      "  - name: host\n"
      "    match: {cgroup: \"/\"}\n"
      "    mode: auto\n"
      "exclude:\n"
      "  - match: {comm: \"^leakwatch$\"}\n";
  std::vector<ConfigError> errors;
  Result<Config> c = parse_config(kDefault, "<built-in default>", &errors);
  return c ? std::move(*c) : Config{};
}

Status Daemon::run(const std::function<void()>& on_ready) {
  set_log_level(options_.log_level_override.value_or(state_.config.log_level));
  set_log_format(options_.log_format_override.value_or(state_.config.log_format));
  if (state_.config.kill_switch) set_kill_switch(true, "config");
  oom_.load();
  discovery_.reconcile();
  publisher_.publish();
  LW_LOG_INFO("tracking %zu processes across %zu targets", state_.tracked.size(),
              state_.config.targets.size());
  if (on_ready) on_ready();

  const auto watchdog = sd_watchdog_interval();
  auto last_watchdog = Clock::now();
  auto last_publish = Clock::now();
  auto last_reconcile = Clock::now();
  auto last_sample = Clock::now();
  sample_analysis();
  // One pass of this loop at most every kMinPassInterval. Exec and fork
  // events wake the consumer at once (the attach waits for them), so a fork
  // loop of any local user ran the whole pass (counters, every process,
  // discovery) per event: 72% of a core at 2,600 forks/s. Events wait at
  // most this long in the ring buffer; the attach takes it on top (issue 32).
  constexpr auto kMinPassInterval = std::chrono::milliseconds(2);
  auto last_pass = Clock::now() - kMinPassInterval;
  while (!stop_.load()) {
    if (const auto since = Clock::now() - last_pass; since < kMinPassInterval)
      std::this_thread::sleep_for(kMinPassInterval - since);
    last_pass = Clock::now();
    Result<int> n = tracer_->poll(100);
    if (!n) return n.error();
    overhead_.handle_budget_sheds(now_s());
    // Before reaping: an OOM victim's report is built from the state that
    // reaping its exit drops, and published at once, not after the exit's
    // teardown (closing uprobe links waits out grace periods:
    // decision oom-kill-reports).
    if (oom_.handle_kills() > 0) {
      publisher_.publish();
      last_publish = Clock::now();
    }
    discovery_.handle_events();
    discovery_.reap_exited();
    // A rescan attached new objects (libc mapped after exec, a dlopen):
    // publish now, so the API shows the probes as soon as they exist. Only
    // a change: a dlopen/dlclose loop of a library already probed must not
    // publish at every poll.
    if (uint64_t r = tracer_->stats().probe_changes; r != probe_changes_seen_) {
      probe_changes_seen_ = r;
      state_.dirty = true;
    }
    if (reload_.exchange(false) || watcher_.changed()) {
      // sd_notify(3): RELOADING=1 ... READY=1 brackets a reload, so
      // `systemctl reload` returns when it is done (MONOTONIC_USEC is what
      // Type=notify-reload, systemd >= 253, also wants). A rejected file
      // still ends the reload: the old configuration keeps running.
      timespec mono = {};
      clock_gettime(CLOCK_MONOTONIC, &mono);
      sd_notify_send("RELOADING=1\nMONOTONIC_USEC=" +
                     std::to_string(static_cast<uint64_t>(mono.tv_sec) * 1000000u +
                                    static_cast<uint64_t>(mono.tv_nsec) / 1000u));
      reload();
      sd_notify_send(state_.counters.last_reload_successful
                         ? "READY=1\nSTATUS=configuration reloaded"
                         : "READY=1\nSTATUS=configuration reload failed: previous configuration kept");
    }
    if (kill_toggle_.exchange(false))
      set_kill_switch(!state_.counters.kill_switch_engaged, "SIGUSR2");
    overhead_.tick(now_s());
    oom_.tick(now_s());
    auto now = Clock::now();
    if (now - last_reconcile >= std::chrono::seconds(state_.config.reconcile_interval_seconds)) {
      discovery_.reconcile();
      last_reconcile = now;
    }
    if (now - last_sample >= std::chrono::seconds(state_.config.analysis.sample_interval_seconds)) {
      sample_analysis();
      last_sample = now;
    }
    if (publish_due(state_.dirty,
                    std::chrono::duration<double, std::milli>(now - last_publish).count(),
                    publisher_.last_timing().total_ms)) {
      publisher_.publish();
      state_.dirty = false;
      last_publish = now;
    }
    // From the consumer loop itself: a stuck consumer stops the pings and
    // systemd restarts us.
    if (watchdog && now - last_watchdog >= *watchdog / 2) {
      sd_notify_send("WATCHDOG=1");
      last_watchdog = now;
    }
  }
  sd_notify_send("STOPPING=1");
  LW_LOG_INFO("stopping: detaching %zu processes", state_.tracked.size());
  return ok_status();
}

}  // namespace lw
