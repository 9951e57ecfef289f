// SPDX-License-Identifier: Apache-2.0
#include "core/policy/discovery_budget.h"

namespace lw {

void DiscoveryBudget::set_rate(uint32_t per_second) {
  if (per_second == per_second_) return;
  per_second_ = per_second;
  buckets_.clear();  // refilled at the new rate
  if (per_second == 0) {  // no budget: what waited is looked at by the reconciliation
    queue_.clear();
    queued_by_uid_.clear();
  }
}

TokenBucket& DiscoveryBudget::bucket(uid_t uid, uint64_t now_ns) {
  auto it = buckets_.find(uid);
  if (it != buckets_.end()) return it->second;
  // One bucket per uid that ever forked; uids are the host's, but a user
  // namespace can show many: past the bound every bucket starts again full
  // (a burst more, never an unbounded map).
  if (buckets_.size() >= kMaxUids) buckets_.clear();
  const uint64_t interval_ns = 1000000000ull / per_second_;
  return buckets_.emplace(uid, TokenBucket(interval_ns, 2ull * per_second_, now_ns)).first->second;
}

bool DiscoveryBudget::admit(const DeferredDiscovery& d, uint64_t now_ns) {
  if (per_second_ == 0 || d.uid == 0) return true;
  // Behind others of its uid already waiting: wait too (order kept).
  auto waiting = queued_by_uid_.find(d.uid);
  if (waiting == queued_by_uid_.end() && bucket(d.uid, now_ns).take(now_ns)) return true;
  if (queue_.size() >= kMaxDeferred || (waiting != queued_by_uid_.end() && waiting->second >= kMaxDeferredPerUid)) {
    ++dropped_;
    return false;
  }
  ++deferred_;
  queue_.push_back(d);
  ++queued_by_uid_[d.uid];
  return false;
}

std::vector<DeferredDiscovery> DiscoveryBudget::due(uint64_t now_ns) {
  std::vector<DeferredDiscovery> out;
  std::map<uid_t, bool> dry;  // uids found without a token this call
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (dry.count(it->uid) || !bucket(it->uid, now_ns).take(now_ns)) {
      dry[it->uid] = true;
      ++it;
      continue;
    }
    out.push_back(*it);
    if (--queued_by_uid_[it->uid] == 0) queued_by_uid_.erase(it->uid);
    it = queue_.erase(it);
  }
  return out;
}

}  // namespace lw
