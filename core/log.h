/* SPDX-License-Identifier: Apache-2.0 */
// Logging to stderr for the daemon and the CLI. Levels from the config and
// --log-level. Under journald (JOURNAL_STREAM set) lines carry no timestamp:
// the journal adds its own.
// Thread-safety: thread-safe (one write(2) per line).
#pragma once

#include <string>

#include "core/config.h"

namespace lw {

void set_log_level(LogLevel level);
LogLevel log_level();

void log_at(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
#define LW_LOG_DEBUG(...) ::lw::log_at(::lw::LogLevel::kDebug, __VA_ARGS__)
#define LW_LOG_INFO(...) ::lw::log_at(::lw::LogLevel::kInfo, __VA_ARGS__)
#define LW_LOG_WARN(...) ::lw::log_at(::lw::LogLevel::kWarn, __VA_ARGS__)
#define LW_LOG_ERROR(...) ::lw::log_at(::lw::LogLevel::kError, __VA_ARGS__)

// Logs `message` at warn level the first time `key` is seen: for limits that
// are hit over and over (they are counted in metrics every time).
void log_once(const std::string& key, const std::string& message);

}  // namespace lw
