// SPDX-License-Identifier: Apache-2.0
// Reservations no record holds (decision reserved-address-space): Go's heap
// arenas and the JVM's heap, reserved before the attach. A record made
// later wholly inside one, in a range still mapped, commits part of it: its
// untouched pages are reserved. Any other record keeps its whole size.
#include <gtest/gtest.h>

#include "core/accounting/event.h"
#include "core/analysis/reserved_space.h"

namespace lw {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kArena = 0xc000000000;

Event mmap_alloc(uint64_t addr, uint64_t size, uint64_t ns, uint64_t stack = 7) {
  return Event{EventType::kAlloc, 0, 1, 1, LW_KIND_MMAP, ns, addr, size, ns, stack};
}

SmapsMapping vma(uint64_t start, uint64_t end, bool access, uint64_t rss = 0) {
  SmapsMapping s;
  s.map.start = start;
  s.map.end = end;
  s.map.readable = s.map.writable = access;
  s.map.is_private = true;
  s.rss = s.anonymous = rss;
  return s;
}

void expect_sums(const HeapTracker& t) {
  for (const SiteStats& s : t.sites())
    EXPECT_EQ(s.allocated_bytes - s.freed_bytes, s.live_bytes + s.reserved_bytes + s.unmapped_bytes);
}

// A 64 MiB arena, its first 4 MiB committed before the attach (read at 5).
UntrackedReservations arena_before(const HeapTracker& t) {
  UntrackedReservations u;
  u.note(untracked_prot_none(t, {vma(kArena, kArena + 4 * kMiB, true, 4 * kMiB),
                                 vma(kArena + 4 * kMiB, kArena + 64 * kMiB, false)},
                             5));
  return u;
}

// Go's sysMap of 8 MiB after the attach, 2 MiB touched: 2 MiB live, 6 MiB
// reserved; all touched later: 8 MiB live, and it stays a commit through
// maps-only reads (no flapping to reserved and back).
TEST(ReservedUntracked, CommitOfUntrackedReservationCountsTouchedPages) {
  HeapTracker t;
  UntrackedReservations u = arena_before(t);
  ASSERT_EQ(u.newer.ranges.size(), 1u);
  EXPECT_EQ(u.newer.ranges[0], std::make_pair(kArena + 4 * kMiB, kArena + 64 * kMiB));
  t.apply(mmap_alloc(kArena + 4 * kMiB, 8 * kMiB, 10));
  std::vector<SmapsMapping> maps = {vma(kArena, kArena + 12 * kMiB, true, 6 * kMiB),
                                    vma(kArena + 12 * kMiB, kArena + 64 * kMiB, false)};
  refresh_splits(t, maps, true, false, &u);
  // The kernel merged the commit with the older 4 MiB: pro rata, 6 MiB
  // resident of 12 is 4 MiB of the record's 8.
  EXPECT_EQ(t.live_bytes_total(), 4 * kMiB);
  EXPECT_EQ(t.reserved_bytes(LW_KIND_MMAP), 4 * kMiB);
  EXPECT_TRUE(t.split_of(kArena + 4 * kMiB).commit);
  expect_sums(t);
  maps[0].rss = 12 * kMiB;
  refresh_splits(t, maps, true, false, &u);
  EXPECT_EQ(t.live_bytes_total(), 8 * kMiB);
  EXPECT_EQ(t.reserved_bytes(LW_KIND_MMAP), 0u);
  EXPECT_EQ(t.split_count(), 1u);  // kept: smaps reads go on for it
  refresh_splits(t, maps, false, true, &u);
  EXPECT_EQ(t.live_bytes_total(), 8 * kMiB);
  // Given back (MADV_DONTNEED, the scavenger): live again only what is resident.
  maps[0].rss = 3 * kMiB;
  refresh_splits(t, maps, true, false, &u);
  EXPECT_EQ(t.live_bytes_total(), 2 * kMiB);
  expect_sums(t);
}

// Ordinary mappings keep their whole size, touched or not: outside any
// reservation, made before the read, or where the reservation was unmapped
// since and the new mapping lies in its hole.
TEST(ReservedUntracked, OtherRecordsKeepTheirSize) {
  HeapTracker t;
  UntrackedReservations u = arena_before(t);
  const uint64_t elsewhere = 0x7f0000000000;
  t.apply(mmap_alloc(elsewhere, 4 * kMiB, 10));
  t.apply(mmap_alloc(kArena + 8 * kMiB, 4 * kMiB, 4));  // older than the read
  std::vector<SmapsMapping> maps = {vma(kArena, kArena + 64 * kMiB, true, kMiB),
                                    vma(elsewhere, elsewhere + 4 * kMiB, true)};
  refresh_splits(t, maps, true, false, &u);
  EXPECT_EQ(t.live_bytes_total(), 8 * kMiB);
  EXPECT_EQ(t.split_count(), 0u);
  // The arena unmapped (untracked: no event) and a new mapping in its hole.
  HeapTracker t2;
  UntrackedReservations u2 = arena_before(t2);
  t2.apply(mmap_alloc(kArena + 16 * kMiB, 4 * kMiB, 10));
  refresh_splits(t2, {vma(kArena + 16 * kMiB, kArena + 20 * kMiB, true)}, true, false, &u2);
  EXPECT_EQ(t2.live_bytes_total(), 4 * kMiB);
  EXPECT_EQ(t2.split_count(), 0u);
  // Reaching past the reservation: not wholly in it.
  HeapTracker t3;
  UntrackedReservations u3 = arena_before(t3);
  t3.apply(mmap_alloc(kArena + 62 * kMiB, 4 * kMiB, 10));
  refresh_splits(t3, {vma(kArena, kArena + 66 * kMiB, true)}, true, false, &u3);
  EXPECT_EQ(t3.live_bytes_total(), 4 * kMiB);
}

// A picture leaves out the address space tracked records hold (their
// commits are found through them), and a record is held against the newest
// picture read before it was made.
TEST(ReservedUntracked, PictureLeavesTrackedRecordsOutAndPredatesTheRecord) {
  HeapTracker t;
  t.apply(mmap_alloc(kArena + 16 * kMiB, 16 * kMiB, 3));
  const std::vector<SmapsMapping> before = {vma(kArena, kArena + 64 * kMiB, false)};
  ProtNonePicture p = untracked_prot_none(t, before, 5);
  ASSERT_EQ(p.ranges.size(), 2u);
  EXPECT_EQ(p.ranges[0], std::make_pair(kArena, kArena + 16 * kMiB));
  EXPECT_EQ(p.ranges[1], std::make_pair(kArena + 32 * kMiB, kArena + 64 * kMiB));
  UntrackedReservations u;
  u.note(p);
  u.note(untracked_prot_none(t, {vma(kArena, kArena + 64 * kMiB, true)}, 20));  // after the commit
  EXPECT_TRUE(u.commits(before, kArena + 4 * kMiB, 4 * kMiB, 10));   // held against the read at 5
  EXPECT_FALSE(u.commits(before, kArena + 4 * kMiB, 4 * kMiB, 30));  // the read at 20 shows it mapped
  EXPECT_FALSE(u.commits(before, kArena + 12 * kMiB, 8 * kMiB, 10));  // into the tracked record
  EXPECT_FALSE(u.commits(before, kArena + 4 * kMiB, 4 * kMiB, 2));    // older than both reads
}

// A munmap cutting a commit leaves commits: the pieces count touched pages.
TEST(ReservedUntracked, PiecesOfACommitStayCommits) {
  HeapTracker t;
  UntrackedReservations u = arena_before(t);
  t.apply(mmap_alloc(kArena + 4 * kMiB, 8 * kMiB, 10));
  std::vector<SmapsMapping> maps = {vma(kArena + 4 * kMiB, kArena + 12 * kMiB, true, 8 * kMiB),
                                    vma(kArena + 12 * kMiB, kArena + 64 * kMiB, false)};
  refresh_splits(t, maps, true, false, &u);
  t.apply(Event{EventType::kFree, LW_EVF_PARTIAL, 1, 1, LW_KIND_MMAP, 11, kArena + 4 * kMiB, 2 * kMiB, 10,
                2 * kMiB});
  EXPECT_TRUE(t.split_of(kArena + 4 * kMiB).commit);
  EXPECT_TRUE(t.split_of(kArena + 8 * kMiB).commit);
  maps = {vma(kArena + 4 * kMiB, kArena + 6 * kMiB, true, kMiB), vma(kArena + 8 * kMiB, kArena + 12 * kMiB, true),
          vma(kArena + 12 * kMiB, kArena + 64 * kMiB, false)};
  refresh_splits(t, maps, true, false, &u);
  EXPECT_EQ(t.live_bytes_total(), kMiB);
  EXPECT_EQ(t.reserved_bytes(LW_KIND_MMAP), 5 * kMiB);
  expect_sums(t);
}

// A mapping at the start of a record at least its size (the kernel retires the
// reservation's record: the live map is keyed by address) commits it: Go's
// first sysMap of an arena reserved after the attach.
TEST(ReservedUntracked, MappingOverTheHeadOfALargerRecordIsACommit) {
  HeapTracker t;
  t.apply(mmap_alloc(kArena, 64 * kMiB, 10));
  t.apply(mmap_alloc(kArena, 4 * kMiB, 11, 8));
  EXPECT_TRUE(t.split_of(kArena).commit);
  EXPECT_EQ(t.counters().missed_frees, 1u);
  refresh_splits(t, {vma(kArena, kArena + 4 * kMiB, true, kMiB), vma(kArena + 4 * kMiB, kArena + 64 * kMiB, false)},
                 true, false);
  EXPECT_EQ(t.live_bytes_total(), kMiB);
  EXPECT_EQ(t.reserved_bytes(LW_KIND_MMAP), 3 * kMiB);
  expect_sums(t);
  // The same address at the same size (HotSpot's MmapArrayAllocator
  // commits what it just reserved): a commit; at a larger size, not.
  t.apply(mmap_alloc(kArena, 4 * kMiB, 12, 9));
  EXPECT_TRUE(t.split_of(kArena).commit);
  t.apply(mmap_alloc(kArena, 8 * kMiB, 13, 10));
  EXPECT_FALSE(t.split_of(kArena).commit);
  expect_sums(t);
  // The rest of the retired reservation stays one: a later record inside it
  // (HotSpot's second code heap) commits it, while it is wholly mapped.
  std::vector<HeapTracker::RetiredReservation> retired = t.take_retired_reservations();
  ASSERT_EQ(retired.size(), 1u);
  EXPECT_EQ(retired[0].start, kArena + 4 * kMiB);
  EXPECT_EQ(retired[0].end, kArena + 64 * kMiB);
  UntrackedReservations u;
  u.add_retired(retired);
  const std::vector<SmapsMapping> mapped = {vma(kArena, kArena + 64 * kMiB, true)};
  EXPECT_TRUE(u.commits(mapped, kArena + 32 * kMiB, 4 * kMiB, 20));
  EXPECT_FALSE(u.commits(mapped, kArena + 32 * kMiB, 4 * kMiB, 9));  // older than the reservation
  EXPECT_FALSE(u.commits({vma(kArena + 32 * kMiB, kArena + 36 * kMiB, true)}, kArena + 32 * kMiB, 4 * kMiB, 20));
}

}  // namespace
}  // namespace lw
