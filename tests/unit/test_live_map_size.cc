// SPDX-License-Identifier: Apache-2.0
// The live map's automatic size (core/policy/live_map_size.h,
// decision live-map-sizing).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/config/config.h"
#include "core/policy/live_map_size.h"

namespace lw {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

TEST(LiveMapSize, ConfiguredEntriesWin) {
  const LiveMapSizing s = size_live_map(1000, 2, 0, {.ram_bytes = 64 * kGiB, .cgroup_limit_bytes = 0});
  EXPECT_FALSE(s.automatic);
  EXPECT_EQ(s.entries, 1000u);
  EXPECT_EQ(s.bucket_bytes, 1024 * kLiveMapBucketBytes);
  EXPECT_EQ(s.worst_bytes, 1000 * kLiveMapEntryBytes + 1024 * kLiveMapBucketBytes);
}

TEST(LiveMapSize, AutomaticFillsTheShareOfRamWithoutCrossingIt) {
  for (uint64_t ram : {2 * kGiB, 8 * kGiB, 24 * kGiB, 64 * kGiB, 512 * kGiB}) {
    for (uint32_t pct : {1u, 2u, 10u}) {
      const LiveMapSizing s = size_live_map(0, pct, 0, {.ram_bytes = ram, .cgroup_limit_bytes = 0});
      const uint64_t allowed = ram / 100 * pct;
      EXPECT_TRUE(s.automatic);
      EXPECT_EQ(s.ram_bytes, ram);
      if (s.entries == kLiveMapMaxEntries) continue;  // the hard maximum bounds it
      EXPECT_LE(s.worst_bytes, allowed) << ram << " " << pct;
      // Maximal: one more entry would not fit.
      EXPECT_GT(live_map_worst_bytes(s.entries + 1), allowed) << ram << " " << pct;
    }
  }
}

TEST(LiveMapSize, CgroupEnvelopeBoundsIt) {
  const uint64_t reserved = 512 * kMiB;
  const LiveMapSizing s =
      size_live_map(0, 50, reserved, {.ram_bytes = 64 * kGiB, .cgroup_limit_bytes = 1 * kGiB});
  EXPECT_EQ(s.cgroup_limit_bytes, 1 * kGiB);
  EXPECT_LE(s.worst_bytes + reserved, 1 * kGiB);
  EXPECT_GT(live_map_worst_bytes(s.entries + 1) + reserved, 1 * kGiB);
  EXPECT_FALSE(s.envelope_too_small);
}

TEST(LiveMapSize, TooSmallAnEnvelopeKeepsTheFloorAndSaysSo) {
  const LiveMapSizing s =
      size_live_map(0, 2, 900 * kMiB, {.ram_bytes = 64 * kGiB, .cgroup_limit_bytes = 768 * kMiB});
  EXPECT_EQ(s.entries, kLiveMapMinAutoEntries);
  EXPECT_TRUE(s.envelope_too_small);
}

TEST(LiveMapSize, DaemonReservesItsBudgetAndOtherKernelMemory) {
  // The unit's envelope: the daemon sized on a host with a cgroup limit of
  // 1 GiB keeps the budget, the ring buffer, the unwind tables and the
  // fixed reserve out of it.
  Config c;
  const uint64_t limit = 1 * kGiB;
  const uint64_t reserved =
      c.limits.max_daemon_memory_bytes + c.ringbuf_bytes + c.unwind.max_table_bytes + kLiveMapEnvelopeReserveBytes;
  const LiveMapSizing s = size_live_map(c.limits.live_map_entries, c.limits.live_map_memory_percent, reserved,
                                        {.ram_bytes = 256 * kGiB, .cgroup_limit_bytes = limit});
  EXPECT_TRUE(s.automatic);
  EXPECT_LE(s.worst_bytes, limit - reserved);
  EXPECT_GT(s.entries, 1000000u);  // the envelope of deploy/systemd holds a million allocations
}

TEST(LiveMapSize, ParsesMeminfo) {
  EXPECT_EQ(parse_meminfo_total("MemTotal:       24683520 kB\nMemFree: 1 kB\n"), 24683520ull * 1024);
  EXPECT_EQ(parse_meminfo_total("MemFree: 1 kB\n"), std::nullopt);
}

TEST(LiveMapSize, ParsesCgroupLimits) {
  EXPECT_EQ(parse_cgroup_limit("max\n"), 0u);
  EXPECT_EQ(parse_cgroup_limit("805306368\n"), 805306368u);
  EXPECT_EQ(parse_cgroup_limit("9223372036854771712\n"), 0u);  // v1 unlimited
  EXPECT_EQ(parse_cgroup_limit(""), std::nullopt);
  EXPECT_EQ(parse_cgroup_limit("12x"), std::nullopt);
}

TEST(LiveMapSize, FindsTheMemoryCgroup) {
  auto v2 = parse_memory_cgroup("0::/system.slice/leakwatch.service\n");
  ASSERT_TRUE(v2);
  EXPECT_EQ(v2->first, "/system.slice/leakwatch.service");
  EXPECT_TRUE(v2->second);
  auto v1 = parse_memory_cgroup("5:cpu,cpuacct:/\n4:memory:/box/a\n0::/\n");
  ASSERT_TRUE(v1);
  EXPECT_EQ(v1->first, "/box/a");
  EXPECT_FALSE(v1->second);
  EXPECT_EQ(parse_memory_cgroup("garbage"), std::nullopt);
}

TEST(LiveMapSize, TightestLimitOnTheWayToTheRoot) {
  char tmpl[] = "/tmp/lw_cgroup_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  const auto write = [&](const std::string& dir, const std::string& value) {
    std::filesystem::create_directories(root + dir);
    std::ofstream(root + dir + "/memory.max") << value;
  };
  write("", "max\n");
  write("/system.slice", "1073741824\n");
  write("/system.slice/leakwatch.service", "max\n");
  EXPECT_EQ(cgroup_memory_limit(root, "/system.slice/leakwatch.service", true), 1073741824u);
  write("/system.slice/leakwatch.service", "805306368\n");
  EXPECT_EQ(cgroup_memory_limit(root, "/system.slice/leakwatch.service", true), 805306368u);
  EXPECT_EQ(cgroup_memory_limit(root, "/", true), 0u);
  EXPECT_EQ(cgroup_memory_limit(root, "/user.slice", true), 0u);  // no file there: no limit
  std::filesystem::remove_all(root);
}

TEST(LiveMapSize, DescribesTheChoice) {
  const LiveMapSizing a = size_live_map(0, 2, 0, {.ram_bytes = 8 * kGiB, .cgroup_limit_bytes = 2 * kGiB});
  const std::string d = describe(a);
  EXPECT_NE(d.find(std::to_string(a.entries) + " entries"), std::string::npos) << d;
  EXPECT_NE(d.find("automatic"), std::string::npos) << d;
  EXPECT_NE(d.find("cgroup limit 2048.0 MiB"), std::string::npos) << d;
  EXPECT_NE(describe(size_live_map(64, 2, 0, {})).find("set by limits.live_map_entries"), std::string::npos);
}

}  // namespace
}  // namespace lw
