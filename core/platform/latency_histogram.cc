// SPDX-License-Identifier: Apache-2.0
#include "core/platform/latency_histogram.h"

#include <cmath>
#include <limits>

namespace lw {

void LatencyHistogram::observe(double seconds) {
  if (!(seconds > 0)) seconds = 0;  // negative or NaN
  std::size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  ++buckets_[i];
  ++count_;
  sum_ += seconds;
}

uint64_t LatencyHistogram::cumulative(std::size_t i) const {
  uint64_t n = 0;
  for (std::size_t b = 0; b <= i && b < buckets_.size(); ++b) n += buckets_[b];
  return n;
}

double LatencyHistogram::quantile_upper_bound(double q) const {
  if (count_ == 0) return 0;
  const double want = std::ceil(q * static_cast<double>(count_));
  uint64_t seen = 0;
  for (std::size_t i = 0; i < kBounds.size(); ++i) {
    seen += buckets_[i];
    if (static_cast<double>(seen) >= want) return kBounds[i];
  }
  return std::numeric_limits<double>::infinity();
}

}  // namespace lw
