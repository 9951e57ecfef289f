// SPDX-License-Identifier: Apache-2.0
// The JSON shapes of the views, shared by the API (exporter/http/http_server.cc)
// and `leakwatch top --json` (docs/api.md, docs/cli.md).
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "view/process_view.h"

namespace lw {

nlohmann::json to_json(const ProcessSnapshot& snap);
nlohmann::json to_json(const AllocatorInfo& a);
// A process's CPython (docs/api.md): null when it runs none.
nlohmann::json to_json(const PythonInfo& p);
nlohmann::json to_json(const JitInfo& jit);  // null when absent (decision jit-perf-maps)
// The unwind tables (docs/api.md, "unwind").
nlohmann::json to_json(const UnwindStats& u);
// {"events", "rescans", "rescans_deferred", "deferred_since"} (null when no
// rescan waits).
nlohmann::json to_json(const LifecycleStats& l);
// What the daemon holds for the process (docs/api.md, "cost"; decision process-cost).
nlohmann::json cost_json(const ProcessSnapshot& snap);
// Totals per kind over every site, kinds with no allocation left out (API, top).
nlohmann::json kinds_to_json(const ProcessSnapshot& snap);
// The RSS breakdown (docs/api.md, "rss"); null when not read.
nlohmann::json rss_to_json(const RssBreakdown& b);
// The tensor tier (docs/api.md, "tensor"; decision tensor-tier): always an
// object, state "none" where no framework library is mapped.
nlohmann::json to_json(const TensorTierInfo& t);
// GPU memory explained (docs/api.md, "gpu_explained"), one object per
// device; the figures that need the pool's totals are null without them.
nlohmann::json gpu_explained_json(const std::vector<GpuExplained>& devices);
// Allocations not recorded, by reason, and the coverage
// (decision unrecorded-per-kind).
nlohmann::json unrecorded_json(const ProcessSnapshot& snap);
// Which figures are estimates, at what mean, and whether automatic
// sampling chose it (docs/api.md, `sampling`; decision auto-sampling).
nlohmann::json sampling_json(const ProcessSnapshot& snap);

}  // namespace lw
