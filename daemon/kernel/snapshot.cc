// SPDX-License-Identifier: Apache-2.0
#include "daemon/kernel/snapshot.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>

#include "daemon/core/stack_id.h"

namespace lw {

const char* kind_name(uint32_t kind) {
  switch (kind) {
    case LW_KIND_HEAP: return "heap";
    case LW_KIND_MMAP: return "mmap";
    case LW_KIND_CUDA_DEVICE: return "cuda_device";
    case LW_KIND_CUDA_HOST: return "cuda_host";
    case LW_KIND_CUDA_MANAGED: return "cuda_managed";
  }
  return "unknown";
}

ProcessSnapshot take_snapshot(Tracer& tracer, TracedProcess& proc, size_t max_sites,
                              bool read_kernel_live, const ProcessAnalyzer* analyzer) {
  ProcessSnapshot snap;
  snap.pid = proc.pid;
  snap.comm = proc.comm;
  if (proc.attacher) snap.allocator = proc.attacher->allocator();

  snap.final = proc.exited;
  snap.timestamp = std::chrono::duration<double>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
  snap.live_bytes = proc.heap.live_bytes_total();
  snap.sample_mean_bytes = proc.heap.sample_mean();
  snap.heap_stale_since = proc.heap_stale_since;
  snap.live_allocations = proc.heap.live_allocations_total();
  snap.kernel_counters = tracer.counters();
  snap.heap_counters = proc.heap.counters();
  snap.cuda_devices = proc.cuda_devices.totals();
  snap.tracer_stats = tracer.stats();
  if (read_kernel_live) {
    if (auto k = tracer.kernel_live_bytes(proc.pid)) snap.kernel_live_bytes = static_cast<int64_t>(*k);
  }
  if (analyzer) {
    for (uint32_t k = 0; k < LW_KIND_MAX; ++k) {
      snap.kind_verdicts[k] = analyzer->process_verdict(k);
      snap.kind_ages[k] = analyzer->process_ages(k);
    }
  }

  // Rank cheaply first (no symbolization), then symbolize what is shown.
  struct Ranked {
    const SiteStats* stats;
    const SiteAnalysis* analysis;
  };
  std::vector<Ranked> live;
  for (const SiteStats& s : proc.heap.sites()) {
    KindTotals& k = snap.kinds[s.kind];
    k.live_bytes += s.live_bytes;
    k.live_allocations += s.live_allocations;
    k.allocated_bytes += s.allocated_bytes;
    k.allocations += s.allocations;
    k.freed_bytes += s.freed_bytes;
    k.frees += s.frees;
    if (s.live_allocations > 0)
      live.push_back({&s, analyzer ? analyzer->site(s.stack_hash, s.kind) : nullptr});
  }
  auto rate = [](const Ranked& r) { return r.analysis ? r.analysis->verdict.rate_bytes_per_s : 0.0; };
  std::vector<Ranked> chosen;
  std::sort(live.begin(), live.end(), [](const Ranked& a, const Ranked& b) {
    return a.stats->live_bytes > b.stats->live_bytes;
  });
  chosen.assign(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(std::min(max_sites, live.size())));
  if (analyzer && live.size() > max_sites) {
    std::vector<Ranked> rest(live.begin() + static_cast<std::ptrdiff_t>(max_sites), live.end());
    std::sort(rest.begin(), rest.end(), [&](const Ranked& a, const Ranked& b) { return rate(a) > rate(b); });
    for (size_t i = 0; i < rest.size() && i < max_sites && rate(rest[i]) > 0; ++i) chosen.push_back(rest[i]);
  }
  snap.sites_total = live.size();

  // Distinct kernel stacks can be one stable stack (same code, other
  // addresses after a library was mapped again): merge them.
  std::map<std::pair<uint64_t, uint32_t>, size_t> index;
  for (const Ranked& r : chosen) {
    const SiteStats* s = r.stats;
    const ResolvedStack& rs = tracer.resolve_stack(proc, s->stack_hash);
    auto [it, inserted] = index.emplace(std::make_pair(rs.stack_id, s->kind), snap.sites.size());
    if (inserted) {
      SiteSnapshot site;
      site.stack_id = rs.stack_id;
      site.kind = s->kind;
      site.frames = rs.frames;
      snap.sites.push_back(std::move(site));
    }
    SiteSnapshot& site = snap.sites[it->second];
    site.live_bytes += s->live_bytes;
    site.live_allocations += s->live_allocations;
    site.allocated_bytes += s->allocated_bytes;
    site.allocations += s->allocations;
    site.freed_bytes += s->freed_bytes;
    site.frees += s->frees;
    if (const SiteAnalysis* a = r.analysis) {
      site.ages.lt_1m += a->ages.lt_1m;
      site.ages.lt_10m += a->ages.lt_10m;
      site.ages.lt_1h += a->ages.lt_1h;
      site.ages.older += a->ages.older;
      site.leak_rate_bytes_per_second += a->verdict.rate_bytes_per_s;
      site.trend = std::max(site.trend, a->verdict.trend);
      site.suspected_leak = site.suspected_leak || a->verdict.suspected_leak;
    }
  }
  std::stable_sort(snap.sites.begin(), snap.sites.end(),
                   [](const SiteSnapshot& a, const SiteSnapshot& b) {
                     return a.live_bytes > b.live_bytes;
                   });
  return snap;
}

nlohmann::json to_json(const ProcessSnapshot& snap) {
  using nlohmann::json;
  json sites = json::array();
  for (const SiteSnapshot& s : snap.sites) {
    json frames = json::array();
    for (const Frame& f : s.frames) {
      frames.push_back({{"function", f.function},
                        {"file", f.file},
                        {"line", f.line},
                        {"module", f.module},
                        {"build_id", f.build_id},
                        {"offset", f.offset}});
    }
    sites.push_back({{"stack_id", stack_id_hex(s.stack_id)},
                     {"kind", kind_name(s.kind)},
                     {"live_bytes", s.live_bytes},
                     {"live_allocations", s.live_allocations},
                     {"allocated_bytes", s.allocated_bytes},
                     {"allocations", s.allocations},
                     {"freed_bytes", s.freed_bytes},
                     {"frees", s.frees},
                     {"leak_rate_bytes_per_second", s.leak_rate_bytes_per_second},
                     {"suspected_leak", s.suspected_leak},
                     {"trend", trend_name(s.trend)},
                     {"age_bytes",
                      {{"lt_1m", s.ages.lt_1m},
                       {"lt_10m", s.ages.lt_10m},
                       {"lt_1h", s.ages.lt_1h},
                       {"older", s.ages.older}}},
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
  json out = {{"pid", snap.pid},
              {"comm", snap.comm},
              {"timestamp", snap.timestamp},
              {"final", snap.final},
              {"live_bytes", snap.live_bytes},
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
  out["sampling"] = {{"mean_bytes", snap.sample_mean_bytes},
                     {"estimated_kinds", snap.sample_mean_bytes ? json::array({"heap"}) : json::array()}};
  out["heap_stale_since"] = snap.heap_stale_since > 0 ? json(snap.heap_stale_since) : json(nullptr);
  json cuda_devices = json::array();
  for (const CudaDeviceTotal& t : snap.cuda_devices)
    cuda_devices.push_back({{"device", t.device},
                            {"kind", kind_name(t.kind)},
                            {"live_bytes", t.live_bytes},
                            {"live_allocations", t.live_allocations}});
  out["cuda_devices"] = std::move(cuda_devices);
  out["kinds"] = kinds_to_json(snap);
  out["allocator"] = to_json(snap.allocator);
  return out;
}

nlohmann::json kinds_to_json(const ProcessSnapshot& snap) {
  nlohmann::json kinds = nlohmann::json::object();
  for (uint32_t k = 0; k < LW_KIND_MAX; ++k) {
    const KindTotals& t = snap.kinds[k];
    if (t.allocations == 0 && t.live_allocations == 0) continue;
    kinds[kind_name(k)] = {{"live_bytes", t.live_bytes},
                           {"live_allocations", t.live_allocations},
                           {"allocated_bytes", t.allocated_bytes},
                           {"allocations", t.allocations},
                           {"freed_bytes", t.freed_bytes},
                           {"frees", t.frees}};
  }
  return kinds;
}

nlohmann::json to_json(const AllocatorInfo& a) {
  return {{"support", a.support},       {"reason", a.reason},
          {"family", a.family},         {"object", a.object},
          {"build_id", a.build_id},     {"static", a.static_exe},
          {"go", a.go},                 {"preload", a.preload},
          {"functions", a.functions},   {"objects", a.objects},
          {"mmap_tracing", a.mmap_tracing}, {"mmap_tracing_reason", a.mmap_tracing_reason}};
}

}  // namespace lw
