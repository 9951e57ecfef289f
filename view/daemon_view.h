// SPDX-License-Identifier: Apache-2.0
// What the daemon publishes: one immutable DaemonSnapshot per publish (every
// second, and whenever the tracked set changes), swapped in under a mutex.
// The HTTP threads and the metrics writer read only this; none of it points
// back into the daemon, the engine or the BPF session
// (decision daemon-threads; docs/architecture.md, "Layers").
// Thread-safety: plain data; shared as shared_ptr<const DaemonSnapshot>.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config/config.h"
#include "core/platform/latency_histogram.h"
#include "core/policy/live_map_size.h"
#include "core/policy/oom_retention.h"
#include "core/proc/process_identity.h"
#include "core/proc/procfs.h"
#include "view/process_view.h"

namespace lw {

// How the daemon holds one process: its identity, the target that matched
// it and the state of its overhead controls, as of the publish.
// A process the governor traces in bursts (decision busy-processes;
// core/policy/bursts.h): its heap figures are estimates, each record
// weighing period/burst.
struct BurstInfo {
  bool active = false;
  bool in_burst = false;         // the allocating probes are on now
  double fraction = 1;           // burst_seconds / period_seconds
  uint32_t burst_seconds = 0;
  uint32_t period_seconds = 0;
  double since = 0;              // unix seconds
  uint64_t bursts = 0;           // bursts run since then
  double burst_rate = 0;         // probe hits/s of the last whole burst
  double drain_rate = 0;         // probe hits/s of the last whole drain (the free side)
  // Windows (decision busy-processes, "Windows and walks"): the free side
  // over the budget, kept only `window_seconds` after each burst; parked:
  // no heap probe on now, the heap walked before the next burst.
  bool windows = false;
  bool parked = false;
  uint32_t window_seconds = 0;
  // The last whole burst: the seconds the allocating probes really
  // recorded, and the seconds it was scheduled for (decision busy-processes,
  // "Measured bursts"); its records weigh by the first. < 0: none yet.
  double last_recorded_seconds = -1;
  double last_scheduled_seconds = -1;
};

struct ProcessInfo {
  ProcessIdentity identity;
  std::string target;       // TargetConfig::name
  TargetMode mode = TargetMode::kAuto;
  pid_t parent = 0;         // the target it was forked from, 0 if matched itself
  std::chrono::system_clock::time_point attached_at;
  bool full = false;              // heap probes wanted (mode full, or auto escalated)
  bool heap_attached = false;     // the heap probes are attached now
  bool tracing_suspended = false; // the governor (or the memory budget) holds the heap probes off
  // The governor's budget for this process in hits a second: the configured
  // one, divided by its threads where uprobe hits serialize (before 6.14).
  uint64_t hit_budget = 0;
  BurstInfo bursts;
};

struct ProcessEntry {
  ProcessInfo process;
  ProcessSnapshot snapshot;
};

struct DaemonCounters {
  uint64_t attached_total = 0;            // processes attached since start
  uint64_t detached_total = 0;
  uint64_t refused_max_processes = 0;     // not attached: limits.max_processes
  uint64_t refused_memory_budget = 0;     // not attached: limits.max_daemon_memory_bytes
  uint64_t refused_user_share = 0;        // not attached: its user's share of limits.max_processes
  uint64_t attach_failures = 0;           // by the last error's reason in attach_errors
  std::map<std::string, uint64_t> attach_errors;  // reason -> count
  uint64_t reconciliations = 0;
  uint64_t discoveries = 0;               // exec/fork events looked at
  uint64_t reloads_total = 0;
  uint64_t reload_failures_total = 0;
  bool last_reload_successful = true;
  double last_reload_success_timestamp = 0;  // unix seconds
  uint64_t daemon_memory_over_budget = 0; // snapshots taken over limits.max_daemon_memory_bytes
  // overhead
  uint64_t escalations_up = 0;
  uint64_t escalations_down = 0;
  uint64_t governor_suspensions = 0;
  uint64_t governor_bursts = 0;  // processes put in bursts (decision busy-processes)
  // heap tracing suspended because the live records reached the cap derived
  // from limits.max_daemon_memory_bytes (decision daemon-memory-bound)
  uint64_t memory_budget_suspensions = 0;
  bool kill_switch_engaged = false;
  // Attaches that followed an exec/fork event: from the event's kernel time
  // to the probes being in place (leakwatch_attach_latency_seconds).
  LatencyHistogram attach_latency;
  // A traced pid found running another process at its exec event (pid
  // reused, the old exit unseen): the old state dropped, the new process
  // matched afresh.
  uint64_t pid_reuse_detected = 0;
  // Processes that exited while being attached
  // (decision gone-processes-dropped): dropped at once, their links closed off
  // the event loop.
  uint64_t exited_while_attaching = 0;
  // Exec and fork events of non-root users past limits.max_discoveries_per_second
  // (issue 32): deferred to when that user has a token, and dropped when the
  // bounded queue was full (the reconciliation finds those still alive).
  uint64_t discoveries_deferred = 0;
  uint64_t discoveries_dropped = 0;
  // OOM kill reports (decision oom-kill-reports): kills reported since start by
  // (target, reason), the last kill's time (unix seconds; reports read back
  // from oom.report_dir count for it, 0: none), and report files not written.
  std::map<std::pair<std::string, std::string>, uint64_t> oom_kills;
  // Other SIGKILLs from user space (reason sigkill: not for memory), by target.
  std::map<std::string, uint64_t> sigkills;
  double oom_last_kill_timestamp = 0;
  uint64_t oom_report_write_failures = 0;
  // Reports not taken or no longer kept, by cause (issue 32), and reports
  // cut to oom.max_report_bytes.
  std::array<uint64_t, kOomDropCauses> oom_reports_dropped{};
  uint64_t oom_reports_truncated = 0;
  // GPU OOMs not reported (rate limit: one report per process and device
  // per minute), by target; each is counted in its standing report.
  std::map<std::string, uint64_t> gpu_oom_suppressed;
};

// An OOM kill report as the API serves it (view/oom_report.h): its JSON
// text, built at the kill or read back from oom.report_dir at start, and
// its time, for ordering.
// `meta` is what retention knows of it (core/policy/oom_retention.h; its
// `id` is the paging cursor); `file`: its file in oom.report_dir, "" if none.
struct StoredOomReport {
  double timestamp = 0;
  std::string json;
  OomReportMeta meta;
  std::string file;
};

// What the HTTP side serves: immutable once published.
struct DaemonSnapshot {
  double timestamp = 0;
  std::vector<ProcessEntry> processes;
  Counters kernel_counters{};
  TracerStats tracer_stats;
  DaemonCounters counters;
  std::vector<std::pair<std::string, ProbeReport>> probes;  // (object path, probe), all processes
  uint32_t max_processes = 0;
  uint32_t live_map_capacity = 0;
  LiveMapSizing live_map;  // how live_map_capacity was chosen (decision live-map-sizing)
  uint32_t stack_map_capacity = 0;
  uint64_t live_map_entries = 0;          // records of tracked processes
  std::string config_path;
  std::vector<std::string> targets;  // TargetConfig::name, in file order (zero series)
  // Newest first, at most oom.max_reports; shared between snapshots.
  std::shared_ptr<const std::vector<StoredOomReport>> oom_reports;
  // The daemon's own process (the process_* metrics) and the boot time,
  // read from /proc when the snapshot is built: the exporter reads no /proc.
  SelfStats self;
};

const char* mode_name(TargetMode mode);

// Unix time of a process start given in clock ticks after boot (/proc/PID/stat
// field 22), from the boot time the snapshot carries; 0 when unknown.
double start_time_unix_seconds(const DaemonSnapshot& snap, uint64_t start_time_ticks);

}  // namespace lw
