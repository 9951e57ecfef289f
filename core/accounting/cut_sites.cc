// SPDX-License-Identifier: Apache-2.0
#include "core/accounting/cut_sites.h"

#include <algorithm>

namespace lw {

uint64_t python_frames_identity(const std::vector<std::pair<uint64_t, int32_t>>& frames) {
  if (frames.empty()) return 0;
  uint64_t h = 0xcbf29ce484222325ull ^ frames.size();
  for (const auto& [code, lasti] : frames) {
    for (uint64_t v : {code, static_cast<uint64_t>(static_cast<uint32_t>(lasti))}) {
      h ^= v;
      h *= 0x100000001b3ull;
      h ^= h >> 29;
    }
  }
  return h ? h : 1;
}

std::vector<WalkedFrame> cut_prefix(const WalkedStack& stack) {
  if (stack.end != LW_END_TABLE_PENDING) return {};
  std::vector<WalkedFrame> prefix;
  for (const WalkedFrame& f : stack.frames) {
    if (f.how == LW_UNWOUND_FP) break;
    prefix.push_back(f);
  }
  return prefix;
}

bool starts_with(const WalkedStack& whole, const std::vector<WalkedFrame>& prefix) {
  if (prefix.empty() || whole.frames.size() <= prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    const WalkedFrame& a = whole.frames[i];
    const WalkedFrame& b = prefix[i];
    if (a.ino != b.ino || a.dev != b.dev || a.addr != b.addr) return false;
  }
  return true;
}

std::vector<SiteFold> find_cut_site_folds(CutSites& state, const std::vector<SiteStats>& sites,
                                          const std::function<WalkedStack(uint64_t)>& peek) {
  if (state.checked > sites.size()) state = CutSites{};  // the tracker was cleared (exec)
  std::vector<SiteFold> folds;
  const size_t end = std::min(sites.size(), state.checked + CutSites::kMaxCheckedPerPoll);
  for (size_t i = state.checked; i < end; ++i) {
    const SiteStats& s = sites[i];
    if (s.stack_hash == 0 || s.stack_hash == LW_STACK_HEAP_REGROWN) continue;
    const WalkedStack stored = peek(s.stack_hash);
    if (stored.end == LW_END_TABLE_PENDING) {
      std::vector<WalkedFrame> prefix = cut_prefix(stored);
      if (prefix.empty()) continue;
      if (state.waiting.size() >= CutSites::kMaxWaiting) continue;
      state.waiting.push_back({static_cast<uint32_t>(i), s.kind, std::move(prefix), stored.python});
      continue;
    }
    // A whole stack (or one cut for another reason, which no table will
    // lengthen): it takes over every waiting cut stack it starts with.
    auto taken = std::remove_if(state.waiting.begin(), state.waiting.end(), [&](const CutSites::Cut& c) {
      if (c.kind != s.kind || (c.python && c.python != stored.python) || !starts_with(stored, c.prefix))
        return false;
      folds.push_back({c.site, static_cast<uint32_t>(i)});
      return true;
    });
    state.waiting.erase(taken, state.waiting.end());
  }
  state.checked = end;
  return folds;
}

}  // namespace lw
