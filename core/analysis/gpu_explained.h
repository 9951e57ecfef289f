/* SPDX-License-Identifier: Apache-2.0 */
// GPU memory explained (decision tensor-tier), pure and unit-tested: per
// device, what a framework pool holds in tensors (the tensor tier's
// records), what it keeps cached (its own reserved - allocated), and what
// CUDA memory lies outside any pool (CUDA kinds - reserved). The GPU side of
// "RSS explained" (core/analysis/rss_breakdown.h).
// Thread-safety: stateless.
#pragma once

#include <cstdint>
#include <vector>

#include "core/accounting/cuda_devices.h"

namespace lw {

// GPU memory explained (decision tensor-tier), per device, the GPU side of
// "RSS explained": what a framework pool holds in tensors, what it keeps
// cached, and what CUDA memory lies outside any pool.
struct GpuExplained {
  int device = -1;                    // -1: unknown
  uint64_t tensors_live_bytes = 0;    // kind tensor_gpu live on this device (the tier's records)
  // The pool's own totals, where its allocator reports them (PyTorch's
  // reportMemoryUsageToProfiler); false: the three figures below that
  // need them are 0 and not shown.
  bool pool_totals = false;
  uint64_t pool_allocated_bytes = 0;  // the allocator's own figure of bytes in tensors
  uint64_t pool_reserved_bytes = 0;   // bytes it reserved from the driver
  uint64_t cached_bytes = 0;          // reserved - allocated: the pool's cache
  uint64_t cuda_bytes = 0;            // CUDA kinds (cuda_device + cuda_managed) live on the device
  uint64_t outside_pool_bytes = 0;    // cuda_bytes - reserved (0 when below)
};

// A pool's own totals on one device (the allocator's report).
struct PoolReport {
  int device = -1;
  uint64_t allocated = 0;
  uint64_t reserved = 0;
};

// One entry per device with tensors, a pool or CUDA device/managed memory,
// by device ascending. `devices`: the live totals per (device, kind)
// (CudaDeviceLedger::totals()).
std::vector<GpuExplained> explain_gpu(const std::vector<CudaDeviceTotal>& devices,
                                      const std::vector<PoolReport>& pools);

}  // namespace lw
