// SPDX-License-Identifier: Apache-2.0
// The per-uid budget of exec and fork events (core/policy/discovery_budget.h,
// issue 32): a user's fork loop waits on its own tokens, never another
// user's, and never grows the queue past its bounds.
#include <gtest/gtest.h>

#include "core/policy/discovery_budget.h"

namespace lw {
namespace {

constexpr uint64_t kSec = 1000000000ull;

DeferredDiscovery event(pid_t pid, uid_t uid) { return DeferredDiscovery{pid, 0, 0, uid}; }

TEST(DiscoveryBudget, AUsersBurstIsAdmittedThenDeferredInOrder) {
  DiscoveryBudget b(10);  // burst 20
  int admitted = 0;
  for (pid_t pid = 1; pid <= 30; ++pid) admitted += b.admit(event(pid, 1000), 0);
  EXPECT_EQ(admitted, 20);
  EXPECT_EQ(b.deferred(), 10u);
  EXPECT_EQ(b.queued(), 10u);
  // Half a second later: 5 tokens, the 5 oldest deferred, in order.
  std::vector<DeferredDiscovery> due = b.due(kSec / 2);
  ASSERT_EQ(due.size(), 5u);
  for (size_t i = 0; i < due.size(); ++i) EXPECT_EQ(due[i].pid, static_cast<pid_t>(21 + i));
  // A new event of that user waits behind the rest, even with a token.
  EXPECT_FALSE(b.admit(event(31, 1000), 2 * kSec));
  due = b.due(2 * kSec);
  ASSERT_EQ(due.size(), 6u);
  EXPECT_EQ(due.back().pid, 31);
  EXPECT_EQ(b.queued(), 0u);
}

TEST(DiscoveryBudget, AnotherUserAndRootAreNotHeldUp) {
  DiscoveryBudget b(10);
  for (pid_t pid = 1; pid <= 1000; ++pid) (void)b.admit(event(pid, 1000), 0);
  EXPECT_TRUE(b.admit(event(2000, 1001), 0));
  for (pid_t pid = 3000; pid < 4000; ++pid) EXPECT_TRUE(b.admit(event(pid, 0), 0));
}

TEST(DiscoveryBudget, TheQueueIsBoundedPerUserAndInAll) {
  DiscoveryBudget b(1);  // burst 2
  for (pid_t pid = 1; pid <= 10000; ++pid) (void)b.admit(event(pid, 1000), 0);
  EXPECT_EQ(b.queued(), DiscoveryBudget::kMaxDeferredPerUid);
  EXPECT_EQ(b.dropped(), 10000u - 2 - DiscoveryBudget::kMaxDeferredPerUid);
  // Many users filling their shares reach the overall bound, no further.
  for (uid_t uid = 2000; uid < 2100; ++uid)
    for (pid_t pid = 0; pid < 300; ++pid) (void)b.admit(event(pid, uid), 0);
  EXPECT_EQ(b.queued(), DiscoveryBudget::kMaxDeferred);
}

TEST(DiscoveryBudget, NoBudgetAdmitsEverything) {
  DiscoveryBudget b(0);
  for (pid_t pid = 1; pid <= 1000; ++pid) EXPECT_TRUE(b.admit(event(pid, 1000), 0));
  EXPECT_EQ(b.deferred(), 0u);
}

}  // namespace
}  // namespace lw
