// SPDX-License-Identifier: Apache-2.0
#include "core/escalation.h"

namespace lw {

EscalationAction EscalationState::tick(double now_s, const EscalationConfig& c) {
  if (full_ && now_s >= full_until_s_) {
    full_ = false;
    cooldown_until_s_ = now_s + c.cooldown_seconds;
    growth_.clear();
    growth_resident_.clear();
    return EscalationAction::kStepDown;
  }
  if (now_s - last_check_s_ < c.check_interval_seconds) return EscalationAction::kNone;
  last_check_s_ = now_s;
  return EscalationAction::kReadMemory;
}

EscalationAction EscalationState::sample(double now_s, const StatmBytes& mem,
                                         const EscalationConfig& c) {
  growth_.add(now_s, mem.data, c.growth_window_seconds);
  growth_resident_.add(now_s, mem.anon_resident, c.growth_window_seconds);
  if (!full_ && now_s >= cooldown_until_s_ &&
      (growth_.growing(c.growth_bytes) || growth_resident_.growing(c.growth_bytes))) {
    full_ = true;
    full_until_s_ = now_s + c.full_window_seconds;
    return EscalationAction::kEscalate;
  }
  return EscalationAction::kNone;
}

}  // namespace lw
