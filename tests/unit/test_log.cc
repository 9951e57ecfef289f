// SPDX-License-Identifier: Apache-2.0
// Log lines cannot be forged or carry terminal sequences: whatever a
// message's arguments hold (a process name set with prctl, a path from a
// target), each log_at call writes exactly one line of printable text.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "core/platform/log.h"

namespace lw {
namespace {

// Captures what log_at writes, through a pipe.
class LogCapture {
 public:
  LogCapture() {
    EXPECT_EQ(pipe2(fds_, O_CLOEXEC | O_NONBLOCK), 0);
    set_log_fd_for_testing(fds_[1]);
  }
  ~LogCapture() {
    set_log_fd_for_testing(STDERR_FILENO);
    close(fds_[0]);
    close(fds_[1]);
  }
  std::string text() {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds_[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  int fds_[2];
};

size_t count_lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(Log, NewlineInAProcessNameForgesNoLine) {
  LogCapture capture;
  const std::string comm = "x\n2026-01-01T00:00:00.000Z error: forged";
  LW_LOG_INFO("attached pid %d (%s) target=%s", 42, comm.c_str(), "host");
  std::string out = capture.text();
  EXPECT_EQ(count_lines(out), 1u) << out;
  EXPECT_NE(out.find("(x\\x0a2026-01-01T00:00:00.000Z error: forged)"), std::string::npos) << out;
  EXPECT_EQ(out.find("\nerror"), std::string::npos);
}

TEST(Log, ControlCharactersAndEscapesAreEscaped) {
  EXPECT_EQ(escape_log_text("a\rb"), "a\\x0db");
  EXPECT_EQ(escape_log_text("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(escape_log_text(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(escape_log_text("\x7f"), "\\x7f");
  // A backslash is escaped too, so a name spelling "\x0a" stays distinct
  // from a real newline.
  EXPECT_EQ(escape_log_text("a\\x0a"), "a\\\\x0a");
  // C1 controls in UTF-8 (U+009B is CSI), invalid UTF-8, overlong forms.
  EXPECT_EQ(escape_log_text("\xc2\x9b" "2J"), "\\u009b2J");
  EXPECT_EQ(escape_log_text("\x9b"), "\\x9b");
  EXPECT_EQ(escape_log_text("\xc0\x8a"), "\\xc0\\x8a");
  EXPECT_EQ(escape_log_text("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  // Printable UTF-8 stays readable.
  EXPECT_EQ(escape_log_text("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x8d"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x8d");
}

TEST(Log, LongMessagesStayOneLine) {
  LogCapture capture;
  std::string big(10000, '\n');
  LW_LOG_WARN("%s", big.c_str());
  std::string out = capture.text();
  EXPECT_EQ(count_lines(out), 1u);
  EXPECT_EQ(out.back(), '\n');
}

// Restores the process-wide format and prefix after a test.
struct FormatGuard {
  ~FormatGuard() {
    set_log_format(LogFormat::kText);
    set_log_priority_prefix_for_testing(getenv("JOURNAL_STREAM") != nullptr);
  }
};

TEST(Log, FormatsParseByExporterToolkitNames) {
  LogFormat f = LogFormat::kText;
  EXPECT_TRUE(parse_log_format("logfmt", &f));
  EXPECT_EQ(f, LogFormat::kLogfmt);
  EXPECT_TRUE(parse_log_format("json", &f));
  EXPECT_EQ(f, LogFormat::kJson);
  EXPECT_TRUE(parse_log_format("text", &f));
  EXPECT_EQ(f, LogFormat::kText);
  EXPECT_FALSE(parse_log_format("JSON", &f));
  EXPECT_FALSE(parse_log_format("", &f));
}

TEST(Log, LogfmtQuotesTheMessageAndEscapesItsQuotes) {
  FormatGuard guard;
  set_log_priority_prefix_for_testing(false);
  set_log_format(LogFormat::kLogfmt);
  LogCapture capture;
  LW_LOG_WARN("pid %d (%s) over budget", 42, "a\"b\nc");
  const std::string out = capture.text();
  EXPECT_EQ(count_lines(out), 1u);
  EXPECT_EQ(out.rfind("ts=", 0), 0u) << out;
  EXPECT_NE(out.find(" level=warn msg=\"pid 42 (a\\\"b\\x0ac) over budget\"\n"), std::string::npos) << out;
}

TEST(Log, JsonLinesParseAndKeepTheMessage) {
  FormatGuard guard;
  set_log_priority_prefix_for_testing(false);
  set_log_format(LogFormat::kJson);
  LogCapture capture;
  LW_LOG_ERROR("%s", "q\"uote \\ back\nslash \xc2\x9b bad\x9b end");
  std::string big(3000, '\x01');  // cut to 2,047 bytes, each escaped to 6
  LW_LOG_INFO("%s", big.c_str());
  const std::string out = capture.text();
  ASSERT_EQ(count_lines(out), 2u) << out;
  const std::string first = out.substr(0, out.find('\n'));
  nlohmann::json j = nlohmann::json::parse(first);
  EXPECT_EQ(j["level"], "error");
  EXPECT_EQ(j["msg"], "q\"uote \\ back\nslash \xc2\x9b bad\\x9b end");
  EXPECT_TRUE(j["ts"].is_string());
  nlohmann::json j2 = nlohmann::json::parse(out.substr(first.size() + 1));
  EXPECT_EQ(j2["msg"].get<std::string>().size(), 2047u);
}

// Under journald, `journalctl -p warning` filters on the priority the line
// starts with.
TEST(Log, ThePriorityPrefixIsSyslogs) {
  FormatGuard guard;
  set_log_priority_prefix_for_testing(true);
  LogCapture capture;
  LW_LOG_WARN("w");
  LW_LOG_ERROR("e");
  LW_LOG_INFO("i");
  const std::string out = capture.text();
  EXPECT_NE(out.find("<4>"), std::string::npos) << out;
  EXPECT_NE(out.find("<3>"), std::string::npos) << out;
  EXPECT_NE(out.find("<6>"), std::string::npos) << out;
  EXPECT_EQ(out.rfind("<4>", 0), 0u) << out;
}

}  // namespace
}  // namespace lw
