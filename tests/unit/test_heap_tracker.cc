// SPDX-License-Identifier: Apache-2.0
#include "core/accounting/heap_tracker.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <unordered_map>

#include "core/accounting/event.h"
#include "core/platform/flat_map.h"

namespace lw {
namespace {

Event alloc_ev(uint64_t addr, uint64_t size, uint64_t ns, uint64_t stack, uint32_t kind = LW_KIND_HEAP,
               uint16_t flags = 0) {
  return Event{EventType::kAlloc, flags, 1, 1, kind, ns, addr, size, ns, stack};
}
Event free_ev(uint64_t addr, uint64_t size, uint64_t ns, uint32_t kind = LW_KIND_HEAP,
              uint16_t flags = 0) {
  return Event{EventType::kFree, flags, 1, 1, kind, ns + 1, addr, size, ns, 0};
}

const SiteStats* site(const HeapTracker& t, uint64_t stack, uint32_t kind = LW_KIND_HEAP) {
  for (const SiteStats& s : t.sites())
    if (s.stack_hash == stack && s.kind == kind) return &s;
  return nullptr;
}

TEST(HeapTracker, AllocFreePerSite) {
  HeapTracker t;
  t.apply(alloc_ev(0x1000, 100, 1, 7));
  t.apply(alloc_ev(0x2000, 50, 2, 7));
  t.apply(alloc_ev(0x3000, 30, 3, 9));
  t.apply(free_ev(0x2000, 50, 2));
  ASSERT_NE(site(t, 7), nullptr);
  EXPECT_EQ(site(t, 7)->live_bytes, 100u);
  EXPECT_EQ(site(t, 7)->live_allocations, 1u);
  EXPECT_EQ(site(t, 7)->allocated_bytes, 150u);
  EXPECT_EQ(site(t, 7)->freed_bytes, 50u);
  EXPECT_EQ(site(t, 9)->live_bytes, 30u);
  EXPECT_EQ(t.live_bytes_total(), 130u);
  EXPECT_EQ(t.live_allocations_total(), 2u);
}

// top's --older/--min-size/--max-size: per site, only the records that
// pass count; the site's own figures stay whole.
TEST(HeapTracker, FilteredLiveCountsOnlyRecordsThatPass) {
  HeapTracker t;
  constexpr uint64_t kS = 1'000'000'000;
  t.apply(alloc_ev(0x1000, 100, 1 * kS, 7));
  t.apply(alloc_ev(0x2000, 5000, 2 * kS, 7));
  t.apply(alloc_ev(0x3000, 300, 9 * kS, 7));
  t.apply(alloc_ev(0x4000, 400, 3 * kS, 9, LW_KIND_MMAP));
  std::vector<size_t> index(2);
  for (size_t i = 0; i < t.sites().size(); ++i) index[t.sites()[i].stack_hash == 7 ? 0 : 1] = i;

  LiveFilter none;
  EXPECT_FALSE(none.active());
  std::vector<FilteredLive> all = t.filtered_live(none, 10 * kS);
  ASSERT_EQ(all.size(), t.sites().size());
  EXPECT_EQ(all[index[0]].bytes, 5400u);
  EXPECT_EQ(all[index[0]].allocations, 3u);

  LiveFilter older;
  older.min_age_ns = 5 * kS;  // at t = 10 s: the records from 1, 2 and 3 s
  std::vector<FilteredLive> aged = t.filtered_live(older, 10 * kS);
  EXPECT_EQ(aged[index[0]].bytes, 5100u);
  EXPECT_EQ(aged[index[0]].allocations, 2u);
  EXPECT_EQ(aged[index[1]].bytes, 400u);
  // A record stamped after "now" is age 0.
  EXPECT_EQ(t.filtered_live(older, 1).at(index[0]).bytes, 0u);

  LiveFilter sizes;
  sizes.min_size = 300;
  sizes.max_size = 4999;
  std::vector<FilteredLive> sized = t.filtered_live(sizes, 10 * kS);
  EXPECT_EQ(sized[index[0]].bytes, 300u);
  EXPECT_EQ(sized[index[1]].bytes, 400u);
  EXPECT_EQ(site(t, 7)->live_bytes, 5400u) << "the site's own figures are not filtered";
}

// Escalation's explained bytes (decision tensor-tier, "Tensors in
// flight"): only the kind's records allocated at or before the cut count;
// other kinds and younger records do not.
TEST(HeapTracker, LiveBytesSettledCountsOnlyOlderRecordsOfTheKind) {
  HeapTracker t;
  constexpr uint64_t kS = 1'000'000'000;
  EXPECT_EQ(t.live_bytes_settled(LW_KIND_TENSOR_CPU, 100 * kS), 0u);
  t.apply(alloc_ev(0x1000, 65536, 1 * kS, 7, LW_KIND_TENSOR_CPU));   // kept
  t.apply(alloc_ev(0x2000, 4096, 10 * kS, 7, LW_KIND_TENSOR_CPU));   // in flight
  t.apply(alloc_ev(0x3000, 777, 1 * kS, 7, LW_KIND_HEAP));           // other kind
  t.apply(alloc_ev(0x4000, 1000, 2 * kS, 8, LW_KIND_TENSOR_CPU));
  t.apply(free_ev(0x4000, 1000, 2 * kS, LW_KIND_TENSOR_CPU));        // freed
  EXPECT_EQ(t.live_bytes(LW_KIND_TENSOR_CPU), 65536u + 4096u);
  EXPECT_EQ(t.live_bytes_settled(LW_KIND_TENSOR_CPU, 5 * kS), 65536u);
  EXPECT_EQ(t.live_bytes_settled(LW_KIND_TENSOR_CPU, 10 * kS), 65536u + 4096u);
  EXPECT_EQ(t.live_bytes_settled(LW_KIND_TENSOR_CPU, 0), 0u);
  EXPECT_EQ(t.live_bytes_settled(LW_KIND_MAX, 100 * kS), 0u);
}

TEST(HeapTracker, KindsAreSeparateAtTheSameAddress) {
  HeapTracker t;
  t.apply(alloc_ev(0x1000, 4096, 1, 7, LW_KIND_MMAP));
  t.apply(alloc_ev(0x1000, 16, 2, 7, LW_KIND_HEAP));
  t.apply(free_ev(0x1000, 16, 2, LW_KIND_HEAP));
  EXPECT_EQ(t.live_bytes(LW_KIND_MMAP), 4096u);
  EXPECT_EQ(t.live_bytes(LW_KIND_HEAP), 0u);
}

TEST(HeapTracker, StaleFreeDoesNotRetireNewerRecord) {
  HeapTracker t;
  t.apply(alloc_ev(0x1000, 100, 5, 7));
  t.apply(free_ev(0x1000, 100, 4));  // names an older record at this address
  EXPECT_EQ(t.live_bytes_total(), 100u);
  EXPECT_EQ(t.counters().stale_frees, 1u);
}

TEST(HeapTracker, DuplicateAllocIsIgnoredAndMissedFreeRetires) {
  HeapTracker t;
  t.apply(alloc_ev(0x1000, 100, 5, 7));
  t.apply(alloc_ev(0x1000, 100, 5, 7));
  EXPECT_EQ(t.counters().duplicate_allocs, 1u);
  EXPECT_EQ(site(t, 7)->allocated_bytes, 100u);
  t.apply(alloc_ev(0x1000, 60, 6, 8, LW_KIND_HEAP, LW_EVF_REPLACED));
  EXPECT_EQ(t.counters().missed_frees, 1u);
  EXPECT_EQ(site(t, 7)->live_bytes, 0u);
  EXPECT_EQ(site(t, 8)->live_bytes, 60u);
  EXPECT_EQ(t.live_bytes_total(), 60u);
}

TEST(HeapTracker, PartialUnmapCutsTheMiddle) {
  HeapTracker t;
  t.apply(alloc_ev(0x10000, 4 * 4096, 1, 7, LW_KIND_MMAP));
  Event cut = free_ev(0x10000, 4096, 1, LW_KIND_MMAP, LW_EVF_PARTIAL);
  cut.stack_hash = 4096;  // offset of the cut
  t.apply(cut);
  EXPECT_EQ(t.live_bytes(LW_KIND_MMAP), 3u * 4096);
  EXPECT_EQ(t.live_allocations_total(), 2u);  // head and tail
  t.apply(free_ev(0x10000, 4096, 1, LW_KIND_MMAP));
  t.apply(free_ev(0x12000, 2 * 4096, 1, LW_KIND_MMAP));
  EXPECT_EQ(t.live_bytes(LW_KIND_MMAP), 0u);
  // An impossible cut (past the end) changes nothing.
  t.apply(alloc_ev(0x20000, 4096, 2, 7, LW_KIND_MMAP));
  Event bad = free_ev(0x20000, 4096, 2, LW_KIND_MMAP, LW_EVF_PARTIAL);
  bad.stack_hash = 4096;
  t.apply(bad);
  EXPECT_EQ(t.live_bytes(LW_KIND_MMAP), 4096u);
}

TEST(HeapTracker, PartialUnmapTrimsHead) {
  HeapTracker t;
  t.apply(alloc_ev(0x10000, 3 * 4096, 1, 7, LW_KIND_MMAP));
  t.apply(free_ev(0x10000, 4096, 1, LW_KIND_MMAP, LW_EVF_PARTIAL));
  EXPECT_EQ(t.live_bytes(LW_KIND_MMAP), 2u * 4096);
  // The rest now lives at the trimmed address and frees from there.
  t.apply(free_ev(0x11000, 2 * 4096, 1, LW_KIND_MMAP));
  EXPECT_EQ(t.live_bytes(LW_KIND_MMAP), 0u);
  EXPECT_EQ(site(t, 7, LW_KIND_MMAP)->freed_bytes, 3u * 4096);
}

TEST(HeapTracker, ResyncMatchesKernelAndKeepsTotalsConsistent) {
  HeapTracker t;
  t.apply(alloc_ev(0x1000, 100, 1, 7));
  t.apply(alloc_ev(0x2000, 200, 2, 7));  // its FREE will be "lost"
  // Kernel: 0x1000 still live, 0x2000 freed, 0x3000 allocated (ALLOC lost).
  std::vector<KernelRecord> kernel = {{LW_KIND_HEAP, 0x1000, 100, 1, 7},
                                      {LW_KIND_HEAP, 0x3000, 300, 3, 9}};
  t.resync(kernel);
  EXPECT_EQ(t.live_bytes_total(), 400u);
  EXPECT_EQ(site(t, 7)->live_bytes, 100u);
  EXPECT_EQ(site(t, 9)->live_bytes, 300u);
  for (const SiteStats& s : t.sites())
    EXPECT_EQ(s.allocated_bytes - s.freed_bytes, s.live_bytes) << "stack " << s.stack_hash;
  EXPECT_EQ(t.counters().resync_added, 1u);
  EXPECT_EQ(t.counters().resync_removed, 1u);
  // Events that were still queued when the map was read change nothing.
  t.apply(alloc_ev(0x3000, 300, 3, 9));
  t.apply(free_ev(0x2000, 200, 2));
  EXPECT_EQ(t.live_bytes_total(), 400u);
}

// Differential test against a plain std::unordered_map model.
TEST(HeapTracker, RandomEventsMatchModel) {
  std::mt19937_64 rng(42);
  HeapTracker t;
  std::unordered_map<uint64_t, std::pair<uint64_t, uint64_t>> model;  // addr -> (size, ns)
  uint64_t ns = 1;
  for (int i = 0; i < 200000; ++i) {
    uint64_t addr = 0x1000 + (rng() % 5000) * 16;
    auto it = model.find(addr);
    if (it == model.end()) {
      uint64_t size = 1 + rng() % 4096;
      t.apply(alloc_ev(addr, size, ns, rng() % 13));
      model[addr] = {size, ns++};
    } else {
      t.apply(free_ev(addr, it->second.first, it->second.second));
      model.erase(it);
    }
  }
  uint64_t want = 0;
  for (auto& [a, v] : model) want += v.first;
  EXPECT_EQ(t.live_bytes_total(), want);
  EXPECT_EQ(t.live_allocations_total(), model.size());
  uint64_t by_site = 0;
  for (const SiteStats& s : t.sites()) by_site += s.live_bytes;
  EXPECT_EQ(by_site, want);
}

TEST(FlatMap, InsertFindEraseWithCollisionsAndZeroKey) {
  FlatMap<uint64_t> m;
  std::unordered_map<uint64_t, uint64_t> ref;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100000; ++i) {
    uint64_t k = rng() % 3000;  // includes 0
    if (rng() % 3 == 0) {
      EXPECT_EQ(m.erase(k), ref.erase(k) == 1);
    } else {
      m.insert(k, i);
      ref[k] = static_cast<uint64_t>(i);
    }
  }
  ASSERT_EQ(m.size(), ref.size());
  for (auto& [k, v] : ref) {
    ASSERT_NE(m.find(k), nullptr);
    EXPECT_EQ(*m.find(k), v);
  }
}

TEST(FlatMap, ClearEmptiesIt) {
  FlatMap<uint64_t> m;
  for (uint64_t k = 0; k < 1000; ++k) m.insert(k, k);
  m.clear();
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.find(5), nullptr);
  EXPECT_EQ(m.find(0), nullptr);
  size_t seen = 0;
  m.for_each([&](uint64_t, const uint64_t&) { ++seen; });
  EXPECT_EQ(seen, 0u);
  m.insert(7, 70);
  ASSERT_NE(m.find(7), nullptr);
  EXPECT_EQ(*m.find(7), 70u);
}

TEST(DecodeEvent, RejectsShortAndOutOfRange) {
  lw_event raw{};
  raw.type = LW_EV_ALLOC;
  raw.kind = LW_KIND_HEAP;
  raw.addr = 0x1234;
  EXPECT_TRUE(decode_event(&raw, sizeof(raw)).has_value());
  EXPECT_FALSE(decode_event(&raw, sizeof(raw) - 1).has_value());
  EXPECT_FALSE(decode_event(nullptr, sizeof(raw)).has_value());
  raw.type = 99;
  EXPECT_FALSE(decode_event(&raw, sizeof(raw)).has_value());
  raw.type = LW_EV_FREE;
  raw.kind = LW_KIND_MAX;
  EXPECT_FALSE(decode_event(&raw, sizeof(raw)).has_value());
}

// Every byte pattern either decodes to an in-range event or is rejected.
TEST(DecodeEvent, RandomBytesNeverProduceOutOfRangeEvents) {
  std::mt19937 rng(1);
  unsigned char buf[sizeof(lw_event) + 8];
  for (int i = 0; i < 100000; ++i) {
    for (auto& b : buf) b = static_cast<unsigned char>(rng());
    size_t len = rng() % sizeof(buf);
    auto e = decode_event(buf, len);
    if (e) {
      EXPECT_GE(len, sizeof(lw_event));
      if (const Event* r = std::get_if<Event>(&*e)) {
        EXPECT_LT(r->kind, static_cast<uint32_t>(LW_KIND_MAX));
        EXPECT_TRUE(r->type == EventType::kAlloc || r->type == EventType::kFree);
      }
      if (const GpuOomEvent* g = std::get_if<GpuOomEvent>(&*e)) {
        EXPECT_LT(g->kind, static_cast<uint32_t>(LW_KIND_MAX));
      }
    }
  }
}

// Each type's overloaded fields land in its own named ones (leakwatch_abi.h,
// enum lw_event_type).
TEST(DecodeEvent, TypesHaveTheirOwnFields) {
  lw_event raw{};
  raw.tgid = 42;
  raw.ts_ns = 1000;
  raw.type = LW_EV_SIGKILL;
  raw.addr = 7;
  raw.size = 4096;
  std::memcpy(&raw.alloc_ns, "systemd-", 8);
  std::memcpy(&raw.stack_hash, "oomd\0\0\0\0", 8);
  auto e = decode_event(&raw, sizeof(raw));
  ASSERT_TRUE(e && std::holds_alternative<SigkillEvent>(*e));
  const auto& kill = std::get<SigkillEvent>(*e);
  EXPECT_EQ(kill.tgid, 42u);
  EXPECT_EQ(kill.sender_pid, 7u);
  EXPECT_EQ(kill.sender_comm(), "systemd-oomd");
  EXPECT_EQ(kill.rss_bytes, 4096u);
  EXPECT_EQ(event_tgid(*e), 42u);
  // 16 bytes, no NUL: all of them.
  std::memcpy(&raw.stack_hash, "oomd-xyz", 8);
  EXPECT_EQ(std::get<SigkillEvent>(*decode_event(&raw, sizeof(raw))).sender_comm(), "systemd-oomd-xyz");

  raw = lw_event{};
  raw.type = LW_EV_OOM_KILL;
  raw.flags = LW_EVF_OOM_MEMCG;
  raw.addr = 1 << 20;
  raw.size = 3 << 10;
  raw.alloc_ns = 5 << 10;
  e = decode_event(&raw, sizeof(raw));
  ASSERT_TRUE(e && std::holds_alternative<OomKillEvent>(*e));
  const auto& oom = std::get<OomKillEvent>(*e);
  EXPECT_TRUE(oom.memcg);
  EXPECT_EQ(oom.limit_bytes, 1u << 20);
  EXPECT_EQ(oom.rss_bytes, 3u << 10);
  EXPECT_EQ(oom.memcg_usage_bytes, 5u << 10);

  raw = lw_event{};
  raw.type = LW_EV_GPU_OOM;
  raw.flags = static_cast<uint16_t>((3 << LW_EVF_DEVICE_SHIFT) | LW_EVF_GPU_DRIVER);
  raw.kind = LW_KIND_CUDA_DEVICE;
  raw.addr = LW_CU_ERROR_OUT_OF_MEMORY;
  raw.size = 1 << 30;
  raw.alloc_ns = 17;
  e = decode_event(&raw, sizeof(raw));
  ASSERT_TRUE(e && std::holds_alternative<GpuOomEvent>(*e));
  const auto& gpu = std::get<GpuOomEvent>(*e);
  EXPECT_EQ(gpu.device, 2);
  EXPECT_TRUE(gpu.driver);
  EXPECT_EQ(gpu.kind, static_cast<uint32_t>(LW_KIND_CUDA_DEVICE));
  EXPECT_EQ(gpu.requested, 1u << 30);
  EXPECT_EQ(gpu.error, static_cast<uint32_t>(LW_CU_ERROR_OUT_OF_MEMORY));
  EXPECT_EQ(gpu.func, 17u);

  raw = lw_event{};
  raw.type = LW_EV_FORK;
  raw.addr = 99;
  e = decode_event(&raw, sizeof(raw));
  ASSERT_TRUE(e && std::holds_alternative<ForkEvent>(*e));
  EXPECT_EQ(std::get<ForkEvent>(*e).child, 99u);

  raw.type = LW_EV_EXEC;
  raw.flags = LW_EVF_UNTRACKED;
  EXPECT_TRUE(std::get<ExecEvent>(*decode_event(&raw, sizeof(raw))).untracked);
  raw.type = LW_EV_EXIT;
  raw.flags = LW_EVF_STALE_EXIT;
  EXPECT_TRUE(std::get<ExitEvent>(*decode_event(&raw, sizeof(raw))).stale);
  raw.type = LW_EV_MAP_EXEC;
  EXPECT_TRUE(std::holds_alternative<MapExecEvent>(*decode_event(&raw, sizeof(raw))));
}

}  // namespace
}  // namespace lw
