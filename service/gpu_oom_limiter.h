// SPDX-License-Identifier: Apache-2.0
// The GPU OOM report rate limit (decision oom-kill-reports, "GPU
// OOM"): a process that keeps failing CUDA allocations (a retry loop, a
// caching allocator freeing and trying again) gets at most one report per
// (process, device) per window; the failures in between are counted against
// the report that stands for them, never silently dropped.
//
// Thread-safety: not thread-safe (the consumer thread's OomRecorder owns it).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <tuple>

namespace lw {

class GpuOomLimiter {
 public:
  // (pid, process start time, device; -1 for unknown).
  using Key = std::tuple<pid_t, uint64_t, int>;

  explicit GpuOomLimiter(double window_s = 60.0, size_t max_keys = 65536)
      : window_s_(window_s), max_keys_(max_keys) {}

  // An OOM at now_s (monotonic seconds): true when a report is due (the
  // first for the key, or the window since the last report has passed; the
  // suppressed count starts again at 0), else false and the key's suppressed
  // count goes up by one.
  bool admit(const Key& key, double now_s);
  // OOMs suppressed since the key's last report (0 for an unknown key).
  uint64_t suppressed(const Key& key) const;
  // Drops a process's keys (it exited).
  void forget(pid_t pid);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    double last_report_s = 0;
    uint64_t suppressed = 0;
  };
  double window_s_;
  size_t max_keys_;
  std::map<Key, Entry> entries_;
  std::deque<Key> order_;  // insertion order, for the bound (oldest dropped)
};

}  // namespace lw
