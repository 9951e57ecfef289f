// SPDX-License-Identifier: Apache-2.0
#include "engine/stack_gc_pass.h"

#include <algorithm>
#include <unordered_set>
#include <vector>

#include "core/platform/clock.h"
#include "core/platform/log.h"

namespace lw {

StackGcPass::StackGcPass(BpfSession& session, TracerStats& stats, uint32_t grace_ms)
    : session_(session), stats_(stats) {
  if (grace_ms == 0) return;
  const uint64_t grace_ns = grace_ms * 1000000ull;
  stack_gc_ = std::make_unique<StackCollector>(grace_ns, kMaxStacksCollectedPerPass);
  // A pass every quarter of the grace: a stack goes at most 1.25 graces
  // after its last reference.
  stack_gc_period_ns_ = std::clamp<uint64_t>(grace_ns / 4, 100000000ull, 10000000000ull);
}

StackUses StackGcPass::stack_uses(const ProcessTable& procs) {
  // Exited processes too: their last snapshot still resolves their live
  // sites.
  StackUses uses;
  for (const auto& [pid, proc] : procs) {
    for (const SiteStats& s : proc->heap.sites()) {
      if (s.stack_hash == 0) continue;
      StackUse& u = uses[s.stack_hash];
      if (u.owner == 0) u.owner = pid;
      u.allocations += s.allocations;
      u.live = u.live || s.live_allocations > 0;
    }
  }
  return uses;
}

void StackGcPass::restore_live(const StackUses& uses) {
  // An event queued before the last pass's delete named a stack it
  // deleted, and the block is still live: store that stack again.
  for (const auto& [hash, stack] : collected_) {
    const auto u = uses.find(hash);
    if (u != uses.end() && u->second.live && session_.restore_stack(hash, stack)) ++stats_.stacks_restored;
  }
  collected_.clear();
}

void StackGcPass::run(ProcessTable& procs) {
  if (!stack_gc_) return;
  const uint64_t now = monotonic_ns();
  if (now < stack_gc_due_ns_) return;
  stack_gc_due_ns_ = now + stack_gc_period_ns_;
  const StackUses uses = stack_uses(procs);
  restore_live(uses);
  bool walk_done = false;
  Result<std::vector<uint64_t>> stored =
      session_.stack_hashes(stack_walk_after_ ? &*stack_walk_after_ : nullptr, kStackKeysPerPass, walk_done);
  if (!stored) return;  // tried again at the next pass
  const std::vector<uint64_t> doomed = stack_gc_->pass(*stored, uses, now, walk_done);
  collected_.reserve(doomed.size());
  for (uint64_t hash : doomed) {
    lw_stack copy;
    if (session_.read_raw_stack(hash, copy)) collected_.emplace(hash, copy);
  }
  const size_t deleted = session_.delete_stacks(doomed);
  for (uint64_t hash : doomed)
    if (auto u = uses.find(hash); u != uses.end())
      if (auto p = procs.find(u->second.owner); p != procs.end()) ++p->second->stacks_freed;
  stats_.stacks_collected += deleted;
  stack_walk_count_ += stored->size() - std::min(deleted, stored->size());
  // The next slice starts after the last hash still stored (after a deleted
  // one the kernel would start over from the first).
  stack_walk_after_.reset();
  if (walk_done) {
    stats_.stack_map_entries = stack_walk_count_;
    stack_walk_count_ = 0;
  } else {
    const std::unordered_set<uint64_t> gone(doomed.begin(), doomed.end());
    for (auto it = stored->rbegin(); it != stored->rend() && !stack_walk_after_; ++it)
      if (!gone.count(*it)) stack_walk_after_ = *it;
    if (!stack_walk_after_) stack_walk_count_ = 0;  // starts over
  }
  if (deleted > 0)
    LW_LOG_DEBUG("stack map: %zu collected of %zu stacks walked, in %.2f ms", deleted, stored->size(),
                 static_cast<double>(monotonic_ns() - now) / 1e6);
}

StoredStack StackGcPass::read_stack(uint64_t stack_hash) {
  StoredStack stored = session_.read_stack(stack_hash);
  // A stored stack has a frame at least (bpf/lw_stack.bpf.h stores none
  // without): empty, it is not in the map.
  if (!stored.frames.empty()) return stored;
  auto it = collected_.find(stack_hash);
  if (it == collected_.end()) return stored;
  if (session_.restore_stack(stack_hash, it->second)) ++stats_.stacks_restored;
  stored = BpfSession::decode_stack(it->second);
  collected_.erase(it);
  return stored;
}

StoredStack StackGcPass::peek_stack(uint64_t stack_hash) const {
  StoredStack stored = session_.read_stack(stack_hash);
  if (!stored.frames.empty()) return stored;
  auto it = collected_.find(stack_hash);
  return it == collected_.end() ? stored : BpfSession::decode_stack(it->second);
}

}  // namespace lw
