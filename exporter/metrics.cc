// SPDX-License-Identifier: Apache-2.0
#include "exporter/metrics.h"
#include "exporter/metric_families.h"
#include "exporter/site_label.h"

#include "view/oom_report.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <deque>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <map>
#include <span>

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

using Families = MetricFamilies;

Labels clean(Labels l) {
  for (ClientMetric::Label& x : l) x.value = sanitize_label_value(x.value);
  return l;
}

// A process's key on every per-process and per-site series: pid and
// start_time (pid reuse gives another start_time).
Labels process_key(const ProcessIdentity& id) {
  return {{"pid", std::to_string(id.pid)}, {"start_time", std::to_string(id.start_time)}};
}

// leakwatch_process_info's labels: the key and the identity, once per
// process (issue 35, item 12). Spelled as kube-state-metrics spells them,
// so PromQL joins on uid and container_id need no relabelling. Absent
// values are empty labels.
Labels process_info_labels(const ProcessInfo& t) {
  const ProcessIdentity& id = t.identity;
  Labels l = process_key(id);
  l.push_back({"comm", id.comm});
  l.push_back({"exe", id.exe});
  l.push_back({"target", t.target});
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

// One scrape: what the families are built from, and the families so far.
struct Scrape {
  const DaemonSnapshot& snap;
  const MetricsOptions& options;
  RenderStats* stats;
  Families fam;
  size_t sites_folded = 0;  // by the per-process rows, for leakwatch_series_sites_folded

  // One series without labels.
  template <typename T>
  void one(MetricFamily& f, T value) {
    fam.add(f, {}, static_cast<double>(value));
  }
};

// A family as /metrics declares it: name, type and help, as docs/metrics.md
// lists them, and what adds its samples. Families are written in the order
// of their tables, a family with no sample left out.
struct FamilyDef {
  const char* name;
  MetricType type;
  const char* help;
  void (*fill)(Scrape&, MetricFamily&);  // nullptr: filled with its table (kProcessFamilies)
};

constexpr MetricType kGauge = MetricType::Gauge;
constexpr MetricType kCounter = MetricType::Counter;

void add_rows(Scrape& s, std::span<const FamilyDef> rows) {
  for (const FamilyDef& d : rows) d.fill(s, s.fam.family(d.name, d.help, d.type));
}

// Self-monitoring first: it must survive the series cap.
const FamilyDef kBuildInfo[] = {
    {"leakwatch_build_info", kGauge, "leakwatch version; always 1.",
     [](Scrape& s, MetricFamily& f) { s.fam.add(f, {{"version", LEAKWATCH_VERSION}}, 1); }},
};

// The kernel counters, each in the family the one list (bpf/lw_counters.h)
// names for it, with its `reason` label where it has one.
void add_kernel_counters(Scrape& s) {
  const Counters& k = s.snap.kernel_counters;
  for (size_t i = 0; i < LW_CNT_MAX; ++i) {
    const CounterInfo* c = counter_info(i);
    if (c == nullptr) continue;  // a slot no one has assigned
    const char* help = counter_family_help(c->family);
    if (help == nullptr) continue;  // unreachable: Counters.EveryCounterHasAKnownFamily
    MetricFamily& f = s.fam.family(c->family, help, kCounter);
    if (c->reason)
      s.fam.add(f, {{"reason", c->reason}}, static_cast<double>(k[i]));
    else
      s.one(f, k[i]);
    if (i == LW_CNT_EVENTS_DROPPED_RINGBUF)
      s.fam.add(f, {{"reason", "decode_error"}}, static_cast<double>(s.snap.tracer_stats.decode_errors));
  }
}

// OOM kill reports (decision oom-kill-reports): every (target, reason) from
// the start, at 0, so increase() sees the first kill; a target removed by a
// reload keeps its series while it has kills.
void fill_oom_kills(Scrape& s, MetricFamily& f) {
  std::map<std::pair<std::string, std::string>, uint64_t> oom_kills = s.snap.counters.oom_kills;
  for (const std::string& target : s.snap.targets)
    for (KillReason r : kMemoryKillReasons) oom_kills.try_emplace({target, kill_reason_name(r)}, 0);
  for (const auto& [key, n] : oom_kills)
    s.fam.add(f, {{"target", key.first}, {"reason", key.second}}, static_cast<double>(n));
}

// A counter by target, every target at 0 from the start.
void fill_by_target(Scrape& s, MetricFamily& f, std::map<std::string, uint64_t> by_target) {
  for (const std::string& target : s.snap.targets) by_target.try_emplace(target, 0);
  for (const auto& [target, n] : by_target) s.fam.add(f, {{"target", target}}, static_cast<double>(n));
}

// Every documented reason from the start, at 0 until it happens: rate() and
// increase() then see the first error, and dashboards and alerts have a
// series to show (Prometheus' advice for known label values).
void fill_attach_errors(Scrape& s, MetricFamily& f) {
  std::map<std::string, uint64_t> attach_errors = {
      {"no_such_process", 0}, {"permission_denied", 0}, {"no_allocator_found", 0}, {"file_changed", 0},
      {"kernel_map_full", 0}, {"invalid", 0},           {"other", 0}};
  // Our own constants.
  for (const auto& [reason, n] : s.snap.counters.attach_errors) attach_errors[reason] = n;
  for (const auto& [reason, n] : attach_errors) s.fam.add(f, {{"reason", reason}}, static_cast<double>(n));
}

void fill_probes(Scrape& s, MetricFamily& f) {
  std::map<std::pair<std::string, std::string>, bool> probes;
  for (const auto& [object, p] : s.snap.probes) {
    auto key = std::make_pair(object, p.symbols);
    auto it = probes.find(key);
    probes[key] = it == probes.end() ? p.attached : (it->second && p.attached);
  }
  for (const auto& [key, ok] : probes)
    s.fam.add(f, clean({{"object", key.first}, {"function", key.second}}), ok ? 1 : 0);
}

void fill_elf_rejected(Scrape& s, MetricFamily& f) {
  const std::vector<uint64_t>& rejections = s.snap.tracer_stats.elf_rejections;
  for (size_t r = 0; r < static_cast<size_t>(ElfReject::kCount); ++r) {
    const uint64_t n = r < rejections.size() ? rejections[r] : 0;
    s.fam.add(f, {{"reason", elf_reject_name(static_cast<ElfReject>(r))}}, static_cast<double>(n));
  }
}

// The daemon: overhead controls, budgets, the unwind tables, kernel maps,
// attaching, OOM kills, config reloads and its own process.
const FamilyDef kDaemonFamilies[] = {
    // overhead: escalation, governor, kill switch.
    {"leakwatch_escalations_total", kCounter,
     "auto processes stepped up (light -> full) or down (full -> light).",
     [](Scrape& s, MetricFamily& f) {
       s.fam.add(f, {{"direction", "up"}}, static_cast<double>(s.snap.counters.escalations_up));
       s.fam.add(f, {{"direction", "down"}}, static_cast<double>(s.snap.counters.escalations_down));
     }},
    {"leakwatch_governor_suspensions_total", kCounter,
     "Times the governor detached a process's heap probes for going over budget.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.governor_suspensions); }},
    {"leakwatch_governor_bursts_total", kCounter,
     "Times the governor put a process over budget in bursts instead (decision busy-processes).",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.governor_bursts); }},
    // The memory budget (decision daemon-memory-bound).
    {"leakwatch_memory_budget_suspensions_total", kCounter,
     "Times a process's heap tracing was suspended because the daemon's live records "
     "reached the cap derived from limits.max_daemon_memory_bytes.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.memory_budget_suspensions); }},
    {"leakwatch_daemon_live_records", kGauge,
     "Per-address allocation records the daemon holds, all processes.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.live_records); }},
    {"leakwatch_daemon_live_records_limit", kGauge,
     "Records the daemon may hold before it suspends the process holding the most "
     "(from limits.max_daemon_memory_bytes).",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.live_record_cap); }},
    {"leakwatch_automatic_sampling_switches_total", kCounter,
     "Times a process's heap was switched to byte sampling, or to a larger mean, "
     "because its records outgrew its share of the live map or of the daemon's budget.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.auto_sampling_switches); }},
    {"leakwatch_automatic_sampling_thinned_records_total", kCounter,
     "Heap records dropped by those switches (each kept one stands for more).",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.auto_sampling_thinned); }},
    {"leakwatch_fair_share_marks_total", kCounter,
     "Times a process was marked over its fair share (limits.fair_share_percent), by map: live "
     "(nothing new recorded for it) or stack (its new stacks not stored).",
     [](Scrape& s, MetricFamily& f) {
       s.fam.add(f, {{"map", "live"}}, static_cast<double>(s.snap.tracer_stats.fair_share_marks));
       s.fam.add(f, {{"map", "stack"}}, static_cast<double>(s.snap.tracer_stats.fair_share_stack_marks));
     }},
    // What the daemon holds for traced processes (decision process-cost).
    {"leakwatch_processes_shed_total", kCounter, "Processes whose tracing was stopped for what the daemon held for them.",
     [](Scrape& s, MetricFamily& f) {
       for (size_t r = 1; r < s.snap.tracer_stats.processes_shed.size(); ++r)
         s.fam.add(f, {{"reason", shed_reason_name(static_cast<ShedReason>(r))}},
                   static_cast<double>(s.snap.tracer_stats.processes_shed[r]));
     }},
    {"leakwatch_process_cost_bytes", kGauge, "Bytes held for traced processes beside their live records.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.process_cost_bytes); }},
    {"leakwatch_resolved_stacks_pruned_total", kCounter, "Resolved stacks dropped: no live site used them.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.stacks_pruned); }},
    {"leakwatch_maps_dropped_total", kCounter, "/proc/PID/maps entries and paths past a read's bounds.",
     [](Scrape& s, MetricFamily& f) {
       s.fam.add(f, {{"what", "entries"}}, static_cast<double>(s.snap.tracer_stats.maps_entries_dropped));
       s.fam.add(f, {{"what", "paths"}}, static_cast<double>(s.snap.tracer_stats.maps_paths_dropped));
     }},
    {"leakwatch_kill_switch_engaged", kGauge, "1 while the kill switch has every probe detached.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.kill_switch_engaged ? 1 : 0); }},
    {"leakwatch_syscall_tracepoints_attached", kGauge,
     "1 while the host-wide raw syscall tracepoints are attached (a process in mode "
     "full has no probeable mmap wrapper).",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.raw_syscall_tracepoints ? 1 : 0); }},
    {"leakwatch_resyncs_total", kCounter, "Process states rebuilt from the kernel's live map after a loss.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.resyncs); }},
    // The lifecycle budget (decision lifecycle-budget).
    {"leakwatch_lifecycle_events_total", kCounter,
     "Changes of traced processes' code mappings (exec, executable mmap, dlopen, dlclose).",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.lifecycle_events); }},
    {"leakwatch_rescans_total", kCounter,
     "Rescans of traced processes' mapped objects (each after lifecycle events).",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.rescans); }},
    {"leakwatch_rescans_deferred_total", kCounter,
     "Rescans that waited for a process's lifecycle budget (limits.max_rescans_per_second): "
     "probes on a newly loaded library came late.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.rescans_deferred); }},
    // The unwind tables (decision cfi-unwinding).
    {"leakwatch_unwind_objects", kGauge,
     "Mapped objects registered for unwinding, by table state (pending: being built; "
     "no_cfi: no call-frame information; memory_budget: refused by unwind.max_table_bytes).",
     [](Scrape& s, MetricFamily& f) {
       const UnwindStats& u = s.snap.tracer_stats.unwind;
       s.fam.add(f, {{"state", "pending"}}, static_cast<double>(u.objects_pending));
       s.fam.add(f, {{"state", "ready"}}, static_cast<double>(u.objects_ready));
       s.fam.add(f, {{"state", "no_cfi"}}, static_cast<double>(u.objects_no_cfi));
       s.fam.add(f, {{"state", "memory_budget"}}, static_cast<double>(u.objects_budget));
     }},
    {"leakwatch_unwind_tables", kGauge, "Unwind tables loaded (one per build-id).",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.unwind.tables); }},
    {"leakwatch_unwind_table_bytes", kGauge,
     "Kernel memory of the loaded unwind tables (rows and page indexes).",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.unwind.table_bytes); }},
    {"leakwatch_unwind_table_max_bytes", kGauge, "unwind.max_table_bytes.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.unwind.max_table_bytes); }},
    {"leakwatch_unwind_table_builds_total", kCounter,
     "Unwind tables compiled from an object's call-frame information.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.unwind.builds); }},
    {"leakwatch_unwind_table_build_failures_total", kCounter,
     "Objects whose call-frame information was refused or whose table failed to load.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.unwind.build_failures); }},
    {"leakwatch_unwind_table_build_seconds_total", kCounter,
     "Time spent compiling unwind tables (off the event path).",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.unwind.build_seconds); }},
    {"leakwatch_unwind_table_cache_hits_total", kCounter, "Unwind tables found already built, by cache.",
     [](Scrape& s, MetricFamily& f) {
       const UnwindStats& u = s.snap.tracer_stats.unwind;
       s.fam.add(f, {{"cache", "disk"}}, static_cast<double>(u.disk_cache_hits));
       s.fam.add(f, {{"cache", "memory"}}, static_cast<double>(u.memory_cache_hits));
     }},
    {"leakwatch_unwind_table_queue", kGauge, "Objects waiting for their unwind table.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.unwind.queue_depth); }},
    {"leakwatch_kernel_map_entries", kGauge,
     "Entries used in a kernel map (live: tracked processes' records; stacks: at the end of "
     "the last collection walk).",
     [](Scrape& s, MetricFamily& f) {
       s.fam.add(f, {{"map", "live"}}, static_cast<double>(s.snap.live_map_entries));
       s.fam.add(f, {{"map", "stacks"}}, static_cast<double>(s.snap.tracer_stats.stack_map_entries));
     }},
    // The stack map's collection (decision stack-map-gc).
    {"leakwatch_stack_map_collected_total", kCounter,
     "Stored stacks deleted from the kernel stack map, unreferenced past the grace period.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.stacks_collected); }},
    {"leakwatch_stack_map_restored_total", kCounter,
     "Deleted stacks stored again because a record queued before the delete named one.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.stacks_restored); }},
    {"leakwatch_cut_sites_folded_total", kCounter,
     "Sites whose stacks were cut at a pending unwind table, folded into the whole stack they start.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.cut_sites_folded); }},
    {"leakwatch_kernel_map_capacity", kGauge, "Capacity of a kernel map.",
     [](Scrape& s, MetricFamily& f) {
       s.fam.add(f, {{"map", "live"}}, s.snap.live_map_capacity);
       s.fam.add(f, {{"map", "stacks"}}, s.snap.stack_map_capacity);
     }},
    {"leakwatch_live_map_worst_bytes", kGauge,
     "Kernel memory of the live map when full (entries and buckets).",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.live_map.worst_bytes); }},
    {"leakwatch_tracked_processes", kGauge, "Processes attached now.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.processes.size()); }},
    {"leakwatch_max_processes", kGauge, "limits.max_processes.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.max_processes); }},
    {"leakwatch_processes_refused_total", kCounter, "Matching processes not attached, by reason.",
     [](Scrape& s, MetricFamily& f) {
       const DaemonCounters& dc = s.snap.counters;
       s.fam.add(f, {{"reason", "max_processes"}}, static_cast<double>(dc.refused_max_processes));
       s.fam.add(f, {{"reason", "memory_budget"}}, static_cast<double>(dc.refused_memory_budget));
       s.fam.add(f, {{"reason", "user_share"}}, static_cast<double>(dc.refused_user_share));
     }},
    {"leakwatch_attached_processes_total", kCounter, "Processes attached since start.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.attached_total); }},
    {"leakwatch_attach_latency_seconds", MetricType::Histogram,
     "From a process's exec (or followed fork) event to its probes attached.",
     [](Scrape& s, MetricFamily& f) { s.fam.add_histogram(f, {}, s.snap.counters.attach_latency); }},
    {"leakwatch_pid_reuse_detected_total", kCounter,
     "Traced pids found held by another process (the old state dropped, the new process matched afresh).",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.pid_reuse_detected); }},
    {"leakwatch_discoveries_deferred_total", kCounter,
     "Exec and fork events of non-root users past limits.max_discoveries_per_second, looked at later.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.discoveries_deferred); }},
    {"leakwatch_discoveries_dropped_total", kCounter,
     "Exec and fork events of non-root users dropped, the deferral queue being full.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.discoveries_dropped); }},
    {"leakwatch_exited_while_attaching_total", kCounter,
     "Processes that exited while their probes were being attached: dropped at once.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.exited_while_attaching); }},
    {"leakwatch_oom_kills_total", kCounter,
     "Traced processes killed for memory (an OOM kill, or a SIGKILL from a known "
     "user-space OOM killer), by target and reason; each has a report in /api/v1/oom_kills.",
     fill_oom_kills},
    {"leakwatch_sigkills_total", kCounter,
     "Traced processes killed by any other SIGKILL from user space (not for memory), by target; "
     "reported in /api/v1/oom_kills (reason sigkill) within the user's oom.sigkill_* limits.",
     [](Scrape& s, MetricFamily& f) { fill_by_target(s, f, s.snap.counters.sigkills); }},
    {"leakwatch_gpu_oom_suppressed_total", kCounter,
     "GPU OOMs not reported because their process and device had a report in the last minute "
     "(counted in that report's `suppressed`).",
     [](Scrape& s, MetricFamily& f) { fill_by_target(s, f, s.snap.counters.gpu_oom_suppressed); }},
    {"leakwatch_oom_last_kill_timestamp_seconds", kGauge,
     "Unix time of the last OOM kill of a traced process (reports read back at start count); 0 when none.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.oom_last_kill_timestamp); }},
    {"leakwatch_oom_report_write_failures_total", kCounter,
     "OOM kill reports not written to oom.report_dir (served by the API with file null and file_error).",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.oom_report_write_failures); }},
    {"leakwatch_oom_reports_dropped_total", kCounter,
     "OOM reports not taken or no longer kept (issue 32), by cause: rate_limited, uid_cap, retention.",
     [](Scrape& s, MetricFamily& f) {
       for (size_t c = 0; c < kOomDropCauses; ++c)
         s.fam.add(f, {{"cause", oom_drop_cause_name(static_cast<OomDropCause>(c))}},
                   static_cast<double>(s.snap.counters.oom_reports_dropped[c]));
     }},
    {"leakwatch_oom_reports_truncated_total", kCounter, "OOM reports cut to oom.max_report_bytes.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.oom_reports_truncated); }},
    {"leakwatch_stale_exits_total", kCounter,
     "Exits of traced processes found only at the fork of a new process on the pid.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.stale_exits); }},
    {"leakwatch_attach_errors_total", kCounter, "Failed process attachments, by reason.", fill_attach_errors},
    {"leakwatch_probe_attached", kGauge, "1 when the probe on this function of this object is attached.",
     fill_probes},
    {"leakwatch_symbolization_errors_total", kCounter,
     "Modules that could not be opened or parsed for symbols.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.symbolization_errors); }},
    {"leakwatch_symbol_inflated_refused_total", kCounter, "Files over symbols.max_inflated_bytes (no libdw).",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.tracer_stats.symbols.symbolizer.inflated_refused); }},
    {"leakwatch_elf_rejected_total", kCounter,
     "ELF files from target processes refused before parsing, by reason.",
     fill_elf_rejected},
    {"leakwatch_config_last_reload_successful", kGauge,
     "1 if the last config reload succeeded (as Prometheus reports its own).",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.last_reload_successful ? 1 : 0); }},
    {"leakwatch_config_last_reload_success_timestamp_seconds", kGauge,
     "When the config was last loaded successfully.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.last_reload_success_timestamp); }},
    {"leakwatch_config_reloads_total", kCounter, "Config reload attempts.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.reloads_total); }},
    {"leakwatch_config_reload_failures_total", kCounter, "Config reloads rejected.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.reload_failures_total); }},
    {"leakwatch_daemon_memory_over_budget_total", kCounter,
     "Snapshots taken while tracked state exceeded limits.max_daemon_memory_bytes.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.counters.daemon_memory_over_budget); }},
    // The daemon's own process, as Prometheus' client libraries name it
    // (read when the snapshot was built).
    {"process_cpu_seconds_total", kCounter, "Total user and system CPU time spent in seconds.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.self.cpu_seconds); }},
    {"process_resident_memory_bytes", kGauge, "Resident memory size in bytes.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.self.rss); }},
    {"process_virtual_memory_bytes", kGauge, "Virtual memory size in bytes.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.self.vsize); }},
    {"process_open_fds", kGauge, "Number of open file descriptors.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.self.open_fds); }},
    {"process_max_fds", kGauge, "Maximum number of open file descriptors.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.self.max_fds); }},
    {"process_start_time_seconds", kGauge, "Start time of the process since unix epoch in seconds.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.self.start_time); }},
    {"process_threads", kGauge, "Number of OS threads in the process.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.snap.self.threads); }},
    {"leakwatch_series_limit", kGauge, "The cap on series per scrape.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.options.max_series); }},
};

// Closed connections and refused requests by reason: every reason, at 0
// until it happens.
void fill_by_reason(Scrape& s, MetricFamily& f, const std::map<std::string, uint64_t>& counts,
                    std::initializer_list<const char*> reasons) {
  for (const char* reason : reasons) {
    auto it = counts.find(reason);
    s.fam.add(f, {{"reason", reason}}, static_cast<double>(it == counts.end() ? 0 : it->second));
  }
}

// The HTTP front (exporter/http/http_server.h): connections, refusals, the
// response memory it holds and its web config reloads. Only with
// MetricsOptions::http.
const FamilyDef kHttpFamilies[] = {
    {"leakwatch_http_connections", kGauge, "HTTP connections held now.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.options.http->connections_open); }},
    {"leakwatch_http_max_connections", kGauge, "HTTP connections held at most.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.options.http->max_connections); }},
    {"leakwatch_http_connections_accepted_total", kCounter, "HTTP connections accepted.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.options.http->connections_accepted); }},
    {"leakwatch_http_connections_closed_total", kCounter, "HTTP connections closed by leakwatch, by reason.",
     [](Scrape& s, MetricFamily& f) {
       fill_by_reason(s, f, s.options.http->connections_closed,
                      {"cap", "timeout", "write_timeout", "tls_handshake"});
     }},
    {"leakwatch_http_requests_total", kCounter, "HTTP request heads received.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.options.http->requests); }},
    {"leakwatch_http_requests_refused_total", kCounter,
     "HTTP requests answered with an error before any route, by reason.",
     [](Scrape& s, MetricFamily& f) {
       fill_by_reason(s, f, s.options.http->refused,
                      {"malformed", "head_too_large", "body", "method", "unauthorized", "rate_limited",
                       "overloaded", "plain_on_tls"});
     }},
    {"leakwatch_http_response_bytes_held", kGauge, "Bytes of HTTP responses held for clients now.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.options.http->response_bytes_in_flight); }},
    {"leakwatch_http_response_bytes_limit", kGauge, "Bytes of HTTP responses held at most.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.options.http->response_bytes_limit); }},
    {"leakwatch_web_config_reloads_total", kCounter, "Web config files re-read after a change.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.options.http->web_config_reloads); }},
    {"leakwatch_web_config_reload_failures_total", kCounter,
     "Web config re-reads rejected (the running one kept).",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.options.http->web_config_reload_failures); }},
    {"leakwatch_web_config_last_reload_successful", kGauge, "1 if the last web config re-read succeeded.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.options.http->web_config_last_reload_successful ? 1 : 0); }},
};

// Per process and kind, and per site: filled process by process
// (add_process_rows), a process's series together, so the series cap cuts
// whole processes in order. The rows are in ProcessRow's order.
enum ProcessRow : size_t {
  kProcessInfo, kLiveBytes, kLiveAllocations, kAllocatedBytes, kAllocations, kFreedBytes, kFrees, kLeakRate, kSuspectedLeak,
  kSiteLiveBytes, kSiteLiveAllocations, kSiteLeakRate, kSiteSuspectedLeak, kSiteLiveBytesByAge,
  kSamplingMean, kStaleSince, kUnrecorded, kUnrecordedBytes, kCoverage, kStartTime,
  kMode, kTracingSuspended, kBurstsFraction, kCudaDeviceLiveBytes, kAllocatorInfo, kRssBytes, kTensorTierInfo, kGpuTensorBytes,
  kGpuPoolCachedBytes, kGpuPoolReservedBytes, kGpuOutsidePoolBytes, kHeapWalkRecords, kHeapWalkUndecidedBytes,
  kProcessRowCount
};
const FamilyDef kProcessFamilies[] = {
    {"leakwatch_process_info", kGauge,
     "1 per process: its identity (comm, exe, target, systemd unit, pod); every other per-process and "
     "per-site series carries only pid and start_time, to join on.",
     nullptr},
    {"leakwatch_process_live_bytes", kGauge, "Bytes live now, by kind.", nullptr},
    {"leakwatch_process_live_allocations", kGauge, "Allocations live now.", nullptr},
    {"leakwatch_process_allocated_bytes_total", kCounter, "Bytes allocated since attach.", nullptr},
    {"leakwatch_process_allocations_total", kCounter, "Allocations since attach.", nullptr},
    {"leakwatch_process_freed_bytes_total", kCounter, "Bytes freed since attach.", nullptr},
    {"leakwatch_process_frees_total", kCounter, "Frees since attach.", nullptr},
    {"leakwatch_process_leak_rate_bytes_per_second", kGauge,
     "Robust growth rate of live bytes over the analysis window.",
     nullptr},
    {"leakwatch_process_suspected_leak", kGauge,
     "1 when the process's live bytes are classified as a leak.", nullptr},
    {"leakwatch_site_live_bytes", kGauge,
     "Live bytes of the top sites per process; site=\"other\" has the rest.", nullptr},
    {"leakwatch_site_live_allocations", kGauge, "Live allocations per site.", nullptr},
    {"leakwatch_site_leak_rate_bytes_per_second", kGauge,
     "Robust growth rate of a site's live bytes.", nullptr},
    {"leakwatch_site_suspected_leak", kGauge, "1 when the site is classified as a leak.", nullptr},
    {"leakwatch_site_live_bytes_by_age", kGauge, "Live bytes per site by allocation age.", nullptr},
    // overhead: which figures are estimates, and whether they are current.
    {"leakwatch_process_sampling_mean_bytes", kGauge,
     "Byte-sampling mean of the process's heap; > 0: its heap figures are estimates.", nullptr},
    {"leakwatch_process_heap_stale_since_timestamp_seconds", kGauge,
     "When the heap probes were detached (unix seconds): heap figures frozen since; 0 when current.",
     nullptr},
    // Unrecorded (decision unrecorded-per-kind): lost, apart from sampled and
    // suspended.
    {"leakwatch_process_unrecorded_allocations_total", kCounter,
     "Allocations of the process not recorded, by kind and reason: map_full (live map full, not "
     "tracked), stack_map_full (recorded, stack unknown), over_share (over its fair share of the live "
     "map, not tracked), stack_over_share (over its share of the stack map, stack unknown).",
     nullptr},
    {"leakwatch_process_unrecorded_bytes_total", kCounter,
     "Bytes of the allocations not tracked at all (reasons map_full and over_share), by kind.",
     nullptr},
    {"leakwatch_process_recorded_coverage_ratio", kGauge,
     "Recorded allocations / (recorded + not recorded): 1 when nothing was lost.", nullptr},
    {"leakwatch_process_start_time_seconds", kGauge,
     "When the process started (unix seconds); the start_time label holds the same in clock ticks "
     "since boot.",
     nullptr},
    {"leakwatch_process_mode", kGauge,
     "1 for the process's current mode (full while its heap probes are attached).",
     nullptr},
    {"leakwatch_process_tracing_suspended", kGauge,
     "1 while the governor has the process's heap probes detached.",
     nullptr},
    {"leakwatch_process_heap_bursts_fraction", kGauge,
     "While the governor traces the process's heap in bursts (decision busy-processes): the share of "
     "the time they cover, each heap record weighing its inverse; 0 otherwise.",
     nullptr},
    {"leakwatch_cuda_device_live_bytes", kGauge,
     "Live CUDA bytes by the device current on the allocating thread (device=\"unknown\" if not seen).",
     nullptr},
    {"leakwatch_process_allocator_info", kGauge,
     "1 per process: the allocator probed (family), the object whose malloc wins, and how "
     "well it is supported (full, partial, unsupported, pending).",
     nullptr},
    {"leakwatch_process_rss_bytes", kGauge,
     "Resident bytes by part (docs/analysis.md, RSS explained): live_heap, held_before_attach_or_retained, "
     "tracked_mmap, stacks, untracked add up to anonymous RSS; file is file-backed RSS.",
     nullptr},
    // The tensor tier and GPU memory explained (decision tensor-tier).
    {"leakwatch_process_tensor_tier_info", kGauge,
     "1 per process: the tensor tier's state (on, off, suspended, unsupported, none), the framework "
     "allocators probed (sources) and the GPU allocator path the process uses.",
     nullptr},
    {"leakwatch_process_gpu_tensor_bytes", kGauge,
     "GPU tensors live in a framework pool (kind tensor_gpu), by device.", nullptr},
    {"leakwatch_process_gpu_pool_cached_bytes", kGauge,
     "GPU memory a framework pool keeps cached (reserved - allocated, from its own totals), by device.",
     nullptr},
    {"leakwatch_process_gpu_pool_reserved_bytes", kGauge,
     "GPU memory a framework pool reserved from the driver (its own total), by device.", nullptr},
    {"leakwatch_process_gpu_outside_pool_bytes", kGauge,
     "Live CUDA bytes (cuda_device, cuda_managed) outside the framework pool's reservation, by device.",
     nullptr},
    // Windows and walks (decision busy-processes).
    {"leakwatch_process_heap_walk_records_total", kCounter,
     "Heap records settled by walking the process's heap between bursts (decision busy-processes): "
     "freed (its block was freed unseen) or undecided (dropped: nothing could say it is live).",
     nullptr},
    {"leakwatch_process_heap_walk_undecided_bytes_total", kCounter,
     "The estimated bytes of the heap records dropped as undecided by marks and walks.", nullptr},
};
static_assert(std::size(kProcessFamilies) == kProcessRowCount);

using ProcessRows = std::array<MetricFamily*, kProcessRowCount>;

std::string device_label(int device) { return device < 0 ? "unknown" : std::to_string(device); }

// The tensor tier's state, and GPU memory explained per device: what needs
// the pool's own totals only where its allocator reports them.
void add_tensor_series(Families& fam, const ProcessRows& rows, const Labels& base, const ProcessSnapshot& ps) {
  std::string sources;
  for (const std::string& source : ps.tensor.sources) sources += (sources.empty() ? "" : ",") + source;
  fam.add(*rows[kTensorTierInfo],
          with(base, {{"state", ps.tensor.state},
                      {"sources", sanitize_label_value(sources)},
                      {"gpu_allocator", sanitize_label_value(ps.tensor.gpu_allocator)}}),
          1);
  for (const GpuExplained& g : ps.gpu_explained) {
    const Labels l = with(base, {{"device", device_label(g.device)}});
    fam.add(*rows[kGpuTensorBytes], l, static_cast<double>(g.tensors_live_bytes));
    if (!g.pool_totals) continue;
    fam.add(*rows[kGpuPoolCachedBytes], l, static_cast<double>(g.cached_bytes));
    fam.add(*rows[kGpuPoolReservedBytes], l, static_cast<double>(g.pool_reserved_bytes));
    fam.add(*rows[kGpuOutsidePoolBytes], l, static_cast<double>(g.outside_pool_bytes));
  }
}

// heap and mmap: exported from the start; the other kinds (CUDA, tensors)
// once the process made or lost an allocation of them.
bool kind_always_exported(uint32_t kind) { return kind == LW_KIND_HEAP || kind == LW_KIND_MMAP; }

// The per-process series of one process, site rows aside.
void add_process_series(Scrape& s, const ProcessRows& rows, const ProcessEntry& e) {
  const Labels base = process_key(e.process.identity);
  const ProcessSnapshot& ps = e.snapshot;
  Families& fam = s.fam;
  // First: a process cut by the series cap keeps its name while any of it fits.
  fam.add(*rows[kProcessInfo], process_info_labels(e.process), 1);
  fam.add(*rows[kSamplingMean], base, static_cast<double>(ps.sample_mean_bytes));
  fam.add(*rows[kStaleSince], base, ps.heap_stale_since);
  fam.add(*rows[kStartTime], base, start_time_unix_seconds(s.snap, e.process.identity.start_time));
  if (const RssBreakdown& r = ps.rss; r.valid) {  // decision rss-explained
    const std::pair<const char*, uint64_t> parts[] = {
        {"live_heap", r.live_heap},   {"held_before_attach_or_retained", r.held_or_retained},
        {"tracked_mmap", r.tracked_mmap}, {"stacks", r.stacks}, {"untracked", r.untracked}, {"file", r.file_rss}};
    for (const auto& [name, bytes] : parts)
      fam.add(*rows[kRssBytes], with(base, {{"part", name}}), static_cast<double>(bytes));
  }
  fam.add(*rows[kMode], with(base, {{"mode", "light"}}), e.process.heap_attached ? 0 : 1);
  fam.add(*rows[kMode], with(base, {{"mode", "full"}}), e.process.heap_attached ? 1 : 0);
  fam.add(*rows[kTracingSuspended], base, e.process.tracing_suspended ? 1 : 0);
  fam.add(*rows[kBurstsFraction], base, e.process.bursts.active ? e.process.bursts.fraction : 0);
  if (const HeapWalkView& w = ps.heap_walk; w.walks > 0 || w.undecided > 0) {
    fam.add(*rows[kHeapWalkRecords], with(base, {{"verdict", "freed"}}), static_cast<double>(w.freed));
    fam.add(*rows[kHeapWalkRecords], with(base, {{"verdict", "undecided"}}), static_cast<double>(w.undecided));
    fam.add(*rows[kHeapWalkUndecidedBytes], base, static_cast<double>(w.undecided_bytes));
  }
  // By kind: heap and mmap always (so an alert's increase() sees the
  // first loss), a CUDA or tensor kind once it made or lost an allocation.
  for (uint32_t kind = 0; kind < LW_KIND_MAX; ++kind) {
    const UnrecordedCounts& u = ps.unrecorded.kinds[kind];
    if (!kind_always_exported(kind) && ps.kinds[kind].allocations == 0 && !u.any()) continue;
    const char* k = kind_name(kind);
    fam.add(*rows[kUnrecorded], with(base, {{"kind", k}, {"reason", "map_full"}}),
            static_cast<double>(u.map_full));
    fam.add(*rows[kUnrecorded], with(base, {{"kind", k}, {"reason", "stack_map_full"}}),
            static_cast<double>(u.stack_map_full));
    fam.add(*rows[kUnrecordedBytes], with(base, {{"kind", k}, {"reason", "map_full"}}),
            static_cast<double>(u.map_full_bytes));
    // Fair shares (decision fair-shares): only a process that went over its
    // share has these series.
    if (u.over_share > 0 || u.stack_over_share > 0) {
      fam.add(*rows[kUnrecorded], with(base, {{"kind", k}, {"reason", "over_share"}}),
              static_cast<double>(u.over_share));
      fam.add(*rows[kUnrecorded], with(base, {{"kind", k}, {"reason", "stack_over_share"}}),
              static_cast<double>(u.stack_over_share));
      fam.add(*rows[kUnrecordedBytes], with(base, {{"kind", k}, {"reason", "over_share"}}),
              static_cast<double>(u.over_share_bytes));
    }
  }
  fam.add(*rows[kCoverage], base, ps.coverage);
  fam.add(*rows[kAllocatorInfo],
          with(base, {{"allocator", ps.allocator.family},
                      {"object", sanitize_label_value(ps.allocator.object)},
                      {"support", ps.allocator.support}}),
          1);
  for (uint32_t kind = 0; kind < LW_KIND_MAX; ++kind) {
    const KindTotals& t = ps.kinds[kind];
    if (t.allocations == 0 && t.live_allocations == 0) continue;
    Labels l = with(base, {{"kind", kind_name(kind)}});
    fam.add(*rows[kLiveBytes], l, static_cast<double>(t.live_bytes));
    fam.add(*rows[kLiveAllocations], l, static_cast<double>(t.live_allocations));
    fam.add(*rows[kAllocatedBytes], l, static_cast<double>(t.allocated_bytes));
    fam.add(*rows[kAllocations], l, static_cast<double>(t.allocations));
    fam.add(*rows[kFreedBytes], l, static_cast<double>(t.freed_bytes));
    fam.add(*rows[kFrees], l, static_cast<double>(t.frees));
    fam.add(*rows[kLeakRate], l, ps.kind_verdicts[kind].rate_bytes_per_s);
    fam.add(*rows[kSuspectedLeak], l, ps.kind_verdicts[kind].suspected_leak ? 1 : 0);
  }
  for (const CudaDeviceTotal& t : ps.cuda_devices)  // tensor_gpu's: leakwatch_process_gpu_tensor_bytes
    if (is_cuda_kind(t.kind))
      fam.add(*rows[kCudaDeviceLiveBytes], with(base, {{"kind", kind_name(t.kind)}, {"device", device_label(t.device)}}),
              static_cast<double>(t.live_bytes));
  add_tensor_series(fam, rows, base, ps);
}

// Sites: the snapshot holds the top sites by live bytes and by leak rate;
// its suspected leaks first, then by live bytes, at most sites_per_process,
// the rest of each kind going to one "other" row so sums add up.
void add_site_series(Scrape& s, const ProcessRows& rows, const ProcessEntry& e, size_t sites_per_process) {
  const ProcessSnapshot& ps = e.snapshot;
  Families& fam = s.fam;
  std::array<uint64_t, LW_KIND_MAX> shown_bytes{}, shown_allocs{};
  const Labels site_base = process_key(e.process.identity);
  std::vector<const SiteSnapshot*> shown;
  for (const SiteSnapshot& site : ps.sites)
    if (site.suspected_leak) shown.push_back(&site);
  for (const SiteSnapshot& site : ps.sites)
    if (!site.suspected_leak) shown.push_back(&site);
  if (shown.size() > sites_per_process) {
    s.sites_folded += shown.size() - sites_per_process;
    shown.resize(sites_per_process);
  }
  for (const SiteSnapshot* site : shown) {
    const SiteSnapshot& st = *site;
    Labels l = with(site_base, {{"kind", kind_name(st.kind)},
                                {"stack_id", stack_id_hex(st.stack_id)},
                                {"site", sanitize_label_value(site_label(st))}});
    fam.add(*rows[kSiteLiveBytes], l, static_cast<double>(st.live_bytes));
    fam.add(*rows[kSiteLiveAllocations], l, static_cast<double>(st.live_allocations));
    fam.add(*rows[kSiteLeakRate], l, st.leak_rate_bytes_per_second);
    fam.add(*rows[kSiteSuspectedLeak], l, st.suspected_leak ? 1 : 0);
    fam.add(*rows[kSiteLiveBytesByAge], with(l, {{"age", "lt_1m"}}), static_cast<double>(st.ages.lt_1m));
    fam.add(*rows[kSiteLiveBytesByAge], with(l, {{"age", "lt_10m"}}), static_cast<double>(st.ages.lt_10m));
    fam.add(*rows[kSiteLiveBytesByAge], with(l, {{"age", "lt_1h"}}), static_cast<double>(st.ages.lt_1h));
    fam.add(*rows[kSiteLiveBytesByAge], with(l, {{"age", "older"}}), static_cast<double>(st.ages.older));
    shown_bytes[st.kind] += st.live_bytes;
    shown_allocs[st.kind] += st.live_allocations;
  }
  for (uint32_t kind = 0; kind < LW_KIND_MAX; ++kind) {
    const KindTotals& t = ps.kinds[kind];
    if (t.live_allocations == 0) continue;
    Labels l = with(site_base, {{"kind", kind_name(kind)}, {"stack_id", "other"}, {"site", "other"}});
    fam.add(*rows[kSiteLiveBytes], l, static_cast<double>(t.live_bytes - shown_bytes[kind]));
    fam.add(*rows[kSiteLiveAllocations], l, static_cast<double>(t.live_allocations - shown_allocs[kind]));
  }
}

// Per-site series share what the cap leaves fairly: every process gets the
// same number of site rows (its suspected leaks first, then by live bytes),
// the rest of its bytes going to its "other" row, instead of the processes
// late in the list losing every series. Each process also has about 16
// per-process series per kind and one "other" pair per kind.
void add_process_rows(Scrape& s) {
  ProcessRows rows;
  for (size_t i = 0; i < kProcessRowCount; ++i) {
    const FamilyDef& d = kProcessFamilies[i];
    rows[i] = &s.fam.family(d.name, d.help, d.type);
  }
  const size_t processes = s.snap.processes.size();
  size_t sites_per_process = SIZE_MAX;
  if (processes > 0) {
    constexpr size_t kSeriesPerSite = 8, kProcessSeries = 40;
    const size_t used = s.stats->series + processes * kProcessSeries + 1;
    const size_t left = s.options.max_series > used ? s.options.max_series - used : 0;
    sites_per_process = std::max<size_t>(1, left / (processes * kSeriesPerSite));
  }
  for (const ProcessEntry& e : s.snap.processes) {
    add_process_series(s, rows, e);
    add_site_series(s, rows, e, sites_per_process);
  }
}

// About this scrape, last: what the cap folded and cut.
const FamilyDef kScrapeFamilies[] = {
    {"leakwatch_series_sites_folded", kGauge,
     "Sites of the snapshot folded into their process's site=\"other\" row in this scrape so that every "
     "process fits under the series cap.",
     [](Scrape& s, MetricFamily& f) { s.one(f, s.sites_folded); }},
    {"leakwatch_series_dropped", kGauge, "Series not exported in this scrape because of the series cap.",
     [](Scrape& s, MetricFamily& f) {
       const size_t dropped_now = s.stats->series_dropped;
       ++s.stats->series;  // this one is always emitted, past the cap
       ClientMetric m;
       m.gauge.value = static_cast<double>(dropped_now);
       f.metric.push_back(m);
     }},
};

}  // namespace

std::vector<MetricFamily> build_metric_families(const DaemonSnapshot& snap,
                                                const MetricsOptions& options,
                                                RenderStats* stats) {
  RenderStats local;
  if (!stats) stats = &local;
  *stats = {};
  Scrape s{snap, options, stats, Families(options.max_series, stats)};
  // In the order of the text, which is also the order the series cap cuts
  // in: self-monitoring first, so that it survives the cap.
  add_rows(s, kBuildInfo);
  add_kernel_counters(s);
  add_rows(s, kDaemonFamilies);
  if (options.http) add_rows(s, kHttpFamilies);
  add_process_rows(s);
  add_rows(s, kScrapeFamilies);
  return s.fam.take();
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
