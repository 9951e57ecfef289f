// SPDX-License-Identifier: Apache-2.0
// Issue 35, item 5: a site cut at a pending unwind table is folded into the
// whole stack it starts (core/accounting/cut_sites.h, HeapTracker::fold_sites()).
#include "core/accounting/cut_sites.h"

#include <gtest/gtest.h>

#include <map>

#include "core/accounting/event.h"
#include "core/accounting/heap_tracker.h"

namespace lw {
namespace {

constexpr uint32_t kDev = 8 << 20;
constexpr uint64_t kLibc = 100, kProgram = 200;

WalkedFrame frame(uint64_t ino, uint64_t addr, uint8_t how) { return WalkedFrame{ino, kDev, addr, how}; }

// malloc's entry, then its caller leak_early in the program: as a walk sees
// them with libc's and the program's tables pending (the caller from the
// entry's stack slot, then the frame-pointer fallback fails).
WalkedStack cut() {
  return WalkedStack{LW_END_TABLE_PENDING, {frame(kLibc, 0x9a0, LW_UNWOUND_LEAF), frame(kProgram, 0x1150, LW_UNWOUND_CFI)}};
}
// The same call once the tables are in: main, libc's start, _start.
WalkedStack whole(uint64_t main_offset = 0x1060) {
  return WalkedStack{LW_END_COMPLETE,
                     {frame(kLibc, 0x9a0, LW_UNWOUND_LEAF), frame(kProgram, 0x1150, LW_UNWOUND_CFI),
                      frame(kProgram, main_offset, LW_UNWOUND_CFI), frame(kLibc, 0x271ca, LW_UNWOUND_CFI),
                      frame(kProgram, 0x1095, LW_UNWOUND_CFI)}};
}

Event alloc_ev(uint64_t addr, uint64_t size, uint64_t ns, uint64_t stack) {
  return Event{EventType::kAlloc, 0, 1, 1, LW_KIND_HEAP, ns, addr, size, ns, stack};
}
Event free_ev(uint64_t addr, uint64_t size, uint64_t ns) {
  return Event{EventType::kFree, 0, 1, 1, LW_KIND_HEAP, ns + 1, addr, size, ns, 0};
}

TEST(CutSites, PrefixIsTheExactFramesOfAStackCutAtAPendingTable) {
  EXPECT_EQ(cut_prefix(cut()).size(), 2u);
  EXPECT_TRUE(cut_prefix(whole()).empty()) << "not cut";
  WalkedStack no_cfi = cut();
  no_cfi.end = LW_END_NO_CFI;
  EXPECT_TRUE(cut_prefix(no_cfi).empty()) << "no table will lengthen it";
  // Frames the frame-pointer fallback guessed are not part of the prefix.
  WalkedStack guessed = cut();
  guessed.frames.push_back(frame(kProgram, 0x7777, LW_UNWOUND_FP));
  EXPECT_EQ(cut_prefix(guessed).size(), 2u);
  EXPECT_TRUE(starts_with(whole(), cut_prefix(guessed)));
  EXPECT_FALSE(starts_with(cut(), cut_prefix(cut()))) << "a stack does not lengthen itself";
  WalkedStack elsewhere = whole();
  elsewhere.frames[1].addr = 0x1170;
  EXPECT_FALSE(starts_with(elsewhere, cut_prefix(cut())));
}

// Sites in the order a process records them: the cut stack first, the
// whole one once the tables are in, an unrelated one, and a mmap site
// with the cut stack's frames (another kind: never folded).
TEST(CutSites, FirstWholeStackOfTheKindTakesTheCutSiteOver) {
  std::map<uint64_t, WalkedStack> stored = {{11, cut()}, {12, whole()}, {13, whole()}, {14, cut()}};
  stored[13].frames[1].addr = 0x1200;  // another caller of malloc
  auto peek = [&](uint64_t hash) { return stored.at(hash); };
  std::vector<SiteStats> sites = {SiteStats{11, LW_KIND_HEAP}, SiteStats{14, LW_KIND_MMAP}};
  CutSites state;
  EXPECT_TRUE(find_cut_site_folds(state, sites, peek).empty());
  EXPECT_EQ(state.waiting.size(), 2u);
  sites.push_back(SiteStats{13, LW_KIND_HEAP});
  sites.push_back(SiteStats{12, LW_KIND_HEAP});
  const std::vector<SiteFold> folds = find_cut_site_folds(state, sites, peek);
  ASSERT_EQ(folds.size(), 1u);
  EXPECT_EQ(folds[0].from, 0u);
  EXPECT_EQ(folds[0].to, 3u);
  EXPECT_EQ(state.waiting.size(), 1u) << "the mmap one still waits";
  // Each site is looked at once.
  sites.push_back(SiteStats{12, LW_KIND_HEAP});
  EXPECT_TRUE(find_cut_site_folds(state, sites, peek).empty());
  // An exec cleared the tracker: it starts over.
  sites.resize(1);
  EXPECT_TRUE(find_cut_site_folds(state, sites, peek).empty());
  EXPECT_EQ(state.checked, 1u);
  EXPECT_EQ(state.waiting.size(), 1u);
}

// A Python process records its first tensors while libtorch's table loads:
// every Python function's tensors start with the same native frames, and
// only their Python frames (read whatever the tables) tell them apart. The
// cut site of remember_batch waits for a whole stack with its Python
// frames, not the first one of the kind (a Conv2d's).
TEST(CutSites, ACutStackWithPythonFramesGoesOnlyIntoOneWithTheSame) {
  const uint64_t remember = python_frames_identity({{0x7f00, 40}, {0x7f80, 12}});
  const uint64_t conv = python_frames_identity({{0x7e00, 40}, {0x7f80, 12}});
  ASSERT_NE(remember, 0u);
  ASSERT_NE(remember, conv);
  EXPECT_NE(python_frames_identity({{0x7f00, 42}, {0x7f80, 12}}), remember) << "another instruction";
  EXPECT_EQ(python_frames_identity({}), 0u);
  WalkedStack cut_py = cut(), conv_whole = whole(), remember_whole = whole();
  cut_py.python = remember_whole.python = remember;
  conv_whole.python = conv;
  std::map<uint64_t, WalkedStack> stored = {{11, cut_py}, {12, conv_whole}, {13, remember_whole}};
  auto peek = [&](uint64_t hash) { return stored.at(hash); };
  std::vector<SiteStats> sites = {SiteStats{11, LW_KIND_TENSOR_CPU}, SiteStats{12, LW_KIND_TENSOR_CPU}};
  CutSites state;
  EXPECT_TRUE(find_cut_site_folds(state, sites, peek).empty()) << "the native frames match, the Python ones do not";
  EXPECT_EQ(state.waiting.size(), 1u);
  sites.push_back(SiteStats{13, LW_KIND_TENSOR_CPU});
  const std::vector<SiteFold> folds = find_cut_site_folds(state, sites, peek);
  ASSERT_EQ(folds.size(), 1u);
  EXPECT_EQ(folds[0].from, 0u);
  EXPECT_EQ(folds[0].to, 2u);
  EXPECT_TRUE(state.waiting.empty());
}

// The fold itself: the cut site's records and figures move, a free of one
// of them and a late event naming the cut stack land in the whole site.
TEST(CutSites, FoldMovesRecordsAndFiguresAndLaterEventsFollow) {
  HeapTracker t;
  t.apply(alloc_ev(0x1000, 64, 1, 11));  // while the tables were built
  t.apply(alloc_ev(0x2000, 64, 2, 11));
  t.apply(alloc_ev(0x3000, 32, 3, 11));
  t.apply(free_ev(0x3000, 32, 3));
  t.apply(alloc_ev(0x4000, 64, 4, 12));  // once they are in
  ASSERT_EQ(t.sites().size(), 2u);
  t.fold_sites({{0, 1}});
  EXPECT_EQ(t.counters().sites_folded, 1u);
  const SiteStats& folded = t.sites()[0];
  const SiteStats& into = t.sites()[1];
  EXPECT_EQ(folded.live_bytes, 0u);
  EXPECT_EQ(folded.allocations, 0u);
  EXPECT_EQ(into.live_bytes, 192u);
  EXPECT_EQ(into.live_allocations, 3u);
  EXPECT_EQ(into.allocated_bytes, 224u);
  EXPECT_EQ(into.freed_bytes, 32u);
  EXPECT_EQ(into.allocations, 4u);
  EXPECT_EQ(into.frees, 1u);
  t.apply(free_ev(0x1000, 64, 1));
  EXPECT_EQ(t.sites()[1].live_bytes, 128u);
  t.apply(alloc_ev(0x5000, 64, 5, 11));  // queued before the fold
  EXPECT_EQ(t.sites().size(), 2u);
  EXPECT_EQ(t.sites()[1].live_bytes, 192u);
  EXPECT_EQ(t.sites()[0].live_bytes, 0u);
  EXPECT_EQ(t.live_bytes_total(), 192u);
  // A resync from the kernel's map (which still names the cut stack) keeps
  // the figures where they are.
  t.resync({{LW_KIND_HEAP, 0x2000, 64, 2, 11}, {LW_KIND_HEAP, 0x4000, 64, 4, 12}, {LW_KIND_HEAP, 0x5000, 64, 5, 11}});
  EXPECT_EQ(t.sites()[1].live_bytes, 192u);
  EXPECT_EQ(t.sites()[0].live_bytes, 0u);
  EXPECT_EQ(t.sites()[1].allocated_bytes - t.sites()[1].freed_bytes, t.sites()[1].live_bytes);
  // Folding into a folded site, across kinds, or out of range: ignored.
  t.apply(Event{EventType::kAlloc, 0, 1, 1, LW_KIND_MMAP, 6, 0x9000, 4096, 6, 13});
  t.fold_sites({{1, 0}, {2, 1}, {1, 7}});
  EXPECT_EQ(t.counters().sites_folded, 1u);
  EXPECT_EQ(t.sites()[1].live_bytes, 192u);
}

}  // namespace
}  // namespace lw
