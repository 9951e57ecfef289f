// SPDX-License-Identifier: Apache-2.0
#include "view/json.h"

#include "core/symbols/stack_id.h"

namespace lw {

namespace {

nlohmann::json heap_walk_json(const HeapWalkView& w) {
  if (w.walks == 0 && w.undecided == 0) return nullptr;
  return {{"walks", w.walks},
          {"marked", w.marked},
          {"kept", w.kept},
          {"freed", w.freed},
          {"undecided", w.undecided},
          {"undecided_bytes", w.undecided_bytes},
          {"last_bytes_read", w.last_bytes_read},
          {"last_seconds", w.last_seconds},
          {"last_complete", w.last_complete},
          {"last_stopped", w.last_stopped.empty() ? nlohmann::json(nullptr) : nlohmann::json(w.last_stopped)}};
}

}  // namespace

nlohmann::json sampling_json(const ProcessSnapshot& snap) {
  using nlohmann::json;
  const bool estimated = snap.sample_mean_bytes || snap.time_sampled;
  return {{"mean_bytes", snap.sample_mean_bytes},
          {"estimated_kinds", estimated ? json::array({"heap"}) : json::array()},
          {"heap_basis", snap.heap_basis()},  // decision busy-processes
          {"burst_fraction", snap.burst_fraction < 1 ? json(snap.burst_fraction) : json(nullptr)},
          {"heap_walk", heap_walk_json(snap.heap_walk)},  // decision busy-processes, "Windows and walks"
          {"automatic", snap.sampling_automatic},
          {"reason", snap.sampling_automatic ? json(snap.sampling_reason) : json(nullptr)},
          {"since", snap.sampling_automatic ? json(snap.sampling_since) : json(nullptr)}};
}

namespace {

nlohmann::json unrecorded_allocations_json(const UnrecordedCounts& c) {
  return {{"map_full", c.map_full},
          {"stack_map_full", c.stack_map_full},
          {"over_share", c.over_share},
          {"stack_over_share", c.stack_over_share}};
}

nlohmann::json unrecorded_bytes_json(const UnrecordedCounts& c) {
  return {{"map_full", c.map_full_bytes}, {"over_share", c.over_share_bytes}};
}

}  // namespace

nlohmann::json unrecorded_json(const ProcessSnapshot& snap) {
  using nlohmann::json;
  const Unrecorded& u = snap.unrecorded;
  // Per kind (decision unrecorded-per-kind): only the kinds that lost
  // something.
  nlohmann::json kinds = nlohmann::json::object();
  for (uint32_t k = 0; k < LW_KIND_MAX; ++k) {
    const UnrecordedCounts& c = u.kinds[k];
    if (!c.any()) continue;
    kinds[kind_name(k)] = {{"allocations", unrecorded_allocations_json(c)},
                           {"bytes", unrecorded_bytes_json(c)},
                           {"verdicts_incomplete", u.kind_incomplete(k)}};
  }
  return {{"allocations", unrecorded_allocations_json(u)},
          {"bytes", unrecorded_bytes_json(u)},
          {"coverage", snap.coverage},
          // The leak verdicts were made on incomplete data: live bytes (and
          // so growth) are a lower bound.
          {"verdicts_incomplete", u.lost() > 0},
          // Marked over its fair share (decision fair-shares): whose share.
          {"fair_share",
           {{"live_map", snap.over_share.empty() ? json(nullptr) : json(snap.over_share)},
            {"stack_map", snap.stack_over_share.empty() ? json(nullptr) : json(snap.stack_over_share)}}},
          {"kinds", std::move(kinds)}};
}

nlohmann::json to_json(const ProcessSnapshot& snap) {
  using nlohmann::json;
  json sites = json::array();
  for (const SiteSnapshot& s : snap.sites) {
    json frames = json::array();
    for (const Frame& f : s.frames) {
      frames.push_back({{"function", f.function},
                        {"display_name", frame_display_name(f)},
                        {"file", f.file},
                        {"line", f.line},
                        {"module", f.module},
                        {"build_id", f.build_id},
                        {"offset", f.offset},
                        {"unwound", f.unwound},
                        {"inlined", f.inlined},
                        {"language", f.language}});
    }
    sites.push_back({{"stack_id", stack_id_hex(s.stack_id)},
                     {"kind", kind_name(s.kind)},
                     {"live_bytes", s.live_bytes},
                     {"reserved_bytes", s.reserved_bytes},  // decision reserved-address-space
                     {"live_allocations", s.live_allocations},
                     {"allocated_bytes", s.allocated_bytes},
                     {"allocations", s.allocations},
                     {"freed_bytes", s.freed_bytes},
                     {"frees", s.frees},
                     {"leak_rate_bytes_per_second", s.leak_rate_bytes_per_second},
                     {"suspected_leak", s.suspected_leak},
                     {"primed", s.primed},
                     {"trend", trend_name(s.trend)},
                     {"basis", s.kind == LW_KIND_HEAP ? snap.heap_basis() : std::string("exact")},
                     {"incomplete", snap.unrecorded.site_incomplete(s.kind)},  // decision unrecorded-per-kind
                     {"age_bytes",
                      {{"lt_1m", s.ages.lt_1m},
                       {"lt_10m", s.ages.lt_10m},
                       {"lt_1h", s.ages.lt_1h},
                       {"older", s.ages.older}}},
                     {"truncated", s.truncated.empty() ? json(nullptr) : json(s.truncated)},
                     {"symbols_pending", s.symbols_pending},
                     {"symbols_missing", s.symbols_missing.empty() ? json(nullptr) : json(s.symbols_missing)},
                     {"frames", std::move(frames)}});
  }
  json counters = json::object();
  for (size_t i = 0; i < LW_CNT_MAX; ++i)
    if (const char* name = counter_name(i)) counters[name] = snap.kernel_counters[i];
  counters["resyncs"] = snap.heap_counters.resyncs;
  counters["resync_added"] = snap.heap_counters.resync_added;
  counters["resync_removed"] = snap.heap_counters.resync_removed;
  counters["stale_frees"] = snap.heap_counters.stale_frees;
  counters["duplicate_allocs"] = snap.heap_counters.duplicate_allocs;
  counters["decode_errors"] = snap.tracer_stats.decode_errors;
  counters["attach_errors"] = snap.tracer_stats.attach_errors;
  counters["mapping_reads"] = snap.tracer_stats.mapping_reads;  // decision reserved-address-space
  counters["mapping_read_errors"] = snap.tracer_stats.mapping_read_errors;
  const SymbolCounters& sym = snap.tracer_stats.symbols;
  counters["symbol_requests"] = sym.requests;
  counters["symbol_requests_dropped"] = sym.requests_dropped;
  counters["symbol_queue_depth"] = sym.queue_depth;
  counters["symbol_module_errors"] = sym.symbolizer.module_errors;
  counters["symbol_inflated_refused"] = sym.symbolizer.inflated_refused;  // issue 32
  counters["debuginfod_fetches"] = sym.debuginfod.fetches;
  counters["debuginfod_hits"] = sym.debuginfod.hits;
  counters["debuginfod_failures"] = sym.debuginfod.failures;
  counters["debuginfod_bytes"] = sym.debuginfod.bytes;
  json out = {{"pid", snap.pid},
              {"comm", snap.comm},
              {"timestamp", snap.timestamp},
              {"final", snap.final},
              {"live_bytes", snap.live_bytes},
              {"reserved_bytes", snap.reserved_bytes},
              {"live_allocations", snap.live_allocations},
              {"events",
               {{"seen", snap.kernel_counters[LW_CNT_EVENTS_SEEN]},
                {"delivered", snap.kernel_counters[LW_CNT_EVENTS_DELIVERED]},
                {"dropped", snap.kernel_counters[LW_CNT_EVENTS_DROPPED_RINGBUF]}}},
              {"counters", std::move(counters)},
              {"sites_total", snap.sites_total},
              {"sites", std::move(sites)}};
  if (snap.kernel_live_bytes >= 0) out["kernel_live_bytes"] = snap.kernel_live_bytes;
  // Which figures are estimates, and at what rate (docs/api.md).
  out["sampling"] = sampling_json(snap);
  out["heap_stale_since"] = snap.heap_stale_since > 0 ? json(snap.heap_stale_since) : json(nullptr);
  out["unrecorded"] = unrecorded_json(snap);
  out["lifecycle"] = to_json(snap.lifecycle);
  json cuda_devices = json::array();
  for (const CudaDeviceTotal& t : snap.cuda_devices)
    cuda_devices.push_back({{"device", t.device},
                            {"kind", kind_name(t.kind)},
                            {"live_bytes", t.live_bytes},
                            {"live_allocations", t.live_allocations}});
  out["cuda_devices"] = std::move(cuda_devices);
  out["kinds"] = kinds_to_json(snap);
  out["allocator"] = to_json(snap.allocator);
  if (snap.live_filter.active()) {
    const LiveFilter& f = snap.live_filter;
    out["filter"] = {{"older_s", static_cast<double>(f.min_age_ns) / 1e9},
                     {"min_size", f.min_size},
                     {"max_size", f.max_size == UINT64_MAX ? json(nullptr) : json(f.max_size)}};
  }
  out["unwind"] = to_json(snap.tracer_stats.unwind);
  out["python"] = to_json(snap.python);
  out["jit"] = to_json(snap.jit);
  out["rss"] = rss_to_json(snap.rss);
  out["cost"] = cost_json(snap);                                 // decision process-cost
  out["tensor"] = to_json(snap.tensor);                         // decision tensor-tier
  out["gpu_explained"] = gpu_explained_json(snap.gpu_explained);  // GPU memory explained
  return out;
}

// What the daemon holds for the process, its cap, and whether it was shed
// (decision process-cost).
nlohmann::json cost_json(const ProcessSnapshot& snap) {
  using nlohmann::json;
  const ProcessCost& c = snap.cost;
  return {{"bytes", c.capped()},
          {"records_bytes", c.records},
          {"cap_bytes", snap.cost_cap > 0 ? json(snap.cost_cap) : json(nullptr)},
          {"parts", {{"stacks", c.stacks}, {"maps", c.maps}, {"python", c.python}, {"jit", c.jit}, {"sites", c.sites}}},
          {"stacks_resolved", snap.stacks_resolved},
          {"stacks_pruned", snap.stacks_pruned},
          {"maps_entries", snap.maps_entries},
          {"maps_entries_dropped", snap.maps_entries_dropped},
          {"maps_paths_dropped", snap.maps_paths_dropped},
          {"shed", snap.shed_reason.empty() ? json(nullptr)
                                            : json{{"reason", snap.shed_reason}, {"since", snap.shed_since}}}};
}

nlohmann::json kinds_to_json(const ProcessSnapshot& snap) {
  nlohmann::json kinds = nlohmann::json::object();
  for (uint32_t k = 0; k < LW_KIND_MAX; ++k) {
    const KindTotals& t = snap.kinds[k];
    if (t.allocations == 0 && t.live_allocations == 0) continue;
    kinds[kind_name(k)] = {{"live_bytes", t.live_bytes},
                           {"reserved_bytes", t.reserved_bytes},
                           {"live_allocations", t.live_allocations},
                           {"allocated_bytes", t.allocated_bytes},
                           {"allocations", t.allocations},
                           {"freed_bytes", t.freed_bytes},
                           {"frees", t.frees}};
  }
  return kinds;
}

nlohmann::json to_json(const AllocatorInfo& a) {
  nlohmann::json preload_objects = nlohmann::json::array();
  for (const PreloadInfo::Object& o : a.preload.objects)
    preload_objects.push_back({{"file", o.file}, {"build_id", o.build_id}});
  nlohmann::json preload = {{"present", a.preload.entries > 0},
                            {"entries", a.preload.entries},
                            {"objects", std::move(preload_objects)}};
  return {{"support", a.support},       {"reason", a.reason},
          {"family", a.family},         {"object", a.object},
          {"build_id", a.build_id},     {"static", a.static_exe},
          {"go", a.go},                 {"preload", std::move(preload)},
          {"functions", a.functions},   {"objects", a.objects},
          {"mmap_tracing", a.mmap_tracing}, {"mmap_tracing_reason", a.mmap_tracing_reason}};
}

nlohmann::json to_json(const LifecycleStats& l) {
  return {{"events", l.events},
          {"rescans", l.rescans},
          {"rescans_deferred", l.rescans_deferred},
          {"deferred_since", l.deferred_since > 0 ? nlohmann::json(l.deferred_since) : nlohmann::json(nullptr)}};
}

nlohmann::json to_json(const UnwindStats& u) {
  return {{"objects", {{"total", u.objects},
                       {"pending", u.objects_pending},
                       {"ready", u.objects_ready},
                       {"no_cfi", u.objects_no_cfi},
                       {"memory_budget", u.objects_budget}}},
          {"tables", u.tables},
          {"table_bytes", u.table_bytes},
          {"max_table_bytes", u.max_table_bytes},
          {"builds", u.builds},
          {"build_failures", u.build_failures},
          {"build_seconds", u.build_seconds},
          {"disk_cache_hits", u.disk_cache_hits},
          {"memory_cache_hits", u.memory_cache_hits},
          {"queue_depth", u.queue_depth},
          {"disk_cache_mismatches", u.disk_cache_mismatches}};
}

nlohmann::json to_json(const JitInfo& jit) {
  if (!jit.present) return nullptr;
  const PerfMapStats& s = jit.stats;
  return {{"perf_map", jit.perf_map},
          {"entries", jit.entries},
          {"memory_bytes", jit.memory_bytes},
          {"bytes_read", s.bytes_read},
          {"lines", s.lines},
          {"entries_replaced", s.entries_replaced},
          {"bad_lines", s.bad_lines},
          {"long_lines", s.long_lines},
          {"names_cut", s.names_cut},
          {"entries_refused", s.entries_refused},
          {"file_capped", s.file_capped},
          {"restarts", s.restarts}};
}

nlohmann::json to_json(const PythonInfo& py) {
  if (!py.present) return nullptr;
  return {{"version", py.version},
          {"support", py.support},
          {"frames", py.frames},
          {"reason", py.reason},
          {"object", py.object},
          {"code_cache_bytes", py.code_cache_bytes},
          {"line_table_bytes_read", py.line_table_bytes_read}};
}

}  // namespace lw
