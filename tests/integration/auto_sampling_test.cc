// SPDX-License-Identifier: Apache-2.0
// Automatic sampling (decision auto-sampling; docs/config.md,
// "Automatic sampling"), with real probes: a heap with more live blocks
// than a process's share of the live map is switched from exact recording
// to byte sampling part way, its records thinned rather than dropped, and
// every site's bytes stay within 5% of the truth, with nothing counted as
// lost and the switch said in the JSON and the text view. The loss path
// itself (--no-auto-sampling) is tested in fault_test.cc.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness.h"

namespace lw::itest {
namespace {

// big_heap's 500,000 blocks against a live map of 400,000 entries: its
// share (3/4) is 300,000 records, so the switch comes about 60% through
// the allocation loop; the sampled heap keeps about 50,000 records (1/8).
// hold_rare holds 10% of the heap: one standard error is
// sqrt(T / B) = sqrt(1 / (0.1 * 50,000)) = 1.4%, so 5% is 3.5 of them.
constexpr const char *kBlocks = "500000";
constexpr const char *kLiveMax = "400000";

double ratio(int64_t got, int64_t truth) { return truth ? static_cast<double>(got) / truth : 0.0; }

TEST(AutoSampling, HeapOverItsShareIsSampledNotLost) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  TraceSession session({.target = "big_heap",
                        .target_args = {kBlocks},
                        .leakwatch_args = {"--live-max", kLiveMax, "--interval", "0.5"},
                        .settle_after_done_s = 3.0});
  const Json &snap = session.snapshot();
  const Json &truth = session.truth();
  const Json &sampling = snap.at("sampling");
  const Json &u = snap.at("unrecorded");
  const auto leaves = live_by_leaf(snap);
  auto live_at = [&](const char *leaf) {
    auto it = leaves.find(leaf);
    return it == leaves.end() ? int64_t{0} : it->second.live_bytes;
  };
  const int64_t held = truth.at("sites").at("hold_block").get<int64_t>();
  const int64_t rare = truth.at("sites").at("hold_rare").get<int64_t>();
  const int64_t total = truth.at("total_live").get<int64_t>();
  std::printf("[ metric   ] big_heap %s blocks, live map %s: mean %lld B (%s); hold_block %lld of %lld "
              "(%.4f), hold_rare %lld of %lld (%.4f), churn_block %lld, process %lld of %lld (%.4f)\n",
              kBlocks, kLiveMax, static_cast<long long>(sampling.at("mean_bytes").get<int64_t>()),
              sampling.at("reason").dump().c_str(),
              static_cast<long long>(live_at("hold_block")), static_cast<long long>(held),
              ratio(live_at("hold_block"), held), static_cast<long long>(live_at("hold_rare")),
              static_cast<long long>(rare), ratio(live_at("hold_rare"), rare),
              static_cast<long long>(live_at("churn_block")), static_cast<long long>(snap.at("live_bytes").get<int64_t>()),
              static_cast<long long>(total), ratio(snap.at("live_bytes").get<int64_t>(), total));

  // Sampled, automatically, and said so.
  EXPECT_TRUE(sampling.at("automatic").get<bool>()) << sampling.dump() << session.diagnostics();
  EXPECT_EQ(sampling.at("reason"), "live_map_share") << sampling.dump();
  EXPECT_GT(sampling.at("mean_bytes").get<int64_t>(), 0) << sampling.dump();
  EXPECT_EQ(sampling.at("estimated_kinds"), Json::array({"heap"})) << sampling.dump();
  EXPECT_NE(session.diagnostics().find("automatic sampling: pid " + std::to_string(session.target_pid())),
            std::string::npos)
      << session.diagnostics();
  // Nothing lost: sampling is not a loss.
  EXPECT_EQ(u.at("allocations").at("map_full").get<int64_t>(), 0) << u.dump();
  EXPECT_EQ(u.at("coverage").get<double>(), 1.0) << u.dump();
  EXPECT_FALSE(u.at("verdicts_incomplete").get<bool>()) << u.dump();
  EXPECT_EQ(snap.at("counters").at("live_insert_failed").get<int64_t>(), 0) << snap.at("counters").dump();
  // Every site within 5%: the records of before the switch were thinned,
  // not dropped (dropping them would leave hold_* at about 40%).
  EXPECT_NEAR(ratio(live_at("hold_block"), held), 1.0, 0.05) << describe_sites(snap);
  EXPECT_NEAR(ratio(live_at("hold_rare"), rare), 1.0, 0.05) << describe_sites(snap);
  EXPECT_NEAR(ratio(snap.at("live_bytes").get<int64_t>(), total), 1.0, 0.05) << describe_sites(snap);
  // Churn freed all it took: what a sampled block stands for leaves with it.
  EXPECT_LT(live_at("churn_block"), total / 100) << describe_sites(snap);
  session.target().write_line("exit");
}

// big_heap with `top`'s defaults (the live map sized from the host,
// automatic sampling on): 1,000,000 blocks plus churn and frees. Whether
// exact or sampled depends on the host's RAM (the share is 3/4 of the
// automatic map); either way every site is within 5% of the truth and the
// coverage is said right: exact is 1 with mean 0, sampled is an automatic
// mean with nothing unrecorded. Prints the kernel live map's memory and
// top's RSS per live block.
//
// The long form (docs: bench/README.md, "Scale"): LW_SCALE_BLOCKS=10000000
// (10 million blocks, about 2 minutes); LW_SCALE_EXACT=1 adds a live map of
// 16,777,216 entries and --no-auto-sampling, for the exact figures.
TEST(AutoSampling, BlocksWithDefaults) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  const char *env_blocks = getenv("LW_SCALE_BLOCKS");
  const std::string blocks = env_blocks && *env_blocks ? env_blocks : "1000000";
  const bool exact = getenv("LW_SCALE_EXACT") && *getenv("LW_SCALE_EXACT") == '1';
  std::vector<std::string> args = {"--interval", "1"};
  if (exact) args.insert(args.end(), {"--live-max", "16777216", "--no-auto-sampling"});
  TraceSession session({.target = "big_heap",
                        .target_args = {blocks},
                        .leakwatch_args = args,
                        .settle_after_done_s = 5.0});
  const Json &snap = session.snapshot();
  const Json &truth = session.truth();
  const Json &sampling = snap.at("sampling");
  const Json &u = snap.at("unrecorded");
  const auto leaves = live_by_leaf(snap);
  auto live_at = [&](const char *leaf) {
    auto it = leaves.find(leaf);
    return it == leaves.end() ? int64_t{0} : it->second.live_bytes;
  };
  const int64_t held = truth.at("sites").at("hold_block").get<int64_t>();
  const int64_t rare = truth.at("sites").at("hold_rare").get<int64_t>();
  const int64_t total = truth.at("total_live").get<int64_t>();
  const int64_t mean = sampling.at("mean_bytes").get<int64_t>();
  const int64_t n = truth.at("facts").at("blocks").get<int64_t>();
  const int64_t live_blocks = n - (n + 2) / 4;  // big_heap frees blocks 1, 5, 9, ...
  const auto [entries, memlock] = live_map_fdinfo(session.leakwatch().pid());
  uint64_t rss_kib = 0;
  {
    std::ifstream status("/proc/" + std::to_string(session.leakwatch().pid()) + "/status");
    std::string key;
    while (status >> key)
      if (key == "VmRSS:") status >> rss_kib;
  }
  std::printf("[ metric   ] big_heap %s blocks, defaults%s: %s; hold_block %.4f, hold_rare %.4f, process %.4f of the "
              "truth; live map %llu entries, %.1f MB kernel memory (%.1f B per live block); top RSS %.1f MiB "
              "(%.1f B per live block)\n",
              blocks.c_str(), exact ? " + exact" : "",
              mean ? ("sampled at " + std::to_string(mean) + " B, " + sampling.at("reason").dump()).c_str() : "exact",
              ratio(live_at("hold_block"), held), ratio(live_at("hold_rare"), rare),
              ratio(snap.at("live_bytes").get<int64_t>(), total), static_cast<unsigned long long>(entries),
              memlock / 1e6, static_cast<double>(memlock) / static_cast<double>(live_blocks), rss_kib / 1024.0,
              rss_kib * 1024.0 / static_cast<double>(live_blocks));

  EXPECT_EQ(u.at("allocations").at("map_full").get<int64_t>(), 0) << u.dump() << session.diagnostics();
  EXPECT_EQ(u.at("coverage").get<double>(), 1.0) << u.dump();
  if (mean == 0) {
    EXPECT_FALSE(sampling.at("automatic").get<bool>()) << sampling.dump();
    EXPECT_EQ(live_at("hold_block"), held) << describe_sites(snap);
    EXPECT_EQ(live_at("hold_rare"), rare) << describe_sites(snap);
  } else {
    EXPECT_FALSE(exact) << "sampled despite --no-auto-sampling: " << sampling.dump();
    EXPECT_TRUE(sampling.at("automatic").get<bool>()) << sampling.dump();
    EXPECT_NEAR(ratio(live_at("hold_block"), held), 1.0, 0.05) << describe_sites(snap);
    EXPECT_NEAR(ratio(live_at("hold_rare"), rare), 1.0, 0.05) << describe_sites(snap);
  }
  EXPECT_NEAR(ratio(snap.at("live_bytes").get<int64_t>(), total), 1.0, 0.05) << describe_sites(snap);
  EXPECT_LT(live_at("churn_block"), total / 100) << describe_sites(snap);
  session.target().write_line("exit");
}

}  // namespace
}  // namespace lw::itest
