/* SPDX-License-Identifier: Apache-2.0 */
// Live CUDA bytes per device, for one process. The kernel side attributes
// each CUDA record to the device current on the allocating thread and puts
// it in the event flags (LW_EVF_DEVICE_*); this mirrors the CUDA records
// (few: GPU allocations are large and rare next to malloc) with their
// device, so totals per (device, kind) can be reported.
// Thread-safety: not thread-safe; owned by the tracer's thread.
#pragma once

#include <cstdint>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "core/accounting/event.h"
#include "core/accounting/heap_tracker.h"

namespace lw {

// The device of a CUDA event, or -1 when unknown.
inline int event_device(const Event& e) {
  int v = (e.flags & LW_EVF_DEVICE_MASK) >> LW_EVF_DEVICE_SHIFT;
  return v - 1;
}

inline bool is_cuda_kind(uint32_t kind) {
  return kind == LW_KIND_CUDA_DEVICE || kind == LW_KIND_CUDA_HOST || kind == LW_KIND_CUDA_MANAGED;
}

// The kinds whose records belong to a device: CUDA's, and a framework
// pool's GPU tensors (decision tensor-tier). The ledger keeps these.
inline bool is_device_kind(uint32_t kind) {
  return is_cuda_kind(kind) || kind == LW_KIND_TENSOR_GPU;
}

// The most CUDA devices a process can see, or -1 when that is not known.
// `environ` is /proc/PID/environ (NUL-separated, untrusted): a
// CUDA_VISIBLE_DEVICES there limits the process to its comma-separated
// entries (an upper bound: CUDA stops at the first invalid one; empty: none).
// `device_nodes` counts the /dev/nvidiaN nodes in the process's root, one
// per GPU it may open; 0 or less means not known (a process using CUDA has
// at least one: none found means we cannot see them).
int max_visible_cuda_devices(std::string_view environ, int device_nodes);

// The device of a process's CUDA records whose thread's current device was
// not seen (made current before leakwatch attached): a process that can see
// at most one device and uses CUDA has only ordinal 0. -1 otherwise.
inline int sole_cuda_device(int max_visible) { return max_visible == 1 ? 0 : -1; }

struct CudaDeviceTotal {
  int device = -1;  // -1: unknown
  uint32_t kind = 0;
  uint64_t live_bytes = 0;
  uint64_t live_allocations = 0;
};

class CudaDeviceLedger {
 public:
  // ALLOC and FREE events of the CUDA kinds; everything else is ignored.
  void apply(const Event& e);
  // After a loss: keeps the CUDA records the kernel still holds (a record
  // new to us gets device -1) and drops the others.
  void resync(const std::vector<KernelRecord>& records);
  void clear() { records_.clear(); }
  // Drops one kind's records (the tensor tier re-baselined after its
  // governor resumed it; decision tensor-tier).
  void clear_kind(uint32_t kind) {
    std::erase_if(records_, [kind](const auto& r) { return r.first.first == kind; });
  }
  // Sorted by (device, kind); only pairs with live bytes.
  std::vector<CudaDeviceTotal> totals() const;
  size_t size() const { return records_.size(); }

 private:
  struct Record {
    int device;
    uint64_t size;
    uint64_t alloc_ns;  // identity, as in HeapTracker: a late free never retires a newer record
  };
  std::map<std::pair<uint32_t, uint64_t>, Record> records_;  // (kind, addr)
};

}  // namespace lw
