/* SPDX-License-Identifier: Apache-2.0 */
// Byte-weighted Poisson sampling, daemon side. The sampling decision itself
// is bpf/lw_sampling.h (shared with the BPF side); this is the estimator.
//
// An allocation of s bytes in a target sampled at mean T is recorded with
// probability p(s) = 1 - exp(-s/T); recorded, it stands for s / p(s) bytes
// and 1 / p(s) allocations (Horvitz-Thompson: unbiased for any mix of
// sizes). Pure functions; thread-safe.
#pragma once

#include <cstdint>

namespace lw {

// p(s): the probability an allocation of `size` bytes is recorded at mean
// `mean_bytes` (0: sampling off, 1).
double sample_probability(uint64_t size, uint64_t mean_bytes);

// The estimated bytes one recorded allocation stands for, s / p(s), rounded.
uint64_t sample_weight_bytes(uint64_t size, uint64_t mean_bytes);

// The estimated allocations one recorded allocation stands for, 1 / p(s),
// rounded to a whole number up or down with the probability that keeps the
// rounding unbiased; the choice is a function of `identity` (the record's
// alloc_ns), so a record counts the same when it is added and retired.
uint64_t sample_weight_count(uint64_t size, uint64_t mean_bytes, uint64_t identity);

// The sampling decision of bpf/lw_sampling.h, for tests and simulation:
// `left_q32` is the per-CPU counter, `rand32` the random source.
template <typename Rand>
bool sample_decision(uint64_t* left_q32, uint64_t size, uint64_t mean_bytes, Rand&& rand32);

}  // namespace lw

#include "leakwatch_abi.h"
#include "lw_sampling.h"

namespace lw {

template <typename Rand>
bool sample_decision(uint64_t* left_q32, uint64_t size, uint64_t mean_bytes, Rand&& rand32) {
  if (mean_bytes == 0) return true;
  if (*left_q32 == 0) *left_q32 = lw_exp_draw_q32(rand32());
  const uint64_t units = lw_sample_units_q32(size, mean_bytes);
  if (units >= *left_q32) {
    *left_q32 = lw_exp_draw_q32(rand32());
    return true;
  }
  *left_q32 -= units;
  return false;
}

}  // namespace lw
