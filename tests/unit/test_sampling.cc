// SPDX-License-Identifier: Apache-2.0
// Byte-weighted Poisson sampling: the BPF side's decision (bpf/lw_sampling.h,
// run here through sample_decision()) and the daemon's estimator
// (core/sampling.h, HeapTracker with a sample mean).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "core/heap_tracker.h"
#include "core/sampling.h"

namespace lw {
namespace {

TEST(Sampling, ExponentialDrawHasMeanOne) {
  // Every 2^32 input weighs the same: stratify over the whole range.
  double sum = 0;
  const uint64_t n = 1u << 22;
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t u = static_cast<uint32_t>((i << 10) | ((i * 2654435761u) & 0x3ff));
    sum += static_cast<double>(lw_exp_draw_q32(u)) * 0x1.0p-32;
  }
  EXPECT_NEAR(sum / static_cast<double>(n), 1.0, 2e-4);
  // Monotone decreasing in u, as -ln(u) is.
  EXPECT_GT(lw_exp_draw_q32(1), lw_exp_draw_q32(2));
  EXPECT_GT(lw_exp_draw_q32(0x80000000u), lw_exp_draw_q32(0xffffffffu));
  EXPECT_NEAR(static_cast<double>(lw_exp_draw_q32(0x80000000u)) * 0x1.0p-32, std::log(2.0), 3e-3);
}

TEST(Sampling, DecisionMatchesProbability) {
  std::mt19937 rng(7);
  auto rand32 = [&] { return static_cast<uint32_t>(rng()); };
  const uint64_t mean = 512 * 1024;
  for (uint64_t size : {64ull, 4096ull, 65536ull, 524288ull, 2097152ull}) {
    uint64_t left = 0;
    const int n = 400000;
    int hit = 0;
    for (int i = 0; i < n; ++i) hit += sample_decision(&left, size, mean, rand32) ? 1 : 0;
    const double p = sample_probability(size, mean);
    const double sd = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(static_cast<double>(hit) / n, p, 5 * sd + 1e-6) << "size " << size;
  }
  uint64_t left = 0;
  EXPECT_TRUE(sample_decision(&left, 1ull << 31, mean, rand32));  // always sampled
  EXPECT_TRUE(sample_decision(&left, 1, 0, rand32));               // sampling off
}

TEST(Sampling, WeightsAreInverseProbability) {
  EXPECT_EQ(sample_weight_bytes(100, 0), 100u);
  EXPECT_EQ(sample_weight_bytes(1ull << 31, 512 * 1024), 1ull << 31);
  // s / (1 - exp(-s/T)) ~ T + s/2 for s << T.
  EXPECT_NEAR(static_cast<double>(sample_weight_bytes(64, 524288)), 524288 + 32, 1.0);
  EXPECT_NEAR(static_cast<double>(sample_weight_bytes(524288, 524288)), 524288 / (1 - std::exp(-1.0)),
              1.0);
  // Count weights round up or down, unbiased over many records.
  double sum = 0;
  for (uint64_t id = 1; id <= 100000; ++id) sum += static_cast<double>(sample_weight_count(524288, 524288, id));
  EXPECT_NEAR(sum / 100000, 1 / (1 - std::exp(-1.0)), 0.01);
  EXPECT_EQ(sample_weight_count(1000, 0, 5), 1u);
}

// The accuracy test: mean 512 KiB, sizes log-uniform 64 B..1 MiB,
// 20 runs; every site's live-byte estimate within 5% of the truth in at
// least 19. Sites allocate 12,000 blocks and free a random sixth of them
// (frees match by lookup: a free of an unsampled block retires nothing).
TEST(Sampling, LiveBytesPerSiteWithinFivePercentIn19Of20Runs) {
  const uint64_t mean = 512 * 1024;
  const int kRuns = 20, kSites = 3, kPerSite = 12000;
  int good_runs = 0;
  std::vector<double> worst;
  for (int run = 0; run < kRuns; ++run) {
    std::mt19937_64 rng(1000 + run);
    std::uniform_real_distribution<double> logsize(std::log(64.0), std::log(1048576.0));
    auto rand32 = [&] { return static_cast<uint32_t>(rng()); };
    uint64_t left = 0;  // the per-CPU counter
    HeapTracker heap;
    heap.set_sample_mean(mean);
    std::map<uint64_t, uint64_t> truth;  // site -> live bytes
    struct Block {
      uint64_t addr, size, alloc_ns, site;
      bool sampled;
    };
    std::vector<Block> blocks;
    uint64_t next_addr = 0x10000, ns = 1;
    // Interleave the sites, as a real program's allocations are.
    for (int i = 0; i < kSites * kPerSite; ++i) {
      uint64_t site = 1 + static_cast<uint64_t>(i % kSites);
      auto size = static_cast<uint64_t>(std::exp(logsize(rng)));
      Block b{next_addr, size, ns++, site, sample_decision(&left, size, mean, rand32)};
      next_addr += size + 16;
      truth[site] += size;
      if (b.sampled)
        heap.apply(Event{EventType::kAlloc, 0, 1, 1, LW_KIND_HEAP, b.alloc_ns, b.addr, b.size,
                         b.alloc_ns, site});
      blocks.push_back(b);
    }
    for (const Block& b : blocks) {
      if (rng() % 6 != 0) continue;
      truth[b.site] -= b.size;
      if (b.sampled)  // the kernel emits FREE only for what its map holds
        heap.apply(Event{EventType::kFree, 0, 1, 1, LW_KIND_HEAP, ns++, b.addr, b.size, b.alloc_ns, 0});
    }
    std::map<uint64_t, uint64_t> est;
    for (const SiteStats& s : heap.sites()) est[s.stack_hash] += s.live_bytes;
    double run_worst = 0;
    for (const auto& [site, bytes] : truth)
      run_worst = std::max(run_worst, std::abs(static_cast<double>(est[site]) / static_cast<double>(bytes) - 1));
    worst.push_back(run_worst);
    good_runs += run_worst <= 0.05 ? 1 : 0;
  }
  std::string detail;
  for (double w : worst) detail += std::to_string(w) + " ";
  EXPECT_GE(good_runs, 19) << "worst relative error per run: " << detail;
  RecordProperty("good_runs", good_runs);
}

TEST(Sampling, TrackerCountsEstimatesAndClearsOnNewMean) {
  HeapTracker heap;
  heap.set_sample_mean(1000);
  heap.apply(Event{EventType::kAlloc, 0, 1, 1, LW_KIND_HEAP, 1, 0x1000, 500, 11, 7});
  heap.apply(Event{EventType::kAlloc, 0, 1, 1, LW_KIND_MMAP, 2, 0x9000, 4096, 12, 8});
  const uint64_t w = sample_weight_bytes(500, 1000);
  EXPECT_EQ(heap.live_bytes(LW_KIND_HEAP), w);
  EXPECT_EQ(heap.live_bytes(LW_KIND_MMAP), 4096u);  // mmap is never sampled
  heap.apply(Event{EventType::kFree, 0, 1, 1, LW_KIND_HEAP, 3, 0x1000, 500, 11, 0});
  EXPECT_EQ(heap.live_bytes(LW_KIND_HEAP), 0u);
  heap.apply(Event{EventType::kAlloc, 0, 1, 1, LW_KIND_HEAP, 4, 0x2000, 500, 13, 7});
  heap.set_sample_mean(0);  // weighted at the old mean: dropped
  EXPECT_EQ(heap.live_bytes(LW_KIND_HEAP), 0u);
  EXPECT_EQ(heap.live_bytes(LW_KIND_MMAP), 4096u);
}

}  // namespace
}  // namespace lw
