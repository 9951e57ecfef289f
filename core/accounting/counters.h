// SPDX-License-Identifier: Apache-2.0
// The kernel side's per-CPU counters as user space sees them, generated
// from the one list in bpf/lw_counters.h: the JSON name of each index, the
// Prometheus family it is exported in and its `reason` label there.
// Thread-safety: constant data.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "leakwatch_abi.h"

namespace lw {

// Summed over CPUs, indexed by enum lw_counter.
using Counters = std::array<uint64_t, LW_CNT_MAX>;

struct CounterInfo {
  const char* name = nullptr;    // JSON name ("live_insert_failed")
  const char* family = nullptr;  // Prometheus family ("leakwatch_bpf_failures_total")
  const char* reason = nullptr;  // its `reason` label, nullptr for none
  const char* help = nullptr;    // what it counts
};

// nullptr for an index no one has assigned (callers skip it).
const CounterInfo* counter_info(size_t index);
// counter_info(index)->name, or nullptr.
const char* counter_name(size_t index);

}  // namespace lw
