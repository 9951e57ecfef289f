// SPDX-License-Identifier: Apache-2.0
// What the daemon holds for a traced process (decision process-cost): the
// parsed maps' shared paths and bounds, the cost rules, the pruning of
// resolved stacks.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <unordered_map>

#include "core/accounting/heap_tracker.h"
#include "core/policy/memory_budget.h"
#include "core/policy/process_cost.h"
#include "core/proc/proc_maps.h"
#include "core/symbols/stack_frames.h"

namespace lw {
namespace {

std::string map_line(uint64_t start, uint64_t end, const std::string& path, uint64_t inode = 77) {
  char head[128];
  snprintf(head, sizeof(head), "%llx-%llx r-xp 00000000 08:01 %llu ", static_cast<unsigned long long>(start),
           static_cast<unsigned long long>(end), static_cast<unsigned long long>(inode));
  return head + path + "\n";
}

// The vector: 15,000 mappings of one file under a 3.8 KB path. Each
// entry held its own copy of the path (57 MB); now one copy is shared.
TEST(ProcessCost, OneFileMappedFifteenThousandTimesKeepsOneCopyOfItsPath) {
  const std::string path = "/tmp/" + std::string(3800, 'p');
  std::string text;
  for (uint64_t i = 0; i < 15000; ++i) text += map_line(0x10000000 + i * 0x2000, 0x10001000 + i * 0x2000, path);
  ParsedMaps maps = parse_proc_maps(text);
  ASSERT_EQ(maps.entries.size(), 15000u);
  EXPECT_EQ(maps.entries.back().path, path);
  EXPECT_TRUE(maps.entries.front().path.shares(maps.entries.back().path));
  EXPECT_EQ(maps.path_bytes, MapsParser::memory_of(path.size()));
  // The entries themselves and one path: about 1.4 MB, where the copies
  // were 15,000 * 3.8 KB = 57 MB.
  EXPECT_LT(maps.memory_bytes(), 15000 * sizeof(MapEntry) + 8192);
  EXPECT_LT(maps.memory_bytes(), 2u << 20);
}

// Distinct long paths (hard links under many names) are bounded per read:
// past kMaxMapPathBytes a path is kept as kDroppedPath, counted.
TEST(ProcessCost, DistinctPathsPastTheBoundAreDroppedAndCounted) {
  std::string text;
  const size_t n = kMaxMapPathBytes / MapsParser::memory_of(4000) + 20;
  for (uint64_t i = 0; i < n; ++i) {
    std::string path = "/" + std::to_string(i) + "/" + std::string(4000 - 8, 'q');
    text += map_line(0x10000000 + i * 0x2000, 0x10001000 + i * 0x2000, path, 100 + i);
  }
  ParsedMaps maps = parse_proc_maps(text);
  ASSERT_EQ(maps.entries.size(), n);
  EXPECT_GE(maps.paths_dropped, 10u);
  EXPECT_LE(maps.path_bytes, kMaxMapPathBytes);
  EXPECT_EQ(maps.entries.back().path, std::string(kDroppedPath));
  EXPECT_FALSE(maps.entries.back().is_file());
  EXPECT_TRUE(maps.entries.front().is_file());
}

TEST(ProcessCost, EntriesPastTheBoundAreNotKeptAndCounted) {
  std::string text;
  for (uint64_t i = 0; i < kMaxMapEntries + 5; ++i) text += map_line(0x10000000 + i * 0x2000, 0x10001000 + i * 0x2000, "");
  ParsedMaps maps = parse_proc_maps(text);
  EXPECT_EQ(maps.entries.size(), kMaxMapEntries);
  EXPECT_EQ(maps.entries_dropped, 5u);
  EXPECT_EQ(maps.malformed_lines, 0u);
}

// read_proc_maps parses as it reads, in 64 KiB chunks: lines cut across
// chunks are whole, and a file of many mappings of one long path reads the
// same as parse_proc_maps of its text.
TEST(ProcessCost, StreamedReadOfOwnMapsSharesPathsAcrossChunks) {
  char dir[] = "/tmp/lw_cost_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/" + std::string(200, 'f');
  FILE* f = fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("x", f);
  fclose(f);
  const int fd = open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::vector<void*> maps_made;
  const long page = sysconf(_SC_PAGESIZE);
  for (int i = 0; i < 2000; ++i) {  // 2,000 * ~280 bytes: several chunks
    void* p = mmap(nullptr, static_cast<size_t>(page), PROT_READ, MAP_PRIVATE, fd, 0);
    ASSERT_NE(p, MAP_FAILED);
    maps_made.push_back(p);
  }
  close(fd);
  Result<ParsedMaps> maps = read_proc_maps(getpid());
  for (void* p : maps_made) munmap(p, static_cast<size_t>(page));
  unlink(file.c_str());
  rmdir(dir);
  ASSERT_TRUE(maps.ok());
  EXPECT_EQ(maps->malformed_lines, 0u);
  size_t ours = 0;
  const MapEntry* first = nullptr;
  for (const MapEntry& e : maps->entries) {
    if (e.path != file) continue;
    ++ours;
    if (!first) first = &e;
    EXPECT_TRUE(e.path.shares(first->path));
  }
  // Adjacent identical mappings may merge into one entry.
  EXPECT_GE(ours, 1u);
  EXPECT_LT(maps->path_bytes, 64u << 10);
}

TEST(ProcessCost, CappedCostLeavesTheRecordsOut) {
  ProcessCost c{.records = 1000, .sites = 1, .stacks = 2, .maps = 3, .python = 4, .jit = 5};
  EXPECT_EQ(c.capped(), 15u);
  EXPECT_EQ(c.total(), 1015u);
  EXPECT_TRUE(over_process_cap(c, 14));
  EXPECT_FALSE(over_process_cap(c, 15));
  EXPECT_FALSE(over_process_cap(c, 0));  // no cap
}

TEST(ProcessCost, TheDaemonBudgetCoversCostsAndRecordsTogether) {
  // 100,000 records of 128 bytes: 12.8 MB of room.
  EXPECT_EQ(record_cap_after_costs(100000, 128, 0, 4096), 100000u);
  EXPECT_EQ(record_cap_after_costs(100000, 128, 128 * 1000, 4096), 99000u);
  EXPECT_EQ(record_cap_after_costs(100000, 128, 129, 4096), 99998u);  // rounded up
  EXPECT_EQ(record_cap_after_costs(100000, 128, 128 * 99000, 4096), 4096u);  // never under the floor
  EXPECT_EQ(record_cap_after_costs(0, 128, 1u << 30, 4096), 0u);  // no cap stays no cap
  EXPECT_FALSE(over_daemon_budget(100000, 128, 128 * (100000 - 4096), 4096));
  EXPECT_TRUE(over_daemon_budget(100000, 128, 128 * (100000 - 4096) + 1, 4096));
  EXPECT_FALSE(over_daemon_budget(0, 128, 1u << 30, 4096));
}

TEST(ProcessCost, TheCostliestNotYetShedIsPicked) {
  std::vector<ProcessCost> costs(3);
  costs[0].stacks = 10;
  costs[1].maps = 30;
  costs[1].records = 0;
  costs[2].records = 1000;  // records are the record budget's
  EXPECT_EQ(pick_costliest(costs, {false, false, false}), std::optional<size_t>(1));
  EXPECT_EQ(pick_costliest(costs, {false, true, false}), std::optional<size_t>(0));
  EXPECT_EQ(pick_costliest(costs, {true, true, false}), std::nullopt);
  EXPECT_STREQ(shed_reason_name(ShedReason::kProcessCap), "process_memory_cap");
  EXPECT_STREQ(shed_reason_name(ShedReason::kDaemonBudget), "daemon_memory_budget");
  EXPECT_STREQ(shed_reason_name(ShedReason::kNone), "");
}

// Pruning visits a bounded number of entries a call, and every entry in
// turn over calls: a table of 10,000 stacks, 100 of them in use, is down to
// those 100 after enough calls of 1,000 visits, never by more than the
// visits of one call at a time.
TEST(ProcessCost, PruningIsBoundedAndReachesEveryEntry) {
  std::unordered_map<uint64_t, int> cache;
  for (uint64_t i = 0; i < 10000; ++i) cache.emplace(i * 7919, 1);
  auto in_use = [](uint64_t key) { return (key / 7919) % 100 == 0; };
  size_t cursor = 0, erased_values = 0, calls = 0;
  while (cache.size() > 100 && calls < 1000) {
    const size_t before = cache.size();
    const size_t erased = prune_unused(cache, cursor, 1000, in_use, [&](int v) { erased_values += v; });
    EXPECT_EQ(before - cache.size(), erased);
    EXPECT_LE(erased, 1000u + 16);  // a bucket's worth past the budget at most
    ++calls;
  }
  EXPECT_EQ(cache.size(), 100u);
  EXPECT_EQ(erased_values, 9900u);
  EXPECT_LE(calls, 40u);
  for (const auto& [key, v] : cache) EXPECT_TRUE(in_use(key));
}

TEST(ProcessCost, FrameBytesCountTheirStrings) {
  Frame small;
  EXPECT_EQ(frame_memory_bytes(small), sizeof(Frame));
  Frame big = small;
  big.module = std::string(3800, 'm');
  big.function = std::string(100, 'f');
  EXPECT_GE(frame_memory_bytes(big), sizeof(Frame) + 3900);
  EXPECT_LE(frame_memory_bytes(big), sizeof(Frame) + 2 * 3900);
}

TEST(ProcessCost, HeapTrackerTellsLiveStacksAndItsSitesBytes) {
  HeapTracker h;
  EXPECT_FALSE(h.stack_live(42));
  h.apply(Event{EventType::kAlloc, 0, 1, 1, LW_KIND_HEAP, 1, 0x1000, 64, 1, 42});
  h.apply(Event{EventType::kAlloc, 0, 1, 1, LW_KIND_MMAP, 2, 0x20000, 4096, 2, 43});
  EXPECT_TRUE(h.stack_live(42));
  EXPECT_TRUE(h.stack_live(43));
  EXPECT_FALSE(h.stack_live(44));
  EXPECT_GT(h.site_memory_bytes(), 0u);
  EXPECT_LT(h.site_memory_bytes(), h.memory_bytes());
  h.apply(Event{EventType::kFree, 0, 1, 1, LW_KIND_HEAP, 3, 0x1000, 64, 1, 0});
  EXPECT_FALSE(h.stack_live(42));  // the site is still there, holding nothing
  EXPECT_EQ(h.sites().size(), 2u);
}

}  // namespace
}  // namespace lw
