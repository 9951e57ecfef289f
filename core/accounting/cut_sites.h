/* SPDX-License-Identifier: Apache-2.0 */
// Sites whose stacks were cut at a pending unwind table (issue 35, item 5).
//
// While an object's unwind table is still being built, a walk that needs it
// falls back to frame pointers; in code built without them the stack ends
// there, `table_pending` (decision cfi-unwinding). A process that allocates
// from its first moments thus records some allocations under a cut stack
// (its innermost frames only) and, once the table is in, the same call path
// under its whole stack: two sites for one, each with its own verdict and
// series, for the whole session. Here each new site's stored stack is
// looked at once: a cut one waits, and the first whole stack of the same
// kind that starts with its frames takes it over (HeapTracker::fold_sites()).
// Its frames found by the frame-pointer fallback are not compared (they may
// be a wrong guess); the frames before them, found from the probe's
// registers and from tables, are exact. So are its Python frames, read from
// the interpreter whatever the tables: a cut stack with Python frames goes
// only into a whole stack with the same ones (a PyTorch process records its
// first tensors while libtorch's table loads, and every Python function's
// tensors start with the same native frames). Where native callers differ
// beyond the cut and no Python frames tell them apart, the early bytes go to
// the first whole stack seen: the cut stack cannot say which caller it had.
// Pure: the engine reads the stacks (Tracer::fold_cut_sites).
// Thread-safety: not thread-safe; the tracer's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/accounting/heap_tracker.h"
#include "leakwatch_abi.h"

namespace lw {

// A stored stack as this needs it (the engine's WalkedStack, read from the
// kernel's stack map): why it ends (enum lw_stack_end) and its frames,
// leaf first, each with how it was found (enum lw_unwound).
struct WalkedFrame {
  uint64_t ino = 0;  // 0: not file-backed
  uint32_t dev = 0;
  uint64_t addr = 0;  // file offset, or the absolute address when ino is 0
  uint8_t how = 0;
};
struct WalkedStack {
  uint32_t end = LW_END_COMPLETE;
  std::vector<WalkedFrame> frames;
  // The identity of its Python frames (python_frames_identity()); 0: none.
  uint64_t python = 0;
};

// A digest of Python frames (code object, instruction offset), innermost
// first; 0 for none.
uint64_t python_frames_identity(const std::vector<std::pair<uint64_t, int32_t>>& frames);

// Per process: how far its sites were looked at, and the cut ones waiting.
struct CutSites {
  size_t checked = 0;  // sites() looked at so far
  struct Cut {
    uint32_t site = 0;                // index into HeapTracker::sites()
    uint32_t kind = 0;
    std::vector<WalkedFrame> prefix;  // the exact frames, leaf first
    uint64_t python = 0;              // WalkedStack::python: a whole stack must match it
  };
  std::vector<Cut> waiting;  // at most kMaxWaiting; past it a cut site stays apart, `truncated`
  static constexpr size_t kMaxWaiting = 4096;
  static constexpr size_t kMaxCheckedPerPoll = 4096;
};

// The frames of a cut stack that a whole stack must start with: those
// before the first one the frame-pointer fallback found. Empty when the
// stack is not cut at a pending table, or no frame is exact.
std::vector<WalkedFrame> cut_prefix(const WalkedStack& stack);

// Whether `whole` (not cut at a pending table) starts with `prefix`.
bool starts_with(const WalkedStack& whole, const std::vector<WalkedFrame>& prefix);

// Looks at the sites recorded since the last call (at most
// kMaxCheckedPerPoll), reading each one's stored stack once with `peek`;
// returns the folds to apply. A tracker that shrank (exec) starts over.
std::vector<SiteFold> find_cut_site_folds(CutSites& state, const std::vector<SiteStats>& sites,
                                          const std::function<WalkedStack(uint64_t)>& peek);

}  // namespace lw
