// SPDX-License-Identifier: Apache-2.0
// The live map sized from the host by default (decision live-map-sizing):
// `leakwatch top` with no --live-max holds a process's million live blocks,
// every one recorded, and the map's kernel memory stays within the bytes
// it announced.
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "core/policy/live_map_size.h"
#include "core/config/config.h"
#include "daemon_harness.h"
#include "harness.h"

namespace lw::itest {
namespace {

constexpr unsigned long kBlocks = 1000000;

TEST(LiveMapAutoSize, MillionLiveBlocksWithDefaults) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  // What top will choose here; a host too small for a million entries at
  // 2% of RAM (under 6 GiB) cannot run this test.
  const LiveMapSizing expected = top_live_map_sizing(0);
  if (expected.entries < kBlocks + kBlocks / 10)
    GTEST_SKIP() << "automatic live map of " << expected.entries << " entries on this host: " << describe(expected);

  // top's default interval (the harness's 0.2 s snapshots of a million
  // records slow the consumer enough for the ring to overflow), and time
  // for the consumer to drain the ring and resync after any loss.
  TraceSession session({.target = "holder",
                        .target_args = {std::to_string(kBlocks)},
                        .leakwatch_args = {"--interval", "1"},
                        .settle_after_done_s = 5.0});
  const Json& snap = session.snapshot();
  const int64_t truth = session.truth().at("sites").at("hold_block").get<int64_t>();
  const auto leaves = live_by_leaf(snap);
  const auto it = leaves.find("hold_block");
  ASSERT_NE(it, leaves.end()) << describe_sites(snap) << session.diagnostics();
  const int64_t live = it->second.live_bytes;
  const Json& counters = snap.at("counters");
  const Json& u = snap.at("unrecorded");

  // The size it logged is the one derived from this host.
  std::smatch m;
  const std::string err = session.leakwatch().stderr_text();
  ASSERT_TRUE(std::regex_search(err, m, std::regex("live map: ([0-9]+) entries, .*automatic: from RAM")))
      << session.diagnostics();
  EXPECT_EQ(std::stoull(m[1].str()), expected.entries) << session.diagnostics();

  const auto [max_entries, memlock] = live_map_fdinfo(session.leakwatch().pid(), expected.entries);
  std::printf("[ metric   ] holder %lu blocks, defaults: live map %u entries (%s); hold_block %lld B of %lld B "
              "(%.4f); live_insert_failed %lld; fdinfo: max_entries %llu, %llu bytes (%.1f B per live block)\n",
              kBlocks, expected.entries, describe(expected).c_str(), static_cast<long long>(live),
              static_cast<long long>(truth), truth ? static_cast<double>(live) / truth : 0.0,
              static_cast<long long>(counters.at("live_insert_failed").get<int64_t>()),
              static_cast<unsigned long long>(max_entries), static_cast<unsigned long long>(memlock),
              static_cast<double>(memlock) / kBlocks);

  EXPECT_EQ(counters.at("live_insert_failed").get<int64_t>(), 0) << counters.dump();
  EXPECT_EQ(u.at("allocations").at("map_full").get<int64_t>(), 0) << u.dump();
  EXPECT_GE(live, truth - truth / 20) << describe_sites(snap);
  EXPECT_LE(live, truth + truth / 20) << describe_sites(snap);
  ASSERT_EQ(max_entries, expected.entries) << "no live map of that size in leakwatch's fdinfo";
  {
    // A million entries in use, within the announced worst case and above
    // the bare elements.
    EXPECT_LE(memlock, expected.worst_bytes);
    EXPECT_GE(memlock, kBlocks * 88);
  }
  session.target().write_line("exit");
}

// The daemon with the defaults sizes its map from this host as
// core/policy/live_map_size.h says, and says so in /api/v1/status and /metrics; a
// configured size wins and is not called automatic.
TEST(LiveMapAutoSize, DaemonExportsTheChoice) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  const LiveMapSizing expected = live_map_sizing(Config{});
  for (const uint32_t configured : {0u, 4096u}) {
    const std::string limits =
        configured ? "limits:\n  live_map_entries: " + std::to_string(configured) + "\n" : std::string();
    DaemonProcess daemon({.config_body = limits + "targets:\n  - name: none\n    match: {comm: \"^none-such$\"}\n"});
    daemon.wait_notify("READY=1", kReadyTimeout);
    const Json status = daemon.get_json("/api/v1/status");
    const Json& lm = status.at("live_map");
    const uint64_t entries = configured ? configured : expected.entries;
    EXPECT_EQ(lm.at("entries").get<uint64_t>(), entries) << lm.dump();
    EXPECT_EQ(lm.at("automatic").get<bool>(), configured == 0) << lm.dump();
    EXPECT_EQ(lm.at("worst_bytes").get<uint64_t>(), live_map_worst_bytes(entries)) << lm.dump();
    EXPECT_EQ(lm.at("ram_bytes").get<uint64_t>(), expected.ram_bytes) << lm.dump();
    EXPECT_FALSE(lm.at("preallocated").get<bool>()) << lm.dump();
    const std::string metrics = daemon.get("/metrics").body;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(metrics, m, std::regex("leakwatch_kernel_map_capacity\\{map=\"live\"\\} ([0-9.e+]+)")));
    EXPECT_EQ(static_cast<uint64_t>(std::stod(m[1].str())), entries);
    ASSERT_TRUE(std::regex_search(metrics, m, std::regex("leakwatch_live_map_worst_bytes ([0-9.e+]+)")));
    EXPECT_EQ(static_cast<uint64_t>(std::stod(m[1].str())), live_map_worst_bytes(entries));
    std::printf("[ metric   ] daemon, live_map_entries %u: %s\n", configured, lm.dump().c_str());
  }
}

}  // namespace
}  // namespace lw::itest
