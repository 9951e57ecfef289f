// SPDX-License-Identifier: Apache-2.0
#include "core/analysis/leak_analysis.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <vector>

namespace lw {
namespace {

// Time is simulated: a site's allocations are made second by second with
// their timestamps, and every 10 s (the daemon's default interval) the ages
// of what is live are bucketed and fed to the analysis, as the daemon does
// from its HeapTracker. Nothing sleeps.
constexpr uint64_t kNsPerS = 1'000'000'000;
constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kGiB = kMiB << 10;
constexpr int kSampleInterval = 10;
constexpr double kLeakPerS = 1048576.0 / 60;  // 1 MiB/min

// One site's live allocations, oldest first.
class SimSite {
 public:
  void alloc(int t_s, uint64_t size) {
    live_.push_back({static_cast<uint64_t>(t_s) * kNsPerS, size});
    bytes_ += size;
  }
  void free_oldest() {
    bytes_ -= live_[head_].size;
    if (++head_ * 2 > live_.size()) {  // compact now and then, not per free
      live_.erase(live_.begin(), live_.begin() + static_cast<ptrdiff_t>(head_));
      head_ = 0;
    }
  }
  void free_all() {
    live_.clear();
    head_ = 0;
    bytes_ = 0;
  }
  uint64_t bytes() const { return bytes_; }
  AgeBuckets ages(int t_s) const {
    return age_buckets(static_cast<uint64_t>(t_s) * kNsPerS,
                       std::span<const AllocAge>(live_).subspan(head_));
  }

 private:
  std::vector<AllocAge> live_;
  size_t head_ = 0;
  uint64_t bytes_ = 0;
};

SeriesSample sample_of(int t_s, const AgeBuckets& b) {
  return {static_cast<double>(t_s), b.total(), b.bytes_older_than_1m()};
}

// Runs step(t) for every second of [0, seconds], and feeds the series with
// the site's ages every kSampleInterval; on_verdict(t, verdict) sees each
// classification.
template <typename Step, typename OnVerdict>
void simulate(int seconds, SimSite& site, const AnalysisParams& p, Step step,
              OnVerdict on_verdict) {
  SiteSeries series;
  std::vector<double> scratch;
  for (int t = 0; t <= seconds; ++t) {
    step(t);
    if (t % kSampleInterval != 0) continue;
    series.add(sample_of(t, site.ages(t)), p);
    on_verdict(t, series.classify(p, scratch));
  }
}

// Accumulates 1 MiB/min in whole bytes, a record a second.
struct SteadyLeak {
  double owed = 0;
  void step(int t, SimSite& site) {
    owed += kLeakPerS;
    const auto whole = static_cast<uint64_t>(owed);
    owed -= static_cast<double>(whole);
    site.alloc(t, whole);
  }
};

TEST(AgeBuckets, Boundaries) {
  const uint64_t now = 10'000 * kNsPerS;
  const std::vector<AllocAge> allocs = {
      {now, 1},                        // age 0
      {now - 60 * kNsPerS + 1, 2},     // just under 1 min
      {now - 60 * kNsPerS, 4},         // 1 min
      {now - 600 * kNsPerS + 1, 8},    // just under 10 min
      {now - 600 * kNsPerS, 16},       // 10 min
      {now - 3600 * kNsPerS + 1, 32},  // just under 1 h
      {now - 3600 * kNsPerS, 64},      // 1 h
      {0, 128},                        // boot
      {now + 5 * kNsPerS, 256},        // stamped after the sample's clock read
  };
  const AgeBuckets b = age_buckets(now, allocs);
  EXPECT_EQ(b.lt_1m, 1u + 2 + 256);
  EXPECT_EQ(b.lt_10m, 4u + 8);
  EXPECT_EQ(b.lt_1h, 16u + 32);
  EXPECT_EQ(b.older, 64u + 128);
  EXPECT_EQ(b.total(), 511u);
  EXPECT_EQ(b.bytes_older_than_1m(), 511u - b.lt_1m);
}

TEST(AnalysisParams, DefaultsAreValidAndBadOnesAreRejected) {
  EXPECT_EQ(AnalysisParams{}.invalid_reason(), "");
  AnalysisParams p;
  p.min_samples = 2;
  EXPECT_NE(p.invalid_reason(), "");
  EXPECT_THROW(ProcessAnalysis{p}, std::invalid_argument);
  p = {};
  p.window_s = std::nan("");
  EXPECT_NE(p.invalid_reason(), "");
  p = {};
  p.min_samples = p.max_samples + 1;
  EXPECT_NE(p.invalid_reason(), "");
}

TEST(SiteSeries, UnknownUntilMinimumSpanAndSamples) {
  const AnalysisParams p;
  SiteSeries s;
  for (int t = 0; t < 120; t += kSampleInterval) {
    s.add({static_cast<double>(t), static_cast<uint64_t>(t) * 100'000, 0}, p);
    EXPECT_EQ(s.classify(p).trend, Trend::kUnknown) << t;
  }
}

TEST(SiteSeries, WindowShorterThanMinimumSpanStillGivesVerdicts) {
  // Any window_s the configuration accepts (from 1 s) must work: the
  // minimum span is capped at half the window.
  AnalysisParams p;
  p.window_s = 60;
  ASSERT_EQ(p.invalid_reason(), "");
  SiteSeries s;
  for (int t = 0; t <= 120; t += 5) s.add({static_cast<double>(t), 1000, 1000}, p);
  EXPECT_EQ(s.classify(p).trend, Trend::kStable);
}

TEST(SiteSeries, RateWithinFivePercentOnACleanLine) {
  const double rate = 12'345;  // bytes/s
  auto line = [&](int t) { return static_cast<uint64_t>(5 * kMiB + rate * t); };
  AnalysisParams all_pairs;
  AnalysisParams strided;
  strided.max_pairs = 100;  // of 1770: every 18th pair
  SiteSeries s;
  for (int t = 0; t <= 600; t += kSampleInterval) s.add({static_cast<double>(t), line(t), 0}, all_pairs);
  for (const AnalysisParams& p : {all_pairs, strided}) {
    const LeakVerdict v = s.classify(p);
    EXPECT_NEAR(v.rate_bytes_per_s, rate, rate * 0.05) << p.max_pairs;
    EXPECT_NEAR(v.recent_rate_bytes_per_s, rate, rate * 0.05);
    EXPECT_DOUBLE_EQ(v.consistency, 1.0);
    EXPECT_EQ(v.samples, 60u);  // capped: 600 s at 10 s would be 61
  }
}

TEST(SiteSeries, FastSamplingIsThinnedAndJitterIsKept) {
  const AnalysisParams p;
  SiteSeries fast;
  for (int t = 0; t <= 1800; ++t) fast.add({static_cast<double>(t), 1, 0}, p);
  ASSERT_LE(fast.samples().size(), p.max_samples);
  EXPECT_GE(fast.samples().back().t_s - fast.samples().front().t_s, 0.9 * 0.9 * p.window_s);
  for (size_t i = 1; i + 1 < fast.samples().size(); ++i)
    EXPECT_GE(fast.samples()[i].t_s - fast.samples()[i - 1].t_s, 9.0);

  // The nominal 10 s with +-0.5 s of timer jitter: nothing is merged.
  SiteSeries jittery;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> jitter(-0.5, 0.5);
  for (int k = 0; k < 30; ++k) jittery.add({k * 10.0 + jitter(rng), 1, 0}, p);
  EXPECT_EQ(jittery.samples().size(), 30u);

  // Time going backwards is ignored.
  jittery.add({0, 5, 0}, p);
  EXPECT_EQ(jittery.samples().size(), 30u);
  EXPECT_EQ(jittery.samples().back().live_bytes, 1u);
}

TEST(LeakAnalysis, SteadyLeakOfOneMiBPerMinuteIsALeakWithinThreeMinutes) {
  const AnalysisParams p;
  SimSite site;
  SteadyLeak leak;
  int first = -1;
  simulate(1800, site, p, [&](int t) { leak.step(t, site); },
           [&](int t, const LeakVerdict& v) {
             if (v.trend == Trend::kLeak && first < 0) first = t;
             if (first >= 0) {
               EXPECT_EQ(v.trend, Trend::kLeak) << "t=" << t;  // and it stays one
               EXPECT_TRUE(v.suspected_leak);
               EXPECT_NEAR(v.rate_bytes_per_s, kLeakPerS, kLeakPerS * 0.05) << "t=" << t;
             }
           });
  printf("1 MiB/min steady leak: first `leak` at t=%d s\n", first);
  ASSERT_GE(first, 0);
  EXPECT_LE(first, 180);
}

TEST(LeakAnalysis, SteadyLeakUnderChurnNoiseIsALeakWithinThreeMinutes) {
  // The same leak at a site that also holds a churning working set of
  // 4 MiB +- 20%, replaced every second (so it is always young). At 180 s
  // the leak (3 MiB) is about the size of the noise's swing (1.6 MiB).
  // docs/analysis.md gives the detection time for larger working sets.
  const AnalysisParams p;
  int worst = -1;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> swing(-0.2, 0.2);
    SimSite leaked, churn;
    SteadyLeak leak;
    SiteSeries series;
    int first = -1;
    int leak_after_first = 0, samples_after_first = 0;
    for (int t = 0; t <= 1800; ++t) {
      leak.step(t, leaked);
      churn.free_all();
      churn.alloc(t, static_cast<uint64_t>(4.0 * kMiB * (1 + swing(rng))));
      if (t % kSampleInterval != 0) continue;
      AgeBuckets b = leaked.ages(t);
      b.lt_1m += churn.ages(t).lt_1m;
      series.add(sample_of(t, b), p);
      const LeakVerdict v = series.classify(p);
      if (v.trend == Trend::kLeak && first < 0) first = t;
      if (first >= 0) {
        ++samples_after_first;
        leak_after_first += v.trend == Trend::kLeak;
      }
    }
    printf("noisy 1 MiB/min leak, seed %llu: first `leak` at t=%d s, then `leak` in %d of %d samples\n",
           static_cast<unsigned long long>(seed), first, leak_after_first, samples_after_first);
    ASSERT_GE(first, 0) << seed;
    EXPECT_LE(first, 180) << seed;
    EXPECT_GE(leak_after_first, samples_after_first * 95 / 100) << seed;
    worst = std::max(worst, first);
  }
  printf("noisy 1 MiB/min leak: latest first `leak` over 20 seeds: t=%d s\n", worst);
}

// A 50 MiB cache filled evenly over its first 60 s with entries of 32 to
// 96 KiB, then run for 24 h. turnover_s > 0: entries are replaced
// (oldest out) at 50 MiB per turnover_s; 0: entries are kept forever and no
// new ones come. Returns how many samples after the fill were `growing`.
int run_cache(int turnover_s, uint64_t seed) {
  const AnalysisParams p;
  const uint64_t capacity = 50 * kMiB;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> entry(32 << 10, 96 << 10);
  SimSite site;
  int growing = 0;
  double owed = 0;  // bytes to replace, carried between seconds
  auto insert = [&](int t) {
    const uint64_t size = entry(rng);
    while (site.bytes() + size > capacity) site.free_oldest();
    site.alloc(t, size);
    return size;
  };
  simulate(
      24 * 3600, site, p,
      [&](int t) {
        if (t < 60) {
          while (site.bytes() < capacity * static_cast<uint64_t>(t + 1) / 60 - (96 << 10))
            insert(t);
        } else if (turnover_s > 0) {
          owed += static_cast<double>(capacity) / turnover_s;
          while (owed > 0) owed -= static_cast<double>(insert(t));
        }
      },
      [&](int t, const LeakVerdict& v) {
        if (t < 60) return;  // filling
        EXPECT_NE(v.trend, Trend::kLeak) << "turnover " << turnover_s << " s, t=" << t;
        growing += v.trend == Trend::kGrowing;
      });
  return growing;
}

TEST(LeakAnalysis, CacheThatPlateausIsNeverALeak) {
  for (int turnover_s : {0, 30, 300, 1800}) {
    const int growing = run_cache(turnover_s, 1);
    printf("50 MiB cache, turnover %d s (0 = kept forever), 24 h: no `leak`; `growing` in %d of %d samples\n",
           turnover_s, growing, 24 * 360 - 6 + 1);
  }
}

TEST(LeakAnalysis, SawtoothIsNotALeak) {
  // A collector-like site: 20 MiB held for good, plus garbage at 20 MiB per
  // period, all freed at the end of each period.
  const AnalysisParams p;
  for (int period : {60, 90, 120, 300}) {
    SimSite base, garbage;
    SiteSeries series;
    int leak_samples = 0;
    for (int t = 0; t <= 4 * 3600; ++t) {
      if (t == 0) base.alloc(t, 20 * kMiB);
      if (t % period == 0) garbage.free_all();
      garbage.alloc(t, 20 * kMiB / static_cast<uint64_t>(period));
      if (t % kSampleInterval != 0) continue;
      AgeBuckets b = base.ages(t), g = garbage.ages(t);
      b.lt_1m += g.lt_1m;
      b.lt_10m += g.lt_10m;
      series.add(sample_of(t, b), p);
      const LeakVerdict v = series.classify(p);
      // A first ramp as long as the minimum span (120 s) is a steady, aging
      // growth: a leak for all the window can tell, until the first sweep
      // has shown in two samples (one low sample could be a bad one). From
      // then on, the sweep in the window rules it out.
      if (t > period || period < 120) {
        EXPECT_NE(v.trend, Trend::kLeak) << "period " << period << " s, t=" << t;
      }
      leak_samples += v.trend == Trend::kLeak;
    }
    printf("sawtooth, period %d s: `leak` in %d samples, none after the first sweep\n", period,
           leak_samples);
  }
}

TEST(LeakAnalysis, SlowLeakOnALargeBaselineIsGrowing) {
  // 10 KiB/min on top of 1 GiB held since the start: 0.01% growth per
  // window, under min_relative_growth (1%), so `growing`, not `leak`, with
  // its rate. The same leak alone is a leak.
  const AnalysisParams p;
  const double rate = 10240.0 / 60;
  for (bool baseline : {true, false}) {
    SimSite site;
    double owed = 0;
    int first_leak = -1;
    simulate(
        2 * 3600, site, p,
        [&](int t) {
          if (t == 0 && baseline) site.alloc(t, kGiB);
          owed += rate;
          const auto whole = static_cast<uint64_t>(owed);
          owed -= static_cast<double>(whole);
          site.alloc(t, whole);
        },
        [&](int t, const LeakVerdict& v) {
          if (t < 120) return;
          EXPECT_NEAR(v.rate_bytes_per_s, rate, rate * 0.05) << t;
          if (baseline) {
            EXPECT_EQ(v.trend, Trend::kGrowing) << t;
          }
          if (!baseline && first_leak < 0 && v.trend == Trend::kLeak) first_leak = t;
        });
    if (!baseline) {
      printf("10 KiB/min leak with no baseline: first `leak` at t=%d s\n", first_leak);
      EXPECT_GE(first_leak, 0);
      EXPECT_LE(first_leak, 180);
    }
  }
}

TEST(LeakAnalysis, OneOutlyingSampleDoesNotFlipTheVerdict) {
  const AnalysisParams p;
  // A steady leak: one sample reads 5x, another reads 0 (both live and old).
  for (uint64_t bad : {uint64_t{5}, uint64_t{0}}) {
    SiteSeries s;
    for (int t = 0; t <= 1200; t += kSampleInterval) {
      const auto live = static_cast<uint64_t>(kLeakPerS * t);
      const auto old = static_cast<uint64_t>(kLeakPerS * std::max(0, t - 60));
      if (t == 400) {
        s.add({static_cast<double>(t), live * bad, old * bad}, p);
      } else {
        s.add({static_cast<double>(t), live, old}, p);
      }
      if (t >= 180) {
        EXPECT_EQ(s.classify(p).trend, Trend::kLeak) << "x" << bad << " t=" << t;
      }
    }
  }
  // A flat site with one 100 MiB spike stays stable.
  SiteSeries flat;
  for (int t = 0; t <= 1200; t += kSampleInterval) {
    const uint64_t live = t == 400 ? 110 * kMiB : 10 * kMiB;
    flat.add({static_cast<double>(t), live, live}, p);
    if (t >= 120) {
      EXPECT_EQ(flat.classify(p).trend, Trend::kStable) << t;
    }
  }
}

std::vector<SiteSample> batch_of(const std::vector<SimSite>& sites, int t) {
  std::vector<SiteSample> out;
  for (size_t k = 0; k < sites.size(); ++k)
    if (sites[k].bytes() > 0) out.push_back({k + 1, sites[k].ages(t)});
  return out;
}

TEST(ProcessAnalysis, FindsTheLeakingSiteAndTheProcessLeak) {
  // 40 sites holding 1 MiB each for good, 10 churning 1 MiB, and site 51
  // leaking 1 MiB/min.
  ProcessAnalysis a;
  std::vector<SimSite> sites(51);
  SteadyLeak leak;
  int first_process_leak = -1;
  for (int t = 0; t <= 900; ++t) {
    for (size_t k = 0; k < 50; ++k) {
      if (k >= 40) sites[k].free_all();
      if (sites[k].bytes() == 0) sites[k].alloc(t, kMiB);
    }
    leak.step(t, sites[50]);
    if (t % kSampleInterval != 0) continue;
    a.ingest(t, batch_of(sites, t));
    if (first_process_leak < 0 && a.process_verdict().trend == Trend::kLeak) first_process_leak = t;
  }
  printf("process of 50 MiB + 1 MiB/min: first process `leak` at t=%d s\n", first_process_leak);
  EXPECT_GE(first_process_leak, 0);
  EXPECT_LE(first_process_leak, 180);
  EXPECT_EQ(a.process_ages().total(), 50 * kMiB + sites[50].bytes());
  const std::vector<SiteReport> reports = a.site_reports();
  ASSERT_EQ(reports.size(), 51u);
  for (const SiteReport& r : reports) {
    EXPECT_EQ(r.verdict.trend, r.key == 51 ? Trend::kLeak : Trend::kStable) << r.key;
    EXPECT_EQ(r.ages, sites[r.key - 1].ages(900));
  }
}

TEST(ProcessAnalysis, SiteThatDisappearsIsForgottenAfterAWindow) {
  AnalysisParams p;
  ProcessAnalysis a(p);
  const std::vector<SiteSample> both = {{1, {kMiB, 0, 0, 0}}, {2, {kMiB, 0, 0, 0}}};
  const std::vector<SiteSample> one = {{1, {kMiB, 0, 0, 0}}};
  a.ingest(0, both);
  a.ingest(10, both);
  EXPECT_EQ(a.site_count(), 2u);
  // Site 2 freed everything at t=20: it reads 0 for a window, then is gone.
  for (int t = 20; t < 10 + p.window_s; t += kSampleInterval) {
    a.ingest(t, one);
    ASSERT_EQ(a.site_count(), 2u) << t;
    EXPECT_EQ(a.site_reports()[1].ages.total(), 0u);
  }
  a.ingest(10 + p.window_s, one);
  EXPECT_EQ(a.site_count(), 1u);
  EXPECT_EQ(a.sites_dropped_by_cap(), 0u);  // forgotten, not dropped by the cap

  // Passed again with nothing live (HeapTracker keeps every site it saw),
  // it is not taken back.
  const std::vector<SiteSample> with_empty = {{1, {kMiB, 0, 0, 0}}, {2, {}}};
  a.ingest(20 + p.window_s, with_empty);
  EXPECT_EQ(a.site_count(), 1u);
}

TEST(ProcessAnalysis, MemoryIsBoundedWithOneHundredThousandSites) {
  const AnalysisParams p;
  ProcessAnalysis a(p);
  constexpr uint64_t kSites = 100'000;
  // Site k holds k * 64 bytes: the largest 10000 are keys 90001..100000.
  std::vector<SiteSample> batch(kSites);
  for (int t = 0; t <= 700; t += kSampleInterval) {
    for (uint64_t k = 0; k < kSites; ++k) batch[k] = {k + 1, {(k + 1) * 64, 0, 0, 0}};
    a.ingest(t, batch);
    ASSERT_LE(a.site_count(), p.max_sites);
  }
  // The most this can hold: every site with a full ring.
  const size_t full = a.memory_bytes();
  printf("100k sites, cap %zu: %zu sites tracked, full rings: %zu KiB\n", p.max_sites,
         a.site_count(), full >> 10);
  // 60 samples of 24 bytes (a vector grown to 64) and a map node per site.
  EXPECT_LE(full, p.max_sites * 1800);
  const std::vector<SiteReport> reports = a.site_reports();
  ASSERT_EQ(reports.size(), p.max_sites);
  EXPECT_EQ(reports.front().key, kSites - p.max_sites + 1);
  EXPECT_EQ(reports.back().key, kSites);
  EXPECT_EQ(reports.front().verdict.samples, p.max_samples);
  EXPECT_EQ(a.process_ages().total(), 64 * kSites * (kSites + 1) / 2);

  // Sizes reshuffle: another 10000 become the largest, and the map stays
  // capped while it turns over.
  for (int t = 710; t <= 800; t += kSampleInterval) {
    for (uint64_t k = 0; k < kSites; ++k) batch[k] = {k + 1, {(kSites - k) * 64, 0, 0, 0}};
    a.ingest(t, batch);
    ASSERT_LE(a.site_count(), p.max_sites);
  }
  EXPECT_EQ(a.site_reports().back().key, p.max_sites);
  EXPECT_EQ(a.sites_dropped_by_cap(), 81 * (kSites - p.max_sites));
}

}  // namespace
}  // namespace lw

namespace lw {
namespace {

// How long until a verdict: the span rule (120 s) or the sample count (8
// samples at the ring's 9 s spacing), whichever binds, in whole intervals.
TEST(SecondsUntilVerdict, SpanOrSamplesWhicheverIsLater) {
  AnalysisParams p;
  LeakVerdict v;
  v.samples = 1;
  v.span_s = 0;
  EXPECT_DOUBLE_EQ(seconds_until_verdict(v, p, 1.0), 120.0);
  v.samples = 7;
  v.span_s = 100;
  // One more sample at the 9 s spacing; 20 s of span still missing.
  EXPECT_DOUBLE_EQ(seconds_until_verdict(v, p, 1.0), 20.0);
  v.samples = 2;
  v.span_s = 110;
  // Six more samples 9 s apart (the span is not what binds): 54 s.
  EXPECT_DOUBLE_EQ(seconds_until_verdict(v, p, 1.0), 54.0);
  // Sampled every 20 s: whole intervals of 20 s.
  v.samples = 1;
  v.span_s = 0;
  EXPECT_DOUBLE_EQ(seconds_until_verdict(v, p, 20.0), 140.0);
  v.trend = Trend::kStable;
  EXPECT_DOUBLE_EQ(seconds_until_verdict(v, p, 1.0), 0.0);
}

// A series sampled every second: the estimate made at its first sample is
// when the first verdict comes.
TEST(SecondsUntilVerdict, MatchesWhenTheFirstVerdictComes) {
  AnalysisParams p;
  SiteSeries series;
  series.add({0, 1000, 0}, p);
  const double predicted = seconds_until_verdict(series.classify(p), p, 1.0);
  int t = 0;
  while (series.classify(p).trend == Trend::kUnknown) {
    ++t;
    series.add({static_cast<double>(t), 1000 + 100 * static_cast<uint64_t>(t), 0}, p);
  }
  EXPECT_DOUBLE_EQ(predicted, static_cast<double>(t));
}

// top --analysis-window: the old-bytes age comes from the caller's
// SiteSample::old_bytes; a steady leak is a leak after W/5 of samples.
TEST(ProcessAnalysis, OwnOldAgeGivesALeakInAScaledWindow) {
  AnalysisParams p;
  p.window_s = 120;
  p.min_span_s = 24;
  p.old_age_s = 12;
  ProcessAnalysis analysis(p);
  const uint64_t rate = 200 * 1024;  // bytes/s, as the demo service leaks
  Trend trend = Trend::kUnknown;
  int first_leak = -1;
  for (int t = 0; t <= 60 && first_leak < 0; t += 2) {
    SiteSample s;
    s.key = 1;
    s.ages.lt_1m = rate * static_cast<uint64_t>(t);  // all younger than a minute
    s.old_bytes = t > 12 ? rate * static_cast<uint64_t>(t - 12) : 0;
    analysis.ingest(t, std::vector<SiteSample>{s});
    if (analysis.site_reports().empty()) continue;  // nothing live yet at t = 0
    trend = analysis.site_reports().at(0).verdict.trend;
    if (trend == Trend::kLeak) first_leak = t;
  }
  EXPECT_EQ(trend, Trend::kLeak);
  EXPECT_GE(first_leak, 24);
  EXPECT_LE(first_leak, 36);
  // Without old_bytes the minute buckets are used: nothing is a minute old.
  ProcessAnalysis minute(p);
  for (int t = 0; t <= 60; t += 2) {
    SiteSample s;
    s.key = 1;
    s.ages.lt_1m = rate * static_cast<uint64_t>(t);
    minute.ingest(t, std::vector<SiteSample>{s});
  }
  EXPECT_EQ(minute.site_reports().at(0).verdict.trend, Trend::kGrowing);
  p.old_age_s = 0;
  EXPECT_FALSE(p.invalid_reason().empty());
}

}  // namespace
}  // namespace lw
