// SPDX-License-Identifier: Apache-2.0
// Fetches debug files from debuginfod servers, only when configured
// (`symbols.debuginfod_urls`, docs/config.md), into a bounded cache
// directory.
//
// Debian 12's libdebuginfod (0.188) takes its servers, cache path and
// limits from the environment only (DEBUGINFOD_URLS, DEBUGINFOD_CACHE_PATH,
// DEBUGINFOD_TIMEOUT, DEBUGINFOD_MAXTIME, DEBUGINFOD_MAXSIZE): there is no
// call to set them. Changing the daemon's own environment from a thread
// races every getenv() elsewhere, and would hand the servers to any other
// code reading it. So each fetch runs in a child process, the leakwatch
// binary re-executed as `leakwatch debuginfod-fetch BUILD_ID`, whose
// environment is built from the configuration alone; it drops its
// capabilities, loads libdebuginfod with dlopen (libcurl never enters the
// daemon), aborts past the deadline from its progress callback, and is
// killed by the parent if it runs over anyway.
//
// Thread-safety: DebuginfodFetcher is not thread-safe (the symbol thread
// owns it). debuginfod_fetch_main() is a process entry point.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "core/platform/result.h"

namespace lw {

struct DebuginfodOptions {
  std::vector<std::string> urls;  // empty: off, nothing is ever fetched
  std::string cache_dir = "/var/cache/leakwatch/debuginfod";
  uint64_t cache_max_bytes = 1ull << 30;
  uint32_t timeout_seconds = 30;
  // The program run as `PROGRAM debuginfod-fetch BUILD_ID`.
  std::string helper = "/proc/self/exe";
  size_t max_parallel = 2;
  // A build-id that failed is not asked for again for this long.
  std::chrono::seconds retry_after{600};
};

// Counters (metrics later: leakwatch_debuginfod_<name>_total).
struct DebuginfodCounters {
  uint64_t fetches = 0;          // child processes started
  uint64_t hits = 0;             // a server (or libdebuginfod's cache) had the file
  uint64_t failures = 0;         // not found, error, timeout, or a refused file
  uint64_t timeouts = 0;         // of the failures: killed at the deadline
  uint64_t bytes = 0;            // size of the files obtained
  uint64_t cache_evictions = 0;  // build-id directories deleted to stay under the bound
  uint64_t not_started = 0;      // wanted but not fetched: queue full
};

class DebuginfodFetcher {
 public:
  explicit DebuginfodFetcher(DebuginfodOptions options);
  ~DebuginfodFetcher();  // kills and reaps running children
  DebuginfodFetcher(const DebuginfodFetcher&) = delete;
  DebuginfodFetcher& operator=(const DebuginfodFetcher&) = delete;

  bool enabled() const { return !options_.urls.empty(); }
  // Asks for `build_id`'s debug file unless it is being fetched, was
  // fetched, or failed within retry_after. False when nothing will happen.
  bool want(const std::string& build_id);
  // Starts queued fetches, reaps finished ones, kills overdue ones. Returns
  // the fetches that ended since the last call: ok, the file is in the
  // cache; not ok, it will not come (for retry_after at least).
  struct Outcome {
    std::string build_id;
    bool ok = false;
  };
  std::vector<Outcome> poll();
  // Fetches queued or running.
  size_t busy() const { return queue_.size() + running_.size(); }
  const DebuginfodCounters& counters() const { return counters_; }

 private:
  struct Child {
    pid_t pid = -1;
    int out_fd = -1;
    std::string output;
    std::chrono::steady_clock::time_point deadline;
  };
  void start(const std::string& build_id);
  std::vector<std::string> child_env() const;
  void finish(const std::string& build_id, Child& child, bool timed_out);
  void finish_output(const std::string& build_id, const std::string& output, bool timed_out);
  void trim_cache();

  DebuginfodOptions options_;
  DebuginfodCounters counters_;
  std::deque<std::string> queue_;
  std::map<std::string, Child> running_;
  // build-id -> when it may be asked again (max(): fetched, never again).
  std::map<std::string, std::chrono::steady_clock::time_point> done_;
  std::vector<Outcome> ended_;
};

// Sizes of the build-id directories under `cache_dir` and deletes the least
// recently used (by the newest atime/mtime of their files) until the total
// is at most `max_bytes`. Returns the number of directories deleted. Only
// directories whose name is a hex build-id are touched.
uint64_t trim_debuginfod_cache(const std::string& cache_dir, uint64_t max_bytes);

// The daemon runs under a seccomp filter that kills execve (core/platform/sandbox.h,
// decision sandbox-after-start), so before it installs the filter, while it is
// still one thread, it forks a spawner: a small process outside the filter,
// with no capabilities, that dies with the daemon (PR_SET_PDEATHSIG) and runs
// the fetch children for it, one at a time, on requests over a socket pair
// (build-id, timeout, the child's environment), enforcing the deadline itself
// and answering with the child's output. Without a spawner (`top`, `snapshot`,
// `sandbox: false`) DebuginfodFetcher spawns the child itself.
Status start_debuginfod_spawner();
// The daemon's end of the spawner's socket, -1 when there is none.
int debuginfod_spawner_fd();

// `leakwatch debuginfod-fetch BUILD_ID`: the child's side. Prints one line,
// "ok SIZE PATH" or "error CODE MESSAGE", and returns 0 or 1.
int debuginfod_fetch_main(int argc, char** argv);

}  // namespace lw
