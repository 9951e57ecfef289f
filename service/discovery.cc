// SPDX-License-Identifier: Apache-2.0
#include "core/platform/clock.h"
#include "service/discovery.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "core/platform/fd.h"
#include "core/platform/log.h"

namespace lw {

namespace {

TraceOptions trace_options(const TargetConfig& t, const Config& c) {
  TraceOptions o;
  // `auto` starts light and is escalated to full while it grows (escalation).
  o.heap = t.mode == TargetMode::kFull;
  o.mmap = true;
  o.follow_forks = t.follow_forks;
  o.tensors = t.tensors;
  o.sample_mean_bytes = t.sampling_mean_bytes.value_or(c.sampling.enabled ? c.sampling.mean_bytes : 0);
  o.auto_sampling = t.automatic_sampling.value_or(c.sampling.automatic);
  o.max_rescans_per_second = c.limits.max_rescans_per_second;
  o.max_process_memory_bytes = c.limits.max_process_memory_bytes;
  return o;
}

// A short reason for attach-error metrics: the errno name, not the message
// (messages hold paths and pids, which would explode label cardinality).
std::string reason_of(const Error& e) {
  switch (e.code) {
    case ESRCH: return "no_such_process";
    case EPERM:
    case EACCES: return "permission_denied";
    case ENOENT: return "no_allocator_found";
    case ESTALE: return "file_changed";
    case E2BIG:
    case ENOSPC:
    case ENOMEM: return "kernel_map_full";
    case EINVAL: return "invalid";
    default: return "other";
  }
}

AnalysisParams analysis_params(const Config& c) {
  AnalysisParams p;
  p.window_s = c.analysis.window_seconds;
  p.primed_min_span_s = c.analysis.primed_min_span_seconds;
  return p;
}

}  // namespace

ProcessFacts facts_of(const ProcessIdentity& id) {
  ProcessFacts f;
  f.pid = id.pid;
  f.comm = id.comm;
  f.exe = id.exe;
  f.cgroup_path = id.cgroup.value_or("");
  f.k8s_namespace = id.pod_namespace;
  f.k8s_pod = id.pod_name;
  return f;
}

uint64_t read_start_ticks(pid_t pid) {
  Result<std::string> text = read_regular_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!text) return 0;
  Result<StatFields> st = parse_proc_stat(*text);
  return st ? st->start_time : 0;
}

ProcessDiscovery::ProcessDiscovery(DaemonState& state, TracerControl& tracer,
                                   PodDirectoryOptions pods)
    : state_(state), tracer_(tracer), pods_(std::move(pods)) {}

void ProcessDiscovery::consider(pid_t pid, pid_t parent, uint64_t event_ns) {
  if (pid == getpid() || state_.tracked.count(pid)) return;
  // Kill switch: nothing new is attached; the reconciliation after it is
  // released finds what started meanwhile.
  if (state_.counters.kill_switch_engaged) return;
  ++state_.counters.discoveries;
  consider_ns_ = monotonic_ns();
  Result<ProcessIdentity> id = read_process_identity(pid, &pods_);
  if (!id) return;  // exited meanwhile, or a kernel thread
  if (id->exe.empty()) return;  // kernel threads have no executable
  const TargetConfig* target = nullptr;
  auto parent_it = parent ? state_.tracked.find(parent) : state_.tracked.end();
  if (parent_it != state_.tracked.end()) {
    // A forked child of a target that follows forks: it belongs to the
    // parent's target, whatever its own name says.
    for (const TargetConfig& t : state_.config.targets)
      if (t.name == parent_it->second.info.target) target = &t;
  }
  if (!target) target = match_target(state_.config, facts_of(*id));
  if (!target) {
    unmatched_.insert({pid, id->start_time});
    return;
  }
  attach(pid, *id, *target, parent_it != state_.tracked.end() ? parent : 0, event_ns);
}

void ProcessDiscovery::attach(pid_t pid, const ProcessIdentity& id, const TargetConfig& target,
                              pid_t parent, uint64_t event_ns) {
  const Config& config = state_.config;
  DaemonCounters& counters = state_.counters;
  if (state_.tracked.size() >= config.limits.max_processes) {
    ++counters.refused_max_processes;
    log_once("max_processes", "limits.max_processes (" +
                                  std::to_string(config.limits.max_processes) +
                                  ") reached: new matching processes are not attached");
    return;
  }
  // A user's share of the slots (decision fair-shares): one user cannot
  // keep another's processes untraced, and users together leave slots
  // over ("Two users": at most three quarters of what the others leave).
  if (id.real_uid && *id.real_uid != 0 && config.limits.fair_share_percent < 100) {
    const size_t slots = config.limits.max_processes;
    size_t held = 0;
    for (const auto& [p, t] : state_.tracked) held += t.info.identity.real_uid == id.real_uid;
    const size_t left = slots - (state_.tracked.size() - held);
    const size_t share =
        std::max<size_t>(std::min(slots * config.limits.fair_share_percent / 100, left / 4 * 3), 1);
    if (held >= share) {
      ++counters.refused_user_share;
      log_once("user_share", "limits.fair_share_percent: a user holds its share of limits.max_processes (" +
                                 std::to_string(share) + "): its new processes are not attached");
      return;
    }
  }
  // Over the memory budget, keep what is tracked and take on nothing new.
  if (state_.tracked_memory > config.limits.max_daemon_memory_bytes) {
    ++counters.refused_memory_budget;
    log_once("max_daemon_memory", "limits.max_daemon_memory_bytes reached: new matching "
                                  "processes are not attached");
    return;
  }
  const uint64_t probes_ns = monotonic_ns();
  TraceOptions options = trace_options(target, config);
  options.uid = id.real_uid;
  Status st = tracer_.attach(pid, options);
  const uint64_t checks_ns = monotonic_ns();
  if (!st) {
    ++counters.attach_failures;
    ++counters.attach_errors[reason_of(st.error())];
    LW_LOG_WARN("attaching pid %d (%s) for target %s: %s", pid, id.comm.c_str(),
                target.name.c_str(), st.error().message.c_str());
    return;
  }
  // The identity was read before the attach: if the process exited and
  // its pid went to another meanwhile, the probes are on the newcomer,
  // with the options of a target it was never matched for. Drop them and
  // match the newcomer itself (its exec event may have come while the pid
  // was registered, and is gone with it). Recursing again would take
  // another whole pid wrap within this call.
  if (std::optional<uint64_t> ticks = tracer_.start_ticks(pid); ticks && *ticks != id.start_time) {
    ++counters.pid_reuse_detected;
    LW_LOG_INFO("pid %d was reused while being attached: matching the new process", pid);
    // The probes are on the newcomer, alive: closed before it is matched
    // (probes twice on one process would count its calls twice).
    tracer_.detach(pid);
    consider(pid, 0, 0);
    return;
  }
  if (read_start_ticks(pid) != id.start_time) {
    // Exited while being attached (its pid free, or already another's),
    // perhaps before its target entry existed, so its exit event may never
    // come: done with it now, not at the next reconciliation, its links
    // closed off the event loop (decision gone-processes-dropped).
    LW_LOG_INFO("pid %d (%s) exited while being attached", pid, id.comm.c_str());
    ++counters.exited_while_attaching;
    tracer_.detach_many({pid});
    return;
  }
  const uint64_t done_ns = monotonic_ns();
  if (event_ns) {
    const int64_t ns = static_cast<int64_t>(done_ns - event_ns);
    counters.attach_latency.observe(static_cast<double>(ns) / 1e9);
  }
  // Where attach time goes (bench/many_processes.sh reads these): from the
  // kernel's exec event to this process's turn on the event loop, reading
  // its identity and matching it, the tracer's attach (maps, ELF, links),
  // and the checks after it. A process found by a /proc scan has no event.
  if (log_level() <= LogLevel::kDebug)
    LW_LOG_DEBUG("attach stages pid %d: queued_ms=%.3f identity_ms=%.3f probes_ms=%.3f checks_ms=%.3f",
                 pid, event_ns && consider_ns_ > event_ns ? (consider_ns_ - event_ns) / 1e6 : -1.0,
                 (probes_ns - consider_ns_) / 1e6, (checks_ns - probes_ns) / 1e6,
                 (done_ns - checks_ns) / 1e6);
  TrackedProcess t;
  t.info.identity = id;
  t.info.target = target.name;
  t.info.mode = target.mode;
  t.info.parent = parent;
  t.info.attached_at = std::chrono::system_clock::now();
  t.info.heap_attached = t.full();
  state_.tracked[pid] = std::move(t);
  state_.analyzers.try_emplace(pid, analysis_params(config));
  state_.dirty = true;
  ++counters.attached_total;
  LW_LOG_INFO("attached pid %d (%s) target=%s mode=%s%s", pid, id.comm.c_str(),
              target.name.c_str(), mode_name(target.mode),
              parent ? (" (forked from " + std::to_string(parent) + ")").c_str() : "");
}

void ProcessDiscovery::detach(pid_t pid, const char* why) {
  auto it = state_.tracked.find(pid);
  if (it == state_.tracked.end()) return;
  LW_LOG_INFO("detached pid %d (%s): %s", pid, it->second.info.identity.comm.c_str(), why);
  tracer_.detach(pid);
  state_.tracked.erase(it);
  state_.analyzers.erase(pid);
  state_.dirty = true;
  ++state_.counters.detached_total;
}

void ProcessDiscovery::reconcile() {
  ++state_.counters.reconciliations;
  DIR* proc = opendir("/proc");
  if (!proc) {
    LW_LOG_ERROR("reconcile: opendir /proc: %s", strerror(errno));
    return;
  }
  std::set<pid_t> alive;
  while (struct dirent* de = readdir(proc)) {
    char* end = nullptr;
    long pid = strtol(de->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    alive.insert(static_cast<pid_t>(pid));
  }
  closedir(proc);
  // Tracked processes that are gone without an exit event (missed while the
  // ring buffer was full) are cleaned up here.
  std::vector<pid_t> gone;
  for (const auto& [pid, t] : state_.tracked)
    if (!alive.count(pid) || read_start_ticks(pid) != t.info.identity.start_time) gone.push_back(pid);
  // Gone: their links are closed together, off the event loop
  // (decision gone-processes-dropped).
  std::vector<pid_t> reaped;
  for (pid_t pid : gone) {
    auto it = state_.tracked.find(pid);
    LW_LOG_INFO("detached pid %d (%s): gone (reconciliation)", pid, it->second.info.identity.comm.c_str());
    state_.tracked.erase(it);
    state_.analyzers.erase(pid);
    ++state_.counters.detached_total;
    reaped.push_back(pid);
  }
  if (!reaped.empty()) {
    tracer_.detach_many(reaped);
    state_.dirty = true;
  }
  for (auto it = unmatched_.begin(); it != unmatched_.end();)
    it = alive.count(it->first) ? std::next(it) : unmatched_.erase(it);
  for (pid_t pid : alive) {
    if (state_.tracked.count(pid)) continue;
    uint64_t start = read_start_ticks(pid);
    if (unmatched_.count({pid, start})) continue;
    consider(pid, 0);
  }
}

void ProcessDiscovery::handle_events() {
  // Deferred events first, in their order; no attach latency for them (it
  // would measure the budget's wait, not the attach). Looked at every 50 ms
  // (a token comes every 50 ms at the default rate), not at every pass: a
  // full queue is 4,096 entries.
  if (const uint64_t now = monotonic_ns(); budget_.queued() > 0 && now - due_checked_ns_ >= kDueIntervalNs) {
    due_checked_ns_ = now;
    for (const DeferredDiscovery& d : budget_.due(now)) consider(d.pid, d.parent, 0);
  }
  for (const ProcessEvent& d : tracer_.take_process_events()) {
    if (d.was_target) {
      // A target exec'd: its new image may not match any more.
      auto it = state_.tracked.find(d.pid);
      if (it == state_.tracked.end()) continue;
      Result<ProcessIdentity> id = read_process_identity(d.pid, &pods_);
      if (!id) continue;
      if (id->start_time != it->second.info.identity.start_time) {
        // Not an exec of the traced process: another process on its pid
        // (the old one's exit went unseen). Nothing of the old state may
        // carry over to it, nor the old target's mode: drop it and match
        // the newcomer as the new process it is.
        ++state_.counters.pid_reuse_detected;
        detach(d.pid, "pid reused by another process");
        consider(d.pid, 0, d.event_ns);
        continue;
      }
      const TargetConfig* target = match_target(state_.config, facts_of(*id));
      if (!target && it->second.info.parent == 0) {
        detach(d.pid, "no longer matches after exec");
        unmatched_.insert({d.pid, id->start_time});
      } else {
        it->second.info.identity = *id;
      }
      continue;
    }
    consider_event(d.pid, d.parent, d.event_ns);
  }
}

void ProcessDiscovery::consider_event(pid_t pid, pid_t parent, uint64_t event_ns) {
  if (pid == getpid() || state_.tracked.count(pid)) return;
  // Whose event it is: one stat. A fork loop's child is gone by now, and
  // costs nothing more.
  struct stat st;
  if (stat(("/proc/" + std::to_string(pid)).c_str(), &st) != 0) return;
  budget_.set_rate(state_.config.limits.max_discoveries_per_second);
  const bool now = budget_.admit(DeferredDiscovery{pid, parent, event_ns, st.st_uid}, monotonic_ns());
  state_.counters.discoveries_deferred = budget_.deferred();
  state_.counters.discoveries_dropped = budget_.dropped();
  if (now) consider(pid, parent, event_ns);
}

void ProcessDiscovery::reap_exited() {
  std::vector<pid_t> exited = tracer_.exited();
  if (exited.empty()) return;
  // One teardown for all: closing a uprobe link waits for a grace period
  // (tens of ms, more on a loaded host), and one process after the other
  // those waits added up to seconds of a stalled consumer under process
  // churn (tests/integration/churn_test.cc).
  for (pid_t pid : exited) {
    auto it = state_.tracked.find(pid);
    if (it != state_.tracked.end()) {
      LW_LOG_INFO("detached pid %d (%s): exited", pid, it->second.info.identity.comm.c_str());
      state_.tracked.erase(it);
      ++state_.counters.detached_total;
    }
    state_.analyzers.erase(pid);
  }
  tracer_.detach_many(exited);
  state_.dirty = true;
}

}  // namespace lw
