// SPDX-License-Identifier: Apache-2.0
// The escalation policy of an `auto` process
// (decision light-mode-escalation), pure and unit-tested: light -> full while
// its memory keeps growing, full -> light after `full_window_seconds`, then no
// escalation for `cooldown_seconds`. Growth is watched on VmData and on
// anonymous resident memory (core/policy/overhead_policy.h: GrowthWatch), one
// /proc/PID/statm read per `check_interval_seconds`, each figure taken as the
// lowest of its last `confirm_checks` readings: a rise counts once it has
// held that long, so memory in flight (a busy loop's large buffers mapped and
// unmapped, a heap top grown and trimmed) is not growth (decision
// tensor-tier, "Tensors in flight"). The defaults (1 MiB within 300 s,
// checked every 10 s, confirmed over 3 checks) escalate a 1 MiB/min leak
// 70-90 s after it starts (decision auto-mode-detection).
//
// The state returns actions and does nothing itself: the caller
// (service/overhead_controller.cc) reads statm when asked (kReadMemory),
// hands the reading to sample(), and attaches or detaches the heap probes on
// kEscalate and kStepDown. Time is passed in (seconds, any monotonic origin).
// Thread-safety: not thread-safe; plain data owned by one caller.
#pragma once

#include <array>
#include <utility>

#include "core/config/config.h"
#include "core/policy/overhead_policy.h"

namespace lw {

enum class EscalationAction {
  kNone,
  kReadMemory,  // a check is due: read statm and pass it to sample()
  kEscalate,    // light -> full, for full_window_seconds
  kStepDown,    // full -> light: the window is over; the cooldown starts
};

class EscalationState {
 public:
  // Once per overhead tick. kStepDown when the full window is over (the
  // process is light from now on and the growth history is forgotten);
  // otherwise kReadMemory when check_interval_seconds passed since the
  // last check (the check counts as done whether or not the read works),
  // else kNone.
  EscalationAction tick(double now_s, const EscalationConfig& c);
  // A statm reading taken after kReadMemory. kEscalate when the process is
  // light, out of its cooldown, and either figure grew by growth_bytes
  // within growth_window_seconds and is at its high now. On kEscalate,
  // growth_span_s() says how long that rise had lasted.
  // `explained_bytes`: live bytes the tiers below the heap name already
  // (the tensor tier, CUDA pinned memory; decision tensor-tier), taken from
  // both figures: their growth does not escalate. Nor does growth they
  // mostly explain: while the explained bytes rose too, the rest must have
  // risen at least as much (the allocator's overhead around kept tensors,
  // a third of their bytes measured on the serving loop, is not a leak the
  // heap tier would name).
  EscalationAction sample(double now_s, const StatmBytes& mem, const EscalationConfig& c,
                          uint64_t explained_bytes = 0);
  // The explained bytes changed basis (the tier below was suspended,
  // resumed or cleared): the growth history is forgotten, as at a
  // step-down, so a tier's records leaving the sum do not read as growth.
  void rebase();

  // Escalated: the heap probes are wanted until full_until_s().
  bool full() const { return full_; }
  double full_until_s() const { return full_until_s_; }
  double cooldown_until_s() const { return cooldown_until_s_; }
  // At the last escalation: how long the rise that escalated had lasted
  // and how fast it was, in bytes/s (GrowthWatch::rise_span_s and
  // rise_bytes of the figure that grew; of the longer rise when both did).
  // The heap analysis counts the span towards its minimum span for growth
  // at a comparable rate (ProcessAnalyzer::prime, docs/analysis.md
  // "Escalated processes").
  double growth_span_s() const { return growth_span_s_; }
  double growth_rate_bytes_per_s() const { return growth_rate_; }

 private:
  bool full_ = false;
  double full_until_s_ = 0;      // when an escalation steps down
  double cooldown_until_s_ = 0;  // no escalation before this
  double last_check_s_ = -1e18;  // last statm check
  double growth_span_s_ = 0;     // the rise that escalated last: seconds
  double growth_rate_ = 0;       // and bytes/s
  GrowthWatch growth_;           // VmData
  GrowthWatch growth_resident_;  // anonymous resident
  GrowthWatch explained_;        // explained_bytes
  // The last readings of each unexplained figure, newest at
  // (recent_count_ - 1) % kMaxConfirmChecks: what confirm_checks takes the
  // lowest of.
  struct Recent {
    std::array<uint64_t, EscalationConfig::kMaxConfirmChecks> data{};
    std::array<uint64_t, EscalationConfig::kMaxConfirmChecks> resident{};
  } recent_;
  uint64_t recent_count_ = 0;
  // Adds a reading; the lowest of each figure's last `confirm` readings.
  std::pair<uint64_t, uint64_t> confirmed(uint64_t data, uint64_t resident, uint32_t confirm);
};

}  // namespace lw
