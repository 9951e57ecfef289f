// SPDX-License-Identifier: Apache-2.0
#include "exporter/metrics.h"

#include "view/oom_report.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <deque>
#include <cstring>
#include <limits>
#include <map>


#include "core/accounting/counters.h"
#include "core/symbols/elf_file.h"
#include "core/formats/label_sanitize.h"
#include "core/symbols/stack_id.h"

namespace lw {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

// Builds families with a shared series budget: once max_series is reached,
// further series are counted, not emitted. Families are kept in a fixed
// order so the self-monitoring families (added first) always fit.
class Families {
 public:
  Families(size_t max_series, RenderStats* stats) : max_(max_series), stats_(stats) {}

  MetricFamily& family(const std::string& name, const std::string& help, MetricType type) {
    auto it = index_.find(name);
    if (it != index_.end()) return out_[it->second];
    index_[name] = out_.size();
    out_.push_back(MetricFamily{name, help, type, {}});
    return out_.back();
  }

  // `labels` values must already be sanitized (see clean()): callers
  // sanitize each distinct value once, not once per series.
  void add(MetricFamily& f, Labels labels, double value) {
    if (stats_->series >= max_) {
      ++stats_->series_dropped;
      return;
    }
    ++stats_->series;
    ClientMetric m;
    m.label = std::move(labels);
    switch (f.type) {
      case MetricType::Counter: m.counter.value = value; break;
      case MetricType::Gauge: m.gauge.value = value; break;
      default: m.untyped.value = value; break;
    }
    f.metric.push_back(std::move(m));
  }

  // One histogram series (counts as one series toward max_series).
  void add_histogram(MetricFamily& f, Labels labels, const LatencyHistogram& h) {
    if (stats_->series >= max_) {
      ++stats_->series_dropped;
      return;
    }
    ++stats_->series;
    ClientMetric m;
    m.label = std::move(labels);
    m.histogram.sample_count = h.count();
    m.histogram.sample_sum = h.sum();
    for (size_t i = 0; i < LatencyHistogram::kBounds.size(); ++i)
      m.histogram.bucket.push_back({h.cumulative(i), LatencyHistogram::kBounds[i]});
    m.histogram.bucket.push_back({h.count(), std::numeric_limits<double>::infinity()});
    f.metric.push_back(std::move(m));
  }

  std::vector<MetricFamily> take() {
    std::vector<MetricFamily> out;
    for (MetricFamily& f : out_)
      if (!f.metric.empty()) out.push_back(std::move(f));
    return out;
  }

 private:
  size_t max_;
  RenderStats* stats_;
  std::deque<MetricFamily> out_;  // deque: family() references stay valid
  std::map<std::string, size_t> index_;
};

Labels clean(Labels l) {
  for (ClientMetric::Label& x : l) x.value = sanitize_label_value(x.value);
  return l;
}

Labels process_labels(const ProcessInfo& t) {
  const ProcessIdentity& id = t.identity;
  Labels l = {{"pid", std::to_string(id.pid)},
              {"start_time", std::to_string(id.start_time)},
              {"comm", id.comm},
              {"exe", id.exe},
              {"target", t.target}};
  // Spelled as kube-state-metrics spells them, so PromQL joins on uid and
  // container_id need no relabelling. Absent values are empty labels.
  l.push_back({"unit", id.unit.value_or("")});
  l.push_back({"uid", id.pod_uid.value_or("")});
  l.push_back({"container_id", id.container_id.value_or("")});
  l.push_back({"namespace", id.pod_namespace.value_or("")});
  l.push_back({"pod", id.pod_name.value_or("")});
  return clean(std::move(l));
}

Labels with(Labels l, std::initializer_list<ClientMetric::Label> more) {
  l.insert(l.end(), more.begin(), more.end());
  return l;
}

// "leaf_function (file:line)", short, for the `site` label: the innermost
// Python frame where the stack has one (the function that keeps the
// memory, not the interpreter's allocator), else the leaf. Full stacks go
// to the API and pprof, never into labels.
std::string site_label(const SiteSnapshot& s) {
  for (const Frame& f : s.frames) {
    if (f.language != "python") continue;
    std::string out = f.function;
    size_t slash = f.file.rfind('/');
    out += " (" + (slash == std::string::npos ? f.file : f.file.substr(slash + 1)) + ":" +
           std::to_string(f.line) + ")";
    return out;
  }
  for (const Frame& f : s.frames) {
    if (f.function.empty() && f.file.empty()) continue;
    std::string out = frame_display_name(f);
    if (!f.file.empty()) {
      size_t slash = f.file.rfind('/');
      out += " (" + (slash == std::string::npos ? f.file : f.file.substr(slash + 1)) + ":" +
             std::to_string(f.line) + ")";
    }
    return out;
  }
  // Nothing symbolized (yet): the leaf as module+offset.
  return s.frames.empty() ? "unknown" : frame_display_name(s.frames.front());
}

// The HTTP front (exporter/http/http_server.h): connections, refusals, the
// response memory it holds and its web config reloads.
template <typename Families>
void add_http_families(Families& fam, const HttpFrontStats& h) {
  const auto G = prometheus::MetricType::Gauge;
  const auto C = prometheus::MetricType::Counter;
  fam.add(fam.family("leakwatch_http_connections", "HTTP connections held now.", G), {},
          static_cast<double>(h.connections_open));
  fam.add(fam.family("leakwatch_http_max_connections", "HTTP connections held at most.", G), {},
          static_cast<double>(h.max_connections));
  fam.add(fam.family("leakwatch_http_connections_accepted_total", "HTTP connections accepted.", C), {},
          static_cast<double>(h.connections_accepted));
  MetricFamily& closed = fam.family("leakwatch_http_connections_closed_total",
                                    "HTTP connections closed by leakwatch, by reason.", C);
  for (const char* reason : {"cap", "timeout", "write_timeout", "tls_handshake"}) {
    auto it = h.connections_closed.find(reason);
    fam.add(closed, {{"reason", reason}},
            static_cast<double>(it == h.connections_closed.end() ? 0 : it->second));
  }
  fam.add(fam.family("leakwatch_http_requests_total", "HTTP request heads received.", C), {},
          static_cast<double>(h.requests));
  MetricFamily& refused = fam.family("leakwatch_http_requests_refused_total",
                                     "HTTP requests answered with an error before any route, by reason.", C);
  for (const char* reason : {"malformed", "head_too_large", "body", "method", "unauthorized", "rate_limited",
                             "overloaded", "plain_on_tls"}) {
    auto it = h.refused.find(reason);
    fam.add(refused, {{"reason", reason}}, static_cast<double>(it == h.refused.end() ? 0 : it->second));
  }
  fam.add(fam.family("leakwatch_http_response_bytes_held", "Bytes of HTTP responses held for clients now.", G),
          {}, static_cast<double>(h.response_bytes_in_flight));
  fam.add(fam.family("leakwatch_http_response_bytes_limit", "Bytes of HTTP responses held at most.", G), {},
          static_cast<double>(h.response_bytes_limit));
  fam.add(fam.family("leakwatch_web_config_reloads_total", "Web config files re-read after a change.", C), {},
          static_cast<double>(h.web_config_reloads));
  fam.add(fam.family("leakwatch_web_config_reload_failures_total",
                     "Web config re-reads rejected (the running one kept).", C),
          {}, static_cast<double>(h.web_config_reload_failures));
  fam.add(fam.family("leakwatch_web_config_last_reload_successful", "1 if the last web config re-read succeeded.", G),
          {}, h.web_config_last_reload_successful ? 1 : 0);
}

}  // namespace

const char* counter_family_help(std::string_view family) {
  // Every family a kernel counter may be exported in (bpf/lw_counters.h).
  static constexpr std::pair<std::string_view, const char*> kFamilies[] = {
      {"leakwatch_events_seen_total", "Events the kernel side tried to emit (seen = delivered + dropped)."},
      {"leakwatch_events_delivered_total", "Events written to the ring buffer."},
      {"leakwatch_events_dropped_total", "Events lost before reaching the daemon, by reason."},
      {LW_FAM_FAILURES, "Kernel-side failures by reason (per-CPU counters summed); see docs/metrics.md."},
      {LW_FAM_TRUNCATED,
       "Stacks that ended before the outermost frame, by reason (no_cfi, depth, table_pending, ...)."},
      {"leakwatch_cuda_nested_calls_total",
       "CUDA driver allocations made inside a runtime call, counted once (at the runtime)."},
      {"leakwatch_cuda_context_released_total", "CUDA records released implicitly by cuCtxDestroy."},
      {"leakwatch_unmatched_frees_total",
       "Frees of addresses not in the live map (allocated before attach, or lost)."},
      {"leakwatch_missed_frees_total",
       "Allocations returned at a still-live address: the old record's free was missed."},
      {"leakwatch_nested_calls_total", "Allocator calls inside another accounted call, not counted twice."},
      {"leakwatch_sampling_skipped_allocations_total",
       "Allocations not recorded because byte sampling skipped them."},
      {"leakwatch_unsampled_frees_total",
       "Frees in sampled processes of blocks not in the live map (unsampled blocks)."},
      {"leakwatch_python_native_thread_allocations_total",
       "Allocations in CPython processes made on threads without a Python thread state (native frames only)."},
      {"leakwatch_stack_walks_reused_total",
       "Native stacks taken from an earlier walk from the same start whose stack reads all still hold."},
      {"leakwatch_stack_window_fills_total",
       "Blocks of user memory copied for the stack walks' reads; each serves every read inside it."},
  };
  for (const auto& [name, help] : kFamilies)
    if (name == family) return help;
  return nullptr;
}

std::vector<MetricFamily> build_metric_families(const DaemonSnapshot& snap,
                                                const MetricsOptions& options,
                                                RenderStats* stats) {
  RenderStats local;
  if (!stats) stats = &local;
  *stats = {};
  Families fam(options.max_series, stats);
  const auto G = MetricType::Gauge;
  const auto C = MetricType::Counter;
  const DaemonCounters& dc = snap.counters;

  // Self-monitoring first: it must survive the series cap.
  fam.add(fam.family("leakwatch_build_info", "leakwatch version; always 1.", G),
          {{"version", LEAKWATCH_VERSION}}, 1);
  const Counters& k = snap.kernel_counters;
  // The kernel counters, each in the family the one list (bpf/lw_counters.h)
  // names for it, with its `reason` label where it has one.
  for (size_t i = 0; i < LW_CNT_MAX; ++i) {
    const CounterInfo* c = counter_info(i);
    if (c == nullptr) continue;  // a slot no one has assigned
    const char* help = counter_family_help(c->family);
    if (help == nullptr) continue;  // unreachable: Counters.EveryCounterHasAKnownFamily
    MetricFamily& f = fam.family(c->family, help, C);
    if (c->reason)
      fam.add(f, {{"reason", c->reason}}, static_cast<double>(k[i]));
    else
      fam.add(f, {}, static_cast<double>(k[i]));
    if (i == LW_CNT_EVENTS_DROPPED_RINGBUF)
      fam.add(f, {{"reason", "decode_error"}}, static_cast<double>(snap.tracer_stats.decode_errors));
  }
  // overhead: escalation, governor, kill switch.
  MetricFamily& escalations = fam.family(
      "leakwatch_escalations_total", "auto processes stepped up (light -> full) or down (full -> light).", C);
  fam.add(escalations, {{"direction", "up"}}, static_cast<double>(dc.escalations_up));
  fam.add(escalations, {{"direction", "down"}}, static_cast<double>(dc.escalations_down));
  fam.add(fam.family("leakwatch_governor_suspensions_total",
                     "Times the governor detached a process's heap probes for going over budget.", C),
          {}, static_cast<double>(dc.governor_suspensions));
  // The memory budget (decision daemon-memory-bound).
  fam.add(fam.family("leakwatch_memory_budget_suspensions_total",
                     "Times a process's heap tracing was suspended because the daemon's live records "
                     "reached the cap derived from limits.max_daemon_memory_bytes.", C),
          {}, static_cast<double>(dc.memory_budget_suspensions));
  fam.add(fam.family("leakwatch_daemon_live_records",
                     "Per-address allocation records the daemon holds, all processes.", G),
          {}, static_cast<double>(snap.tracer_stats.live_records));
  fam.add(fam.family("leakwatch_daemon_live_records_limit",
                     "Records the daemon may hold before it suspends the process holding the most "
                     "(from limits.max_daemon_memory_bytes).", G),
          {}, static_cast<double>(snap.tracer_stats.live_record_cap));
  fam.add(fam.family("leakwatch_automatic_sampling_switches_total",
                     "Times a process's heap was switched to byte sampling, or to a larger mean, "
                     "because its records outgrew its share of the live map or of the daemon's budget.", C),
          {}, static_cast<double>(snap.tracer_stats.auto_sampling_switches));
  fam.add(fam.family("leakwatch_automatic_sampling_thinned_records_total",
                     "Heap records dropped by those switches (each kept one stands for more).", C),
          {}, static_cast<double>(snap.tracer_stats.auto_sampling_thinned));
  fam.add(fam.family("leakwatch_kill_switch_engaged", "1 while the kill switch has every probe detached.", G),
          {}, dc.kill_switch_engaged ? 1 : 0);
  fam.add(fam.family("leakwatch_syscall_tracepoints_attached",
                     "1 while the host-wide raw syscall tracepoints are attached (a process in mode "
                     "full has no probeable mmap wrapper).", G),
          {}, snap.tracer_stats.raw_syscall_tracepoints ? 1 : 0);
  fam.add(fam.family("leakwatch_resyncs_total",
                     "Process states rebuilt from the kernel's live map after a loss.", C),
          {}, static_cast<double>(snap.tracer_stats.resyncs));
  // The lifecycle budget (decision lifecycle-budget).
  fam.add(fam.family("leakwatch_lifecycle_events_total",
                     "Changes of traced processes' code mappings (exec, executable mmap, dlopen, dlclose).", C),
          {}, static_cast<double>(snap.tracer_stats.lifecycle_events));
  fam.add(fam.family("leakwatch_rescans_total",
                     "Rescans of traced processes' mapped objects (each after lifecycle events).", C),
          {}, static_cast<double>(snap.tracer_stats.rescans));
  fam.add(fam.family("leakwatch_rescans_deferred_total",
                     "Rescans that waited for a process's lifecycle budget (limits.max_rescans_per_second): "
                     "probes on a newly loaded library came late.", C),
          {}, static_cast<double>(snap.tracer_stats.rescans_deferred));
  // The unwind tables (decision cfi-unwinding).
  const UnwindStats& u = snap.tracer_stats.unwind;
  MetricFamily& objs = fam.family(
      "leakwatch_unwind_objects",
      "Mapped objects registered for unwinding, by table state (pending: being built; "
      "no_cfi: no call-frame information; memory_budget: refused by unwind.max_table_bytes).", G);
  fam.add(objs, {{"state", "pending"}}, static_cast<double>(u.objects_pending));
  fam.add(objs, {{"state", "ready"}}, static_cast<double>(u.objects_ready));
  fam.add(objs, {{"state", "no_cfi"}}, static_cast<double>(u.objects_no_cfi));
  fam.add(objs, {{"state", "memory_budget"}}, static_cast<double>(u.objects_budget));
  fam.add(fam.family("leakwatch_unwind_tables", "Unwind tables loaded (one per build-id).", G), {},
          static_cast<double>(u.tables));
  fam.add(fam.family("leakwatch_unwind_table_bytes",
                     "Kernel memory of the loaded unwind tables (rows and page indexes).", G),
          {}, static_cast<double>(u.table_bytes));
  fam.add(fam.family("leakwatch_unwind_table_max_bytes", "unwind.max_table_bytes.", G), {},
          static_cast<double>(u.max_table_bytes));
  fam.add(fam.family("leakwatch_unwind_table_builds_total",
                     "Unwind tables compiled from an object's call-frame information.", C),
          {}, static_cast<double>(u.builds));
  fam.add(fam.family("leakwatch_unwind_table_build_failures_total",
                     "Objects whose call-frame information was refused or whose table failed to load.", C),
          {}, static_cast<double>(u.build_failures));
  fam.add(fam.family("leakwatch_unwind_table_build_seconds_total",
                     "Time spent compiling unwind tables (off the event path).", C),
          {}, u.build_seconds);
  MetricFamily& hits = fam.family("leakwatch_unwind_table_cache_hits_total",
                                  "Unwind tables found already built, by cache.", C);
  fam.add(hits, {{"cache", "disk"}}, static_cast<double>(u.disk_cache_hits));
  fam.add(hits, {{"cache", "memory"}}, static_cast<double>(u.memory_cache_hits));
  fam.add(fam.family("leakwatch_unwind_table_queue", "Objects waiting for their unwind table.", G), {},
          static_cast<double>(u.queue_depth));
  MetricFamily& map_entries =
      fam.family("leakwatch_kernel_map_entries",
                 "Entries used in a kernel map (live: tracked processes' records; stacks: at the end of "
                 "the last collection walk).",
                 G);
  fam.add(map_entries, {{"map", "live"}}, static_cast<double>(snap.live_map_entries));
  fam.add(map_entries, {{"map", "stacks"}}, static_cast<double>(snap.tracer_stats.stack_map_entries));
  // The stack map's collection (decision stack-map-gc).
  fam.add(fam.family("leakwatch_stack_map_collected_total",
                     "Stored stacks deleted from the kernel stack map, unreferenced past the grace period.", C),
          {}, static_cast<double>(snap.tracer_stats.stacks_collected));
  fam.add(fam.family("leakwatch_stack_map_restored_total",
                     "Deleted stacks stored again because a record queued before the delete named one.", C),
          {}, static_cast<double>(snap.tracer_stats.stacks_restored));
  MetricFamily& map_cap = fam.family("leakwatch_kernel_map_capacity", "Capacity of a kernel map.", G);
  fam.add(map_cap, {{"map", "live"}}, snap.live_map_capacity);
  fam.add(map_cap, {{"map", "stacks"}}, snap.stack_map_capacity);
  fam.add(fam.family("leakwatch_live_map_worst_bytes",
                     "Kernel memory of the live map when full (entries and buckets).", G),
          {}, static_cast<double>(snap.live_map.worst_bytes));
  fam.add(fam.family("leakwatch_tracked_processes", "Processes attached now.", G), {},
          static_cast<double>(snap.processes.size()));
  fam.add(fam.family("leakwatch_max_processes", "limits.max_processes.", G), {}, snap.max_processes);
  MetricFamily& refused =
      fam.family("leakwatch_processes_refused_total", "Matching processes not attached, by reason.", C);
  fam.add(refused, {{"reason", "max_processes"}}, static_cast<double>(dc.refused_max_processes));
  fam.add(refused, {{"reason", "memory_budget"}}, static_cast<double>(dc.refused_memory_budget));
  fam.add(fam.family("leakwatch_attached_processes_total", "Processes attached since start.", C), {},
          static_cast<double>(dc.attached_total));
  fam.add_histogram(fam.family("leakwatch_attach_latency_seconds",
                               "From a process's exec (or followed fork) event to its probes attached.",
                               MetricType::Histogram),
                    {}, dc.attach_latency);
  fam.add(fam.family("leakwatch_pid_reuse_detected_total",
                     "Traced pids found held by another process (the old state dropped, the new process matched afresh).",
                     C),
          {}, static_cast<double>(dc.pid_reuse_detected));
  fam.add(fam.family("leakwatch_exited_while_attaching_total",
                     "Processes that exited while their probes were being attached: dropped at once.", C),
          {}, static_cast<double>(dc.exited_while_attaching));
  // OOM kill reports (decision oom-kill-reports): every (target, reason) from
  // the start, at 0, so increase() sees the first kill; a target removed by a
  // reload keeps its series while it has kills.
  MetricFamily& oom = fam.family("leakwatch_oom_kills_total",
                                 "Traced processes killed for memory (an OOM kill, or a SIGKILL from user "
                                 "space), by target and reason; each has a report in /api/v1/oom_kills.",
                                 C);
  std::map<std::pair<std::string, std::string>, uint64_t> oom_kills = dc.oom_kills;
  for (const std::string& target : snap.targets)
    for (KillReason r : kAllKillReasons) oom_kills.try_emplace({target, kill_reason_name(r)}, 0);
  for (const auto& [key, n] : oom_kills)
    fam.add(oom, {{"target", key.first}, {"reason", key.second}}, static_cast<double>(n));
  MetricFamily& gpu_sup = fam.family("leakwatch_gpu_oom_suppressed_total",
                                     "GPU OOMs (CUDA allocations failed out of memory) not reported because "
                                     "their process and device had a report in the last minute; each is "
                                     "counted in that report's `suppressed`.",
                                     C);
  std::map<std::string, uint64_t> gpu_suppressed = dc.gpu_oom_suppressed;
  for (const std::string& target : snap.targets) gpu_suppressed.try_emplace(target, 0);
  for (const auto& [target, n] : gpu_suppressed)
    fam.add(gpu_sup, {{"target", target}}, static_cast<double>(n));
  fam.add(fam.family("leakwatch_oom_last_kill_timestamp_seconds",
                     "Unix time of the last OOM kill of a traced process (reports read back at start "
                     "count); 0 when none.",
                     G),
          {}, dc.oom_last_kill_timestamp);
  fam.add(fam.family("leakwatch_oom_report_write_failures_total",
                     "OOM kill reports not written to oom.report_dir (they are still served by the API).", C),
          {}, static_cast<double>(dc.oom_report_write_failures));
  fam.add(fam.family("leakwatch_stale_exits_total",
                     "Exits of traced processes found only at the fork of a new process on the pid.", C),
          {}, static_cast<double>(snap.tracer_stats.stale_exits));
  MetricFamily& attach_err = fam.family("leakwatch_attach_errors_total",
                                        "Failed process attachments, by reason.", C);
  // Every documented reason from the start, at 0 until it happens: rate()
  // and increase() then see the first error, and dashboards and alerts have
  // a series to show (Prometheus' advice for known label values).
  std::map<std::string, uint64_t> attach_errors = {
      {"no_such_process", 0}, {"permission_denied", 0}, {"no_allocator_found", 0}, {"file_changed", 0},
      {"kernel_map_full", 0}, {"invalid", 0},           {"other", 0}};
  for (const auto& [reason, n] : dc.attach_errors) attach_errors[reason] = n;  // our own constants
  for (const auto& [reason, n] : attach_errors)
    fam.add(attach_err, {{"reason", reason}}, static_cast<double>(n));
  MetricFamily& probe = fam.family(
      "leakwatch_probe_attached", "1 when the probe on this function of this object is attached.", G);
  std::map<std::pair<std::string, std::string>, bool> probes;
  for (const auto& [object, p] : snap.probes) {
    auto key = std::make_pair(object, p.symbols);
    auto it = probes.find(key);
    probes[key] = it == probes.end() ? p.attached : (it->second && p.attached);
  }
  for (const auto& [key, ok] : probes)
    fam.add(probe, clean({{"object", key.first}, {"function", key.second}}), ok ? 1 : 0);
  fam.add(fam.family("leakwatch_symbolization_errors_total",
                     "Modules that could not be opened or parsed for symbols.", C),
          {}, static_cast<double>(snap.tracer_stats.symbolization_errors));
  MetricFamily& elf_rejected = fam.family(
      "leakwatch_elf_rejected_total",
      "ELF files from target processes refused before parsing, by reason.", C);
  for (size_t r = 0; r < static_cast<size_t>(ElfReject::kCount); ++r) {
    const uint64_t n = r < snap.tracer_stats.elf_rejections.size()
                           ? snap.tracer_stats.elf_rejections[r] : 0;
    fam.add(elf_rejected, {{"reason", elf_reject_name(static_cast<ElfReject>(r))}},
            static_cast<double>(n));
  }
  fam.add(fam.family("leakwatch_config_last_reload_successful",
                     "1 if the last config reload succeeded (as Prometheus reports its own).", G),
          {}, dc.last_reload_successful ? 1 : 0);
  fam.add(fam.family("leakwatch_config_last_reload_success_timestamp_seconds",
                     "When the config was last loaded successfully.", G),
          {}, dc.last_reload_success_timestamp);
  fam.add(fam.family("leakwatch_config_reloads_total", "Config reload attempts.", C), {},
          static_cast<double>(dc.reloads_total));
  fam.add(fam.family("leakwatch_config_reload_failures_total", "Config reloads rejected.", C), {},
          static_cast<double>(dc.reload_failures_total));
  fam.add(fam.family("leakwatch_daemon_memory_over_budget_total",
                     "Snapshots taken while tracked state exceeded limits.max_daemon_memory_bytes.", C),
          {}, static_cast<double>(dc.daemon_memory_over_budget));
  // The daemon's own process, read when the snapshot was built.
  const SelfStats& self = snap.self;
  fam.add(fam.family("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", C),
          {}, self.cpu_seconds);
  fam.add(fam.family("process_resident_memory_bytes", "Resident memory size in bytes.", G), {}, self.rss);
  fam.add(fam.family("process_virtual_memory_bytes", "Virtual memory size in bytes.", G), {}, self.vsize);
  fam.add(fam.family("process_open_fds", "Number of open file descriptors.", G), {}, self.open_fds);
  fam.add(fam.family("process_max_fds", "Maximum number of open file descriptors.", G), {}, self.max_fds);
  fam.add(fam.family("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", G),
          {}, self.start_time);
  fam.add(fam.family("process_threads", "Number of OS threads in the process.", G), {},
          static_cast<double>(self.threads));
  MetricFamily& limit = fam.family("leakwatch_series_limit", "The cap on series per scrape.", G);
  fam.add(limit, {}, static_cast<double>(options.max_series));
  if (const HttpFrontStats* h = options.http) add_http_families(fam, *h);

  // Per process and kind.
  MetricFamily& p_live = fam.family("leakwatch_process_live_bytes", "Bytes live now, by kind.", G);
  MetricFamily& p_allocs = fam.family("leakwatch_process_live_allocations", "Allocations live now.", G);
  MetricFamily& p_abytes = fam.family("leakwatch_process_allocated_bytes_total",
                                      "Bytes allocated since attach.", C);
  MetricFamily& p_acount = fam.family("leakwatch_process_allocations_total",
                                      "Allocations since attach.", C);
  MetricFamily& p_fbytes = fam.family("leakwatch_process_freed_bytes_total", "Bytes freed since attach.", C);
  MetricFamily& p_fcount = fam.family("leakwatch_process_frees_total", "Frees since attach.", C);
  MetricFamily& p_rate = fam.family("leakwatch_process_leak_rate_bytes_per_second",
                                    "Robust growth rate of live bytes over the analysis window.", G);
  MetricFamily& p_flag = fam.family("leakwatch_process_suspected_leak",
                                    "1 when the process's live bytes are classified as a leak.", G);
  MetricFamily& s_live = fam.family("leakwatch_site_live_bytes",
                                    "Live bytes of the top sites per process; site=\"other\" has the rest.", G);
  MetricFamily& s_allocs = fam.family("leakwatch_site_live_allocations", "Live allocations per site.", G);
  MetricFamily& s_rate = fam.family("leakwatch_site_leak_rate_bytes_per_second",
                                    "Robust growth rate of a site's live bytes.", G);
  MetricFamily& s_flag = fam.family("leakwatch_site_suspected_leak",
                                    "1 when the site is classified as a leak.", G);
  MetricFamily& s_age = fam.family("leakwatch_site_live_bytes_by_age",
                                   "Live bytes per site by allocation age.", G);
  // overhead: which figures are estimates, and whether they are current.
  MetricFamily& p_sampling = fam.family(
      "leakwatch_process_sampling_mean_bytes",
      "Byte-sampling mean of the process's heap; > 0: its heap figures are estimates.", G);
  MetricFamily& p_stale = fam.family(
      "leakwatch_process_heap_stale_since_timestamp_seconds",
      "When the heap probes were detached (unix seconds): heap figures frozen since; 0 when current.", G);
  // The old name, for one release (docs/metrics.md, "Renamed").
  MetricFamily& p_stale_old = fam.family(
      "leakwatch_process_heap_stale_since_seconds",
      "Deprecated: leakwatch_process_heap_stale_since_timestamp_seconds, under its old name for one release.", G);
  // Unrecorded (decision unrecorded-per-kind): lost, apart from sampled and
  // suspended.
  MetricFamily& p_unrec = fam.family(
      "leakwatch_process_unrecorded_allocations_total",
      "Allocations of the process not recorded, by kind and reason: map_full (live map full, not "
      "tracked), stack_map_full (recorded, stack unknown).", C);
  MetricFamily& p_unrec_bytes = fam.family(
      "leakwatch_process_unrecorded_bytes_total",
      "Bytes of the allocations not recorded because the live map was full (reason map_full), by kind.", C);
  MetricFamily& p_coverage = fam.family(
      "leakwatch_process_recorded_coverage_ratio",
      "Recorded allocations / (recorded + not recorded): 1 when nothing was lost.", G);
  MetricFamily& p_start = fam.family(
      "leakwatch_process_start_time_seconds",
      "When the process started (unix seconds); the start_time label holds the same in clock ticks since boot.",
      G);
  MetricFamily& p_mode = fam.family(
      "leakwatch_process_mode", "1 for the process's current mode (full while its heap probes are attached).", G);
  MetricFamily& p_suspended = fam.family(
      "leakwatch_process_tracing_suspended", "1 while the governor has the process's heap probes detached.", G);
  MetricFamily& cuda_dev = fam.family(
      "leakwatch_cuda_device_live_bytes",
      "Live CUDA bytes by the device current on the allocating thread (device=\"unknown\" if not seen).", G);
  MetricFamily& p_allocator = fam.family(
      "leakwatch_process_allocator_info",
      "1 per process: the allocator probed (family), the object whose malloc wins, and how "
      "well it is supported (full, partial, unsupported, pending).", G);
  MetricFamily& p_rss = fam.family(
      "leakwatch_process_rss_bytes",
      "Resident bytes by part (docs/analysis.md, RSS explained): the anonymous parts live_heap, retained, "
      "tracked_mmap, stacks, untracked add up to anonymous RSS; file is file-backed RSS.", G);
  // Per-site series share what the cap leaves fairly: every process gets
  // the same number of site rows (its suspected leaks first, then by live
  // bytes), the rest of its bytes going to its "other" row, instead of the
  // processes late in the list losing every series. Each process also has
  // about 16 per-process series per kind and one "other" pair per kind.
  const size_t processes = snap.processes.size();
  size_t sites_per_process = SIZE_MAX;
  if (processes > 0) {
    constexpr size_t kSeriesPerSite = 8, kProcessSeries = 40;
    const size_t used = stats->series + processes * kProcessSeries + 1;
    const size_t left = options.max_series > used ? options.max_series - used : 0;
    sites_per_process = std::max<size_t>(1, left / (processes * kSeriesPerSite));
  }
  size_t sites_folded = 0;
  for (const ProcessEntry& e : snap.processes) {
    const Labels base = process_labels(e.process);
    const ProcessSnapshot& ps = e.snapshot;
    fam.add(p_sampling, base, static_cast<double>(ps.sample_mean_bytes));
    fam.add(p_stale, base, ps.heap_stale_since);
    fam.add(p_stale_old, base, ps.heap_stale_since);
    fam.add(p_start, base, start_time_unix_seconds(snap, e.process.identity.start_time));
    if (const RssBreakdown& r = ps.rss; r.valid) {  // decision rss-explained
      const std::pair<const char*, uint64_t> parts[] = {
          {"live_heap", r.live_heap}, {"retained", r.retained}, {"tracked_mmap", r.tracked_mmap},
          {"stacks", r.stacks},       {"untracked", r.untracked}, {"file", r.file_rss}};
      for (const auto& [name, bytes] : parts)
        fam.add(p_rss, with(base, {{"part", name}}), static_cast<double>(bytes));
    }
    fam.add(p_mode, with(base, {{"mode", "light"}}), e.process.heap_attached ? 0 : 1);
    fam.add(p_mode, with(base, {{"mode", "full"}}), e.process.heap_attached ? 1 : 0);
    fam.add(p_suspended, base, e.process.tracing_suspended ? 1 : 0);
    // By kind: the host kinds always (so an alert's increase() sees the
    // first loss), a CUDA kind once it made or lost an allocation.
    for (uint32_t kind = 0; kind < LW_KIND_MAX; ++kind) {
      const UnrecordedCounts& u = ps.unrecorded.kinds[kind];
      if (is_cuda_kind(kind) && ps.kinds[kind].allocations == 0 && !u.any()) continue;
      const char* k = kind_name(kind);
      fam.add(p_unrec, with(base, {{"kind", k}, {"reason", "map_full"}}), static_cast<double>(u.map_full));
      fam.add(p_unrec, with(base, {{"kind", k}, {"reason", "stack_map_full"}}),
              static_cast<double>(u.stack_map_full));
      fam.add(p_unrec_bytes, with(base, {{"kind", k}, {"reason", "map_full"}}),
              static_cast<double>(u.map_full_bytes));
    }
    fam.add(p_coverage, base, ps.coverage);
    fam.add(p_allocator,
            with(base, {{"allocator", ps.allocator.family},
                        {"object", sanitize_label_value(ps.allocator.object)},
                        {"support", ps.allocator.support}}),
            1);
    for (uint32_t kind = 0; kind < LW_KIND_MAX; ++kind) {
      const KindTotals& t = ps.kinds[kind];
      if (t.allocations == 0 && t.live_allocations == 0) continue;
      Labels l = with(base, {{"kind", kind_name(kind)}});
      fam.add(p_live, l, static_cast<double>(t.live_bytes));
      fam.add(p_allocs, l, static_cast<double>(t.live_allocations));
      fam.add(p_abytes, l, static_cast<double>(t.allocated_bytes));
      fam.add(p_acount, l, static_cast<double>(t.allocations));
      fam.add(p_fbytes, l, static_cast<double>(t.freed_bytes));
      fam.add(p_fcount, l, static_cast<double>(t.frees));
      fam.add(p_rate, l, ps.kind_verdicts[kind].rate_bytes_per_s);
      fam.add(p_flag, l, ps.kind_verdicts[kind].suspected_leak ? 1 : 0);
    }
    for (const CudaDeviceTotal& t : ps.cuda_devices)
      fam.add(cuda_dev,
              with(base, {{"kind", kind_name(t.kind)},
                          {"device", t.device < 0 ? "unknown" : std::to_string(t.device)}}),
              static_cast<double>(t.live_bytes));
    // Sites: the snapshot holds the top sites by live bytes and by leak
    // rate; the rest of each kind goes to one "other" row so sums add up.
    std::array<uint64_t, LW_KIND_MAX> shown_bytes{}, shown_allocs{};
    const Labels site_base = clean({{"pid", std::to_string(e.process.identity.pid)},
                                    {"start_time", std::to_string(e.process.identity.start_time)},
                                    {"comm", e.process.identity.comm},
                                    {"target", e.process.target}});
    std::vector<const SiteSnapshot*> shown;
    for (const SiteSnapshot& s : ps.sites)
      if (s.suspected_leak) shown.push_back(&s);
    for (const SiteSnapshot& s : ps.sites)
      if (!s.suspected_leak) shown.push_back(&s);
    if (shown.size() > sites_per_process) {
      sites_folded += shown.size() - sites_per_process;
      shown.resize(sites_per_process);
    }
    for (const SiteSnapshot* site : shown) {
      const SiteSnapshot& s = *site;
      Labels l = with(site_base, {{"kind", kind_name(s.kind)},
                                  {"stack_id", stack_id_hex(s.stack_id)},
                                  {"site", sanitize_label_value(site_label(s))}});
      fam.add(s_live, l, static_cast<double>(s.live_bytes));
      fam.add(s_allocs, l, static_cast<double>(s.live_allocations));
      fam.add(s_rate, l, s.leak_rate_bytes_per_second);
      fam.add(s_flag, l, s.suspected_leak ? 1 : 0);
      fam.add(s_age, with(l, {{"age", "lt_1m"}}), static_cast<double>(s.ages.lt_1m));
      fam.add(s_age, with(l, {{"age", "lt_10m"}}), static_cast<double>(s.ages.lt_10m));
      fam.add(s_age, with(l, {{"age", "lt_1h"}}), static_cast<double>(s.ages.lt_1h));
      fam.add(s_age, with(l, {{"age", "older"}}), static_cast<double>(s.ages.older));
      shown_bytes[s.kind] += s.live_bytes;
      shown_allocs[s.kind] += s.live_allocations;
    }
    for (uint32_t kind = 0; kind < LW_KIND_MAX; ++kind) {
      const KindTotals& t = ps.kinds[kind];
      if (t.live_allocations == 0) continue;
      Labels l = with(site_base, {{"kind", kind_name(kind)}, {"stack_id", "other"}, {"site", "other"}});
      fam.add(s_live, l, static_cast<double>(t.live_bytes - shown_bytes[kind]));
      fam.add(s_allocs, l, static_cast<double>(t.live_allocations - shown_allocs[kind]));
    }
  }
  MetricFamily& folded = fam.family(
      "leakwatch_series_sites_folded",
      "Sites of the snapshot folded into their process's site=\"other\" row in this scrape so that every "
      "process fits under the series cap.", G);
  fam.add(folded, {}, static_cast<double>(sites_folded));
  // Counted in this scrape: how many series the cap cut.
  MetricFamily& dropped_series = fam.family(
      "leakwatch_series_dropped", "Series not exported in this scrape because of the series cap.", G);
  size_t dropped_now = stats->series_dropped;
  ++stats->series;  // this one is always emitted
  ClientMetric m;
  m.gauge.value = static_cast<double>(dropped_now);
  dropped_series.metric.push_back(m);
  return fam.take();
}

namespace {

void append_escaped(std::string& out, const std::string& s, bool quote) {
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const char* esc = c == '\\' ? "\\\\" : c == '\n' ? "\\n" : (quote && c == '"') ? "\\\"" : nullptr;
    if (!esc) continue;
    out.append(s, start, i - start);
    out += esc;
    start = i + 1;
  }
  out.append(s, start, std::string::npos);
}

void append_value(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
  } else {
    char buf[64];
    // Integers (every count and byte total) print without exponent or
    // fraction; anything else as the shortest exact representation.
    std::to_chars_result r =
        (v == std::trunc(v) && std::fabs(v) < 9.007199254740992e15)
            ? std::to_chars(buf, buf + sizeof(buf), static_cast<int64_t>(v))
            : std::to_chars(buf, buf + sizeof(buf), v);
    out.append(buf, r.ptr);
  }
}

const char* type_name(MetricType t) {
  switch (t) {
    case MetricType::Counter: return "counter";
    case MetricType::Gauge: return "gauge";
    case MetricType::Summary: return "summary";
    case MetricType::Histogram: return "histogram";
    default: return "untyped";
  }
}

// `{labels}` of a series, with `le` added for a histogram bucket.
void append_labels(std::string& out, const ClientMetric& m, const char* le) {
  if (m.label.empty() && !le) return;
  out += '{';
  bool first = true;
  for (const ClientMetric::Label& l : m.label) {
    if (!first) out += ',';
    first = false;
    out += l.name;
    out += "=\"";
    append_escaped(out, l.value, true);
    out += '"';
  }
  if (le) {
    if (!first) out += ',';
    out += "le=\"";
    out += le;
    out += '"';
  }
  out += '}';
}

// One histogram series: _count, _sum, then a _bucket per bound, in the
// order prometheus-cpp's TextSerializer writes them.
void append_histogram(std::string& out, const std::string& name, const ClientMetric& m) {
  auto line = [&](const char* suffix, const char* le, double v) {
    out += name;
    out += suffix;
    append_labels(out, m, le);
    out += ' ';
    append_value(out, v);
    out += '\n';
  };
  line("_count", nullptr, static_cast<double>(m.histogram.sample_count));
  line("_sum", nullptr, m.histogram.sample_sum);
  for (const ClientMetric::Bucket& b : m.histogram.bucket) {
    // As prometheus-cpp writes `le` (16 significant digits, no exponent for
    // these bounds): the shortest form would be "5e-04".
    char le[32];
    if (std::isinf(b.upper_bound)) {
      snprintf(le, sizeof le, "%s", b.upper_bound > 0 ? "+Inf" : "-Inf");
    } else {
      snprintf(le, sizeof le, "%.16g", b.upper_bound);
    }
    line("_bucket", le, static_cast<double>(b.cumulative_count));
  }
}

}  // namespace

void serialize_text(const std::vector<MetricFamily>& families, std::string& out) {
  for (const MetricFamily& f : families) {
    out += "# HELP ";
    out += f.name;
    out += ' ';
    append_escaped(out, f.help, false);
    out += "\n# TYPE ";
    out += f.name;
    out += ' ';
    out += type_name(f.type);
    out += '\n';
    for (const ClientMetric& m : f.metric) {
      if (f.type == MetricType::Histogram) {
        append_histogram(out, f.name, m);
        continue;
      }
      out += f.name;
      append_labels(out, m, nullptr);
      out += ' ';
      switch (f.type) {
        case MetricType::Counter: append_value(out, m.counter.value); break;
        case MetricType::Gauge: append_value(out, m.gauge.value); break;
        default: append_value(out, m.untyped.value); break;
      }
      out += '\n';
    }
  }
}

std::string render_metrics(const DaemonSnapshot& snap, const MetricsOptions& options,
                           RenderStats* stats) {
  std::vector<MetricFamily> families = build_metric_families(snap, options, stats);
  std::string out;
  out.reserve(1 << 20);
  serialize_text(families, out);
  return out;
}

}  // namespace lw
