/* SPDX-License-Identifier: Apache-2.0 */
// Logging to stderr for the daemon and the CLI. Levels from the config and
// --log-level; formats from --log.format (as Prometheus exporter-toolkit
// names them): `text` (the default: `TIME level: message`), `logfmt`
// (`ts=TIME level=warn msg="message"`) and `json` (one object a line:
// {"ts":..., "level":..., "msg":...}). Under journald (JOURNAL_STREAM set)
// every line starts with its syslog priority (`<4>` for warn), which the
// journal takes as the entry's priority (`journalctl -p warning`), and
// `text` lines carry no timestamp: the journal adds its own.
//
// Every line is one line: control characters in the message (a process
// name set with prctl(PR_SET_NAME) may hold a newline, CR or an escape
// sequence, and with the default config any local user's process is
// watched) are escaped before the write, so no log line can be forged and
// no terminal sequence reaches an operator's screen (escape_log_text).
//
// Thread-safety: thread-safe (one write(2) per line).
#pragma once

#include <string>
#include <string_view>

namespace lw {

enum class LogLevel { kDebug, kInfo, kWarn, kError };
enum class LogFormat { kText, kLogfmt, kJson };

void set_log_level(LogLevel level);
LogLevel log_level();
void set_log_format(LogFormat format);
LogFormat log_format();
// "text", "logfmt" or "json"; false for anything else.
bool parse_log_format(std::string_view name, LogFormat* out);
// Whether lines carry a syslog priority prefix (under journald by default).
// For tests.
void set_log_priority_prefix_for_testing(bool on);

void log_at(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
#define LW_LOG_DEBUG(...) ::lw::log_at(::lw::LogLevel::kDebug, __VA_ARGS__)
#define LW_LOG_INFO(...) ::lw::log_at(::lw::LogLevel::kInfo, __VA_ARGS__)
#define LW_LOG_WARN(...) ::lw::log_at(::lw::LogLevel::kWarn, __VA_ARGS__)
#define LW_LOG_ERROR(...) ::lw::log_at(::lw::LogLevel::kError, __VA_ARGS__)

// Logs `message` at warn level the first time `key` is seen: for limits that
// are hit over and over (they are counted in metrics every time).
void log_once(const std::string& key, const std::string& message);

// `text` as it goes into a log line: C0 controls (newline, CR, ESC, ...),
// DEL, C1 controls (U+0080..U+009F, which terminals also obey) and bytes
// that are not valid UTF-8 become \xNN (C1 as \u00NN), and a backslash
// becomes "\\", so an escaped byte can never be confused with text that
// spells the escape. Valid printable UTF-8 is kept as it is.
std::string escape_log_text(std::string_view text);
// The same for a logfmt quoted value: `"` becomes `\"` too.
std::string escape_logfmt_text(std::string_view text);
// `text` as a JSON string's contents: `"` and `\` escaped, controls (C0,
// DEL, C1) as \u00NN, bytes that are not valid UTF-8 as the text `\xNN`
// (a literal backslash, so the string stays valid JSON and says which byte).
std::string escape_json_text(std::string_view text);

// Where log lines go (stderr by default). For tests; not thread-safe
// against concurrent logging.
void set_log_fd_for_testing(int fd);

}  // namespace lw
