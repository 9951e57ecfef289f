// SPDX-License-Identifier: Apache-2.0
#include "core/accounting/cuda_devices.h"

#include <algorithm>
#include <optional>

#include "core/proc/procfs.h"

namespace lw {

int max_visible_cuda_devices(std::string_view environ, int device_nodes) {
  int listed = -1;  // not set
  if (std::optional<std::string_view> list = environ_value(environ, "CUDA_VISIBLE_DEVICES")) {
    listed = 0;
    for (size_t i = 0; i <= list->size();) {
      size_t comma = list->find(',', i);
      if (comma == std::string_view::npos) comma = list->size();
      if (comma > i) ++listed;
      i = comma + 1;
    }
  }
  const int nodes = device_nodes > 0 ? device_nodes : -1;
  if (listed < 0) return nodes;
  return nodes < 0 ? listed : std::min(listed, nodes);
}

void CudaDeviceLedger::apply(const Event& e) {
  if (!is_device_kind(e.kind)) return;
  const auto key = std::make_pair(e.kind, e.addr);
  if (e.type == EventType::kAlloc) {
    records_[key] = Record{event_device(e), e.size, e.alloc_ns};
  } else if (e.type == EventType::kFree) {
    auto it = records_.find(key);
    if (it != records_.end() && (it->second.alloc_ns == e.alloc_ns || (e.flags & LW_EVF_REPLACED)))
      records_.erase(it);
  }
}

void CudaDeviceLedger::resync(const std::vector<KernelRecord>& records) {
  std::map<std::pair<uint32_t, uint64_t>, Record> next;
  for (const KernelRecord& r : records) {
    if (!is_device_kind(r.kind)) continue;
    const auto key = std::make_pair(r.kind, r.addr);
    auto it = records_.find(key);
    next[key] = Record{it == records_.end() ? -1 : it->second.device, r.size, r.alloc_ns};
  }
  records_ = std::move(next);
}

std::vector<CudaDeviceTotal> CudaDeviceLedger::totals() const {
  std::map<std::pair<int, uint32_t>, CudaDeviceTotal> by;
  for (const auto& [key, rec] : records_) {
    CudaDeviceTotal& t = by[{rec.device, key.first}];
    t.device = rec.device;
    t.kind = key.first;
    t.live_bytes += rec.size;
    t.live_allocations += 1;
  }
  std::vector<CudaDeviceTotal> out;
  for (auto& [key, t] : by) out.push_back(t);
  return out;
}

}  // namespace lw
