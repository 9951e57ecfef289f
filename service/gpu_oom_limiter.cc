// SPDX-License-Identifier: Apache-2.0
#include "service/gpu_oom_limiter.h"

#include <algorithm>

namespace lw {

bool GpuOomLimiter::admit(const Key& key, double now_s) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    while (entries_.size() >= max_keys_ && !order_.empty()) {
      entries_.erase(order_.front());
      order_.pop_front();
    }
    entries_[key] = Entry{now_s, 0};
    order_.push_back(key);
    return true;
  }
  if (now_s - it->second.last_report_s >= window_s_) {
    it->second = Entry{now_s, 0};
    return true;
  }
  ++it->second.suppressed;
  return false;
}

uint64_t GpuOomLimiter::suppressed(const Key& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? 0 : it->second.suppressed;
}

void GpuOomLimiter::forget(pid_t pid) {
  for (auto it = entries_.begin(); it != entries_.end();)
    it = std::get<0>(it->first) == pid ? entries_.erase(it) : std::next(it);
  order_.erase(std::remove_if(order_.begin(), order_.end(), [&](const Key& k) { return std::get<0>(k) == pid; }),
               order_.end());
}

}  // namespace lw
