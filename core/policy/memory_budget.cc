// SPDX-License-Identifier: Apache-2.0
#include "core/policy/memory_budget.h"

#include "core/proc/procfs.h"

#include <cstdlib>

namespace lw {

uint64_t live_record_cap(uint64_t budget_bytes, uint64_t baseline_rss_bytes) {
  const uint64_t fixed = baseline_rss_bytes + kMemoryReserveBytes + kHttpFrontReserveBytes;
  const uint64_t room = budget_bytes > fixed ? budget_bytes - fixed : 0;
  const uint64_t cap = room / kBytesPerLiveRecord;
  return cap < kMinLiveRecordCap ? kMinLiveRecordCap : cap;
}

std::optional<pid_t> pick_shed_victim(const std::vector<std::pair<pid_t, uint64_t>>& heap_records) {
  std::optional<pid_t> best;
  uint64_t most = 0;
  for (const auto& [pid, records] : heap_records) {
    if (records == 0) continue;
    if (records > most || (records == most && best && pid < *best)) {
      most = records;
      best = pid;
    }
  }
  return best;
}

std::optional<uint64_t> parse_statm_resident(const char* statm, uint64_t page_size) {
  std::optional<StatmPages> p = parse_statm_pages(statm, 2);
  if (!p) return std::nullopt;
  return p->resident * page_size;
}

}  // namespace lw
