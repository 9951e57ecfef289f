/* SPDX-License-Identifier: Apache-2.0 */
// A fixed-bucket latency histogram (Prometheus histogram semantics): counts
// observations per upper bound, plus their sum and count. Used for the
// daemon's attach latency (exec event -> probes attached,
// leakwatch_attach_latency_seconds). Plain value type, copied into each
// published snapshot. Thread-safety: none (one writer, copies for readers).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace lw {

class LatencyHistogram {
 public:
  // Upper bounds in seconds; an implicit +Inf bucket follows the last.
  static constexpr std::array<double, 15> kBounds = {0.0005, 0.001, 0.002, 0.005, 0.01,
                                                     0.02,   0.05,  0.1,   0.2,   0.5,
                                                     1,      2,     5,     10,    30};

  // Negative observations (clock skew) count as 0.
  void observe(double seconds);

  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  // Observations <= kBounds[i] (cumulative, as Prometheus exposes them).
  uint64_t cumulative(std::size_t i) const;
  // The bucket upper bound at or below which a fraction q (0..1] of the
  // observations lie: an upper estimate of the q-quantile, +Inf if it lies
  // past the last bound, 0 with no observations.
  double quantile_upper_bound(double q) const;

 private:
  std::array<uint64_t, kBounds.size() + 1> buckets_{};  // per bucket, last = +Inf
  uint64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace lw
