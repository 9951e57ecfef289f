// SPDX-License-Identifier: Apache-2.0
#include "core/policy/bursts.h"

#include <algorithm>

namespace lw {

void BurstState::enter(double now_s, uint64_t hits, const BurstParams& p, double u01) {
  active_ = true;
  in_burst_ = false;
  windowed_ = parked_ = false;
  since_s_ = now_s;
  period_start_ = now_s;
  phase_start_ = now_s;
  phase_hits_ = hits;
  bursts_ = 0;
  burst_rate_ = drain_rate_ = 0;
  schedule_next(p, u01);
}

// The burst of the period starting at period_start_, at a uniform offset;
// the period after it is next.
void BurstState::schedule_next(const BurstParams& p, double u01) {
  next_start_ = period_start_ + std::clamp(u01, 0.0, 1.0) * p.period_s;
  period_start_ += p.period_s;
}

BurstAction BurstState::tick(double now_s, uint64_t hits, uint64_t max_hits_per_second, const BurstParams& p,
                             double u01) {
  if (!active_) return BurstAction::kNone;
  const double budget = static_cast<double>(max_hits_per_second);
  const double span = now_s - phase_start_;
  const double rate = span > 0 && hits >= phase_hits_ ? static_cast<double>(hits - phase_hits_) / span : 0;
  if (in_burst_) {
    // A burst due while one runs (offsets near the ends of two periods)
    // lengthens it: each instant keeps its chance burst_s/period_s.
    while (next_start_ <= burst_end_) {
      burst_end_ = std::max(burst_end_, next_start_ + p.burst_s);
      schedule_next(p, u01);
    }
    if (now_s < burst_end_) return BurstAction::kNone;
    return end_burst(now_s, hits, rate, budget);
  }
  if (!parked_) {
    // A window ends after window_s: the free side goes until the next burst.
    const bool window_over = windowed_ && span >= p.window_s;
    // A drain over the budget is known within kDrainCheckSeconds: its free
    // side would cost the process more than the budget meanwhile.
    const bool over = !windowed_ && (p.force_windows && p.walk ? span >= p.window_s
                                                               : budget > 0 && span >= kDrainCheckSeconds && rate > budget);
    if (window_over || over) {
      drain_rate_ = rate;
      if (over && !(p.walk && p.window_s > 0)) return BurstAction::kLeaveDrainOverBudget;
      windowed_ = parked_ = true;
      phase_start_ = now_s;
      phase_hits_ = hits;
      return BurstAction::kPark;
    }
  }
  if (now_s < next_start_) return BurstAction::kNone;
  return start_burst(now_s, hits, rate, p, u01);
}

BurstAction BurstState::end_burst(double now_s, uint64_t hits, double rate, double budget) {
  in_burst_ = false;
  burst_rate_ = rate;
  phase_start_ = now_s;
  phase_hits_ = hits;
  if (budget > 0 && rate <= budget) return BurstAction::kLeaveCalm;
  return BurstAction::kBurstEnd;
}

BurstAction BurstState::start_burst(double now_s, uint64_t hits, double rate, const BurstParams& p, double u01) {
  const bool was_parked = parked_;
  in_burst_ = true;
  parked_ = false;
  ++bursts_;
  if (!was_parked) drain_rate_ = rate;  // a parked phase has no free side to measure
  burst_due_ = next_start_;
  burst_end_ = next_start_ + p.burst_s;
  schedule_next(p, u01);
  phase_start_ = now_s;
  phase_hits_ = hits;
  return was_parked ? BurstAction::kWalkThenBurst : BurstAction::kBurstStart;
}

}  // namespace lw
