// SPDX-License-Identifier: Apache-2.0
// The tensor tier's view side (decision tensor-tier): the tier's state and
// "GPU memory explained", as the API and `top --json` show them.
#include <nlohmann/json.hpp>

#include "view/json.h"
#include "view/process_view.h"

namespace lw {

nlohmann::json to_json(const TensorTierInfo& t) {
  return {{"state", t.state},
          {"reason", t.reason},
          {"sources", t.sources},
          {"gpu_allocator", t.gpu_allocator.empty() ? nlohmann::json(nullptr) : nlohmann::json(t.gpu_allocator)},
          {"hits_per_second", t.hits_per_second}};
}

nlohmann::json gpu_explained_json(const std::vector<GpuExplained>& devices) {
  using nlohmann::json;
  json out = json::array();
  for (const GpuExplained& g : devices) {
    // Without the pool's own totals (TensorFlow's BFC, an old PyTorch) what
    // it caches and what lies outside it are unknown: null, never 0.
    auto needs_totals = [&g](uint64_t v) { return g.pool_totals ? json(v) : json(nullptr); };
    out.push_back({{"device", g.device < 0 ? json(nullptr) : json(g.device)},
                   {"tensors_live_bytes", g.tensors_live_bytes},
                   {"pool_totals", g.pool_totals},
                   {"pool_allocated_bytes", needs_totals(g.pool_allocated_bytes)},
                   {"pool_reserved_bytes", needs_totals(g.pool_reserved_bytes)},
                   {"cached_bytes", needs_totals(g.cached_bytes)},
                   {"cuda_bytes", g.cuda_bytes},
                   {"outside_pool_bytes", needs_totals(g.outside_pool_bytes)}});
  }
  return out;
}

}  // namespace lw
