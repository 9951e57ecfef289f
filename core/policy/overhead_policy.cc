// SPDX-License-Identifier: Apache-2.0
#include "core/policy/overhead_policy.h"

#include "core/proc/procfs.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

namespace lw {

StatmBytes statm_bytes(const StatmPages& p, uint64_t page_size) {
  StatmBytes b;
  b.anon_resident = (p.resident > p.shared ? p.resident - p.shared : 0) * page_size;
  b.data = p.data * page_size;
  return b;
}

std::optional<StatmBytes> parse_statm(std::string_view statm, uint64_t page_size) {
  std::optional<StatmPages> p = parse_statm_pages(statm, 6);
  if (!p) return std::nullopt;
  return statm_bytes(*p, page_size);
}

void GrowthWatch::add(double t_s, uint64_t bytes, double window_s) {
  samples_.emplace_back(t_s, bytes);
  while (samples_.size() > 1 && t_s - samples_.front().first > window_s) samples_.pop_front();
  // Bounded whatever the interval: at most 4096 samples (a 1 s interval over
  // a 68 min window); older ones go first.
  while (samples_.size() > 4096) samples_.pop_front();
}

bool GrowthWatch::growing(uint64_t growth_bytes) const {
  if (samples_.size() < 2) return false;
  uint64_t low = UINT64_MAX, high = 0;
  for (const auto& [t, b] : samples_) {
    low = std::min(low, b);
    high = std::max(high, b);
  }
  const uint64_t now = samples_.back().second;
  return now == high && now - low >= growth_bytes;
}

double GrowthWatch::rise_span_s() const {
  if (samples_.size() < 2) return 0;
  uint64_t low = UINT64_MAX;
  double low_t = samples_.front().first;
  for (const auto& [t, b] : samples_) {
    if (b <= low) {  // <=: the latest sample at the low
      low = b;
      low_t = t;
    }
  }
  return samples_.back().first - low_t;
}

uint64_t GrowthWatch::rise_bytes() const {
  if (samples_.empty()) return 0;
  uint64_t low = UINT64_MAX;
  for (const auto& [t, b] : samples_) low = std::min(low, b);
  return samples_.back().second - low;
}

uint64_t thread_scaled_budget(uint64_t max_hits_per_second, uint64_t threads, uint64_t cpus) {
  const uint64_t n = std::max<uint64_t>(1, std::min(threads, cpus));
  if (max_hits_per_second == 0) return 0;  // no budget stays none
  return std::max<uint64_t>(1, max_hits_per_second / n);
}

bool release_serializes_uprobe_hits(const char* release) {
  unsigned major = 0, minor = 0;
  if (release == nullptr || std::sscanf(release, "%u.%u", &major, &minor) != 2) return true;
  return major < 6 || (major == 6 && minor < 14);
}

GovernorAction GovernorState::observe(double t_s, uint64_t hits, const GovernorParams& p) {
  GovernorAction action = GovernorAction::kNone;
  if (last_ && t_s > last_->first && hits >= last_->second)
    rate_ = static_cast<double>(hits - last_->second) / (t_s - last_->first);
  else if (last_ && hits < last_->second)
    rate_ = 0;  // the counter restarted (target re-registered)
  last_ = std::make_pair(t_s, hits);
  if (suspended_) {
    if (t_s >= resume_at_) {
      suspended_ = false;
      calm_since_ = t_s;
      action = GovernorAction::kResume;
    }
    return action;
  }
  if (p.max_hits_per_second > 0 && rate_ > static_cast<double>(p.max_hits_per_second)) {
    if (p.bursts) {
      last_.reset();  // the next reading after the bursts starts afresh
      rate_ = 0;
      return GovernorAction::kBursts;
    }
    suspend(t_s, p);
    return GovernorAction::kSuspend;
  }
  return action;
}

double GovernorState::suspend(double t_s, const GovernorParams& p) {
  if (suspended_) return backoff_s_;
  // Over again soon after a resume: double the wait; after a calm stretch
  // as long as the last wait, start from the initial backoff again.
  bool repeat = backoff_s_ > 0 && calm_since_ >= 0 && t_s - calm_since_ < backoff_s_;
  backoff_s_ = repeat ? std::min(backoff_s_ * 2, p.backoff_max_s) : p.backoff_initial_s;
  suspended_ = true;
  resume_at_ = t_s + backoff_s_;
  rate_ = 0;
  return backoff_s_;
}

}  // namespace lw
