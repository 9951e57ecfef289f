// SPDX-License-Identifier: Apache-2.0
// Which stored stacks the stack map's collection deletes (core/accounting/stack_gc.h;
// decision stack-map-gc).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/accounting/stack_gc.h"

namespace lw {
namespace {

constexpr uint64_t kSecond = 1000000000ull;
constexpr uint64_t kGrace = 10 * kSecond;

std::vector<uint64_t> sorted(std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(StackGc, NewHashWaitsOutTheGraceFromWhenItWasFirstSeen) {
  // Its events may still be queued: first seen counts as referenced.
  StackCollector gc(kGrace, 100);
  EXPECT_TRUE(gc.pass({10}, {}, 100 * kSecond).empty());
  EXPECT_TRUE(gc.pass({10}, {}, 109 * kSecond).empty());
  EXPECT_EQ(gc.pass({10}, {}, 110 * kSecond), std::vector<uint64_t>{10});
  EXPECT_EQ(gc.tracked(), 0u);  // forgotten once returned
}

TEST(StackGc, LiveSiteIsNeverCollected) {
  StackCollector gc(kGrace, 100);
  const StackUses uses = {{10, {5, true}}};
  for (uint64_t t = 0; t <= 100; t += 5) EXPECT_TRUE(gc.pass({10}, uses, t * kSecond).empty()) << t;
}

TEST(StackGc, GraceCountsFromTheLastReference) {
  StackCollector gc(kGrace, 100);
  (void)gc.pass({10}, {{10, {1, true}}}, 0);
  (void)gc.pass({10}, {{10, {1, true}}}, 20 * kSecond);  // still live at 20 s
  // Freed: unreferenced from 20 s on (the last pass that saw it held).
  EXPECT_TRUE(gc.pass({10}, {{10, {1, false}}}, 25 * kSecond).empty());
  EXPECT_TRUE(gc.pass({10}, {{10, {1, false}}}, 29 * kSecond).empty());
  EXPECT_EQ(gc.pass({10}, {{10, {1, false}}}, 30 * kSecond), std::vector<uint64_t>{10});
}

TEST(StackGc, AllocationsBetweenPassesCountAsAReference) {
  // Short-lived blocks: never live at a pass, but the stack is in use.
  StackCollector gc(kGrace, 100);
  uint64_t allocations = 1;
  (void)gc.pass({10}, {{10, {allocations, false}}}, 0);
  for (uint64_t t = 5; t <= 60; t += 5) {
    allocations += 3;
    EXPECT_TRUE(gc.pass({10}, {{10, {allocations, false}}}, t * kSecond).empty()) << t;
  }
  // Quiet from 60 s on.
  EXPECT_TRUE(gc.pass({10}, {{10, {allocations, false}}}, 65 * kSecond).empty());
  EXPECT_EQ(gc.pass({10}, {{10, {allocations, false}}}, 70 * kSecond), std::vector<uint64_t>{10});
}

TEST(StackGc, OnlyTheUnreferencedGo) {
  StackCollector gc(kGrace, 100);
  const StackUses uses = {{10, {1, true}}, {11, {1, false}}};  // 12: no process has it (exited)
  (void)gc.pass({10, 11, 12}, uses, 0);
  EXPECT_EQ(sorted(gc.pass({10, 11, 12}, uses, kGrace)), (std::vector<uint64_t>{11, 12}));
  EXPECT_EQ(gc.tracked(), 1u);
}

TEST(StackGc, ReservedHashesAreNeverReturned) {
  StackCollector gc(kGrace, 100);
  (void)gc.pass({0, 1, 2, 3}, {}, 0);
  EXPECT_EQ(gc.pass({0, 1, 2, 3}, {}, kGrace), std::vector<uint64_t>{3});
}

TEST(StackGc, BoundedPerPassLongestUnreferencedFirst) {
  StackCollector gc(kGrace, 2);
  (void)gc.pass({30}, {}, 0);
  (void)gc.pass({30, 20}, {}, 1 * kSecond);
  (void)gc.pass({30, 20, 10}, {}, 2 * kSecond);
  EXPECT_EQ(gc.pass({30, 20, 10}, {}, 20 * kSecond), (std::vector<uint64_t>{30, 20}));
  EXPECT_EQ(gc.pass({10}, {}, 21 * kSecond), std::vector<uint64_t>{10});
}

TEST(StackGc, ReinsertedHashStartsOver) {
  // Deleted, then stored again by BPF (a new allocation from that stack):
  // new again, so it waits a whole grace period.
  StackCollector gc(kGrace, 100);
  (void)gc.pass({10}, {}, 0);
  ASSERT_EQ(gc.pass({10}, {}, kGrace), std::vector<uint64_t>{10});
  EXPECT_TRUE(gc.pass({10}, {}, kGrace + kSecond).empty());
  EXPECT_TRUE(gc.pass({10}, {}, 2 * kGrace).empty());
  EXPECT_EQ(gc.pass({10}, {}, 2 * kGrace + kSecond), std::vector<uint64_t>{10});
}

TEST(StackGc, HashGoneFromTheMapIsForgotten) {
  StackCollector gc(kGrace, 100);
  (void)gc.pass({10, 11}, {}, 0);
  EXPECT_EQ(gc.tracked(), 2u);
  (void)gc.pass({11}, {}, kSecond);
  EXPECT_EQ(gc.tracked(), 1u);
  // Back later: new, not collectable at once on its old first sighting.
  EXPECT_TRUE(gc.pass({10, 11}, {}, 9 * kSecond).empty());
  EXPECT_EQ(gc.pass({10, 11}, {}, 10 * kSecond), std::vector<uint64_t>{11});
}

TEST(StackGc, BigMapWalkedInSlices) {
  // A slice a pass: a hash not met yet in this walk is not forgotten
  // before the walk ends, and only the slice's hashes are returned.
  StackCollector gc(kGrace, 100);
  (void)gc.pass({10, 11}, {}, 0, false);
  (void)gc.pass({12}, {}, kSecond, true);
  EXPECT_EQ(gc.tracked(), 3u);
  EXPECT_EQ(sorted(gc.pass({10, 11}, {}, 11 * kSecond, false)), (std::vector<uint64_t>{10, 11}));
  EXPECT_EQ(gc.tracked(), 1u);  // 12: not met in this walk yet, kept
  // The walk ends without meeting 12 (deleted from the map): forgotten.
  EXPECT_TRUE(gc.pass({}, {}, 12 * kSecond, true).empty());
  EXPECT_EQ(gc.tracked(), 0u);
}

TEST(StackGc, SliceKeepsItsReferenceTimesAcrossWalks) {
  StackCollector gc(kGrace, 100);
  (void)gc.pass({10}, {}, 0, false);
  (void)gc.pass({11}, {{11, {1, true}}}, kSecond, true);
  (void)gc.pass({10}, {}, 5 * kSecond, false);
  EXPECT_TRUE(gc.pass({11}, {{11, {1, false}}}, 6 * kSecond, true).empty());
  // 10 unreferenced since 0 s, 11 since 1 s (live then, its allocations
  // unchanged since): each slice's own times, whichever walk.
  EXPECT_EQ(gc.pass({10}, {}, 10 * kSecond, false), std::vector<uint64_t>{10});
  EXPECT_EQ(gc.pass({11}, {{11, {1, false}}}, 11 * kSecond, true), std::vector<uint64_t>{11});
}

}  // namespace
}  // namespace lw
