// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "core/policy/overhead_policy.h"

namespace lw {
namespace {

TEST(OverheadPolicy, ParseStatm) {
  auto b = parse_statm("1000 300 100 10 0 500 0\n", 4096);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->anon_resident, 200u * 4096);
  EXPECT_EQ(b->data, 500u * 4096);
  EXPECT_EQ(parse_statm("1000 100 300 10 0 500 0", 4096)->anon_resident, 0u);
  EXPECT_FALSE(parse_statm("", 4096));
  EXPECT_FALSE(parse_statm("12 x 3 4 5 6", 4096));
  EXPECT_FALSE(parse_statm("1 2 3", 4096));
  EXPECT_FALSE(parse_statm("99999999999999999999999 1 1 1 1 1", 4096));
}

TEST(OverheadPolicy, GrowthWatchEscalatesOnlySteadyGrowthAtItsHigh) {
  GrowthWatch w;
  const uint64_t mib = 1 << 20;
  // 1 MiB a minute, sampled every 10 s, 4 MiB threshold over 300 s.
  double t = 0;
  int escalated_at = -1;
  for (int i = 0; i <= 40 && escalated_at < 0; ++i, t += 10) {
    w.add(t, 100 * mib + static_cast<uint64_t>(t / 60 * mib), 300);
    if (w.growing(4 * mib)) escalated_at = static_cast<int>(t);
  }
  EXPECT_EQ(escalated_at, 240);  // 4 MiB after 4 minutes
  EXPECT_DOUBLE_EQ(w.rise_span_s(), 240);  // rising since the first sample
  // A plateau, and a spike that went away, do not escalate.
  GrowthWatch flat;
  for (int i = 0; i < 30; ++i) flat.add(i * 10.0, 50 * mib, 300);
  EXPECT_FALSE(flat.growing(4 * mib));
  GrowthWatch spike;
  spike.add(0, 50 * mib, 300);
  spike.add(10, 80 * mib, 300);
  spike.add(20, 60 * mib, 300);
  EXPECT_FALSE(spike.growing(4 * mib));
  // Growth older than the window is forgotten.
  GrowthWatch old;
  old.add(0, 10 * mib, 300);
  old.add(10, 20 * mib, 300);
  old.add(400, 20 * mib, 300);
  EXPECT_FALSE(old.growing(4 * mib));
}

TEST(OverheadPolicy, TheRiseSpanStartsAtTheLatestSampleAtTheLow) {
  GrowthWatch w;
  const uint64_t mib = 1 << 20;
  EXPECT_EQ(w.rise_span_s(), 0);
  w.add(0, 50 * mib, 300);
  EXPECT_EQ(w.rise_span_s(), 0);  // one sample: no rise
  // Flat at the low until 40 s, then a rise: it started at 40 s.
  for (double t = 10; t <= 40; t += 10) w.add(t, 50 * mib, 300);
  w.add(50, 51 * mib, 300);
  w.add(60, 52 * mib, 300);
  EXPECT_DOUBLE_EQ(w.rise_span_s(), 20);
  // A dip below the old low restarts it.
  w.add(70, 49 * mib, 300);
  w.add(80, 53 * mib, 300);
  EXPECT_DOUBLE_EQ(w.rise_span_s(), 10);
}

TEST(OverheadPolicy, ASerializedBudgetIsDividedByThreadsUpToTheCpus) {
  EXPECT_EQ(thread_scaled_budget(50000, 1, 16), 50000u);
  EXPECT_EQ(thread_scaled_budget(50000, 4, 16), 12500u);
  EXPECT_EQ(thread_scaled_budget(50000, 64, 16), 3125u);  // at most the CPUs wait
  EXPECT_EQ(thread_scaled_budget(50000, 0, 16), 50000u);  // unreadable: one thread
  EXPECT_EQ(thread_scaled_budget(0, 8, 16), 0u);          // no budget stays none
  EXPECT_EQ(thread_scaled_budget(3, 8, 16), 1u);
  EXPECT_TRUE(release_serializes_uprobe_hits("6.13.12-arch1"));
  EXPECT_TRUE(release_serializes_uprobe_hits("5.15.0-91-generic"));
  EXPECT_FALSE(release_serializes_uprobe_hits("6.14.0"));
  EXPECT_FALSE(release_serializes_uprobe_hits("6.18.44-fc-v1300"));
  EXPECT_FALSE(release_serializes_uprobe_hits("7.0.1"));
  EXPECT_TRUE(release_serializes_uprobe_hits("garbage"));
}

TEST(OverheadPolicy, GovernorSuspendsOverBudgetAndBacksOff) {
  GovernorParams p;
  p.max_hits_per_second = 1000;
  p.backoff_initial_s = 10;
  p.backoff_max_s = 25;
  GovernorState g;
  EXPECT_EQ(g.observe(0, 0, p), GovernorAction::kNone);
  EXPECT_EQ(g.observe(1, 500, p), GovernorAction::kNone);  // 500/s: under
  EXPECT_FALSE(g.suspended());
  EXPECT_EQ(g.observe(2, 3000, p), GovernorAction::kSuspend);  // 2500/s
  EXPECT_TRUE(g.suspended());
  EXPECT_EQ(g.backoff_s(), 10);
  EXPECT_EQ(g.observe(5, 3000, p), GovernorAction::kNone);
  EXPECT_EQ(g.observe(12, 3000, p), GovernorAction::kResume);
  // Over again at once: the wait doubles, up to the maximum.
  EXPECT_EQ(g.observe(13, 6000, p), GovernorAction::kSuspend);
  EXPECT_EQ(g.backoff_s(), 20);
  EXPECT_EQ(g.observe(33, 6000, p), GovernorAction::kResume);
  EXPECT_EQ(g.observe(34, 9000, p), GovernorAction::kSuspend);
  EXPECT_EQ(g.backoff_s(), 25);
  EXPECT_EQ(g.observe(59, 9000, p), GovernorAction::kResume);
  // Calm for longer than the last wait: back to the initial backoff.
  EXPECT_EQ(g.observe(70, 9100, p), GovernorAction::kNone);
  EXPECT_EQ(g.observe(90, 9200, p), GovernorAction::kNone);
  EXPECT_EQ(g.observe(91, 20000, p), GovernorAction::kSuspend);
  EXPECT_EQ(g.backoff_s(), 10);
  // No budget: never suspends.
  GovernorParams off;
  off.max_hits_per_second = 0;
  GovernorState h;
  h.observe(0, 0, off);
  EXPECT_EQ(h.observe(1, 1u << 30, off), GovernorAction::kNone);
}

}  // namespace
}  // namespace lw

// The overhead keys of the config (docs/config.md).
#include "core/config/config.h"

namespace lw {
namespace {

TEST(OverheadConfig, KeysParseWithDefaultsAndBounds) {
  std::vector<ConfigError> errors;
  Result<Config> d = parse_config("", "t.yaml", &errors);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->sampling.enabled);
  EXPECT_EQ(d->sampling.mean_bytes, 524288u);
  EXPECT_EQ(d->escalation.growth_bytes, 1u << 20);  // decision auto-mode-detection
  EXPECT_EQ(d->analysis.primed_min_span_seconds, 60u);
  EXPECT_EQ(d->governor.max_hits_per_second, 50000u);
  EXPECT_FALSE(d->kill_switch);
  Result<Config> c = parse_config(R"(targets:
  - name: a
    match: {comm: "^a$"}
    sampling_mean_bytes: 0
  - name: b
    match: {comm: "^b$"}
sampling: {enabled: true, mean_bytes: 65536}
escalation: {check_interval_seconds: 2, growth_bytes: 8192, growth_window_seconds: 30,
             full_window_seconds: 40, cooldown_seconds: 0, confirm_checks: 2}
governor: {max_hits_per_second: 0, backoff_initial_seconds: 5, backoff_max_seconds: 50}
analysis: {primed_min_span_seconds: 1m30s}
kill_switch: true
)",
                                  "t.yaml", &errors);
  ASSERT_TRUE(c.ok()) << (errors.empty() ? "" : format_error(errors[0]));
  EXPECT_EQ(c->targets[0].sampling_mean_bytes, std::optional<uint64_t>(0));
  EXPECT_FALSE(c->targets[1].sampling_mean_bytes.has_value());
  EXPECT_EQ(c->sampling.mean_bytes, 65536u);
  EXPECT_EQ(c->escalation.full_window_seconds, 40u);
  EXPECT_EQ(c->escalation.cooldown_seconds, 0u);
  EXPECT_EQ(c->escalation.confirm_checks, 2u);
  EXPECT_EQ(c->governor.backoff_max_seconds, 50u);
  EXPECT_TRUE(c->kill_switch);
  EXPECT_EQ(c->analysis.primed_min_span_seconds, 90u);
  Result<Config> off = parse_config("analysis: {primed_min_span_seconds: 0}\n", "t.yaml", &errors);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->analysis.primed_min_span_seconds, 0u);
  for (const char* bad : {"analysis: {primed_min_span_seconds: -1}\n",
                          "analysis: {primed_min_span_seconds: 1500ms}\n", "sampling: {mean_bytes: 0}\n", "sampling: {mean_bytes: 1073741825}\n",
                          "escalation: {growth_bytes: 100}\n", "kill_switch: yes\n",
                          "governor: {max_hits: 5}\n",
                          "targets:\n  - name: a\n    match: {comm: a}\n    sampling_mean_bytes: -1\n"}) {
    errors.clear();
    EXPECT_FALSE(parse_config(bad, "t.yaml", &errors).ok()) << bad;
    EXPECT_FALSE(errors.empty()) << bad;
  }
}

}  // namespace
}  // namespace lw
