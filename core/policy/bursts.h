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
// A process whose free side alone is over the budget is, when its heap
// can be walked (glibc's; engine/heap_walk.h), traced in *windows*: the
// free side stays for `window_s` after each burst (the short-lived blocks
// a burst recorded are retired exactly), then goes too until the next
// burst ("parked"); before that burst's allocating probes come back, the
// free side is attached again and the heap walked, retiring the records
// whose blocks were freed meanwhile (decision busy-processes, "Windows
// and walks").
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
// Windows: how often a parked process's heap is walked between two bursts
// (the analysis samples every 10 s: a block freed while parked leaves its
// site by the next sample or the one after).
inline constexpr double kParkedWalkSeconds = 10;

struct BurstParams {
  double burst_s = 2;
  double period_s = 60;
  // A drain over the budget: windows of this length after each burst and
  // a heap walk before the next (walk, only where the heap can be walked),
  // or (false, or 0 s) the bursts end in a suspension.
  bool walk = false;
  double window_s = 2;
  // Windows from the first drain, whatever the budget (`top --window`;
  // needs walk).
  bool force_windows = false;
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
  kPark,                  // windows: the free side goes too, until the next burst
  kWalkThenBurst,         // windows: the free side back, the heap walked, then the allocating probes
};

class BurstState {
 public:
  // Enters bursts at now_s, in a drain; the first burst at a uniform offset
  // (u01 in [0, 1)) of the first period.
  void enter(double now_s, uint64_t hits, const BurstParams& p, double u01);
  void leave() {
    active_ = false;
    in_burst_ = false;
    windowed_ = false;
    parked_ = false;
  }
  bool active() const { return active_; }
  bool in_burst() const { return active_ && in_burst_; }
  // Traced in windows (the free side over the budget), and, now, with no
  // heap probe on at all.
  bool windowed() const { return active_ && windowed_; }
  bool parked() const { return active_ && parked_; }

  // Called often (every daemon loop, ~0.1 s): the phase switch due now, if
  // any, with the hits the kernel counted (lw_target.hits). `u01` draws
  // the next burst's offset. A burst's and a drain's rate are measured from
  // the hits at its two ends; a burst whose rate is within the budget
  // (kLeaveCalm) ends the bursts; a drain whose rate is not, judged once it
  // has run kDrainCheckSeconds, ends them (kLeaveDrainOverBudget) or, with
  // p.walk and a window, turns them into windows (kPark; 0 = no budget:
  // only the schedule).
  BurstAction tick(double now_s, uint64_t hits, uint64_t max_hits_per_second, const BurstParams& p,
                   double u01);

  double since_s() const { return since_s_; }
  uint64_t bursts() const { return bursts_; }
  double burst_rate() const { return burst_rate_; }  // hits/s of the last whole burst
  double drain_rate() const { return drain_rate_; }  // hits/s of the last whole drain
  // The seconds the burst running (or the last one) was scheduled to last:
  // from its due start to its end, merged bursts included. What the
  // allocating probes really recorded is measured against it
  // (Tracer::close_burst).
  double scheduled_seconds() const { return burst_end_ - burst_due_; }

 private:
  void schedule_next(const BurstParams& p, double u01);
  BurstAction end_burst(double now_s, uint64_t hits, double rate, double budget);
  BurstAction start_burst(double now_s, uint64_t hits, double rate, const BurstParams& p, double u01);

  bool active_ = false;
  bool in_burst_ = false;
  bool windowed_ = false;
  bool parked_ = false;
  double since_s_ = 0;
  double period_start_ = 0;  // of the period whose burst is next
  double next_start_ = 0;
  double burst_end_ = 0;
  double burst_due_ = 0;  // the running (or last) burst's due start
  double phase_start_ = 0;
  uint64_t phase_hits_ = 0;
  uint64_t bursts_ = 0;
  double burst_rate_ = 0;
  double drain_rate_ = 0;
};

}  // namespace lw
