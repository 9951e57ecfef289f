// SPDX-License-Identifier: Apache-2.0
// The daemon's hard memory bound (decision daemon-memory-bound): the record cap
// derived from the budget, the choice of the process to shed, and what
// shedding does to a HeapTracker (records gone and memory given back,
// per-site figures frozen, events and resyncs of the kind ignored until a
// re-baseline), and the governor's forced suspension.
#include "core/policy/memory_budget.h"

#include <gtest/gtest.h>

#include "core/accounting/event.h"
#include "core/platform/flat_map.h"
#include "core/accounting/heap_tracker.h"
#include "core/policy/overhead_policy.h"

namespace lw {
namespace {

Event alloc_ev(uint64_t addr, uint64_t size, uint64_t ns, uint64_t stack, uint32_t kind = LW_KIND_HEAP) {
  return Event{EventType::kAlloc, 0, 1, 1, kind, ns, addr, size, ns, stack};
}
Event free_ev(uint64_t addr, uint64_t size, uint64_t ns, uint32_t kind = LW_KIND_HEAP) {
  return Event{EventType::kFree, 0, 1, 1, kind, ns + 1, addr, size, ns, 0};
}
const SiteStats* site(const HeapTracker& t, uint64_t stack, uint32_t kind = LW_KIND_HEAP) {
  for (const SiteStats& s : t.sites())
    if (s.stack_hash == stack && s.kind == kind) return &s;
  return nullptr;
}

TEST(MemoryBudget, RecordCapIsWhatTheBudgetLeavesAtWorstCasePerRecord) {
  constexpr uint64_t MiB = 1ull << 20;
  // 256 MiB budget, 24 MiB baseline: (256 - 24 - 16 - 32) MiB / 128 B,
  // the 32 MiB being the HTTP front's bound.
  EXPECT_EQ(live_record_cap(256 * MiB, 24 * MiB), (184 * MiB) / 128);
  EXPECT_EQ(live_record_cap(256 * MiB, 24 * MiB), 1507328u);
  // A budget at or under the baseline plus reserves still tracks a little.
  EXPECT_EQ(live_record_cap(64 * MiB, 24 * MiB), kMinLiveRecordCap);
  EXPECT_EQ(live_record_cap(1, 0), kMinLiveRecordCap);
  EXPECT_EQ(live_record_cap(UINT64_MAX, 0),
            (UINT64_MAX - kMemoryReserveBytes - kHttpFrontReserveBytes) / 128);
  EXPECT_TRUE(live_map_fits(262144, live_record_cap(512 * MiB, 24 * MiB)));
  EXPECT_FALSE(live_map_fits(1u << 26, live_record_cap(512 * MiB, 24 * MiB)));
}

TEST(MemoryBudget, WorstCasePerRecordCoversTheFlatMapWhileItDoubles) {
  // A slot is key + record; the map doubles at 3/4 load and holds both
  // arrays while it rehashes.
  const uint64_t slot = sizeof(uint64_t) + sizeof(LiveRecord);
  EXPECT_EQ(slot, 32u);
  EXPECT_GE(kBytesPerLiveRecord * 3, (1 + 2) * slot * 4);
  // And in fact: the steady memory of n records is below n * the charge.
  HeapTracker t;
  for (uint64_t i = 1; i <= 100000; ++i) t.apply(alloc_ev(i * 64, 16, i, 7));
  EXPECT_LE(t.memory_bytes(), 100000 * kBytesPerLiveRecord);
}

TEST(MemoryBudget, VictimIsTheProcessWithTheMostHeapRecords) {
  EXPECT_EQ(pick_shed_victim({{10, 5}, {11, 900}, {12, 30}}), 11);
  EXPECT_EQ(pick_shed_victim({{12, 7}, {11, 7}}), 11);  // ties: lower pid
  EXPECT_EQ(pick_shed_victim({{10, 0}, {11, 0}}), std::nullopt);
  EXPECT_EQ(pick_shed_victim({}), std::nullopt);
}

TEST(MemoryBudget, ParseStatmResident) {
  EXPECT_EQ(parse_statm_resident("12345 678 90 1 0 2 0\n", 4096), 678u * 4096);
  EXPECT_EQ(parse_statm_resident("", 4096), std::nullopt);
  EXPECT_EQ(parse_statm_resident("12345", 4096), std::nullopt);
  EXPECT_EQ(parse_statm_resident("x 1", 4096), std::nullopt);
}

TEST(MemoryBudget, FlatMapClearGivesMemoryBack) {
  FlatMap<LiveRecord> m;
  for (uint64_t i = 1; i <= 10000; ++i) m.insert(i, LiveRecord{});
  EXPECT_GE(m.memory_bytes(), 10000u * 32);
  m.clear();
  EXPECT_EQ(m.memory_bytes(), 16u * 32);
  EXPECT_EQ(m.size(), 0u);
}

TEST(MemoryBudget, ShedKindDropsRecordsKeepsFrozenFigures) {
  HeapTracker t;
  for (uint64_t i = 1; i <= 5000; ++i) t.apply(alloc_ev(i * 64, 32, i, 7));
  t.apply(free_ev(64, 32, 1));
  t.apply(alloc_ev(0x7000000, 8192, 9000, 5, LW_KIND_MMAP));
  EXPECT_EQ(t.record_count(), 5000u);
  EXPECT_EQ(t.record_count(LW_KIND_HEAP), 4999u);
  const size_t before = t.memory_bytes();
  const SiteStats frozen = *site(t, 7);

  t.shed_kind(LW_KIND_HEAP);
  EXPECT_TRUE(t.frozen(LW_KIND_HEAP));
  EXPECT_FALSE(t.frozen(LW_KIND_MMAP));
  EXPECT_EQ(t.record_count(), 1u);  // the mmap record stays
  EXPECT_EQ(t.record_count(LW_KIND_HEAP), 0u);
  EXPECT_EQ(t.counters().shed_records, 4999u);
  EXPECT_LT(t.memory_bytes() * 10, before);
  // Per-site figures as they were at the shed.
  EXPECT_EQ(site(t, 7)->live_bytes, frozen.live_bytes);
  EXPECT_EQ(site(t, 7)->live_allocations, 4999u);
  EXPECT_EQ(site(t, 7)->allocated_bytes, frozen.allocated_bytes);
  EXPECT_EQ(t.live_bytes(LW_KIND_HEAP), 4999u * 32);
  EXPECT_EQ(t.live_allocations_total(), 5000u);  // 4999 frozen heap + 1 mmap

  // Heap events after the shed change nothing (queued before the kernel
  // flag took effect); mmap events still apply.
  t.apply(alloc_ev(0x900000, 32, 10000, 7));
  t.apply(free_ev(128, 32, 2));
  EXPECT_EQ(t.counters().frozen_events, 2u);
  EXPECT_EQ(site(t, 7)->live_allocations, 4999u);
  EXPECT_EQ(t.record_count(LW_KIND_HEAP), 0u);
  t.apply(alloc_ev(0x8000000, 4096, 10001, 5, LW_KIND_MMAP));
  EXPECT_EQ(t.record_count(LW_KIND_MMAP), 2u);

  // A resync does not read the frozen kind back, nor zero its figures.
  t.resync({{LW_KIND_MMAP, 0x7000000, 8192, 9000, 5},
            {LW_KIND_MMAP, 0x8000000, 4096, 10001, 5},
            {LW_KIND_HEAP, 192, 32, 3, 7}});
  EXPECT_EQ(t.record_count(), 2u);
  EXPECT_EQ(site(t, 7)->live_allocations, 4999u);
  EXPECT_EQ(t.live_bytes(LW_KIND_HEAP), 4999u * 32);
  EXPECT_EQ(t.live_bytes(LW_KIND_MMAP), 8192u + 4096u);

  // The re-baseline when tracing resumes thaws the kind.
  t.clear_kind(LW_KIND_HEAP);
  EXPECT_FALSE(t.frozen(LW_KIND_HEAP));
  EXPECT_EQ(t.live_bytes(LW_KIND_HEAP), 0u);
  t.apply(alloc_ev(0x900000, 32, 20000, 7));
  EXPECT_EQ(site(t, 7)->live_allocations, 1u);
  EXPECT_EQ(t.record_count(LW_KIND_HEAP), 1u);
}

TEST(MemoryBudget, RecordCountsFollowEveryPath) {
  HeapTracker t;
  t.apply(alloc_ev(0x1000, 10, 1, 7));
  t.apply(alloc_ev(0x1000, 10, 2, 7));  // missed free: replaces
  t.apply(alloc_ev(0x1000, 10, 2, 7));  // duplicate: ignored
  EXPECT_EQ(t.record_count(LW_KIND_HEAP), 1u);
  t.resync({{LW_KIND_HEAP, 0x1000, 10, 2, 7}, {LW_KIND_HEAP, 0x2000, 10, 3, 7}});
  EXPECT_EQ(t.record_count(LW_KIND_HEAP), 2u);
  EXPECT_EQ(t.record_count(), 2u);
  t.clear();
  EXPECT_EQ(t.record_count(LW_KIND_HEAP), 0u);
}

TEST(MemoryBudget, GovernorForcedSuspensionBacksOffLikeARateSuspension) {
  GovernorParams p;
  p.max_hits_per_second = 0;  // no rate budget: only the forced suspension
  p.backoff_initial_s = 10;
  p.backoff_max_s = 25;
  GovernorState g;
  EXPECT_EQ(g.suspend(100, p), 10);
  EXPECT_TRUE(g.suspended());
  EXPECT_EQ(g.suspend(101, p), 10);  // already suspended: no change
  EXPECT_EQ(g.observe(105, 0, p), GovernorAction::kNone);
  EXPECT_EQ(g.observe(110, 0, p), GovernorAction::kResume);
  // Shed again soon after the resume: the wait doubles, up to the max.
  EXPECT_EQ(g.suspend(112, p), 20);
  EXPECT_EQ(g.observe(132, 0, p), GovernorAction::kResume);
  EXPECT_EQ(g.suspend(133, p), 25);
  EXPECT_EQ(g.observe(158, 0, p), GovernorAction::kResume);
  // After a calm stretch as long as the last wait: the initial wait again.
  EXPECT_EQ(g.suspend(200, p), 10);
}

}  // namespace
}  // namespace lw
