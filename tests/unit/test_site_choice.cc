// SPDX-License-Identifier: Apache-2.0
// Which sites a snapshot shows (core/analysis/site_choice.h): `top --top K
// --top-by-rate N` (docs/cli.md) and the daemon's top_sites_per_process.
#include <gtest/gtest.h>

#include <vector>

#include "core/analysis/site_choice.h"

namespace lw {
namespace {

// Six sites: live bytes descending by index except where noted; the small
// ones 3..5 grow at different rates.
const std::vector<SiteRank> kSites = {
    {1000, 0}, {900, 5}, {800, 0}, {10, 50}, {20, 0}, {5, 500},
};

TEST(SiteChoice, TopKByLiveThenUpToNByRate) {
  // K=2 by live bytes (0, 1), then N=2 by rate among the rest: 5 (500/s)
  // and 3 (50/s); 2 and 4 do not grow.
  EXPECT_EQ(choose_sites(kSites, SiteLimits(2, 2)), (std::vector<size_t>{0, 1, 5, 3}));
  // N=1: only the fastest.
  EXPECT_EQ(choose_sites(kSites, SiteLimits(2, 1)), (std::vector<size_t>{0, 1, 5}));
}

TEST(SiteChoice, ZeroByRateIsExactlyTheTopK) {
  EXPECT_EQ(choose_sites(kSites, SiteLimits(2, 0)), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(choose_sites(kSites, SiteLimits(3, 0)), (std::vector<size_t>{0, 1, 2}));
}

TEST(SiteChoice, OneFigureIsBothLimitsAsTheDaemonUsesIt) {
  // The daemon's top_sites_per_process K: K by live, up to K by rate.
  const SiteLimits k(2);
  EXPECT_EQ(k.by_live, 2u);
  EXPECT_EQ(k.by_rate, 2u);
  const std::vector<size_t> shown = choose_sites(kSites, k);
  EXPECT_EQ(shown.size(), 4u);  // 2K, as docs/cli.md says of the default
}

TEST(SiteChoice, SitesThatDoNotGrowAreNotAddedByRate) {
  const std::vector<SiteRank> flat = {{300, 0}, {200, 0}, {100, 0}};
  EXPECT_EQ(choose_sites(flat, SiteLimits(1, 5)), (std::vector<size_t>{0}));
  EXPECT_TRUE(choose_sites({}, SiteLimits(3, 3)).empty());
  // Fewer sites than K: all of them, once.
  EXPECT_EQ(choose_sites(flat, SiteLimits(10, 10)), (std::vector<size_t>{0, 1, 2}));
}

}  // namespace
}  // namespace lw
