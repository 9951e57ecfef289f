/* SPDX-License-Identifier: Apache-2.0 */
// Leak analysis: from periodic snapshots of live bytes per allocation site,
// decide which sites (and which processes) are leaking. docs/analysis.md
// gives the algorithm, every parameter with the reasoning behind its
// default, and what each verdict means for the operator.
//
// In short, per site and over a sliding window of samples:
//  - the growth rate of live bytes is the Theil-Sen estimate (median of
//    pairwise slopes), so a few outlying samples cannot move it;
//  - a site is a `leak` when its live bytes grew steadily over the window,
//    are still growing in its recent half, and the bytes older than one
//    minute grew there too and never fell (leaked memory ages and stays;
//    churn does not age, a collector's garbage falls);
//  - `growing` is an upward trend without all of that evidence yet;
//  - `stable` is anything else: flat, shrinking, oscillating, plateaued.
//
// Everything here is pure and deterministic: no I/O, no clock. The caller
// samples (HeapTracker + age_buckets()) and passes timestamps in.
//
// Thread-safety: none. SiteSeries and ProcessAnalysis are meant to be owned
// and used by one thread (the consumer thread that owns the HeapTracker);
// const member functions do not mutate shared state, so concurrent const
// calls on an object no one is modifying are safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace lw {

// Bytes still live, by how long ago they were allocated. The boundaries are
// fixed: they are what the operator reads, and the 1-minute boundary is also
// the leak evidence's age threshold (bytes_older_than_1m()).
struct AgeBuckets {
  uint64_t lt_1m = 0;   // age < 60 s
  uint64_t lt_10m = 0;  // 60 s <= age < 600 s
  uint64_t lt_1h = 0;   // 600 s <= age < 3600 s
  uint64_t older = 0;   // age >= 3600 s

  // Counts one live allocation. An alloc_ns later than now_ns (the sample's
  // clock read before the last events were applied) counts as age 0.
  void add(uint64_t now_ns, uint64_t alloc_ns, uint64_t size);
  uint64_t total() const { return lt_1m + lt_10m + lt_1h + older; }
  uint64_t bytes_older_than_1m() const { return lt_10m + lt_1h + older; }

  friend bool operator==(const AgeBuckets&, const AgeBuckets&) = default;
};

// One live allocation's timestamp (kernel monotonic ns) and size.
struct AllocAge {
  uint64_t alloc_ns = 0;
  uint64_t size = 0;
};

AgeBuckets age_buckets(uint64_t now_ns, std::span<const AllocAge> allocations);

// Every knob of the analysis. The defaults are argued in docs/analysis.md;
// in short, with 10 s samples they call a 1 MiB/min leak a leak after 120 s
// of data (150 s at worst with the tests' churn noise), and never call a
// cache that has plateaued a leak.
struct AnalysisParams {
  // Samples older than this (relative to the newest) leave the window.
  double window_s = 600;
  // Ring size per series. Samples closer together than 90% of
  // window_s / max_samples are merged (the newest is replaced), so a fast
  // sampler still covers the window with at most this many samples.
  size_t max_samples = 60;
  // Theil-Sen takes the median of every pair's slope while there are at
  // most this many pairs, else of an evenly strided subset: 60 samples make
  // 1770 pairs, of which every 4th is used (443); the recent half's 30
  // samples make 435, all used. The trend test always counts every pair.
  size_t max_pairs = 512;
  // No verdict (kUnknown) before the window holds this many samples
  // spanning this long (or half the window, if shorter): the partial window
  // the first verdict is based on.
  size_t min_samples = 8;
  double min_span_s = 120;
  // An upward trend needs at least this rate (Theil-Sen, bytes/s) ...
  double min_rate_bytes_per_s = 64;
  // ... and must be significant: the Mann-Kendall statistic (Kendall tau
  // in standard deviations under "no trend") at least z. The same z sets
  // the confidence interval of the recent rate below.
  double z = 3;
  // In the recent half of the window's samples, live bytes must not have
  // clearly stopped growing: the upper end of the recent rate's interval
  // at least this fraction of the whole window's rate. And for a leak, the
  // bytes older than 1 minute must grow there at least that fast (estimate).
  double min_recent_fraction = 0.5;
  // A leak must have grown by at least this fraction of the site's median
  // live bytes over the window's span; below it the trend is `growing`.
  double min_relative_growth = 0.01;
  // A leak's bytes older than 1 minute must not have fallen, peak to
  // trough within the window, by more than this fraction of the window's
  // growth (rate * span).
  double max_old_drawdown = 0.25;
  // ProcessAnalysis keeps at most this many sites, the largest by live
  // bytes in the latest sample.
  size_t max_sites = 10000;
  // The age past which live bytes are "old", the leak evidence that what
  // is added stays (docs/analysis.md). 60 s, the AgeBuckets boundary; only
  // `top --analysis-window` (demos, tests) scales it with the window, and
  // then the caller passes each site's old bytes (SiteSample::old_bytes).
  double old_age_s = 60;
  // An escalated process's heap analysis may give a `leak` verdict on as
  // little as this much heap data when the growth seen before the
  // escalation makes up the rest of min_span_s (ProcessAnalyzer::prime,
  // docs/analysis.md "Escalated processes"). 0: never.
  double primed_min_span_s = 60;

  // Empty when usable, else what is wrong, for the operator.
  std::string invalid_reason() const;
};

enum class Trend : uint8_t {
  kUnknown,  // not enough samples or span yet
  kStable,   // not growing: flat, shrinking, oscillating, plateaued
  kGrowing,  // growing, but the leak evidence is not all there (yet)
  kLeak,     // growing steadily, still growing, and the growth ages
};

const char* trend_name(Trend t);  // "unknown", "stable", "growing", "leak"

struct LeakVerdict;
// About how long, in seconds, until a series whose latest verdict is `v`
// can have a verdict (min_samples samples spanning min_span_s, capped at
// half the window), when sampled every interval_s from now on: 0 once it
// has one. Samples closer than the ring's spacing are merged (SiteSeries),
// so the samples still missing come at that spacing, rounded up to whole
// intervals.
double seconds_until_verdict(const LeakVerdict& v, const AnalysisParams& p, double interval_s);

struct LeakVerdict {
  Trend trend = Trend::kUnknown;
  // trend == kLeak; a field so exporters can alert on it without the enum.
  bool suspected_leak = false;
  // Theil-Sen slope of live bytes over the window (0 with < 2 samples).
  double rate_bytes_per_s = 0;
  // The same over the recent half of the samples, for live bytes (with the
  // upper end of its z-sigma interval) and for bytes older than 1 minute.
  // Computed only when the whole window shows an upward trend (rate and
  // trend_z pass), as only then they matter; 0 otherwise.
  double recent_rate_bytes_per_s = 0;
  double recent_rate_upper_bytes_per_s = 0;
  double recent_old_rate_bytes_per_s = 0;
  // Kendall tau of live bytes against time, in [-1, 1]: how consistently
  // the series moves in the direction of the rate.
  double consistency = 0;
  // The same in standard deviations under "no trend" (Mann-Kendall): the
  // confidence figure, compared with AnalysisParams::z.
  double trend_z = 0;
  // rate * span / median live bytes.
  double relative_growth = 0;
  // Largest peak-to-trough fall of the bytes older than 1 minute (of their
  // 3-sample running median: one bad sample is not a fall).
  uint64_t old_drawdown_bytes = 0;
  size_t samples = 0;
  double span_s = 0;
  // A `leak` called early, on less than min_span_s of this series, with
  // the process's growth before it escalated making up the rest
  // (ProcessAnalyzer::prime).
  bool primed = false;
};

struct SeriesSample {
  double t_s = 0;  // monotonic seconds; non-decreasing within a series
  uint64_t live_bytes = 0;
  uint64_t old_bytes = 0;  // live bytes allocated more than 60 s ago
};

// A bounded time series of one site's (or one process's) live bytes.
// The parameters are passed per call, not stored, so that thousands of
// series per process do not each carry a copy; pass the same ones always.
class SiteSeries {
 public:
  // Appends s, or replaces the newest sample (same timestamp, or the
  // newest is still too close to the one before: see max_samples), then
  // drops samples outside the window. A sample older than the newest is
  // ignored: timestamps must not go backwards.
  void add(const SeriesSample& s, const AnalysisParams& p);

  // scratch is reused between calls to avoid an allocation per series.
  LeakVerdict classify(const AnalysisParams& p, std::vector<double>& scratch) const;
  LeakVerdict classify(const AnalysisParams& p) const;

  std::span<const SeriesSample> samples() const { return samples_; }
  size_t memory_bytes() const { return samples_.capacity() * sizeof(SeriesSample); }

 private:
  std::vector<SeriesSample> samples_;  // oldest first
};

// One site's sample: the caller's key for the site (e.g. the stable stack
// id, mixed with the allocation kind if kinds are kept apart) and the ages
// of its live bytes.
struct SiteSample {
  uint64_t key = 0;
  AgeBuckets ages;
  // The live bytes older than AnalysisParams::old_age_s when that is not
  // 60 s; absent: ages.bytes_older_than_1m().
  std::optional<uint64_t> old_bytes;
};

struct SiteReport {
  uint64_t key = 0;
  AgeBuckets ages;  // as of the latest sample
  LeakVerdict verdict;
};

// The analysis of one process: a series per site, and one for the whole
// process (sum over all sites of each sample, including the sites the cap
// leaves out).
class ProcessAnalysis {
 public:
  // Throws std::invalid_argument if params.invalid_reason() is not empty
  // (a configuration error).
  explicit ProcessAnalysis(const AnalysisParams& params = {});

  // One sample of the sites, at t_s (monotonic seconds, increasing between
  // calls). Keys must be unique within a batch (a repeated key keeps its
  // last sample). A site not tracked yet is taken when it has live bytes.
  // A tracked site that is missing from the batch has no live bytes: it
  // gets zero samples, and is forgotten once it has had no live bytes for
  // a whole window. When there are more than
  // max_sites sites, the smallest by live bytes in this sample are
  // forgotten or not taken (ties: the larger key goes).
  void ingest(double t_s, std::span<const SiteSample> sites);

  LeakVerdict process_verdict() const;
  const AgeBuckets& process_ages() const { return process_ages_; }
  // Every tracked site, by key.
  std::vector<SiteReport> site_reports() const;

  size_t site_count() const { return sites_.size(); }
  // Sites forgotten or not taken because of max_sites, summed over ingest()
  // calls (a site left out of every sample counts every time): not 0 means
  // the cap binds, and the smallest sites go unanalysed.
  uint64_t sites_dropped_by_cap() const { return sites_dropped_by_cap_; }
  // Heap held by this object, an estimate (the hash map's nodes included).
  size_t memory_bytes() const;
  const AnalysisParams& params() const { return params_; }

 private:
  struct Site {
    SiteSeries series;
    AgeBuckets ages;
    uint64_t seen_in = 0;        // ingest() generation of the latest sample
    double last_present_t = 0;   // when it last had live bytes
  };
  void evict_smallest();

  AnalysisParams params_;
  std::unordered_map<uint64_t, Site> sites_;
  SiteSeries process_;
  AgeBuckets process_ages_;
  uint64_t generation_ = 0;
  uint64_t sites_dropped_by_cap_ = 0;
};

}  // namespace lw
