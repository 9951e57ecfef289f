// SPDX-License-Identifier: Apache-2.0
// The OOM recorder (decision oom-kill-reports): when the kernel's
// OOM killer or a user-space SIGKILL takes a traced process, the kernel
// reports it before the process exits, while the daemon still holds its
// live sites. The recorder freezes them into a report (view/oom_report.h),
// writes it to oom.report_dir (one JSON file per kill, at most
// oom.max_reports and oom.max_total_bytes, each report at most
// oom.max_report_bytes; a user's `sigkill` reports rate-limited and capped:
// core/policy/oom_retention.h), logs a line naming the top site, counts it,
// and hands it to the API. It also keeps each tracked process's recent memory
// history (statm RSS and live bytes per kind), which a report carries.
//
// Thread-safety: not thread-safe; only the consumer thread (Daemon::run)
// calls it, with the DaemonState and TracerControl it was built on.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/policy/oom_retention.h"
#include "service/daemon_state.h"
#include "service/gpu_oom_limiter.h"
#include "service/tracer_control.h"
#include "view/oom_report.h"

namespace lw {

class OomRecorder {
 public:
  OomRecorder(DaemonState& state, TracerControl& tracer) : state_(state), tracer_(tracer) {}

  // At start: the reports left in oom.report_dir, newest first, into the
  // API (state.oom_reports) and the last-kill time.
  void load();
  // A history sample of every tracked process, when one is due
  // (oom.history_interval_seconds; now_s: monotonic seconds).
  void tick(double now_s);
  // Reports the kills the tracer saw since the last call. Call after the
  // poll and before the exited processes are reaped: a report is built
  // from the process's state, which reaping drops. Returns how many.
  size_t handle_kills();

 private:
  void record(const ProcessKill& kill, const Counters& counters, const TracerStats& stats);
  // The report of `kill` from the process's state, its file name not set.
  OomReport build(const ProcessKill& kill, const TrackedProcess& t, KillReason reason, const Counters& counters,
                  const TracerStats& stats);
  // Caps, keeps (or drops: issue 32) and writes the report; sets r.file to
  // the file written, "" when none. Returns whether it was kept.
  bool store(const ProcessKill& kill, OomReport& r);
  // Drops the files of the reports retention evicted from `kept` (newest
  // first), counts them, and returns the rest.
  // *new_dropped: whether the report `new_id` was among them.
  std::vector<StoredOomReport> apply_retention(std::vector<StoredOomReport> kept, const std::string& new_id,
                                               bool* new_dropped);
  // GPU OOM (decision oom-kill-reports, "GPU OOM"): true when `kill` was
  // rate-limited (counted against the standing report) rather than reported.
  bool gpu_suppressed(const ProcessKill& kill, const TrackedProcess& t);
  void gpu_recovered(const ProcessKill& kill);
  // Replaces a GPU report's stored JSON (API and file) after a change.
  void update_gpu_report(const GpuOomLimiter::Key& key, const std::string& old_text);
  // Writes `text` to `file` (through a temporary file); "" when written,
  // else why not.
  std::string write_text(const std::string& file, const std::string& text);
  // Removes the report files in oom.report_dir that are not kept.
  void prune_dir(const std::string& dir);
  void sample_all();

  DaemonState& state_;
  TracerControl& tracer_;
  // How long the kills of one poll may wait for the symbol thread.
  static constexpr std::chrono::milliseconds kSymbolWaitPerPoll{500};
  std::chrono::milliseconds symbol_wait_left_{0};
  std::map<pid_t, std::deque<MemorySample>> history_;
  double last_sample_s_ = -1e18;
  // (pid, start time) already reported: one report per process, whichever
  // of its kill events comes first. Bounded (oldest dropped).
  std::set<std::pair<pid_t, uint64_t>> reported_;
  std::deque<std::pair<pid_t, uint64_t>> reported_order_;
  // GPU OOM: the rate limit, and the standing report of each (process,
  // device), which suppressed OOMs and a recovery update.
  GpuOomLimiter gpu_limiter_;
  struct GpuReport {
    nlohmann::json json;
    std::string file;
    std::string target;
  };
  std::map<GpuOomLimiter::Key, GpuReport> gpu_reports_;
  // Which reports are kept: per-uid `sigkill` rate and count, total count
  // and bytes (issue 32).
  OomRetention retention_;
};

// The file name of a report: oom-<unix ms, 13 digits>-<pid>.json, so names
// sort by time.
std::string oom_report_file_name(double timestamp, pid_t pid);
// A report's id (its file name without .json): oom-<unix ms>-<pid>, with
// -gpu<device> for a GPU OOM (gpu_device >= 0).
std::string oom_report_id(double timestamp, pid_t pid, int gpu_device);
// The retention bounds of the config's oom section.
OomRetentionLimits retention_limits(const OomConfig& c);

}  // namespace lw
