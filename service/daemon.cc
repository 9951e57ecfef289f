#include "service/daemon.h"

#include <dirent.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>
#include <malloc.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/log.h"
#include "core/memory_budget.h"
#include "core/sd_notify.h"

namespace lw {

namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

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

AttachOptions attach_options(const TargetConfig& t, const Config& c) {
  AttachOptions o;
  // `auto` starts light and is escalated to full while it grows (escalation).
  o.heap = t.mode == TargetMode::kFull;
  o.mmap = true;
  o.follow_forks = t.follow_forks;
  o.sample_mean_bytes = t.sampling_mean_bytes.value_or(c.sampling.enabled ? c.sampling.mean_bytes : 0);
  return o;
}

BpfOptions bpf_options(const Config& c) {
  BpfOptions o;
  o.ringbuf_bytes = c.ringbuf_bytes;
  o.live_max_entries = c.limits.live_map_entries;
  o.stack_max_entries = c.limits.stack_map_entries;
  o.max_targets = std::max<uint32_t>(c.limits.max_processes * 2, 64);
  o.report_all_execs = true;
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

// The daemon's own resident memory (/proc/self/statm), 0 if unreadable.
uint64_t own_rss_bytes() {
  char buf[256];
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return parse_statm_resident(buf, page).value_or(0);
}

}  // namespace

ProcessInfo process_info(const TrackedProcess& t) {
  ProcessInfo p;
  p.identity = t.identity;
  p.target = t.target;
  p.mode = t.mode;
  p.parent = t.parent;
  p.attached_at = t.attached_at;
  p.full = t.full;
  p.heap_attached = t.heap_attached;
  p.tracing_suspended = t.governor.suspended();
  return p;
}

Result<std::unique_ptr<Daemon>> Daemon::create(DaemonOptions options, Config config) {
  auto tracer = Tracer::create(bpf_options(config));
  if (!tracer) return tracer.error();
  (*tracer)->configure_symbols(config.symbols);
  std::unique_ptr<Daemon> d(new Daemon(std::move(options), std::move(config), std::move(*tracer)));
  return d;
}

Daemon::Daemon(DaemonOptions options, Config config, std::unique_ptr<Tracer> tracer)
    : options_(std::move(options)),
      config_(std::move(config)),
      tracer_(std::move(tracer)),
      pods_(options_.pods) {
  if (!options_.config_path.empty()) {
    // Watch the directory, not the file: editors and ConfigMap updates
    // replace the file (rename), which a watch on the old inode misses.
    inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    std::string dir = options_.config_path;
    size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : dir.substr(0, slash));
    if (inotify_fd_ >= 0 &&
        inotify_add_watch(inotify_fd_, dir.c_str(),
                          IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE_SELF) < 0) {
      LW_LOG_WARN("cannot watch %s for config changes (%s): reload on SIGHUP only", dir.c_str(),
                  strerror(errno));
      close(inotify_fd_);
      inotify_fd_ = -1;
    }
  }
  counters_.last_reload_success_timestamp = unix_now();
  baseline_rss_ = own_rss_bytes();
  apply_memory_budget();
}

Daemon::~Daemon() {
  if (inotify_fd_ >= 0) close(inotify_fd_);
}

std::shared_ptr<const DaemonSnapshot> Daemon::snapshot() const {
  std::lock_guard<std::mutex> lock(snapshot_mu_);
  return snapshot_;
}

void Daemon::consider(pid_t pid, pid_t parent, uint64_t event_ns) {
  if (pid == getpid() || tracked_.count(pid)) return;
  // Kill switch: nothing new is attached; the reconciliation after it is
  // released finds what started meanwhile.
  if (counters_.kill_switch_engaged) return;
  ++counters_.discoveries;
  Result<ProcessIdentity> id = read_process_identity(pid, &pods_);
  if (!id) return;  // exited meanwhile, or a kernel thread
  if (id->exe.empty()) return;  // kernel threads have no executable
  const TargetConfig* target = nullptr;
  auto parent_it = parent ? tracked_.find(parent) : tracked_.end();
  if (parent_it != tracked_.end()) {
    // A forked child of a target that follows forks: it belongs to the
    // parent's target, whatever its own name says.
    for (const TargetConfig& t : config_.targets)
      if (t.name == parent_it->second.target) target = &t;
  }
  if (!target) target = match_target(config_, facts_of(*id));
  if (!target) {
    unmatched_.insert({pid, id->start_time});
    return;
  }
  attach(pid, *id, *target, parent_it != tracked_.end() ? parent : 0, event_ns);
}

void Daemon::attach(pid_t pid, const ProcessIdentity& id, const TargetConfig& target,
                    pid_t parent, uint64_t event_ns) {
  if (tracked_.size() >= config_.limits.max_processes) {
    ++counters_.refused_max_processes;
    log_once("max_processes", "limits.max_processes (" +
                                  std::to_string(config_.limits.max_processes) +
                                  ") reached: new matching processes are not attached");
    return;
  }
  // Over the memory budget, keep what is tracked and take on nothing new.
  if (tracked_memory_ > config_.limits.max_daemon_memory_bytes) {
    ++counters_.refused_memory_budget;
    log_once("max_daemon_memory", "limits.max_daemon_memory_bytes reached: new matching "
                                  "processes are not attached");
    return;
  }
  Status st = tracer_->attach(pid, attach_options(target, config_));
  if (!st) {
    ++counters_.attach_failures;
    ++counters_.attach_errors[reason_of(st.error())];
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
  if (const TracedProcess* proc = tracer_->process(pid); proc && proc->start_ticks != id.start_time) {
    ++counters_.pid_reuse_detected;
    LW_LOG_INFO("pid %d was reused while being attached: matching the new process", pid);
    tracer_->detach(pid);
    consider(pid, 0, 0);
    return;
  }
  if (event_ns) {
    const int64_t ns = static_cast<int64_t>(monotonic_ns() - event_ns);
    counters_.attach_latency.observe(static_cast<double>(ns) / 1e9);
  }
  TrackedProcess t;
  t.identity = id;
  t.target = target.name;
  t.mode = target.mode;
  t.parent = parent;
  t.attached_at = std::chrono::system_clock::now();
  t.full = target.mode == TargetMode::kFull;
  t.heap_attached = t.full;
  tracked_[pid] = std::move(t);
  analyzers_.try_emplace(pid, analysis_params());
  dirty_ = true;
  ++counters_.attached_total;
  LW_LOG_INFO("attached pid %d (%s) target=%s mode=%s%s", pid, id.comm.c_str(),
              target.name.c_str(), mode_name(target.mode),
              parent ? (" (forked from " + std::to_string(parent) + ")").c_str() : "");
}

void Daemon::detach(pid_t pid, const char* why) {
  auto it = tracked_.find(pid);
  if (it == tracked_.end()) return;
  LW_LOG_INFO("detached pid %d (%s): %s", pid, it->second.identity.comm.c_str(), why);
  tracer_->detach(pid);
  tracked_.erase(it);
  analyzers_.erase(pid);
  dirty_ = true;
  ++counters_.detached_total;
}

void Daemon::reconcile() {
  ++counters_.reconciliations;
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
  for (const auto& [pid, t] : tracked_)
    if (!alive.count(pid) || process_start_ticks(pid) != t.identity.start_time) gone.push_back(pid);
  for (pid_t pid : gone) detach(pid, "gone (reconciliation)");
  for (auto it = unmatched_.begin(); it != unmatched_.end();)
    it = alive.count(it->first) ? std::next(it) : unmatched_.erase(it);
  for (pid_t pid : alive) {
    if (tracked_.count(pid)) continue;
    uint64_t start = process_start_ticks(pid);
    if (unmatched_.count({pid, start})) continue;
    consider(pid, 0);
  }
}

void Daemon::handle_discoveries() {
  for (const Discovery& d : tracer_->take_discoveries()) {
    if (d.was_target) {
      // A target exec'd: its new image may not match any more.
      auto it = tracked_.find(d.pid);
      if (it == tracked_.end()) continue;
      Result<ProcessIdentity> id = read_process_identity(d.pid, &pods_);
      if (!id) continue;
      if (id->start_time != it->second.identity.start_time) {
        // Not an exec of the traced process: another process on its pid
        // (the old one's exit went unseen). Nothing of the old state may
        // carry over to it, nor the old target's mode: drop it and match
        // the newcomer as the new process it is.
        ++counters_.pid_reuse_detected;
        detach(d.pid, "pid reused by another process");
        consider(d.pid, 0, d.event_ns);
        continue;
      }
      const TargetConfig* target = match_target(config_, facts_of(*id));
      if (!target && it->second.parent == 0) {
        detach(d.pid, "no longer matches after exec");
        unmatched_.insert({d.pid, id->start_time});
      } else {
        it->second.identity = *id;
      }
      continue;
    }
    consider(d.pid, d.parent, d.event_ns);
  }
}

void Daemon::reap_exited() {
  std::vector<pid_t> exited;
  for (const auto& [pid, proc] : tracer_->processes())
    if (proc->exited) exited.push_back(pid);
  if (exited.empty()) return;
  // One teardown for all: closing a uprobe link waits for a grace period
  // (tens of ms, more on a loaded host), and one process after the other
  // those waits added up to seconds of a stalled consumer under process
  // churn (tests/integration/churn_test.cc).
  for (pid_t pid : exited) {
    auto it = tracked_.find(pid);
    if (it != tracked_.end()) {
      LW_LOG_INFO("detached pid %d (%s): exited", pid, it->second.identity.comm.c_str());
      tracked_.erase(it);
      ++counters_.detached_total;
    }
    analyzers_.erase(pid);
  }
  tracer_->detach_many(exited);
  dirty_ = true;
}

bool Daemon::config_file_changed() {
  if (inotify_fd_ < 0) return false;
  alignas(struct inotify_event) char buf[4096];
  bool changed = false;
  std::string base = options_.config_path.substr(options_.config_path.rfind('/') + 1);
  for (;;) {
    ssize_t n = read(inotify_fd_, buf, sizeof(buf));
    if (n <= 0) break;
    for (ssize_t off = 0; off < n;) {
      auto* ev = reinterpret_cast<struct inotify_event*>(buf + off);
      // A Kubernetes ConfigMap volume swaps a "..data" symlink: any change
      // in the directory may be ours.
      if (ev->len == 0 || base == ev->name || ev->name[0] == '.') changed = true;
      off += static_cast<ssize_t>(sizeof(struct inotify_event) + ev->len);
    }
  }
  return changed;
}

void Daemon::reload() {
  ++counters_.reloads_total;
  std::vector<ConfigError> errors;
  Result<Config> fresh = load_config_file(options_.config_path, &errors);
  if (!fresh) {
    ++counters_.reload_failures_total;
    counters_.last_reload_successful = false;
    for (const ConfigError& e : errors) LW_LOG_ERROR("config reload: %s", format_error(e).c_str());
    LW_LOG_ERROR("config reload failed: keeping the previous configuration");
    return;
  }
  Config next = std::move(*fresh);
  // Targets whose definition did not change keep their processes, state and
  // counters; processes of removed or changed targets are detached, then
  // everything is matched again against the new selectors.
  std::vector<pid_t> drop;
  for (const auto& [pid, t] : tracked_) {
    const TargetConfig* old_t = nullptr;
    const TargetConfig* new_t = nullptr;
    for (const TargetConfig& c : config_.targets)
      if (c.name == t.target) old_t = &c;
    for (const TargetConfig& c : next.targets)
      if (c.name == t.target) new_t = &c;
    bool unchanged = old_t && new_t && config_equal_target(*old_t, *new_t);
    if (unchanged && t.parent == 0) {
      // Still this target's, and not excluded now?
      const TargetConfig* m = match_target(next, facts_of(t.identity));
      unchanged = m && m->name == t.target;
    }
    if (!unchanged) drop.push_back(pid);
  }
  if (next.limits.live_map_entries != config_.limits.live_map_entries ||
      next.limits.stack_map_entries != config_.limits.stack_map_entries ||
      next.ringbuf_bytes != config_.ringbuf_bytes || next.listen != config_.listen)
    LW_LOG_WARN("config reload: listen, ringbuf_bytes and kernel map sizes take effect at the "
                "next restart");
  config_ = std::move(next);
  tracer_->configure_symbols(config_.symbols);  // a new symbol thread only if `symbols` changed
  set_log_level(options_.log_level_override.value_or(config_.log_level));
  apply_memory_budget();
  if (config_.kill_switch != counters_.kill_switch_engaged)
    apply_kill_switch(config_.kill_switch, "config reload");
  for (pid_t pid : drop) detach(pid, "target removed or changed by reload");
  unmatched_.clear();
  counters_.last_reload_successful = true;
  counters_.last_reload_success_timestamp = unix_now();
  LW_LOG_INFO("config reloaded from %s: %zu targets", options_.config_path.c_str(),
              config_.targets.size());
  reconcile();
}

AnalysisParams Daemon::analysis_params() const {
  AnalysisParams p;
  p.window_s = config_.analysis.window_seconds;
  return p;
}

void Daemon::sample_analysis() {
  const double t = std::chrono::duration<double>(Clock::now() - started_).count();
  const uint64_t now_ns = monotonic_ns();
  for (auto& [pid, analyzer] : analyzers_)
    if (TracedProcess* proc = tracer_->process(pid)) analyzer.sample(proc->heap, t, now_ns);
}

void Daemon::publish() {
  auto snap = std::make_shared<DaemonSnapshot>();
  snap->timestamp = unix_now();
  snap->kernel_counters = tracer_->counters();
  snap->tracer_stats = tracer_->stats();
  snap->max_processes = config_.limits.max_processes;
  snap->live_map_capacity = config_.limits.live_map_entries;
  snap->stack_map_capacity = config_.limits.stack_map_entries;
  snap->config_path = options_.config_path;
  uint64_t memory = 0;
  for (auto& [pid, t] : tracked_) {
    TracedProcess* proc = tracer_->process(pid);
    if (!proc) continue;
    ProcessEntry e;
    e.process = process_info(t);
    auto an = analyzers_.find(pid);
    e.snapshot = take_snapshot(*tracer_, *proc, config_.top_sites_per_process, false,
                               an == analyzers_.end() ? nullptr : &an->second);
    if (an != analyzers_.end()) memory += an->second.memory_bytes();
    snap->live_map_entries += e.snapshot.live_allocations;
    memory += proc->heap.memory_bytes();
    for (const AttachedObject& o : proc->attacher->objects())
      for (const ProbeReport& r : o.probes) snap->probes.emplace_back(o.path, r);
    snap->processes.push_back(std::move(e));
  }
  tracked_memory_ = memory;
  if (memory > config_.limits.max_daemon_memory_bytes) {
    ++counters_.daemon_memory_over_budget;
    log_once("daemon_memory", "tracked state exceeds limits.max_daemon_memory_bytes");
  }
  snap->counters = counters_;
  std::lock_guard<std::mutex> lock(snapshot_mu_);
  snapshot_ = std::move(snap);
}

// ---- overhead: escalation, governor, kill switch ----

double Daemon::now_s() const {
  return std::chrono::duration<double>(Clock::now() - started_).count();
}

namespace {
// /proc/PID/statm: one read of at most 255 bytes.
std::optional<StatmBytes> read_statm(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/statm", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[256];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return std::nullopt;
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return parse_statm(std::string_view(buf, static_cast<size_t>(n)), page);
}
}  // namespace

void Daemon::sync_heap(pid_t pid, TrackedProcess& t, const char* why) {
  const bool want = t.full && !t.governor.suspended() && !counters_.kill_switch_engaged;
  if (want == t.heap_attached) return;
  Status st = tracer_->set_heap_tracing(pid, want);
  if (!st) {
    LW_LOG_WARN("pid %d (%s): %s heap probes (%s): %s", pid, t.identity.comm.c_str(),
                want ? "attaching" : "detaching", why, st.error().message.c_str());
    if (want) return;  // stays light
  }
  t.heap_attached = want;
  dirty_ = true;
  LW_LOG_INFO("pid %d (%s): heap probes %s (%s)", pid, t.identity.comm.c_str(),
              want ? "attached, heap re-baselined" : "detached, heap figures frozen", why);
}

GovernorParams Daemon::governor_params() const {
  const GovernorConfig& g = config_.governor;
  GovernorParams gp;
  gp.max_hits_per_second = g.max_hits_per_second;
  gp.backoff_initial_s = g.backoff_initial_seconds;
  gp.backoff_max_s = std::max(g.backoff_max_seconds, g.backoff_initial_seconds);
  return gp;
}

void Daemon::apply_memory_budget() {
  const uint64_t budget = config_.limits.max_daemon_memory_bytes;
  const uint64_t cap = live_record_cap(budget, baseline_rss_);
  tracer_->set_live_record_cap(cap);
  LW_LOG_INFO("memory budget %llu bytes, baseline RSS %llu: at most %llu live records "
              "(%llu bytes each at worst)",
              static_cast<unsigned long long>(budget), static_cast<unsigned long long>(baseline_rss_),
              static_cast<unsigned long long>(cap),
              static_cast<unsigned long long>(kBytesPerLiveRecord));
  if (!live_map_fits(config_.limits.live_map_entries, cap))
    LW_LOG_WARN("limits.live_map_entries (%u) holds more records than limits.max_daemon_memory_bytes "
                "(%llu) lets the daemon keep (%llu): when tracked allocations reach that, the "
                "process with the most is suspended (leakwatch_memory_budget_suspensions_total)",
                config_.limits.live_map_entries, static_cast<unsigned long long>(budget),
                static_cast<unsigned long long>(cap));
}

void Daemon::handle_budget_sheds() {
  std::vector<pid_t> shed = tracer_->take_budget_sheds();
  if (shed.empty()) return;
  const GovernorParams gp = governor_params();
  for (pid_t pid : shed) {
    auto it = tracked_.find(pid);
    if (it == tracked_.end()) {
      (void)tracer_->set_heap_tracing(pid, false);
      continue;
    }
    TrackedProcess& t = it->second;
    const double wait = t.governor.suspend(now_s(), gp);
    ++counters_.memory_budget_suspensions;
    const TracerStats st = tracer_->stats();
    log_once("memory_budget_shed",
             "limits.max_daemon_memory_bytes: live records reached the cap of " +
                 std::to_string(st.live_record_cap) +
                 "; the process holding the most has its heap tracing suspended, per-site "
                 "figures frozen (leakwatch_memory_budget_suspensions_total)");
    LW_LOG_INFO("memory budget: pid %d (%s) heap records shed, heap probes suspended for %.0f s",
                pid, t.identity.comm.c_str(), wait);
    sync_heap(pid, t, "memory budget");
  }
  // The records' arrays were freed; hand the pages back to the kernel now
  // (glibc keeps freed heap memory otherwise).
  malloc_trim(0);
  dirty_ = true;
}

void Daemon::overhead_tick() {
  const double now = now_s();
  if (now - last_overhead_tick_s_ < 1.0) return;
  last_overhead_tick_s_ = now;
  if (counters_.kill_switch_engaged) return;
  const GovernorParams gp = governor_params();
  const EscalationConfig& e = config_.escalation;
  for (auto& [pid, t] : tracked_) {
    if (t.heap_attached || t.governor.suspended()) {
      if (std::optional<uint64_t> hits = tracer_->probe_hits(pid)) {
        switch (t.governor.observe(now, *hits, gp)) {
          case GovernorAction::kSuspend:
            ++counters_.governor_suspensions;
            LW_LOG_WARN("governor: pid %d (%s) over %llu probe hits/s: heap probes suspended "
                        "for %.0f s",
                        pid, t.identity.comm.c_str(),
                        static_cast<unsigned long long>(gp.max_hits_per_second),
                        t.governor.backoff_s());
            sync_heap(pid, t, "governor: over budget");
            dirty_ = true;
            break;
          case GovernorAction::kResume:
            sync_heap(pid, t, "governor: backoff over");
            dirty_ = true;
            break;
          case GovernorAction::kNone:
            break;
        }
      }
    }
    if (t.mode != TargetMode::kAuto) continue;
    if (t.full && now >= t.full_until_s) {
      t.full = false;
      t.cooldown_until_s = now + e.cooldown_seconds;
      t.growth.clear();
      t.growth_resident.clear();
      ++counters_.escalations_down;
      LW_LOG_INFO("escalation: pid %d (%s) full -> light after %u s", pid,
                  t.identity.comm.c_str(), e.full_window_seconds);
      sync_heap(pid, t, "step-down");
      dirty_ = true;
      continue;
    }
    if (now - t.last_check_s < e.check_interval_seconds) continue;
    t.last_check_s = now;
    std::optional<StatmBytes> mem = read_statm(pid);
    if (!mem) continue;
    t.growth.add(now, mem->data, e.growth_window_seconds);
    t.growth_resident.add(now, mem->anon_resident, e.growth_window_seconds);
    if (!t.full && now >= t.cooldown_until_s &&
        (t.growth.growing(e.growth_bytes) || t.growth_resident.growing(e.growth_bytes))) {
      t.full = true;
      t.full_until_s = now + e.full_window_seconds;
      ++counters_.escalations_up;
      LW_LOG_INFO("escalation: pid %d (%s) light -> full for %u s: VmData %llu, anonymous "
                  "resident %llu bytes, grew >= %llu within %u s",
                  pid, t.identity.comm.c_str(), e.full_window_seconds,
                  static_cast<unsigned long long>(mem->data),
                  static_cast<unsigned long long>(mem->anon_resident),
                  static_cast<unsigned long long>(e.growth_bytes), e.growth_window_seconds);
      sync_heap(pid, t, "escalation");
      dirty_ = true;
    }
  }
}

void Daemon::apply_kill_switch(bool engage, const char* why) {
  const auto t0 = Clock::now();
  if (engage) {
    counters_.kill_switch_engaged = true;
    std::vector<pid_t> heap_pids, all_pids;
    for (auto& [pid, t] : tracked_) {
      (void)tracer_->set_accounting(pid, false);
      if (t.heap_attached) heap_pids.push_back(pid);
      all_pids.push_back(pid);
      t.heap_attached = false;
    }
    // Every probe, CUDA's included, in one parallel teardown.
    tracer_->detach_heap_many(heap_pids, all_pids);
    tracer_->set_raw_syscalls_allowed(false);
  } else {
    counters_.kill_switch_engaged = false;
    tracer_->set_raw_syscalls_allowed(true);
    for (auto& [pid, t] : tracked_) {
      (void)tracer_->set_accounting(pid, true);
      sync_heap(pid, t, "kill switch released");
    }
  }
  dirty_ = true;
  LW_LOG_WARN("kill switch %s (%s): %zu processes, %.0f ms", engage ? "engaged" : "released", why,
              tracked_.size(),
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  publish();
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
// ---- end overhead ----

Status Daemon::run(const std::function<void()>& on_ready) {
  set_log_level(options_.log_level_override.value_or(config_.log_level));
  if (config_.kill_switch) apply_kill_switch(true, "config");
  reconcile();
  publish();
  LW_LOG_INFO("tracking %zu processes across %zu targets", tracked_.size(),
              config_.targets.size());
  if (on_ready) on_ready();

  const auto watchdog = sd_watchdog_interval();
  auto last_watchdog = Clock::now();
  auto last_publish = Clock::now();
  auto last_reconcile = Clock::now();
  auto last_sample = Clock::now();
  sample_analysis();
  while (!stop_.load()) {
    Result<int> n = tracer_->poll(100);
    if (!n) return n.error();
    handle_budget_sheds();
    handle_discoveries();
    reap_exited();
    // A rescan attached new objects (libc mapped after exec, a dlopen):
    // publish now, so the API shows the probes as soon as they exist.
    if (uint64_t r = tracer_->stats().rescans; r != rescans_seen_) {
      rescans_seen_ = r;
      dirty_ = true;
    }
    if (reload_.exchange(false) || config_file_changed()) {
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
      sd_notify_send(counters_.last_reload_successful
                         ? "READY=1\nSTATUS=configuration reloaded"
                         : "READY=1\nSTATUS=configuration reload failed: previous configuration kept");
    }
    if (kill_toggle_.exchange(false))
      apply_kill_switch(!counters_.kill_switch_engaged, "SIGUSR2");
    overhead_tick();
    auto now = Clock::now();
    if (now - last_reconcile >= std::chrono::seconds(config_.reconcile_interval_seconds)) {
      reconcile();
      last_reconcile = now;
    }
    if (now - last_sample >= std::chrono::seconds(config_.analysis.sample_interval_seconds)) {
      sample_analysis();
      last_sample = now;
    }
    if (dirty_ || now - last_publish >= std::chrono::seconds(1)) {
      publish();
      dirty_ = false;
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
  LW_LOG_INFO("stopping: detaching %zu processes", tracked_.size());
  return ok_status();
}

}  // namespace lw
