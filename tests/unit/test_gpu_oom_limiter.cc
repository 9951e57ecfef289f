// SPDX-License-Identifier: Apache-2.0
#include "service/gpu_oom_limiter.h"

#include <gtest/gtest.h>

namespace lw {
namespace {

TEST(GpuOomLimiter, OneReportPerProcessAndDevicePerWindowTheRestCounted) {
  GpuOomLimiter l(60.0);
  const GpuOomLimiter::Key a{100, 7, 0};
  EXPECT_TRUE(l.admit(a, 1000.0));
  EXPECT_EQ(l.suppressed(a), 0u);
  EXPECT_FALSE(l.admit(a, 1001.0));
  EXPECT_FALSE(l.admit(a, 1059.9));
  EXPECT_EQ(l.suppressed(a), 2u);
  // Another device, another process, the same pid with another start time:
  // each its own key.
  EXPECT_TRUE(l.admit({100, 7, 1}, 1002.0));
  EXPECT_TRUE(l.admit({101, 7, 0}, 1002.0));
  EXPECT_TRUE(l.admit({100, 8, 0}, 1002.0));
  // The window passed: a new report, the count starts again.
  EXPECT_TRUE(l.admit(a, 1060.0));
  EXPECT_EQ(l.suppressed(a), 0u);
  EXPECT_FALSE(l.admit(a, 1061.0));
  EXPECT_EQ(l.suppressed(a), 1u);
}

TEST(GpuOomLimiter, ForgetAndBound) {
  GpuOomLimiter l(60.0, 2);
  EXPECT_TRUE(l.admit({1, 0, 0}, 0));
  EXPECT_TRUE(l.admit({2, 0, 0}, 0));
  EXPECT_TRUE(l.admit({3, 0, 0}, 0));  // drops the oldest key
  EXPECT_EQ(l.size(), 2u);
  EXPECT_TRUE(l.admit({1, 0, 0}, 1));  // forgotten by the bound: reported again
  l.forget(3);
  EXPECT_EQ(l.size(), 1u);
  EXPECT_EQ(l.suppressed({3, 0, 0}), 0u);
}

}  // namespace
}  // namespace lw
