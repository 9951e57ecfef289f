// SPDX-License-Identifier: Apache-2.0
// "RSS explained" (docs/analysis.md; architecture.md, decision 41):
// `leakwatch top --json`'s "rss" breakdown against tests/targets/rss_parts.
// Each test prints the share of anonymous RSS (growth) it attributes.
#include <unistd.h>

#include <cstdio>

#include <gtest/gtest.h>

#include "harness.h"

namespace lw::itest {
namespace {

class RssExplained : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "not root";
  }
};

int64_t part(const Json &snap, const char *name) {
  return snap.at("rss").at("parts").at(name).get<int64_t>();
}

// A snapshot whose breakdown was read after "done": --rss-interval 1 and
// 1.5 s of settling.
TraceSession trace(const char *mode, const char *mib) {
  TraceOptions o;
  o.target = "rss_parts";
  o.target_args = {mode, mib};
  o.leakwatch_args = {"--rss-interval", "1"};
  o.settle_after_done_s = 1.5;
  return TraceSession(o);
}

TEST_F(RssExplained, LeakShowsAsLiveHeap) {
  TraceSession s = trace("leak", "100");
  const Json &a = s.attach_snapshot(), &b = s.snapshot();
  ASSERT_FALSE(a.at("rss").is_null()) << s.diagnostics();
  ASSERT_FALSE(b.at("rss").is_null()) << s.diagnostics();
  const int64_t anon_growth = b.at("rss").at("anon_bytes").get<int64_t>() -
                              a.at("rss").at("anon_bytes").get<int64_t>();
  const int64_t live_growth = part(b, "live_heap") - part(a, "live_heap");
  ASSERT_GT(anon_growth, 100ll << 20) << b.at("rss").dump();
  const double share = static_cast<double>(live_growth) / static_cast<double>(anon_growth);
  printf("leak 100 MiB: anon growth %lld, live heap growth %lld (%.1f%%), rss %s\n",
         (long long)anon_growth, (long long)live_growth, 100 * share, b.at("rss").dump().c_str());
  EXPECT_GE(share, 0.90) << b.at("rss").dump();
  EXPECT_LE(share, 1.0);
}

TEST_F(RssExplained, FreedHalfShowsAsRetained) {
  TraceSession s = trace("half", "200");
  const Json &b = s.snapshot();
  ASSERT_FALSE(b.at("rss").is_null()) << s.diagnostics();
  const int64_t freed = 100ll << 20;
  const int64_t retained = part(b, "retained");
  const int64_t anon = b.at("rss").at("anon_bytes").get<int64_t>();
  printf("half of 200 MiB freed: anon %lld, live heap %lld (%.1f%%), retained %lld (%.1f%%), "
         "untracked %lld; rss %s\n",
         (long long)anon, (long long)part(b, "live_heap"), 100.0 * part(b, "live_heap") / anon,
         (long long)retained, 100.0 * retained / anon, (long long)part(b, "untracked"),
         b.at("rss").dump().c_str());
  // The freed half (100 MiB of requests, ~101.6 MiB of chunks) is retained.
  EXPECT_GE(retained, freed * 9 / 10) << b.at("rss").dump();
  EXPECT_LE(retained, freed * 12 / 10) << b.at("rss").dump();
  EXPECT_GE(part(b, "live_heap"), freed) << b.at("rss").dump();
  EXPECT_LT(part(b, "untracked"), freed / 10) << b.at("rss").dump();
}

TEST_F(RssExplained, BeforeAttachShowsAsUntracked) {
  TraceSession s = trace("pre", "50");
  const Json &b = s.snapshot();
  ASSERT_FALSE(b.at("rss").is_null()) << s.diagnostics();
  const int64_t pre = 50ll << 20;
  const int64_t anon = b.at("rss").at("anon_bytes").get<int64_t>();
  printf("50 MiB before attach: anon %lld, untracked %lld (%.1f%%); rss %s\n", (long long)anon,
         (long long)part(b, "untracked"), 100.0 * part(b, "untracked") / anon, b.at("rss").dump().c_str());
  EXPECT_GE(part(b, "untracked"), pre) << b.at("rss").dump();
  EXPECT_LT(part(b, "live_heap"), pre / 10) << b.at("rss").dump();
  EXPECT_LT(part(b, "retained"), pre / 10) << b.at("rss").dump();
}

}  // namespace
}  // namespace lw::itest
