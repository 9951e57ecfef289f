// SPDX-License-Identifier: Apache-2.0
#include "core/analysis/analyzer.h"

#include <algorithm>
#include <vector>

namespace lw {

ProcessAnalyzer::ProcessAnalyzer(const AnalysisParams& params)
    : per_kind_{ProcessAnalysis(params), ProcessAnalysis(params), ProcessAnalysis(params),
                ProcessAnalysis(params), ProcessAnalysis(params), ProcessAnalysis(params),
                ProcessAnalysis(params)} {}
static_assert(LW_KIND_MAX == 7, "one ProcessAnalysis per kind above");

uint64_t ProcessAnalyzer::key(uint64_t stack_hash, uint32_t kind) {
  // Stack hashes are well mixed already; the kind goes in by rotation so the
  // same stack of two kinds gets two keys.
  return stack_hash ^ (static_cast<uint64_t>(kind) * 0x9e3779b97f4a7c15ull);
}

void ProcessAnalyzer::prime(double t_s, double rise_span_s, double rise_rate_bytes_per_s) {
  const AnalysisParams& p = params();
  early_.reset();
  if (!(p.primed_min_span_s > 0) || !(rise_span_s > 0)) return;
  const double main_span = std::min(p.min_span_s, p.window_s / 2);
  const double span = std::max(p.primed_min_span_s, main_span - rise_span_s);
  if (span >= main_span) return;  // nothing gained
  AnalysisParams q = p;
  q.min_span_s = span;
  // The old-bytes evidence scaled as `top --analysis-window` scales it: a
  // leak from the series' start shows old bytes rising through the recent
  // half once the span is twice the age (docs/analysis.md, the arithmetic).
  q.old_age_s = std::min(p.old_age_s, span / 2);
  early_.emplace(Early{ProcessAnalysis(q), t_s, rise_rate_bytes_per_s, {}});
}

LeakVerdict ProcessAnalyzer::process_verdict(uint32_t kind) const {
  LeakVerdict v = per_kind_[kind].process_verdict();
  if (kind == LW_KIND_HEAP && early_ && v.trend == Trend::kUnknown && early_->process.suspected_leak)
    return early_->process;
  return v;
}

void ProcessAnalyzer::sample(const HeapTracker& heap, double t_s, uint64_t now_ns) {
  if (last_t_s_ >= 0 && t_s > last_t_s_) interval_s_ = t_s - last_t_s_;
  last_t_s_ = t_s;
  // The early analysis ends once the main one has had its minimum span.
  if (early_ && t_s - early_->started_t_s > std::min(params().min_span_s, params().window_s / 2) +
                                                 params().window_s / static_cast<double>(params().max_samples))
    early_.reset();
  // One pass over the live records gives every site's age structure (and,
  // with an old-age threshold other than the buckets' minute, its old bytes).
  const AnalysisParams& p = params();
  const bool own_old_age = p.old_age_s != 60;
  const uint64_t old_ns = static_cast<uint64_t>(p.old_age_s * 1e9);
  std::vector<AgeBuckets> ages(heap.sites().size());
  std::vector<uint64_t> old(own_old_age ? heap.sites().size() : 0);
  const uint64_t early_old_ns =
      early_ ? static_cast<uint64_t>(early_->analysis.params().old_age_s * 1e9) : 0;
  std::vector<uint64_t> early_old(early_ ? heap.sites().size() : 0);
  // Committed bytes: an mmap record's reserved part is not live
  // (decision reserved-address-space).
  heap.for_each_live_at([&](uint64_t addr, const LiveRecord& r) {
    const uint64_t bytes = heap.committed_bytes(addr, r);
    ages[r.site].add(now_ns, r.alloc_ns, bytes);
    if (own_old_age && now_ns > r.alloc_ns && now_ns - r.alloc_ns >= old_ns) old[r.site] += bytes;
    if (early_ && now_ns > r.alloc_ns && now_ns - r.alloc_ns >= early_old_ns) early_old[r.site] += bytes;
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
  if (!early_) return;
  std::vector<SiteSample> heap_sites;
  for (size_t i = 0; i < sites.size(); ++i)
    if (sites[i].kind == LW_KIND_HEAP)
      heap_sites.push_back({key(sites[i].stack_hash, sites[i].kind), ages[i], early_old[i]});
  early_->analysis.ingest(t_s, heap_sites);
  // A leak the rise before the escalation can vouch for: no faster than it
  // by more than 1 / min_recent_fraction.
  const double max_rate = early_->rise_rate / std::max(params().min_recent_fraction, 1e-9);
  auto vouched = [&](const LeakVerdict& v) {
    return v.suspected_leak && v.rate_bytes_per_s <= max_rate;
  };
  early_->process = early_->analysis.process_verdict();
  if (!vouched(early_->process)) early_->process = {};
  early_->process.primed = early_->process.suspected_leak;
  for (SiteReport& r : early_->analysis.site_reports()) {
    if (!vouched(r.verdict)) continue;
    auto it = latest_.find(r.key);
    if (it == latest_.end() || it->second.verdict.trend != Trend::kUnknown) continue;
    r.verdict.primed = true;
    it->second.verdict = r.verdict;
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
  if (early_) bytes += early_->analysis.memory_bytes();
  return bytes;
}

}  // namespace lw
