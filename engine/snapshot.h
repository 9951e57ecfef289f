// SPDX-License-Identifier: Apache-2.0
// Builds the view of one traced process (view/process_view.h) from the
// engine's state: sites merged by stable stack id and symbolized.
// Thread-safety: runs on the thread that owns the tracer.
#pragma once

#include <cstddef>
#include <vector>

#include "core/analysis/analyzer.h"
#include "core/analysis/site_choice.h"
#include "core/proc/proc_maps.h"
#include "engine/tracer.h"
#include "view/process_view.h"

namespace lw {

// Sites with live allocations, merged by (stack_id, kind): the top
// `limits.by_live` by live bytes and, with an analyzer, up to
// `limits.by_rate` more by leak rate (core/analysis/site_choice.h); only
// those are symbolized and returned, sorted by live bytes.
// The executable file mappings are copied for pprof. With an active
// `filter` (top's --older/--min-size/--max-size) the live figures, and so
// the ranking, count only the live records it keeps (ProcessSnapshot::live_filter).
ProcessSnapshot take_snapshot(Tracer& tracer, TracedProcess& proc, SiteLimits limits,
                              bool read_kernel_live, const ProcessAnalyzer* analyzer = nullptr,
                              const LiveFilter* filter = nullptr);
// The same with the engine-wide figures read once by the caller: a publish
// of many processes reads the kernel counters (one map lookup per counter)
// once, not once per process (decision daemon-in-parts).
ProcessSnapshot take_snapshot(Tracer& tracer, TracedProcess& proc, SiteLimits limits,
                              bool read_kernel_live, const ProcessAnalyzer* analyzer,
                              const Counters& kernel_counters, const TracerStats& tracer_stats,
                              const LiveFilter* filter = nullptr);

// The file mappings of a process as pprof mappings.
std::vector<PprofMapping> profile_mappings(const ParsedMaps& maps);

}  // namespace lw
