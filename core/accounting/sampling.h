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

// Thinning (automatic sampling, docs/config.md "Automatic sampling"): a
// record the kernel kept at mean `mean_then` (0: every allocation) is kept
// at the larger mean `mean_now` with probability p_now(s) / p_then(s), so
// that it is then kept with probability p_now(s) overall, as if sampled at
// mean_now from the start. The draw is a function of the record's identity
// (address and alloc_ns), independent of sample_weight_count()'s, so a
// record thinned twice is tested against the same draw: the kept sets are
// nested, and a record seen again (a resync, a late event) gets the same
// answer.
bool thin_keeps(uint64_t addr, uint64_t alloc_ns, uint64_t size, uint64_t mean_then, uint64_t mean_now);

// The mean automatic sampling switches a process to: its heap (the live
// bytes it counts now) over `target_records`, so that about that many
// records remain whatever the heap's size, and at least twice `current`
// (each step at least halves the records). 0 when heap_bytes is 0. Clamped
// to 1..LW_SAMPLE_MAX_MEAN.
uint64_t auto_sample_mean(uint64_t heap_bytes, uint64_t target_records, uint64_t current);

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
