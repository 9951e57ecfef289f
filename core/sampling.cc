// SPDX-License-Identifier: Apache-2.0
#include "core/sampling.h"

#include <cmath>

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

uint64_t sample_weight_count(uint64_t size, uint64_t mean_bytes, uint64_t identity) {
  const double p = sample_probability(size, mean_bytes);
  if (p >= 1.0) return 1;
  if (p <= 0.0) return 0;
  const double w = 1.0 / p;
  const double whole = std::floor(w);
  // splitmix64 of the identity: a uniform draw in [0, 1) fixed per record.
  uint64_t h = identity + 0x9e3779b97f4a7c15ULL;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  h ^= h >> 31;
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  return static_cast<uint64_t>(whole) + (u < w - whole ? 1 : 0);
}

}  // namespace lw
