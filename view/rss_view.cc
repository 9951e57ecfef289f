// SPDX-License-Identifier: Apache-2.0
// The RSS breakdown's view side (docs/analysis.md, "RSS explained").
#include <nlohmann/json.hpp>

#include "view/json.h"
#include "view/process_view.h"

namespace lw {

TrackedBytes rss_tracked_bytes(const ProcessSnapshot& snap) {
  TrackedBytes t;
  // A CPU tensor's data is a malloc block (alloc_cpu's posix_memalign),
  // counted as tensor_cpu instead of heap (decision tensor-tier).
  t.live_heap_requested = snap.kinds[LW_KIND_HEAP].live_bytes + snap.kinds[LW_KIND_TENSOR_CPU].live_bytes;
  t.live_heap_allocations =
      snap.kinds[LW_KIND_HEAP].live_allocations + snap.kinds[LW_KIND_TENSOR_CPU].live_allocations;
  t.glibc = snap.allocator.family == "glibc";
  t.live_mmap = snap.kinds[LW_KIND_MMAP].live_bytes;
  t.reserved_mmap = snap.kinds[LW_KIND_MMAP].reserved_bytes;
  return t;
}

nlohmann::json rss_to_json(const RssBreakdown& b) {
  if (!b.valid) return nullptr;
  return {{"read_at", b.read_at},
          {"anon_bytes", b.anon_total},
          {"file_bytes", b.file_rss},
          {"reserved_bytes", b.reserved},
          {"parts",
           {{"live_heap", b.live_heap},
            {"held_before_attach_or_retained", b.held_or_retained},
            {"tracked_mmap", b.tracked_mmap},
            {"stacks", b.stacks},
            {"untracked", b.untracked}}},
          {"threads", b.threads},
          {"stacks_located", b.stacks_located},
          {"unattributed_tracked_bytes", b.unattributed_tracked}};
}

}  // namespace lw
