// SPDX-License-Identifier: Apache-2.0
#include "core/analyzer.h"

#include <time.h>

#include <vector>

namespace lw {

uint64_t monotonic_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

ProcessAnalyzer::ProcessAnalyzer(const AnalysisParams& params)
    : per_kind_{ProcessAnalysis(params), ProcessAnalysis(params), ProcessAnalysis(params),
                ProcessAnalysis(params), ProcessAnalysis(params)} {}

uint64_t ProcessAnalyzer::key(uint64_t stack_hash, uint32_t kind) {
  // Stack hashes are well mixed already; the kind goes in by rotation so the
  // same stack of two kinds gets two keys.
  return stack_hash ^ (static_cast<uint64_t>(kind) * 0x9e3779b97f4a7c15ull);
}

void ProcessAnalyzer::sample(const HeapTracker& heap, double t_s, uint64_t now_ns) {
  if (last_t_s_ >= 0 && t_s > last_t_s_) interval_s_ = t_s - last_t_s_;
  last_t_s_ = t_s;
  // One pass over the live records gives every site's age structure (and,
  // with an old-age threshold other than the buckets' minute, its old bytes).
  const AnalysisParams& p = params();
  const bool own_old_age = p.old_age_s != 60;
  const uint64_t old_ns = static_cast<uint64_t>(p.old_age_s * 1e9);
  std::vector<AgeBuckets> ages(heap.sites().size());
  std::vector<uint64_t> old(own_old_age ? heap.sites().size() : 0);
  heap.for_each_live([&](const LiveRecord& r) {
    ages[r.site].add(now_ns, r.alloc_ns, heap.counted_bytes(r));
    if (own_old_age && now_ns > r.alloc_ns && now_ns - r.alloc_ns >= old_ns)
      old[r.site] += heap.counted_bytes(r);
  });
  std::array<std::vector<SiteSample>, LW_KIND_MAX> by_kind;
  const std::vector<SiteStats>& sites = heap.sites();
  for (size_t i = 0; i < sites.size(); ++i) {
    SiteSample s{key(sites[i].stack_hash, sites[i].kind), ages[i], std::nullopt};
    if (own_old_age) s.old_bytes = old[i];
    by_kind[sites[i].kind].push_back(s);
  }
  latest_.clear();
  for (uint32_t k = 0; k < LW_KIND_MAX; ++k) {
    if (by_kind[k].empty() && per_kind_[k].site_count() == 0) continue;
    per_kind_[k].ingest(t_s, by_kind[k]);
    for (const SiteReport& r : per_kind_[k].site_reports()) latest_[r.key] = {r.ages, r.verdict};
  }
}

const SiteAnalysis* ProcessAnalyzer::site(uint64_t stack_hash, uint32_t kind) const {
  auto it = latest_.find(key(stack_hash, kind));
  return it == latest_.end() ? nullptr : &it->second;
}

double ProcessAnalyzer::seconds_until_verdict(const LeakVerdict& v) const {
  return lw::seconds_until_verdict(v, params(), interval_s_);
}

size_t ProcessAnalyzer::memory_bytes() const {
  size_t bytes = latest_.size() * (sizeof(SiteAnalysis) + 32);
  for (const ProcessAnalysis& a : per_kind_) bytes += a.memory_bytes();
  return bytes;
}

}  // namespace lw
