// SPDX-License-Identifier: Apache-2.0
// The coverage of recorded allocations (docs/architecture.md, decision 44).
#include <gtest/gtest.h>

#include "view/process_view.h"

namespace lw {
namespace {

TEST(UnrecordedCoverage, NothingSeenIsFullCoverage) {
  EXPECT_EQ(unrecorded_coverage(0, {}), 1.0);
}

TEST(UnrecordedCoverage, NothingLostIsFullCoverage) {
  EXPECT_EQ(unrecorded_coverage(1000, {}), 1.0);
}

TEST(UnrecordedCoverage, MapFullLowersIt) {
  Unrecorded u;
  u.map_full = 3;
  EXPECT_DOUBLE_EQ(unrecorded_coverage(1, u), 0.25);
  EXPECT_EQ(unrecorded_coverage(0, u), 0.0);
  EXPECT_TRUE(u.any());
}

// A stack-map-full allocation is recorded (under an unknown stack): not lost.
TEST(UnrecordedCoverage, StackMapFullIsNotLost) {
  Unrecorded u;
  u.stack_map_full = 50;
  EXPECT_EQ(unrecorded_coverage(100, u), 1.0);
  EXPECT_TRUE(u.any());
}

}  // namespace
}  // namespace lw
