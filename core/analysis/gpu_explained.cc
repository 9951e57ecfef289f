// SPDX-License-Identifier: Apache-2.0
#include "core/analysis/gpu_explained.h"

#include <map>

namespace lw {

std::vector<GpuExplained> explain_gpu(const std::vector<CudaDeviceTotal>& devices,
                                      const std::vector<PoolReport>& pools) {
  std::map<int, GpuExplained> by;
  auto at = [&](int device) -> GpuExplained& {
    GpuExplained& g = by[device];
    g.device = device;
    return g;
  };
  for (const CudaDeviceTotal& t : devices) {
    if (t.kind == LW_KIND_TENSOR_GPU)
      at(t.device).tensors_live_bytes += t.live_bytes;
    else if (t.kind == LW_KIND_CUDA_DEVICE || t.kind == LW_KIND_CUDA_MANAGED)
      at(t.device).cuda_bytes += t.live_bytes;
  }
  for (const PoolReport& p : pools) {
    GpuExplained& g = at(p.device);
    g.pool_totals = true;
    g.pool_allocated_bytes += p.allocated;
    g.pool_reserved_bytes += p.reserved;
  }
  std::vector<GpuExplained> out;
  for (auto& [device, g] : by) {
    if (g.pool_totals) {
      g.cached_bytes = g.pool_reserved_bytes > g.pool_allocated_bytes
                           ? g.pool_reserved_bytes - g.pool_allocated_bytes
                           : 0;
      g.outside_pool_bytes = g.cuda_bytes > g.pool_reserved_bytes ? g.cuda_bytes - g.pool_reserved_bytes : 0;
    }
    out.push_back(g);
  }
  return out;
}

}  // namespace lw
