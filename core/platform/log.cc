// SPDX-License-Identifier: Apache-2.0
#include "core/platform/log.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <set>

namespace lw {

namespace {

std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::atomic<LogFormat> g_format{LogFormat::kText};
std::atomic<int> g_fd{STDERR_FILENO};
const bool g_journald = getenv("JOURNAL_STREAM") != nullptr;
std::atomic<bool> g_priority_prefix{g_journald};

// A formatted message longer than this is cut (before escaping): one
// write(2) per line.
constexpr size_t kMaxMessageBytes = 2048;
// An escaped byte takes at most 6 (\u00NN in JSON): a line always fits
// whole, so a logfmt or JSON line is never cut inside its syntax.
constexpr size_t kMaxLineBytes = 6 * kMaxMessageBytes + 128;

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "?";
}

// syslog(3) priorities, as journald reads a `<N>` line prefix.
int syslog_priority(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return 7;
    case LogLevel::kInfo: return 6;
    case LogLevel::kWarn: return 4;
    case LogLevel::kError: return 3;
  }
  return 6;
}

enum class EscapeStyle { kLog, kLogfmt, kJson };

// Length of the valid UTF-8 sequence at s[i] (1..4), or 0 when the bytes
// there are not one (overlong forms, surrogates and code points past
// U+10FFFF included).
size_t utf8_length(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  size_t len;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3f);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff)) {
    return 0;
  }
  return len;
}

}  // namespace

namespace {

void append_hex_escape(std::string& out, const char* prefix, unsigned char c) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += prefix;
  out += kHex[c >> 4];
  out += kHex[c & 0xf];
}

std::string escape_text(std::string_view s, EscapeStyle style) {
  const bool json = style == EscapeStyle::kJson;
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\' || (c == '"' && style != EscapeStyle::kLog)) {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    size_t len = c < 0x80 ? 0 : utf8_length(s, i);
    if (len == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) {
      // C1 control (U+0080..U+009F): U+009B is CSI on a UTF-8 terminal.
      append_hex_escape(out, "\\u00", static_cast<unsigned char>(s[i + 1]));
      i += 2;
      continue;
    }
    if (len > 1) {
      out.append(s.substr(i, len));
      i += len;
      continue;
    }
    // A C0 control or DEL is a character JSON escapes as \u00NN; a byte
    // that is not UTF-8 has no JSON escape: the text `\xNN` says which.
    if (json) append_hex_escape(out, c < 0x80 ? "\\u00" : "\\\\x", c);
    else append_hex_escape(out, "\\x", c);
    ++i;
  }
  return out;
}

}  // namespace

std::string escape_log_text(std::string_view s) { return escape_text(s, EscapeStyle::kLog); }
std::string escape_logfmt_text(std::string_view s) { return escape_text(s, EscapeStyle::kLogfmt); }
std::string escape_json_text(std::string_view s) { return escape_text(s, EscapeStyle::kJson); }

void set_log_level(LogLevel level) { g_level.store(level); }
LogLevel log_level() { return g_level.load(); }
void set_log_format(LogFormat format) { g_format.store(format); }
LogFormat log_format() { return g_format.load(); }
void set_log_priority_prefix_for_testing(bool on) { g_priority_prefix.store(on); }

bool parse_log_format(std::string_view name, LogFormat* out) {
  if (name == "text") *out = LogFormat::kText;
  else if (name == "logfmt") *out = LogFormat::kLogfmt;
  else if (name == "json") *out = LogFormat::kJson;
  else return false;
  return true;
}
void set_log_fd_for_testing(int fd) { g_fd.store(fd); }

namespace {

std::string utc_stamp() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char stamp[64];
  size_t n = strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(stamp + n, sizeof(stamp) - n, ".%03ldZ", ts.tv_nsec / 1000000);
  return stamp;
}

// One line without its newline. Escaped after formatting, so no argument (a
// process name, a path from a target, a config value) can break the line or
// the record's syntax.
std::string format_line(LogLevel level, std::string_view message, LogFormat format, bool priority) {
  std::string line;
  line.reserve(96 + message.size());
  if (priority) line += "<" + std::to_string(syslog_priority(level)) + ">";
  switch (format) {
    case LogFormat::kText:
      if (!g_journald) line += utc_stamp() + " ";
      line += level_name(level);
      line += ": ";
      line += escape_log_text(message);
      break;
    case LogFormat::kLogfmt:
      line += "ts=" + utc_stamp() + " level=" + level_name(level) + " msg=\"";
      line += escape_logfmt_text(message);
      line += '"';
      break;
    case LogFormat::kJson:
      line += "{\"ts\":\"" + utc_stamp() + "\",\"level\":\"" + level_name(level) + "\",\"msg\":\"";
      line += escape_json_text(message);
      line += "\"}";
      break;
  }
  return line;
}

}  // namespace

void log_at(LogLevel level, const char* fmt, ...) {
  if (level < g_level.load()) return;
  char message[kMaxMessageBytes];
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(message, sizeof(message), fmt, ap);
  va_end(ap);
  size_t message_len = m < 0 ? 0 : std::min(sizeof(message) - 1, static_cast<size_t>(m));

  std::string line =
      format_line(level, std::string_view(message, message_len), g_format.load(), g_priority_prefix.load());
  if (line.size() > kMaxLineBytes) line.resize(kMaxLineBytes);  // never, by kMaxLineBytes's bound
  line += '\n';
  ssize_t ignored = write(g_fd.load(), line.data(), line.size());
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
