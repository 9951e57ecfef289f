// SPDX-License-Identifier: Apache-2.0
#include "core/analysis/leak_analysis.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace lw {

namespace {

constexpr uint64_t kNsPerS = 1'000'000'000;

// A sampler's timer fires a little early or late. Merging only samples
// closer than 90% of the nominal spacing keeps every sample taken at the
// nominal rate (window_s / max_samples) despite that jitter, while a
// sampler running faster is still thinned to about the nominal spacing.
constexpr double kMergeTolerance = 0.9;

struct TrendFit {
  double slope = 0;  // Theil-Sen: median of pairwise slopes
  double tau = 0;    // Kendall tau-a over the same pairs
  double z = 0;      // Mann-Kendall statistic: tau in standard deviations
  double sd_tau = 0;
};

// Theil-Sen slope of one field of the samples against time, and the
// Mann-Kendall trend test. The test counts every pair (a comparison each);
// the slope's median is over every pair while there are at most max_pairs,
// else over an evenly strided subset of them (in (i, j) order): selecting
// the median is what costs, some 30 ns a slope on branchy random data. The
// variance is the one without tie correction, which overstates it when
// there are ties (a flat stretch): conservative for the trend test. Leaves
// the slopes in `slopes`, partitioned around the median, for upper_slope().
TrendFit fit(std::span<const SeriesSample> s, uint64_t SeriesSample::*field, size_t max_pairs,
             std::vector<double>& slopes) {
  TrendFit out;
  slopes.clear();
  const size_t n = s.size();
  if (n < 2) return out;
  const size_t pairs = n * (n - 1) / 2;
  const size_t stride = pairs <= max_pairs ? 1 : (pairs + max_pairs - 1) / max_pairs;
  int64_t concordance = 0;
  size_t k = 0;
  for (size_t i = 0; i + 1 < n; ++i) {
    for (size_t j = i + 1; j < n; ++j, ++k) {
      const uint64_t a = s[i].*field, b = s[j].*field;
      concordance += (b > a) - (b < a);
      const double dt = s[j].t_s - s[i].t_s;
      // SiteSeries::add keeps times increasing; dt > 0 is only defensive.
      if (k % stride == 0 && dt > 0)
        slopes.push_back((static_cast<double>(b) - static_cast<double>(a)) / dt);
    }
  }
  if (slopes.empty()) return out;
  const size_t mid = slopes.size() / 2;
  std::nth_element(slopes.begin(), slopes.begin() + mid, slopes.end());
  out.slope = slopes[mid];
  if (slopes.size() % 2 == 0) {
    // nth_element leaves the lower half before mid: its max is the other
    // middle element.
    out.slope = (out.slope + *std::max_element(slopes.begin(), slopes.begin() + mid)) / 2;
  }
  out.tau = static_cast<double>(concordance) / static_cast<double>(pairs);
  // sd of tau under "no trend": sqrt(Var S) / pairs, Var S = n(n-1)(2n+5)/18.
  const double nd = static_cast<double>(n);
  out.sd_tau = std::sqrt(2 * (2 * nd + 5) / (9 * nd * (nd - 1)));
  out.z = out.tau / out.sd_tau;
  return out;
}

// The upper end of the z-sigma confidence interval of the slope fit() just
// estimated (Sen 1968): the slope ranked (N + z sqrt(Var S)) / 2 of N, taken
// as a fraction of the slopes used. A flat stretch's slopes are all 0, so
// its interval is [0, 0] whatever the (overstated) variance.
double upper_slope(const TrendFit& f, std::vector<double>& slopes, double z) {
  if (slopes.empty()) return f.slope;
  const double q = std::min(1.0, (1 + z * f.sd_tau) / 2);
  const size_t mid = slopes.size() / 2;
  const size_t upper =
      std::clamp(static_cast<size_t>(q * static_cast<double>(slopes.size())), mid, slopes.size() - 1);
  std::nth_element(slopes.begin() + mid, slopes.begin() + upper, slopes.end());
  return std::max(f.slope, slopes[upper]);
}

double median_live(std::span<const SeriesSample> s, std::vector<double>& scratch) {
  scratch.clear();
  for (const SeriesSample& x : s) scratch.push_back(static_cast<double>(x.live_bytes));
  const size_t mid = scratch.size() / 2;
  std::nth_element(scratch.begin(), scratch.begin() + mid, scratch.end());
  return scratch[mid];
}

}  // namespace

void AgeBuckets::add(uint64_t now_ns, uint64_t alloc_ns, uint64_t size) {
  const uint64_t age_ns = now_ns > alloc_ns ? now_ns - alloc_ns : 0;
  if (age_ns < 60 * kNsPerS) {
    lt_1m += size;
  } else if (age_ns < 600 * kNsPerS) {
    lt_10m += size;
  } else if (age_ns < 3600 * kNsPerS) {
    lt_1h += size;
  } else {
    older += size;
  }
}

AgeBuckets age_buckets(uint64_t now_ns, std::span<const AllocAge> allocations) {
  AgeBuckets b;
  for (const AllocAge& a : allocations) b.add(now_ns, a.alloc_ns, a.size);
  return b;
}

std::string AnalysisParams::invalid_reason() const {
  // Written as !(x > 0) so that NaN is rejected too.
  if (!(window_s > 0)) return "window must be positive";
  if (max_samples < 3) return "max_samples must be at least 3";
  if (max_pairs < 1) return "max_pairs must be at least 1";
  if (min_samples < 4 || min_samples > max_samples)
    return "min_samples must be between 4 and max_samples";
  if (!(min_span_s >= 0)) return "min_span must be non-negative";
  if (!(min_rate_bytes_per_s > 0)) return "min_rate must be positive";
  if (!(z > 0)) return "z must be positive";
  if (!(min_recent_fraction >= 0)) return "min_recent_fraction must be non-negative";
  if (!(min_relative_growth >= 0)) return "min_relative_growth must be non-negative";
  if (!(max_old_drawdown >= 0)) return "max_old_drawdown must be non-negative";
  if (max_sites < 1) return "max_sites must be at least 1";
  if (!(old_age_s > 0)) return "old_age must be positive";
  if (!(primed_min_span_s >= 0)) return "primed_min_span must be non-negative";
  return {};
}

const char* trend_name(Trend t) {
  switch (t) {
    case Trend::kUnknown: return "unknown";
    case Trend::kStable: return "stable";
    case Trend::kGrowing: return "growing";
    case Trend::kLeak: return "leak";
  }
  return "unknown";
}

void SiteSeries::add(const SeriesSample& s, const AnalysisParams& p) {
  const size_t n = samples_.size();
  if (n > 0) {
    const SeriesSample& newest = samples_.back();
    if (s.t_s < newest.t_s) return;
    const double min_gap = p.window_s / static_cast<double>(p.max_samples) * kMergeTolerance;
    // The newest sample is provisional until it is far enough from the one
    // before it; until then each new sample replaces it. The committed
    // samples are then at least min_gap apart, so the ring spans the window.
    if (s.t_s == newest.t_s || (n >= 2 && newest.t_s - samples_[n - 2].t_s < min_gap)) {
      samples_.back() = s;
      return;
    }
  }
  samples_.push_back(s);
  // At most max_samples, all within the window. Erasing at the front moves
  // at most max_samples small structs, which is cheaper than the classify
  // that follows each sample.
  size_t drop = samples_.size() > p.max_samples ? samples_.size() - p.max_samples : 0;
  while (drop < samples_.size() && s.t_s - samples_[drop].t_s > p.window_s) ++drop;
  samples_.erase(samples_.begin(), samples_.begin() + static_cast<ptrdiff_t>(drop));
}

double seconds_until_verdict(const LeakVerdict& v, const AnalysisParams& p, double interval_s) {
  if (v.trend != Trend::kUnknown) return 0;
  const double min_gap = p.window_s / static_cast<double>(p.max_samples) * kMergeTolerance;
  const double interval = interval_s > 0 ? interval_s : min_gap;
  const double spacing = interval * std::ceil(min_gap / interval - 1e-9);
  const double span_left = std::max(0.0, std::min(p.min_span_s, p.window_s / 2) - v.span_s);
  const size_t samples_left = v.samples < p.min_samples ? p.min_samples - v.samples : 0;
  const double wait = std::max(span_left, static_cast<double>(samples_left) * spacing);
  // A verdict comes with a sample: round up to the sampler's interval.
  return interval * std::ceil(wait / interval - 1e-9);
}

LeakVerdict SiteSeries::classify(const AnalysisParams& p) const {
  std::vector<double> scratch;
  return classify(p, scratch);
}

LeakVerdict SiteSeries::classify(const AnalysisParams& p, std::vector<double>& scratch) const {
  LeakVerdict v;
  const std::span<const SeriesSample> all(samples_);
  const size_t n = all.size();
  v.samples = n;
  if (n < 2) return v;
  v.span_s = all.back().t_s - all.front().t_s;

  const TrendFit whole = fit(all, &SeriesSample::live_bytes, p.max_pairs, scratch);
  v.rate_bytes_per_s = whole.slope;
  v.consistency = whole.tau;
  v.trend_z = whole.z;
  // Against at least one byte: a site that was empty for most of the window
  // and now grows has an unbounded relative growth, which is what it is.
  v.relative_growth = v.rate_bytes_per_s * v.span_s / std::max(1.0, median_live(all, scratch));
  // On the 3-point running median of the old bytes, so that one bad sample
  // (up or down) is no fall: a real fall shows in two consecutive samples.
  uint64_t old_peak = 0;
  for (size_t k = 1; k + 1 < n; ++k) {
    const uint64_t a = all[k - 1].old_bytes, b = all[k].old_bytes, c = all[k + 1].old_bytes;
    const uint64_t med = std::max(std::min(a, b), std::min(std::max(a, b), c));
    old_peak = std::max(old_peak, med);
    v.old_drawdown_bytes = std::max(v.old_drawdown_bytes, old_peak - med);
  }

  // Capped at half the window, so that a window configured shorter than
  // min_span_s still gives verdicts.
  if (n < p.min_samples || v.span_s < std::min(p.min_span_s, p.window_s / 2)) return v;

  // A significant upward trend over the window. Most sites stop here, which
  // spares them the recent half's fits.
  if (v.rate_bytes_per_s < p.min_rate_bytes_per_s || v.trend_z < p.z) {
    v.trend = Trend::kStable;
    return v;
  }
  // The recent half (the middle sample belongs to it when n is odd).
  const std::span<const SeriesSample> recent = all.last(n - n / 2);
  const TrendFit recent_live = fit(recent, &SeriesSample::live_bytes, p.max_pairs, scratch);
  v.recent_rate_bytes_per_s = recent_live.slope;
  v.recent_rate_upper_bytes_per_s = upper_slope(recent_live, scratch, p.z);
  v.recent_old_rate_bytes_per_s = fit(recent, &SeriesSample::old_bytes, p.max_pairs, scratch).slope;

  // That has not clearly stopped: a cache that filled and then plateaued
  // has a positive rate over a window that includes the fill, but its
  // recent half is flat, and flat with a tight interval. The upper bound is
  // used, not the estimate, so that churn on a leaking site (a noisy recent
  // half) does not veto it.
  const double needed_recent = p.min_recent_fraction * v.rate_bytes_per_s;
  if (v.recent_rate_upper_bytes_per_s < needed_recent) {
    v.trend = Trend::kStable;
    return v;
  }
  // What leaks stays: bytes older than a minute must grow with the live
  // bytes, and this is positive evidence, so the estimate is used. Churn
  // (a queue backing up, a cache whose entries are replaced) grows young
  // bytes only. And leaked bytes are never given back: a large fall of the
  // old bytes anywhere in the window (a collector's sweep, a batch freed)
  // means the growth is a cycle. Theil-Sen alone would take one such fall
  // for an outlier.
  const bool ages =
      v.recent_old_rate_bytes_per_s >= needed_recent &&
      static_cast<double>(v.old_drawdown_bytes) <=
          p.max_old_drawdown * v.rate_bytes_per_s * v.span_s;
  const bool large = v.relative_growth >= p.min_relative_growth;
  v.trend = ages && large ? Trend::kLeak : Trend::kGrowing;
  v.suspected_leak = v.trend == Trend::kLeak;
  return v;
}

ProcessAnalysis::ProcessAnalysis(const AnalysisParams& params) : params_(params) {
  if (std::string why = params_.invalid_reason(); !why.empty())
    throw std::invalid_argument("leak analysis: " + why);
}

void ProcessAnalysis::ingest(double t_s, std::span<const SiteSample> sites) {
  ++generation_;
  AgeBuckets total;
  for (const SiteSample& s : sites) {
    total.lt_1m += s.ages.lt_1m;
    total.lt_10m += s.ages.lt_10m;
    total.lt_1h += s.ages.lt_1h;
    total.older += s.ages.older;
  }
  process_ages_ = total;
  uint64_t total_old = 0;
  for (const SiteSample& s : sites) total_old += s.old_bytes.value_or(s.ages.bytes_older_than_1m());
  process_.add({t_s, total.total(), total_old}, params_);

  // Over the cap, only the batch's largest max_sites can survive the cap
  // below, so the rest are not taken at all: the transient growth of the
  // map stays within max_sites whatever the batch size.
  auto larger = [](const SiteSample& a, const SiteSample& b) {
    const uint64_t la = a.ages.total(), lb = b.ages.total();
    return la != lb ? la > lb : a.key < b.key;
  };
  std::vector<const SiteSample*> taken;
  taken.reserve(std::min(sites.size(), params_.max_sites));
  if (sites.size() > params_.max_sites) {
    std::vector<const SiteSample*> order;
    order.reserve(sites.size());
    for (const SiteSample& s : sites) order.push_back(&s);
    auto cut = order.begin() + static_cast<ptrdiff_t>(params_.max_sites);
    std::nth_element(order.begin(), cut, order.end(),
                     [&](const SiteSample* a, const SiteSample* b) { return larger(*a, *b); });
    for (auto it = cut; it != order.end(); ++it) sites_.erase((*it)->key);
    sites_dropped_by_cap_ += static_cast<uint64_t>(order.end() - cut);
    taken.assign(order.begin(), cut);
  } else {
    for (const SiteSample& s : sites) taken.push_back(&s);
  }

  for (const SiteSample* s : taken) {
    const uint64_t live = s->ages.total();
    // A site with nothing live that is not tracked has nothing to analyse;
    // callers may pass every site they ever saw (HeapTracker keeps them).
    if (live == 0 && !sites_.contains(s->key)) continue;
    Site& site = sites_[s->key];
    site.series.add({t_s, live, s->old_bytes.value_or(s->ages.bytes_older_than_1m())}, params_);
    site.ages = s->ages;
    site.seen_in = generation_;
    if (live > 0) site.last_present_t = t_s;
  }

  for (auto it = sites_.begin(); it != sites_.end();) {
    Site& site = it->second;
    if (site.seen_in != generation_) {
      site.series.add({t_s, 0, 0}, params_);
      site.ages = {};
    }
    // A site with no live bytes for a whole window has nothing left to say.
    if (t_s - site.last_present_t >= params_.window_s) {
      it = sites_.erase(it);
    } else {
      ++it;
    }
  }
  if (sites_.size() > params_.max_sites) evict_smallest();
}

void ProcessAnalysis::evict_smallest() {
  // Known sites missing from the batch (now at zero) can push the map over
  // the cap; they are the smallest and go first.
  std::vector<std::pair<uint64_t, uint64_t>> by_size;  // (live bytes, key)
  by_size.reserve(sites_.size());
  for (const auto& [key, site] : sites_) by_size.emplace_back(site.ages.total(), key);
  auto cut = by_size.begin() + static_cast<ptrdiff_t>(params_.max_sites);
  std::nth_element(by_size.begin(), cut, by_size.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (auto it = cut; it != by_size.end(); ++it) sites_.erase(it->second);
  sites_dropped_by_cap_ += static_cast<uint64_t>(by_size.end() - cut);
}

LeakVerdict ProcessAnalysis::process_verdict() const { return process_.classify(params_); }

std::vector<SiteReport> ProcessAnalysis::site_reports() const {
  std::vector<SiteReport> out;
  out.reserve(sites_.size());
  std::vector<double> scratch;
  for (const auto& [key, site] : sites_)
    out.push_back({key, site.ages, site.series.classify(params_, scratch)});
  std::sort(out.begin(), out.end(),
            [](const SiteReport& a, const SiteReport& b) { return a.key < b.key; });
  return out;
}

size_t ProcessAnalysis::memory_bytes() const {
  // A node of libstdc++'s unordered_map: the value, the next pointer and
  // the cached hash; plus one pointer per bucket.
  size_t bytes = sites_.size() * (sizeof(std::pair<const uint64_t, Site>) + 2 * sizeof(void*)) +
                 sites_.bucket_count() * sizeof(void*) + process_.memory_bytes();
  for (const auto& [key, site] : sites_) bytes += site.series.memory_bytes();
  return bytes;
}

}  // namespace lw
