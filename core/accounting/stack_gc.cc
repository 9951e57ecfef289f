// SPDX-License-Identifier: Apache-2.0
#include "core/accounting/stack_gc.h"

#include <algorithm>
#include <utility>

namespace lw {

namespace {
// 0 (unknown), 1 (heap regrown, not walked) and 2 (map full) name no stored
// stack (bpf/leakwatch_abi.h, bpf/lw_stack.bpf.h).
constexpr uint64_t kLastReservedHash = 2;
}  // namespace

StackCollector::StackCollector(uint64_t grace_ns, size_t max_per_pass)
    : grace_ns_(grace_ns), max_per_pass_(max_per_pass) {}

std::vector<uint64_t> StackCollector::pass(const std::vector<uint64_t>& stored, const StackUses& uses,
                                           uint64_t now_ns, bool walk_done) {
  std::vector<std::pair<uint64_t, uint64_t>> idle;  // (last_ref_ns, hash)
  for (uint64_t h : stored) {
    if (h <= kLastReservedHash) continue;
    const auto u = uses.find(h);
    const uint64_t allocations = u == uses.end() ? 0 : u->second.allocations;
    const bool live = u != uses.end() && u->second.live;
    auto [it, fresh] = seen_.try_emplace(h);
    Seen& s = it->second;
    // New, held, or used since the last pass: referenced now.
    if (fresh || live || allocations != s.allocations) s.last_ref_ns = now_ns;
    s.allocations = allocations;
    s.walk = walk_;
    if (now_ns > s.last_ref_ns && now_ns - s.last_ref_ns >= grace_ns_) idle.emplace_back(s.last_ref_ns, h);
  }
  std::sort(idle.begin(), idle.end());
  if (idle.size() > max_per_pass_) idle.resize(max_per_pass_);
  std::vector<uint64_t> out;
  out.reserve(idle.size());
  for (const auto& [ns, h] : idle) {
    seen_.erase(h);
    out.push_back(h);
  }
  if (walk_done) {
    std::erase_if(seen_, [&](const auto& e) { return e.second.walk != walk_; });
    ++walk_;
  }
  return out;
}

}  // namespace lw
