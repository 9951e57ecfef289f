// SPDX-License-Identifier: Apache-2.0
// Bursts (decision busy-processes): the schedule and its rates
// (core/policy/bursts.h), the weight of a record made in a burst
// (HeapTracker::set_time_fraction) and the governor's answer.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/accounting/event.h"
#include "core/accounting/heap_tracker.h"
#include "core/policy/bursts.h"
#include "core/policy/overhead_policy.h"

namespace lw {
namespace {

// Runs a schedule for `seconds` at `step`, the process making `rate` hits a
// second while a burst runs and `drain_rate` between; returns the seconds
// the allocating probes were on.
struct ScheduleRun {
  double on_s = 0;
  double free_side_s = 0;  // the free side attached (bursts, drains and windows; not parked)
  double left_at = -1;  // when a leave action came
  std::vector<BurstAction> actions;
};
ScheduleRun run_schedule(const BurstParams& p, double seconds, double step, double rate, double drain_rate,
                         uint64_t budget, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  BurstState b;
  b.enter(0, 0, p, u(rng));
  ScheduleRun r;
  double hits = 0;
  for (double t = step; t <= seconds && b.active(); t += step) {
    const bool was_in = b.in_burst();
    if (!b.parked()) {
      hits += (was_in ? rate : drain_rate) * step;
      r.free_side_s += step;
    }
    if (was_in) r.on_s += step;
    BurstAction a = b.tick(t, static_cast<uint64_t>(hits), budget, p, u(rng));
    if (a != BurstAction::kNone) r.actions.push_back(a);
    if (a == BurstAction::kLeaveCalm || a == BurstAction::kLeaveDrainOverBudget) {
      b.leave();
      r.left_at = t;
    }
  }
  return r;
}

TEST(Bursts, TheAllocatingProbesAreOnTheirShareOfTheTime) {
  const BurstParams p{2, 60};
  EXPECT_DOUBLE_EQ(p.fraction(), 2.0 / 60);
  // Over 100 periods, the time on is within a few percent of the share.
  double on = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) on += run_schedule(p, 6000, 0.1, 1e6, 100, 50000, seed).on_s;
  const double expected = 5 * 6000 * p.fraction();
  EXPECT_NEAR(on, expected, 0.03 * expected);
}

TEST(Bursts, EachInstantHasTheSameChanceOfFallingInABurst) {
  // Where in its period an instant lies must not matter: offsets are
  // uniform over the period and a burst may run into the next one.
  const BurstParams p{2, 10};
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> covered(10, 0);  // by tenth of the period
  const double step = 0.05;
  BurstState b;
  b.enter(0, 0, p, u(rng));
  for (double t = step; t < 200000; t += step) {
    if (b.in_burst()) covered[static_cast<size_t>(std::fmod(t, 10.0))] += step;
    (void)b.tick(t, 0, 0, p, u(rng));
  }
  for (double c : covered) EXPECT_NEAR(c / (200000 / 10.0), p.fraction(), 0.01);
}

TEST(Bursts, ACalmBurstEndsThemAndAFreeSideOverBudgetSuspends) {
  const BurstParams p{2, 20};
  // Under budget while a burst runs: back to exact tracing at its end.
  ScheduleRun calm = run_schedule(p, 200, 0.1, 1000, 10, 50000, 3);
  ASSERT_FALSE(calm.actions.empty());
  EXPECT_EQ(calm.actions.front(), BurstAction::kBurstStart);
  EXPECT_EQ(calm.actions.back(), BurstAction::kLeaveCalm);
  EXPECT_EQ(calm.actions.size(), 2u);
  // The frees alone over the budget: the bursts end at the next start.
  ScheduleRun heavy = run_schedule(p, 200, 0.1, 1e6, 80000, 50000, 3);
  ASSERT_FALSE(heavy.actions.empty());
  EXPECT_EQ(heavy.actions.back(), BurstAction::kLeaveDrainOverBudget);
  // Judged once the drain has run its check time, not at the next burst.
  EXPECT_NEAR(heavy.left_at, kDrainCheckSeconds, 0.15);
  // Busy, and the frees within budget: bursts go on.
  ScheduleRun busy = run_schedule(p, 200, 0.1, 1e6, 20000, 50000, 3);
  EXPECT_GE(busy.actions.size(), 16u);
  for (BurstAction a : busy.actions)
    EXPECT_TRUE(a == BurstAction::kBurstStart || a == BurstAction::kBurstEnd) << static_cast<int>(a);
}

// A free side over the budget, on a heap that can be walked: windows. The
// first drain is judged after its check time and parked; from then on each
// burst is followed by a window of window_s and parked until the next,
// whose start walks the heap first. The allocating probes keep their share
// of the time, and the free side is on for about burst + window a period.
TEST(Bursts, AFreeSideOverBudgetOnAWalkableHeapIsTracedInWindows) {
  BurstParams p{2, 20};
  p.walk = true;
  p.window_s = 3;
  ScheduleRun w = run_schedule(p, 2000, 0.1, 1e6, 80000, 50000, 7);
  ASSERT_GE(w.actions.size(), 4u);
  EXPECT_EQ(w.actions[0], BurstAction::kPark) << static_cast<int>(w.actions[0]);
  EXPECT_LT(w.left_at, 0) << "the windows never end by themselves while the free side is over budget";
  size_t walks = 0, parks = 1, plain_starts = 0;
  for (size_t i = 1; i < w.actions.size(); ++i) {
    const BurstAction a = w.actions[i];
    walks += a == BurstAction::kWalkThenBurst;
    parks += a == BurstAction::kPark;
    plain_starts += a == BurstAction::kBurstStart;
    EXPECT_TRUE(a == BurstAction::kWalkThenBurst || a == BurstAction::kBurstEnd || a == BurstAction::kPark ||
                a == BurstAction::kBurstStart)
        << static_cast<int>(a);
    // Every park follows a burst's end (its window), never a burst; a
    // walk only a park.
    if (a == BurstAction::kPark) {
      EXPECT_EQ(w.actions[i - 1], BurstAction::kBurstEnd) << i;
    }
    if (a == BurstAction::kWalkThenBurst) {
      EXPECT_EQ(w.actions[i - 1], BurstAction::kPark) << i;
    }
  }
  EXPECT_GE(walks, 90u);
  // A burst due within a window (offsets near the ends of two periods)
  // starts without a walk: the free side never went.
  EXPECT_LE(plain_starts, walks / 4);
  // Every parked phase ends in a walk (the last may still be parked).
  EXPECT_TRUE(parks == walks || parks == walks + 1) << parks << " parks, " << walks << " walks";
  EXPECT_NEAR(w.on_s, 2000 * p.fraction(), 0.1 * 2000 * p.fraction());
  EXPECT_NEAR(w.free_side_s, 2000 * (p.burst_s + p.window_s) / p.period_s, 0.1 * 2000 * 5 / 20);
  // Without walk, the same process is suspended (the old answer).
  p.walk = false;
  EXPECT_EQ(run_schedule(p, 200, 0.1, 1e6, 80000, 50000, 7).actions.back(), BurstAction::kLeaveDrainOverBudget);
  // And a window of 0 s means no windows.
  p.walk = true;
  p.window_s = 0;
  EXPECT_EQ(run_schedule(p, 200, 0.1, 1e6, 80000, 50000, 7).actions.back(), BurstAction::kLeaveDrainOverBudget);
}

TEST(Bursts, AGovernorWithBurstsAnswersOverBudgetWithoutSuspending) {
  GovernorParams gp;
  gp.max_hits_per_second = 1000;
  gp.bursts = true;
  GovernorState g;
  EXPECT_EQ(g.observe(0, 0, gp), GovernorAction::kNone);
  EXPECT_EQ(g.observe(1, 5000, gp), GovernorAction::kBursts);
  EXPECT_FALSE(g.suspended());
  // The next reading starts afresh (no rate from before the bursts).
  EXPECT_EQ(g.observe(100, 1000000, gp), GovernorAction::kNone);
  gp.bursts = false;
  EXPECT_EQ(g.observe(101, 1005000, gp), GovernorAction::kSuspend);
  EXPECT_TRUE(g.suspended());
}

Event heap_alloc(uint64_t addr, uint64_t size, uint64_t alloc_ns, uint64_t stack) {
  return Event{EventType::kAlloc, 0, 1, 1, LW_KIND_HEAP, alloc_ns, addr, size, alloc_ns, stack};
}

TEST(Bursts, ARecordMadeInABurstWeighsTheInverseOfTheShare) {
  HeapTracker h;
  h.apply(heap_alloc(0x1000, 100, 10, 7));  // exact, before the bursts
  EXPECT_FALSE(h.time_sampled());
  h.set_time_fraction(0.25, 100);
  EXPECT_TRUE(h.time_sampled());
  h.apply(heap_alloc(0x2000, 100, 200, 7));  // in a burst: stands for 4
  ASSERT_EQ(h.sites().size(), 1u);
  EXPECT_EQ(h.sites()[0].live_bytes, 100u + 400u);
  EXPECT_EQ(h.sites()[0].live_allocations, 1u + 4u);
  // Leaving the bursts keeps the weights of what they recorded.
  h.set_time_fraction(1, 300);
  h.apply(heap_alloc(0x3000, 100, 400, 7));
  EXPECT_EQ(h.sites()[0].live_bytes, 600u);
  h.apply(Event{EventType::kFree, 0, 1, 1, LW_KIND_HEAP, 500, 0x2000, 100, 200, 0});
  EXPECT_EQ(h.sites()[0].live_bytes, 200u);
  EXPECT_EQ(h.sites()[0].freed_bytes, 400u);
  EXPECT_EQ(h.sites()[0].allocated_bytes - h.sites()[0].freed_bytes, h.sites()[0].live_bytes);
}

TEST(Bursts, ABurstsRecordsWeighTheShareItReallyRecorded) {
  HeapTracker h;
  h.set_time_fraction(0.125, 100);  // 2 s in 16 s, nominally
  h.apply(heap_alloc(0x1000, 500, 1500, 7));  // in the burst, counted at the nominal 8 so far
  h.apply(heap_alloc(0x1100, 500, 1600, 7));
  ASSERT_EQ(h.sites().size(), 1u);
  EXPECT_EQ(h.sites()[0].live_bytes, 8000u);
  // The probes recorded 1 s of the 2 scheduled: that burst's share 1/16.
  h.set_burst_span(1000, 2000, 0.0625);
  EXPECT_DOUBLE_EQ(h.time_fraction(), 0.125);  // the nominal share stays the current one
  EXPECT_EQ(h.sites()[0].live_bytes, 16000u);  // counted again: 16 each
  EXPECT_EQ(h.sites()[0].live_allocations, 32u);
  EXPECT_EQ(h.live_bytes(LW_KIND_HEAP), 16000u);
  // Its free takes off what it adds now.
  h.apply(Event{EventType::kFree, 0, 1, 1, LW_KIND_HEAP, 2500, 0x1100, 500, 1600, 0});
  EXPECT_EQ(h.sites()[0].live_bytes, 8000u);
  EXPECT_EQ(h.sites()[0].allocated_bytes - h.sites()[0].freed_bytes, h.sites()[0].live_bytes);
  h.apply(heap_alloc(0x2000, 1000, 2100, 8));  // after it: the nominal 8
  h.apply(heap_alloc(0x3000, 1000, 500, 9));   // before it: the nominal 8
  ASSERT_EQ(h.sites().size(), 3u);
  EXPECT_EQ(h.sites()[1].live_bytes, 8000u);
  EXPECT_EQ(h.sites()[2].live_bytes, 8000u);
  // Leaving the bursts later keeps the span (its records were made in it).
  h.set_time_fraction(1, 2500);
  EXPECT_DOUBLE_EQ(h.fraction_at(1500), 0.0625);
  EXPECT_DOUBLE_EQ(h.fraction_at(2000), 0.125);
  EXPECT_DOUBLE_EQ(h.fraction_at(2600), 1);
  // A span that is empty, or starts before the share in force, is refused.
  h.set_burst_span(3000, 3000, 0.5);
  h.set_burst_span(2400, 2700, 0.5);
  EXPECT_DOUBLE_EQ(h.fraction_at(2650), 1);
}

TEST(Bursts, OnlyTheLastBurstSpansAreKeptTheOlderFallBackToTheNominalShare) {
  HeapTracker h;
  h.set_time_fraction(0.125, 100);
  h.apply(heap_alloc(0x1000, 100, 1010, 7));  // in the oldest span
  const size_t n = HeapTracker::kMaxBurstSpans + 3;
  for (uint64_t i = 0; i < n; ++i) h.set_burst_span(1000 + 100 * i, 1050 + 100 * i, 0.0625);
  // Its span went: it counts at the share before it again, and its free
  // takes off what it adds now.
  ASSERT_EQ(h.sites().size(), 1u);
  EXPECT_EQ(h.sites()[0].live_bytes, 800u);
  h.apply(Event{EventType::kFree, 0, 1, 1, LW_KIND_HEAP, 999999, 0x1000, 100, 1010, 0});
  EXPECT_EQ(h.sites()[0].live_bytes, 0u);
  EXPECT_EQ(h.live_bytes(LW_KIND_HEAP), 0u);
  EXPECT_EQ(h.sites()[0].allocated_bytes, h.sites()[0].freed_bytes);
  EXPECT_DOUBLE_EQ(h.fraction_at(1025), 0.125);                   // the oldest went
  EXPECT_DOUBLE_EQ(h.fraction_at(1025 + 100 * 2), 0.125);         // and the next two
  EXPECT_DOUBLE_EQ(h.fraction_at(1025 + 100 * 3), 0.0625);        // the oldest kept
  EXPECT_DOUBLE_EQ(h.fraction_at(1025 + 100 * (n - 1)), 0.0625);  // the last
  EXPECT_DOUBLE_EQ(h.fraction_at(1075 + 100 * (n - 1)), 0.125);   // after it
}

TEST(Bursts, ABurstsScheduledSecondsAreFromItsDueStartToItsEnd) {
  const BurstParams p{2, 60};
  BurstState b;
  b.enter(0, 0, p, 0.5);  // due at 30 s
  EXPECT_EQ(b.tick(29.9, 0, 0, p, 0.5), BurstAction::kNone);
  EXPECT_EQ(b.tick(30.07, 0, 0, p, 0.5), BurstAction::kBurstStart);  // a tick late
  EXPECT_DOUBLE_EQ(b.scheduled_seconds(), 2);
  EXPECT_EQ(b.tick(32.05, 0, 0, p, 0.99), BurstAction::kBurstEnd);
  EXPECT_DOUBLE_EQ(b.scheduled_seconds(), 2);
  // A burst due near the end of its period merges with the next period's
  // when that one is due before it ends: scheduled from the first's start.
  const BurstParams q{2, 4};
  BurstState m;
  m.enter(0, 0, q, 0.99);  // due at 3.96, the next period's at 4 + 0.0 * 4
  EXPECT_EQ(m.tick(3.97, 0, 0, q, 0.0), BurstAction::kBurstStart);
  EXPECT_EQ(m.tick(4.5, 0, 0, q, 0.5), BurstAction::kNone);  // the 4 s one merged: ends at 6
  EXPECT_NEAR(m.scheduled_seconds(), 6 - 3.96, 1e-9);
}

TEST(Bursts, AFractionThatIsNotOneWeighsAllocationsToTheirMeanInWholeCounts) {
  HeapTracker h;
  h.set_time_fraction(0.3, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) h.apply(heap_alloc(0x10000 + 16 * i, 10, 1000 + 7919 * i, 9));
  ASSERT_EQ(h.sites().size(), 1u);
  EXPECT_NEAR(static_cast<double>(h.sites()[0].live_allocations), n / 0.3, 0.01 * n / 0.3);
  EXPECT_NEAR(static_cast<double>(h.sites()[0].live_bytes), 10 * n / 0.3, 0.001 * 10 * n / 0.3);
}

}  // namespace
}  // namespace lw
