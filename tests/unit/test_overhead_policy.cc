#include <gtest/gtest.h>

#include "daemon/core/overhead_policy.h"

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
