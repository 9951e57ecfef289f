// SPDX-License-Identifier: Apache-2.0
#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <set>

namespace lw {

namespace {

std::atomic<LogLevel> g_level{LogLevel::kInfo};
const bool g_journald = getenv("JOURNAL_STREAM") != nullptr;

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "?";
}

}  // namespace

void set_log_level(LogLevel level) { g_level.store(level); }
LogLevel log_level() { return g_level.load(); }

void log_at(LogLevel level, const char* fmt, ...) {
  if (level < g_level.load()) return;
  char line[2048];
  size_t n = 0;
  if (!g_journald) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += static_cast<size_t>(snprintf(line + n, sizeof(line) - n, ".%03ldZ ", ts.tv_nsec / 1000000));
  }
  n += static_cast<size_t>(snprintf(line + n, sizeof(line) - n, "%s: ", level_name(level)));
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
  va_end(ap);
  n = m < 0 ? n : std::min(sizeof(line) - 2, n + static_cast<size_t>(m));
  line[n++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, n);
  (void)ignored;  // nowhere left to report a failed log write
}

void log_once(const std::string& key, const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!seen.insert(key).second) return;
  }
  log_at(LogLevel::kWarn, "%s (logged once; see metrics for the count)", message.c_str());
}

}  // namespace lw
