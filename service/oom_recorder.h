// SPDX-License-Identifier: Apache-2.0
// The OOM recorder (decision oom-kill-reports): when the kernel's
// OOM killer or a user-space SIGKILL takes a traced process, the kernel
// reports it before the process exits, while the daemon still holds its
// live sites. The recorder freezes them into a report (view/oom_report.h),
// writes it to oom.report_dir (one JSON file per kill, at most
// oom.max_reports), logs a line naming the top site, counts it, and hands
// it to the API. It also keeps each tracked process's recent memory
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
  // GPU OOM (decision oom-kill-reports, "GPU OOM"): true when `kill` was
  // rate-limited (counted against the standing report) rather than reported.
  bool gpu_suppressed(const ProcessKill& kill, const TrackedProcess& t);
  void gpu_recovered(const ProcessKill& kill);
  // Replaces a GPU report's stored JSON (API and file) after a change.
  void update_gpu_report(const GpuOomLimiter::Key& key, const std::string& old_text);
  std::string write_file(const OomReport& report, const std::string& text);
  std::string write_text(const std::string& file, const std::string& text);
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
};

// The file name of a report: oom-<unix ms, 13 digits>-<pid>.json, so names
// sort by time.
std::string oom_report_file_name(double timestamp, pid_t pid);

}  // namespace lw
