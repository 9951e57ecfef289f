// SPDX-License-Identifier: Apache-2.0
// The symbol thread's counters (core/symbols/symbol_service.h), in a header of
// their own so that views can carry them without the service.
// Thread-safety: plain values.
#pragma once

#include <cstdint>

#include "core/symbols/debuginfod.h"
#include "core/symbols/symbolizer.h"

namespace lw {

// Counters and gauges (metrics later: leakwatch_symbol_<name>; the
// debuginfod ones leakwatch_debuginfod_<name>_total).
struct SymbolCounters {
  uint64_t requests = 0;          // addresses queued for the symbol thread
  uint64_t requests_dropped = 0;  // not queued, the queue was full (asked again later)
  uint64_t resolved = 0;          // addresses resolved (again, after a fetch, included)
  uint64_t results_evicted = 0;   // resolved addresses dropped from the full cache
  uint64_t queue_depth = 0;       // gauge: addresses waiting
  uint64_t cached_results = 0;    // gauge: addresses resolved and kept
  SymbolizerStats symbolizer;     // modules opened, by debug source; files refused
  DebuginfodCounters debuginfod;  // fetches, hits, failures, timeouts, bytes, ...
};

}  // namespace lw
