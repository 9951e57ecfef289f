/* SPDX-License-Identifier: Apache-2.0 */
// `top --bursts SECONDS/PERIOD` (decision busy-processes): the heap traced
// in bursts for the whole run, as the daemon's governor does with a process
// over its budget, but forced and without a budget (bursts never end by
// themselves); with `--window SECONDS`, in windows and walks from the first
// drain (decision busy-processes, "Windows and walks"). Not thread-safe:
// `top`'s thread only.
#pragma once

#include <sys/types.h>

#include <optional>
#include <random>
#include <string>

#include "core/platform/result.h"
#include "core/policy/bursts.h"

namespace lw {

class Tracer;

// Parses "SECONDS/PERIOD" (whole seconds, 1 <= SECONDS, PERIOD >= 2 *
// SECONDS, PERIOD <= 3600); nullopt with `error` set otherwise.
std::optional<BurstParams> parse_bursts(const std::string& text, std::string* error);
// Parses --window's SECONDS into `params` (--bursts', which it needs; 1 <=
// SECONDS, SECONDS + the burst <= the period); false with `error` set
// otherwise.
bool parse_window(const std::string& text, std::optional<BurstParams>& params, std::string* error);

class TopBursts {
 public:
  // Puts `pid` in bursts (it starts in a drain) with `params`; windows
  // (params.force_windows) need a heap that can be walked (glibc's).
  Status start(Tracer& tracer, pid_t pid, const BurstParams& params, double now_s);
  // The phase switch due at now_s, if any; every poll of top's loop.
  Status tick(Tracer& tracer, pid_t pid, double now_s);
  bool active() const { return state_.active(); }

 private:
  BurstParams params_;
  BurstState state_;
  std::mt19937_64 rng_{std::random_device{}()};
  double uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
};

}  // namespace lw
