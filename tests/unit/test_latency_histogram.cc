// SPDX-License-Identifier: Apache-2.0
#include "core/platform/latency_histogram.h"

#include <gtest/gtest.h>

#include <cmath>

namespace lw {
namespace {

TEST(LatencyHistogram, BucketsAreCumulativeAndInclusive) {
  LatencyHistogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.quantile_upper_bound(0.5), 0);
  h.observe(0.001);   // exactly on a bound: that bucket (le is inclusive)
  h.observe(0.0011);  // the next one
  h.observe(-1);      // clock skew: counted as 0
  h.observe(100);     // past the last bound: +Inf only
  EXPECT_EQ(h.count(), 4u);
  EXPECT_DOUBLE_EQ(h.sum(), 0.001 + 0.0011 + 100);
  EXPECT_EQ(h.cumulative(0), 1u);  // le 0.0005: the 0
  EXPECT_EQ(h.cumulative(1), 2u);  // le 0.001
  EXPECT_EQ(h.cumulative(2), 3u);  // le 0.002
  EXPECT_EQ(h.cumulative(LatencyHistogram::kBounds.size() - 1), 3u);
  EXPECT_EQ(h.cumulative(LatencyHistogram::kBounds.size()), 4u);  // +Inf
}

TEST(LatencyHistogram, QuantileUpperBounds) {
  LatencyHistogram h;
  for (int i = 0; i < 98; ++i) h.observe(0.003);  // le 0.005
  h.observe(0.3);                                  // le 0.5
  h.observe(50);                                   // +Inf
  EXPECT_DOUBLE_EQ(h.quantile_upper_bound(0.5), 0.005);
  EXPECT_DOUBLE_EQ(h.quantile_upper_bound(0.98), 0.005);
  EXPECT_DOUBLE_EQ(h.quantile_upper_bound(0.99), 0.5);
  EXPECT_TRUE(std::isinf(h.quantile_upper_bound(1.0)));
}

}  // namespace
}  // namespace lw
