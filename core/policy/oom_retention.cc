// SPDX-License-Identifier: Apache-2.0
#include "core/policy/oom_retention.h"

#include <algorithm>

namespace lw {

namespace {

constexpr uint64_t kMinuteNs = 60'000'000'000ull;
// The group of a report of unknown uid (read back from an older file).
constexpr int64_t kUnknownUid = -1;

int64_t uid_key(const OomReportMeta& m) { return m.uid ? static_cast<int64_t>(*m.uid) : kUnknownUid; }

}  // namespace

const char* oom_drop_cause_name(OomDropCause c) {
  switch (c) {
    case OomDropCause::kRateLimited: return "rate_limited";
    case OomDropCause::kUidCap: return "uid_cap";
    case OomDropCause::kRetention: return "retention";
  }
  return "unknown";
}

void OomRetention::set_limits(const OomRetentionLimits& limits) {
  if (limits.sigkill_reports_per_uid_per_minute != limits_.sigkill_reports_per_uid_per_minute) buckets_.clear();
  limits_ = limits;
}

bool OomRetention::admit_sigkill(std::optional<uint32_t> uid, uint64_t now_ns) {
  const uint32_t per_minute = limits_.sigkill_reports_per_uid_per_minute;
  if (per_minute == 0 || !uid || *uid == 0) return true;
  auto it = buckets_.find(*uid);
  if (it == buckets_.end()) {
    if (buckets_.size() >= kMaxUids) buckets_.clear();
    // Burst: a minute's worth.
    it = buckets_.emplace(*uid, TokenBucket(kMinuteNs / per_minute, per_minute, now_ns)).first;
  }
  return it->second.take(now_ns);
}

std::vector<OomRetention::Eviction> OomRetention::evict(const std::vector<OomReportMeta>& kept) const {
  std::vector<Eviction> out;
  std::vector<bool> gone(kept.size(), false);
  size_t count = kept.size();
  uint64_t bytes = 0;
  for (const OomReportMeta& m : kept) bytes += m.bytes;
  auto drop = [&](size_t i, OomDropCause cause) {
    gone[i] = true;
    --count;
    bytes -= kept[i].bytes;
    out.push_back({i, cause});
  };
  // A non-root user's `sigkill` reports past their cap: the oldest go
  // (kept is newest first, so from the back).
  std::map<int64_t, uint32_t> per_uid;
  for (size_t i = kept.size(); i-- > 0;) {
    const OomReportMeta& m = kept[i];
    if (m.tier == OomReportTier::kSigkill && m.uid && *m.uid != 0) ++per_uid[uid_key(m)];
  }
  for (size_t i = kept.size(); i-- > 0;) {
    const OomReportMeta& m = kept[i];
    if (m.tier != OomReportTier::kSigkill || !m.uid || *m.uid == 0) continue;
    uint32_t& n = per_uid[uid_key(m)];
    if (n > limits_.max_sigkill_reports_per_uid) {
      --n;
      drop(i, OomDropCause::kUidCap);
    }
  }
  // Over the count or the bytes: `sigkill` reports first.
  while (count > 0 && (count > limits_.max_reports || bytes > limits_.max_total_bytes)) {
    OomReportTier lowest = OomReportTier::kForMemory;
    for (size_t i = 0; i < kept.size(); ++i)
      if (!gone[i]) lowest = std::min(lowest, kept[i].tier);
    // Within `sigkill`: the uid with the most reports (on a tie, the one
    // whose oldest is older) loses its oldest. Otherwise the oldest goes.
    std::map<int64_t, std::pair<size_t, size_t>> groups;  // uid -> (count, oldest index)
    for (size_t i = 0; i < kept.size(); ++i) {
      if (gone[i] || kept[i].tier != lowest) continue;
      auto& g = groups[lowest == OomReportTier::kSigkill ? uid_key(kept[i]) : 0];
      ++g.first;
      g.second = std::max(g.second, i);
    }
    auto worst = std::max_element(groups.begin(), groups.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; });
    drop(worst->second.second, OomDropCause::kRetention);
  }
  return out;
}

}  // namespace lw
