// SPDX-License-Identifier: Apache-2.0
#include "core/policy/escalation.h"

#include <algorithm>

namespace lw {

EscalationAction EscalationState::tick(double now_s, const EscalationConfig& c) {
  if (full_ && now_s >= full_until_s_) {
    full_ = false;
    cooldown_until_s_ = now_s + c.cooldown_seconds;
    rebase();
    return EscalationAction::kStepDown;
  }
  if (now_s - last_check_s_ < c.check_interval_seconds) return EscalationAction::kNone;
  last_check_s_ = now_s;
  return EscalationAction::kReadMemory;
}

EscalationAction EscalationState::sample(double now_s, const StatmBytes& mem,
                                         const EscalationConfig& c, uint64_t explained_bytes) {
  auto unexplained = [&](uint64_t v) { return v > explained_bytes ? v - explained_bytes : 0; };
  const auto [data_now, resident_now] =
      confirmed(unexplained(mem.data), unexplained(mem.anon_resident), c.confirm_checks);
  growth_.add(now_s, data_now, c.growth_window_seconds);
  growth_resident_.add(now_s, resident_now, c.growth_window_seconds);
  explained_.add(now_s, explained_bytes, c.growth_window_seconds);
  // Growth the tiers below mostly explain does not call for the heap tier:
  // what they leave unexplained must be at least what they named.
  const uint64_t named = explained_.rise_bytes();
  const bool data = growth_.growing(c.growth_bytes) && growth_.rise_bytes() >= named;
  const bool resident = growth_resident_.growing(c.growth_bytes) && growth_resident_.rise_bytes() >= named;
  if (!full_ && now_s >= cooldown_until_s_ && (data || resident)) {
    const GrowthWatch& w =
        data && (!resident || growth_.rise_span_s() >= growth_resident_.rise_span_s())
            ? growth_
            : growth_resident_;
    growth_span_s_ = w.rise_span_s();
    growth_rate_ = growth_span_s_ > 0 ? static_cast<double>(w.rise_bytes()) / growth_span_s_ : 0;
    full_ = true;
    full_until_s_ = now_s + c.full_window_seconds;
    return EscalationAction::kEscalate;
  }
  return EscalationAction::kNone;
}

std::pair<uint64_t, uint64_t> EscalationState::confirmed(uint64_t data, uint64_t resident,
                                                         uint32_t confirm) {
  constexpr uint64_t kSlots = EscalationConfig::kMaxConfirmChecks;
  recent_.data[recent_count_ % kSlots] = data;
  recent_.resident[recent_count_ % kSlots] = resident;
  ++recent_count_;
  const uint64_t n = std::min<uint64_t>({recent_count_, std::max<uint32_t>(confirm, 1), kSlots});
  for (uint64_t i = 2; i <= n; ++i) {
    const uint64_t slot = (recent_count_ - i) % kSlots;
    data = std::min(data, recent_.data[slot]);
    resident = std::min(resident, recent_.resident[slot]);
  }
  return {data, resident};
}

void EscalationState::rebase() {
  recent_count_ = 0;
  growth_.clear();
  growth_resident_.clear();
  explained_.clear();
}

}  // namespace lw
