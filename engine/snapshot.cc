// SPDX-License-Identifier: Apache-2.0
#include "core/platform/clock.h"
#include "engine/snapshot.h"
#include "engine/process_cost_pass.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "core/symbols/stack_frames.h"
#include "core/symbols/stack_id.h"

namespace lw {

ProcessSnapshot take_snapshot(Tracer& tracer, TracedProcess& proc, SiteLimits limits,
                              bool read_kernel_live, const ProcessAnalyzer* analyzer,
                              const LiveFilter* filter) {
  return take_snapshot(tracer, proc, limits, read_kernel_live, analyzer, tracer.counters(),
                       tracer.stats(), filter);
}

namespace {

// A live site ranked before symbolization.
struct Ranked {
  const SiteStats* stats;
  const SiteAnalysis* analysis;
  uint64_t live_bytes;        // the site's, or what the filter keeps of it
  uint64_t live_allocations;
};

// The tensor tier's state and GPU memory explained (decision tensor-tier).
void fill_tensor(ProcessSnapshot& snap, Tracer& tracer, const TracedProcess& proc) {
  if (proc.attacher) snap.tensor = proc.attacher->tensor_info();
  snap.tensor.hits_per_second = proc.tensor_hits_per_second;
  if (snap.tensor.state == "on" || snap.tensor.state == "unsupported") {
    if (!proc.options.tensors) {
      snap.tensor.state = "off";
      snap.tensor.reason = "tensors: false for this target";
    } else if (!proc.accounting) {
      snap.tensor.state = "off";
      snap.tensor.reason = "kill switch engaged";
    } else if (proc.tensor_suspended) {
      snap.tensor.state = "suspended";
      snap.tensor.reason = "over governor.max_tensor_hits_per_second: tensor figures frozen";
    }
  }
  // Only the PyTorch hook writes pool totals: no map walk per publish for
  // the processes without it.
  std::vector<PoolReport> pools;
  const auto& src = snap.tensor.sources;
  if (std::find(src.begin(), src.end(), std::string("pytorch_cuda_hook")) != src.end())
    for (const BpfSession::PoolTotals& p : tracer.session().read_gpu_pools(proc.pid))
      pools.push_back({p.device, p.allocated, p.reserved});
  snap.gpu_explained = explain_gpu(snap.cuda_devices, pools);
}

// The process-wide figures: identity, totals, sampling, counters.
void fill_process(ProcessSnapshot& snap, Tracer& tracer, const TracedProcess& proc, bool read_kernel_live,
                  const Counters& kernel_counters, const TracerStats& tracer_stats) {
  snap.pid = proc.pid;
  snap.comm = proc.comm;
  if (proc.attacher) snap.allocator = proc.attacher->allocator();
  if (proc.python) snap.python = proc.python->status();
  if (proc.perf_map) {
    const PerfMap& m = proc.perf_map->map();
    snap.jit = JitInfo{true, proc.perf_map->path(), m.entries(), m.memory_bytes(), m.stats()};
  }
  snap.mappings = profile_mappings(proc.maps);

  snap.final = proc.exited;
  snap.timestamp = std::chrono::duration<double>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
  snap.live_bytes = proc.heap.live_bytes_total();
  snap.reserved_bytes = proc.heap.reserved_bytes(LW_KIND_MMAP);
  snap.sample_mean_bytes = proc.heap.sample_mean();
  snap.time_sampled = proc.heap.time_sampled();
  snap.burst_fraction = proc.heap.time_fraction();
  snap.heap_walk = proc.walk.view;
  snap.sampling_automatic = proc.auto_sample_mean > 0 && proc.auto_sample_mean == proc.heap.sample_mean();
  if (snap.sampling_automatic) {
    snap.sampling_reason = proc.auto_sample_reason;
    snap.sampling_since = proc.auto_sample_since;
  }
  snap.heap_stale_since = proc.heap_stale_since;
  snap.lifecycle = proc.lifecycle;
  snap.live_allocations = proc.heap.live_allocations_total();
  snap.kernel_counters = kernel_counters;
  snap.heap_counters = proc.heap.counters();
  snap.cuda_devices = proc.cuda_devices.totals();
  fill_tensor(snap, tracer, proc);
  snap.tracer_stats = tracer_stats;
  snap.unrecorded = tracer.unrecorded(proc.pid);
  snap.over_share = proc.over_share;
  snap.stack_over_share = proc.stack_over_share;
  if (read_kernel_live) {
    // Less the mmap records' bytes that are address space, not memory
    // (decision reserved-address-space): comparable with live_bytes.
    const uint64_t withheld = proc.heap.withheld_bytes();
    if (auto k = tracer.kernel_live_bytes(proc.pid))
      snap.kernel_live_bytes = static_cast<int64_t>(*k > withheld ? *k - withheld : 0);
  }
}

// Filtered live figures per site (top's --older, --min-size, --max-size);
// empty without an active filter.
std::vector<FilteredLive> apply_filter(ProcessSnapshot& snap, const TracedProcess& proc,
                                       const LiveFilter* filter) {
  std::vector<FilteredLive> filtered;
  if (!filter || !filter->active()) return filtered;
  snap.live_filter = *filter;
  filtered = proc.heap.filtered_live(*filter, monotonic_ns());
  snap.live_bytes = 0;
  snap.live_allocations = 0;
  for (const FilteredLive& f : filtered) {
    snap.live_bytes += f.bytes;
    snap.live_allocations += f.allocations;
  }
  return filtered;
}

void fill_analysis(ProcessSnapshot& snap, const ProcessAnalyzer& analyzer) {
  snap.analysis_window_s = analyzer.params().window_s;
  snap.analysis_min_span_s = std::min(analyzer.params().min_span_s, analyzer.params().window_s / 2);
  for (uint32_t k = 0; k < LW_KIND_MAX; ++k) {
    snap.kind_verdicts[k] = analyzer.process_verdict(k);
    snap.kind_ages[k] = analyzer.process_ages(k);
  }
}

// Every site's figures into its kind's totals, and the live sites, cheaply
// (no symbolization).
std::vector<Ranked> live_sites(ProcessSnapshot& snap, const TracedProcess& proc,
                               const std::vector<FilteredLive>& filtered, const ProcessAnalyzer* analyzer) {
  std::vector<Ranked> live;
  const std::vector<SiteStats>& all_sites = proc.heap.sites();
  for (size_t i = 0; i < all_sites.size(); ++i) {
    const SiteStats& s = all_sites[i];
    const uint64_t live_bytes = filtered.empty() ? s.live_bytes : filtered[i].bytes;
    const uint64_t live_allocations = filtered.empty() ? s.live_allocations : filtered[i].allocations;
    KindTotals& k = snap.kinds[s.kind];
    k.live_bytes += live_bytes;
    k.reserved_bytes += s.reserved_bytes;
    k.live_allocations += live_allocations;
    k.allocated_bytes += s.allocated_bytes;
    k.allocations += s.allocations;
    k.freed_bytes += s.freed_bytes;
    k.frees += s.frees;
    if (live_allocations > 0)
      live.push_back({&s, analyzer ? analyzer->site(s.stack_hash, s.kind) : nullptr, live_bytes,
                      live_allocations});
  }
  uint64_t recorded = 0;
  for (const KindTotals& k : snap.kinds) recorded += k.allocations;
  snap.coverage = unrecorded_coverage(recorded, snap.unrecorded);
  return live;
}

// The sites shown (core/analysis/site_choice.h): by live bytes, then by
// leak rate (rates only with an analyzer).
std::vector<Ranked> shown_sites(const std::vector<Ranked>& live, SiteLimits limits) {
  std::vector<SiteRank> ranks;
  ranks.reserve(live.size());
  for (const Ranked& r : live) ranks.push_back({r.live_bytes, r.analysis ? r.analysis->verdict.rate_bytes_per_s : 0.0});
  std::vector<Ranked> chosen;
  for (size_t i : choose_sites(ranks, limits)) chosen.push_back(live[i]);
  return chosen;
}

// Adds a ranked site's figures (and analysis) to its merged site.
void add_to_site(SiteSnapshot& site, const Ranked& r, const ResolvedStack& rs, const ProcessAnalyzer* analyzer) {
  const SiteStats* s = r.stats;
  site.symbols_pending = site.symbols_pending || rs.symbols_pending;
  if (site.symbols_missing.empty()) site.symbols_missing = rs.symbols_missing;
  site.live_bytes += r.live_bytes;
  site.reserved_bytes += s->reserved_bytes;
  site.live_allocations += r.live_allocations;
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
    site.primed = site.primed || a->verdict.primed;
    // Merged parts: the first of them to have a verdict gives the site one.
    const double wait = analyzer->seconds_until_verdict(a->verdict);
    site.verdict_in_s = site.verdict_in_s < 0 ? wait : std::min(site.verdict_in_s, wait);
  }
}

// Distinct kernel stacks can be one stable stack (same code, other
// addresses after a library was mapped again): merge them.
void merge_sites(ProcessSnapshot& snap, Tracer& tracer, TracedProcess& proc, const std::vector<Ranked>& chosen,
                 const ProcessAnalyzer* analyzer) {
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
      // glibc's allocator under a light-tier brk or mmap: the site is its
      // caller, as in the heap tier (issue 35, item 7). The id stays the
      // physical stack's (core/symbols/stack_id.h).
      if (s->kind == LW_KIND_MMAP)
        site.frames.erase(site.frames.begin(),
                          site.frames.begin() + static_cast<std::ptrdiff_t>(allocator_leaf_frames(site.frames)));
      site.truncated = rs.end;
      snap.sites.push_back(std::move(site));
    }
    add_to_site(snap.sites[it->second], r, rs, analyzer);
  }
  std::stable_sort(snap.sites.begin(), snap.sites.end(),
                   [](const SiteSnapshot& a, const SiteSnapshot& b) {
                     return a.live_bytes > b.live_bytes;
                   });
}

}  // namespace

ProcessSnapshot take_snapshot(Tracer& tracer, TracedProcess& proc, SiteLimits limits,
                              bool read_kernel_live, const ProcessAnalyzer* analyzer,
                              const Counters& kernel_counters, const TracerStats& tracer_stats,
                              const LiveFilter* filter) {
  ProcessSnapshot snap;
  fill_process(snap, tracer, proc, read_kernel_live, kernel_counters, tracer_stats);
  const std::vector<FilteredLive> filtered = apply_filter(snap, proc, filter);
  if (analyzer) fill_analysis(snap, *analyzer);
  // Rank cheaply first (no symbolization), then symbolize what is shown.
  std::vector<Ranked> live = live_sites(snap, proc, filtered, analyzer);
  const std::vector<Ranked> chosen = shown_sites(live, limits);
  snap.sites_total = live.size();
  merge_sites(snap, tracer, proc, chosen, analyzer);
  ProcessCostPass::fill(snap, proc);  // after the sites shown were resolved
  return snap;
}

// Each (file, offset) once, at most kMaxProfileMappings: pprof finds a
// frame's mapping by its module, and a process mapping one file 15,000
// times would otherwise copy its path into every snapshot that many times
// (decision process-cost).
std::vector<PprofMapping> profile_mappings(const ParsedMaps& maps) {
  constexpr size_t kMaxProfileMappings = 4096;
  std::vector<PprofMapping> out;
  std::set<std::tuple<uint32_t, uint32_t, uint64_t, uint64_t>> seen;
  for (const MapEntry& m : maps.entries) {
    if (!m.is_file() || !m.executable) continue;
    if (!seen.emplace(m.dev_major, m.dev_minor, m.inode, m.offset).second) continue;
    if (out.size() >= kMaxProfileMappings) break;
    out.push_back({m.start, m.end, m.offset, m.path, ""});
  }
  return out;
}

}  // namespace lw
