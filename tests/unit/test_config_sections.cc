// SPDX-License-Identifier: Apache-2.0
// Config sections apart from test_config.cc: durations, oom, escalation.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/config/yaml_support.h"
#include "tests/unit/config_test_support.h"

namespace lw {
namespace {

using config_test::all_errors;
using config_test::parse_bad;
using config_test::parse_ok;

// escalation.confirm_checks: 1..10 (the readings kept), 3 by default
// (decision tensor-tier, "Tensors in flight").
TEST(Config, EscalationConfirmChecksInRange) {
  EXPECT_EQ(Config{}.escalation.confirm_checks, 3u);
  EXPECT_EQ(parse_ok("escalation: {confirm_checks: 1}\n").escalation.confirm_checks, 1u);
  EXPECT_EQ(parse_ok("escalation: {confirm_checks: 10}\n").escalation.confirm_checks, 10u);
  for (const char* bad : {"escalation: {confirm_checks: 0}\n", "escalation: {confirm_checks: 11}\n"}) {
    auto errors = parse_bad(bad);
    ASSERT_EQ(errors.size(), 1u) << bad << all_errors(errors);
    EXPECT_NE(errors[0].message.find("confirm_checks"), std::string::npos) << errors[0].message;
  }
}

// limits.fair_share_percent: 1..100 (100: no shares), 50 by default
// (decision fair-shares).
TEST(Config, FairSharePercentInRange) {
  EXPECT_EQ(Config{}.limits.fair_share_percent, 50u);
  EXPECT_EQ(parse_ok("limits: {fair_share_percent: 100}\n").limits.fair_share_percent, 100u);
  EXPECT_EQ(parse_ok("limits: {fair_share_percent: 1}\n").limits.fair_share_percent, 1u);
  for (const char* bad : {"limits: {fair_share_percent: 0}\n", "limits: {fair_share_percent: 101}\n"}) {
    auto errors = parse_bad(bad);
    ASSERT_EQ(errors.size(), 1u) << bad << all_errors(errors);
    EXPECT_NE(errors[0].message.find("fair_share_percent"), std::string::npos) << errors[0].message;
  }
}

// sandbox_user: a user name, "nobody" by default (decision
// unprivileged-uid); whether it exists is checked by `run` and
// check-config on the host, not by the parser.
TEST(Config, SandboxUserIsAUserName) {
  EXPECT_EQ(Config{}.sandbox_user, "nobody");
  EXPECT_EQ(parse_ok("sandbox_user: leakwatch\n").sandbox_user, "leakwatch");
  EXPECT_EQ(parse_ok("sandbox_user: root\n").sandbox_user, "root");
  for (const char* bad : {"sandbox_user: \"\"\n", "sandbox_user: \"a b\"\n", "sandbox_user: /etc/passwd\n",
                          "sandbox_user: \"-x\"\n", "sandbox_user: [a]\n", "sandbox_user: \"a:b\"\n"}) {
    auto errors = parse_bad(bad);
    ASSERT_EQ(errors.size(), 1u) << bad << all_errors(errors);
    EXPECT_NE(errors[0].message.find("sandbox_user"), std::string::npos) << errors[0].message;
  }
}


// Keys that are durations take Prometheus durations as well as seconds
// (the issue: `window_seconds: 10m` was refused).
TEST(ConfigDurations, PrometheusDurationsWhereAKeyIsADuration) {
  Config c = parse_ok(
      "analysis: {window_seconds: 10m, sample_interval_seconds: 30s}\n"
      "reconcile_interval_seconds: 1m\n"
      "escalation: {growth_window_seconds: 1h30m, full_window_seconds: 2h, cooldown_seconds: 0,"
      " check_interval_seconds: 15}\n"
      "governor: {backoff_initial_seconds: 90s, backoff_max_seconds: 1d}\n");
  EXPECT_EQ(c.analysis.window_seconds, 600u);
  EXPECT_EQ(c.analysis.sample_interval_seconds, 30u);
  EXPECT_EQ(c.reconcile_interval_seconds, 60u);
  EXPECT_EQ(c.escalation.growth_window_seconds, 5400u);
  EXPECT_EQ(c.escalation.full_window_seconds, 7200u);
  EXPECT_EQ(c.escalation.cooldown_seconds, 0u);
  EXPECT_EQ(c.escalation.check_interval_seconds, 15u);
  EXPECT_EQ(c.governor.backoff_initial_seconds, 90u);
  EXPECT_EQ(c.governor.backoff_max_seconds, 86400u);
}

TEST(ConfigDurations, BadDurationsAreErrorsWithTheirPosition) {
  auto errors = parse_bad(
      "analysis:\n"
      "  window_seconds: 10x\n"        // 2: unknown unit
      "  sample_interval_seconds: 1500ms\n"  // 3: not whole seconds
      "reconcile_interval_seconds: 2h\n"     // 4: out of range (max 3600 s)
      "escalation: {growth_window_seconds: 1m1h}\n");  // 5: units out of order
  ASSERT_EQ(errors.size(), 4u) << all_errors(errors);
  EXPECT_EQ(errors[0].line, 2);
  EXPECT_NE(errors[0].message.find("must be a duration"), std::string::npos) << errors[0].message;
  EXPECT_EQ(errors[1].line, 3);
  EXPECT_NE(errors[1].message.find("whole number of seconds"), std::string::npos) << errors[1].message;
  EXPECT_EQ(errors[2].line, 4);
  EXPECT_NE(errors[2].message.find("7200 seconds"), std::string::npos) << errors[2].message;
  EXPECT_EQ(errors[3].line, 5);
}

TEST(ConfigDurations, DurationSyntax) {
  using yaml_support::parse_duration_ms;
  EXPECT_EQ(parse_duration_ms("0"), 0u);
  EXPECT_EQ(parse_duration_ms("500ms"), 500u);
  EXPECT_EQ(parse_duration_ms("1m30s"), 90000u);
  EXPECT_EQ(parse_duration_ms("1y"), 365ull * 86400000);
  EXPECT_EQ(parse_duration_ms("2w1d"), 15ull * 86400000);
  EXPECT_EQ(parse_duration_ms("1h1m1s1ms"), 3661001u);
  for (const char* bad : {"", "m", "1", "1.5s", "-1s", "1s1m", "1m1m", "1 m", "1h ", "99999999999999999y"})
    EXPECT_FALSE(parse_duration_ms(bad).has_value()) << bad;
}


TEST(Config, OomSection) {
  const Config d;
  EXPECT_EQ(d.oom.report_dir, "/var/lib/leakwatch/oom");
  EXPECT_EQ(d.oom.max_reports, 100u);
  EXPECT_EQ(d.oom.history_seconds, 300u);
  EXPECT_EQ(d.oom.history_interval_seconds, 5u);
  Config c = parse_ok("oom:\n  report_dir: /srv/oom\n  max_reports: 7\n  history_seconds: 0\n"
                      "  history_interval_seconds: 2\n");
  EXPECT_EQ(c.oom.report_dir, "/srv/oom");
  EXPECT_EQ(c.oom.max_reports, 7u);
  EXPECT_EQ(c.oom.history_seconds, 0u);
  EXPECT_EQ(c.oom.history_interval_seconds, 2u);
  EXPECT_EQ(parse_ok("oom:\n  report_dir: \"\"\n").oom.report_dir, "");
  parse_bad("oom:\n  report_dir: relative/dir\n");
  parse_bad("oom:\n  max_reports: 0\n");
  parse_bad("oom:\n  history_interval_seconds: 0\n");
  parse_bad("oom:\n  max_report: 3\n");
}

}  // namespace
}  // namespace lw
