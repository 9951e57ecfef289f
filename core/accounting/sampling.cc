// SPDX-License-Identifier: Apache-2.0
#include "core/accounting/sampling.h"

#include <cmath>

#include "lw_sampling.h"

namespace lw {

double sample_probability(uint64_t size, uint64_t mean_bytes) {
  if (mean_bytes == 0 || size >= LW_SAMPLE_ALWAYS_BYTES) return 1.0;
  if (size == 0) return 0.0;
  return -std::expm1(-static_cast<double>(size) / static_cast<double>(mean_bytes));
}

uint64_t sample_weight_bytes(uint64_t size, uint64_t mean_bytes) {
  const double p = sample_probability(size, mean_bytes);
  if (p >= 1.0 || size == 0) return size;
  return static_cast<uint64_t>(std::llround(static_cast<double>(size) / p));
}

namespace {

// splitmix64's finalizer: a well-mixed 64-bit function of its input.
uint64_t mix64(uint64_t h) {
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

double unit_draw(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

}  // namespace

bool thin_keeps(uint64_t addr, uint64_t alloc_ns, uint64_t size, uint64_t mean_then, uint64_t mean_now) {
  if (mean_now == mean_then) return true;
  const double p_now = sample_probability(size, mean_now);
  const double p_then = sample_probability(size, mean_then);
  if (p_now >= p_then) return true;
  // Another stream than sample_weight_count()'s (which mixes alloc_ns alone).
  const double u = unit_draw(mix64(mix64(alloc_ns ^ 0x6a09e667f3bcc909ULL) ^ addr));
  return u * p_then < p_now;
}

uint64_t auto_sample_mean(uint64_t heap_bytes, uint64_t target_records, uint64_t current) {
  if (heap_bytes == 0) return 0;
  const uint64_t per = target_records ? (heap_bytes + target_records - 1) / target_records : heap_bytes;
  uint64_t mean = per > current * 2 ? per : current * 2;
  if (mean < 1) mean = 1;
  if (mean > LW_SAMPLE_MAX_MEAN) mean = LW_SAMPLE_MAX_MEAN;
  return mean;
}

uint64_t sample_weight_count(uint64_t size, uint64_t mean_bytes, uint64_t identity) {
  const double p = sample_probability(size, mean_bytes);
  if (p >= 1.0) return 1;
  if (p <= 0.0) return 0;
  const double w = 1.0 / p;
  const double whole = std::floor(w);
  // splitmix64 of the identity: a uniform draw in [0, 1) fixed per record.
  const double u = unit_draw(mix64(identity + 0x9e3779b97f4a7c15ULL));
  return static_cast<uint64_t>(whole) + (u < w - whole ? 1 : 0);
}

}  // namespace lw
