// SPDX-License-Identifier: Apache-2.0
// The budget of process discoveries a user's exec and fork events may cost
// the daemon (issue 32; decision lifecycle-budget): a fork loop of any local
// user would otherwise keep the daemon reading /proc and attaching at most of
// a core. Each uid other than root has a token bucket of
// `per_second` discoveries (burst twice that); an event past it is deferred,
// in a bounded queue, and looked at again when that uid has a token, by which
// time a fork loop's child is gone and costs one stat. Deferred events past
// the queue's bound are dropped and counted: the reconciliation (a /proc scan
// every reconcile_interval_seconds) still finds any that live on. Root's
// events are not budgeted: root can stop the daemon anyway, and the host's
// own services start in bursts.
// Pure (time passed in); not thread-safe: owned by the discovery.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "core/platform/token_bucket.h"

namespace lw {

struct DeferredDiscovery {
  pid_t pid = 0;
  pid_t parent = 0;
  uint64_t event_ns = 0;
  uid_t uid = 0;
};

class DiscoveryBudget {
 public:
  static constexpr size_t kMaxDeferred = 4096;
  // One uid's share of the queue: a fork loop cannot have another user's
  // deferred events dropped.
  static constexpr size_t kMaxDeferredPerUid = 256;
  static constexpr size_t kMaxUids = 4096;

  // per_second 0: no budget.
  explicit DiscoveryBudget(uint32_t per_second = 20) { set_rate(per_second); }
  void set_rate(uint32_t per_second);

  // Whether `uid`'s event may be looked at now (a token taken). False: it
  // was deferred (or dropped, the queue being full; dropped() counts).
  bool admit(const DeferredDiscovery& d, uint64_t now_ns);
  // Deferred events whose uid has a token now, oldest first, each with its
  // token taken; the rest stay queued.
  std::vector<DeferredDiscovery> due(uint64_t now_ns);

  uint64_t deferred() const { return deferred_; }
  uint64_t dropped() const { return dropped_; }
  size_t queued() const { return queue_.size(); }

 private:
  TokenBucket& bucket(uid_t uid, uint64_t now_ns);

  uint32_t per_second_ = 0;
  std::map<uid_t, TokenBucket> buckets_;
  std::deque<DeferredDiscovery> queue_;
  std::map<uid_t, size_t> queued_by_uid_;
  uint64_t deferred_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace lw
