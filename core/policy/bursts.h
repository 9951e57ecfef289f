/* SPDX-License-Identifier: Apache-2.0 */
// Bursts (decision busy-processes): what the governor does with a process
// whose heap probes cost more than its budget, instead of detaching them.
// The allocating probes are on for `burst_s` at a random offset in every
// `period_s`; between two bursts only the free side is attached (drain),
// so a block a burst recorded is retired when it is freed, whenever that
// is. Each allocation is then recorded with probability burst_s/period_s,
// whenever it is made (the offset is uniform over the period and a burst
// may run into the next period), so a record weighs period_s/burst_s: an
// unbiased estimate, like byte sampling's.
//
// BurstState is the schedule and the per-phase rates, pure and
// unit-tested; the daemon's overhead controller
// (service/overhead_controller.cc) carries its actions out.
// Thread-safety: not thread-safe; plain data.
#pragma once

#include <cstdint>

namespace lw {

// How long a drain runs before its rate is judged (a drain over the
// budget ends the bursts then, not at the next burst).
inline constexpr double kDrainCheckSeconds = 2;

struct BurstParams {
  double burst_s = 2;
  double period_s = 60;
  // The share of the time the allocating probes are on: each allocation's
  // chance of being recorded.
  double fraction() const { return period_s > 0 ? burst_s / period_s : 1; }
};

enum class BurstAction {
  kNone,
  kBurstStart,            // attach the allocating probes
  kBurstEnd,              // park them: drain
  kLeaveCalm,             // a whole burst ran under the budget: back to exact tracing
  kLeaveDrainOverBudget,  // the free side alone is over the budget: suspend
};

class BurstState {
 public:
  // Enters bursts at now_s, in a drain; the first burst at a uniform offset
  // (u01 in [0, 1)) of the first period.
  void enter(double now_s, uint64_t hits, const BurstParams& p, double u01);
  void leave() {
    active_ = false;
    in_burst_ = false;
  }
  bool active() const { return active_; }
  bool in_burst() const { return active_ && in_burst_; }

  // Called often (every daemon loop, ~0.1 s): the phase switch due now, if
  // any, with the hits the kernel counted (lw_target.hits). `u01` draws
  // the next burst's offset. A burst's and a drain's rate are measured from
  // the hits at its two ends; a burst whose rate is within the budget
  // (kLeaveCalm) ends the bursts, and so does a drain whose rate is not
  // (kLeaveDrainOverBudget), judged once it has run kDrainCheckSeconds
  // (0 = no budget: only the schedule).
  BurstAction tick(double now_s, uint64_t hits, uint64_t max_hits_per_second, const BurstParams& p,
                   double u01);

  double since_s() const { return since_s_; }
  uint64_t bursts() const { return bursts_; }
  double burst_rate() const { return burst_rate_; }  // hits/s of the last whole burst
  double drain_rate() const { return drain_rate_; }  // hits/s of the last whole drain

 private:
  void schedule_next(const BurstParams& p, double u01);

  bool active_ = false;
  bool in_burst_ = false;
  double since_s_ = 0;
  double period_start_ = 0;  // of the period whose burst is next
  double next_start_ = 0;
  double burst_end_ = 0;
  double phase_start_ = 0;
  uint64_t phase_hits_ = 0;
  uint64_t bursts_ = 0;
  double burst_rate_ = 0;
  double drain_rate_ = 0;
};

}  // namespace lw
