// SPDX-License-Identifier: Apache-2.0
#include "core/policy/process_cost.h"

namespace lw {

const char* shed_reason_name(ShedReason r) {
  switch (r) {
    case ShedReason::kProcessCap: return "process_memory_cap";
    case ShedReason::kDaemonBudget: return "daemon_memory_budget";
    default: return "";
  }
}

uint64_t record_cap_after_costs(uint64_t record_cap, uint64_t bytes_per_record, uint64_t capped_total,
                                uint64_t floor) {
  if (record_cap == 0 || bytes_per_record == 0) return record_cap;
  const uint64_t taken = (capped_total + bytes_per_record - 1) / bytes_per_record;
  const uint64_t left = record_cap > taken ? record_cap - taken : 0;
  return left < floor ? floor : left;
}

std::optional<size_t> pick_costliest(const std::vector<ProcessCost>& costs, const std::vector<bool>& shed) {
  std::optional<size_t> best;
  for (size_t i = 0; i < costs.size(); ++i) {
    if (i < shed.size() && shed[i]) continue;
    if (costs[i].capped() == 0) continue;
    if (!best || costs[i].capped() > costs[*best].capped()) best = i;
  }
  return best;
}

}  // namespace lw
