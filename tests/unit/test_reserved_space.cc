// SPDX-License-Identifier: Apache-2.0
// Reserved address space (decision reserved-address-space): a tracked mmap
// record's PROT_NONE bytes are reserved, its bytes no longer mapped are
// unmapped, and neither is live.
#include "core/analysis/reserved_space.h"

#include <gtest/gtest.h>

#include "core/accounting/event.h"
#include "view/json.h"
#include "view/process_view.h"

namespace lw {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kBase = 0x7f0000000000;

Event mmap_alloc(uint64_t addr, uint64_t size, uint64_t ns, uint64_t stack = 7) {
  return Event{EventType::kAlloc, 0, 1, 1, LW_KIND_MMAP, ns, addr, size, ns, stack};
}
Event mmap_free(uint64_t addr, uint64_t size, uint64_t ns, uint16_t flags = 0, uint64_t off = 0) {
  return Event{EventType::kFree, flags, 1, 1, LW_KIND_MMAP, ns + 1, addr, size, ns, off};
}

// A mapping; `rss` resident bytes of it.
SmapsMapping vma(uint64_t start, uint64_t end, bool access, uint64_t rss = 0) {
  SmapsMapping s;
  s.map.start = start;
  s.map.end = end;
  s.map.readable = s.map.writable = access;
  s.map.is_private = true;
  s.rss = s.anonymous = rss;
  return s;
}

const SiteStats* site(const HeapTracker& t, uint64_t stack) {
  for (const SiteStats& s : t.sites())
    if (s.stack_hash == stack) return &s;
  static const SiteStats none;
  return &none;
}

// allocated - freed == live + reserved + unmapped, per site.
void expect_sums(const HeapTracker& t) {
  for (const SiteStats& s : t.sites())
    EXPECT_EQ(s.allocated_bytes - s.freed_bytes, s.live_bytes + s.reserved_bytes + s.unmapped_bytes);
}

TEST(ReservedSpace, RangeUseByProtectionAndResidence) {
  std::vector<SmapsMapping> maps = {vma(kBase, kBase + kMiB, true, 4096),
                                    vma(kBase + kMiB, kBase + 64 * kMiB, false),
                                    vma(kBase + 80 * kMiB, kBase + 82 * kMiB, true, 2 * kMiB)};
  RangeUse u = range_use(maps, true, kBase, 64 * kMiB);
  EXPECT_EQ(u.prot_none, 63 * kMiB);
  EXPECT_EQ(u.accessible, kMiB);
  EXPECT_EQ(u.touched, 4096u);
  // A record reaching past the reservation into a hole, and half of a
  // resident mapping (pro rata).
  u = range_use(maps, true, kBase + 32 * kMiB, 49 * kMiB);
  EXPECT_EQ(u.prot_none, 32 * kMiB);
  EXPECT_EQ(u.accessible, kMiB);
  EXPECT_EQ(u.touched, kMiB);
  RecordSplit s = split_of_use(u, 49 * kMiB, true, true);
  EXPECT_EQ(s.unmapped, 16 * kMiB);
  EXPECT_EQ(s.reserved, 32 * kMiB);
  // Not a reservation: its accessible bytes count whole, touched or not.
  EXPECT_EQ(split_of_use(range_use(maps, true, kBase + 4096, 8192), 8192, false, true), RecordSplit{});
  // Without resident figures a reservation's accessible pages wait.
  EXPECT_EQ(split_of_use(range_use(maps, false, kBase, 64 * kMiB), 64 * kMiB, true, false).reserved, 64 * kMiB);
  EXPECT_EQ(range_use(maps, true, kBase + 200 * kMiB, 4096).accessible, 0u);
}

// glibc's arena heap: 64 MiB PROT_NONE, then mprotect commits its head; a
// thread stack: PROT_NONE guard, 8 MiB read-write of which a few pages are
// touched. Only touched pages are live.
TEST(ReservedSpace, ReservationCountsTouchedPages) {
  HeapTracker t;
  t.apply(mmap_alloc(kBase, 64 * kMiB, 10));
  t.apply(mmap_alloc(kBase + 100 * kMiB, 8 * kMiB + 4096, 11, 8));
  EXPECT_EQ(t.live_bytes_total(), 72 * kMiB + 4096);  // not read yet
  std::vector<SmapsMapping> maps = {vma(kBase, kBase + 132 * 1024, true),
                                    vma(kBase + 132 * 1024, kBase + 64 * kMiB, false),
                                    vma(kBase + 100 * kMiB, kBase + 100 * kMiB + 4096, false),
                                    vma(kBase + 100 * kMiB + 4096, kBase + 108 * kMiB + 4096, true)};
  SplitRefresh r = refresh_splits(t, maps, false, false);  // maps only: nothing counts yet
  EXPECT_EQ(r.records_read, 2u);
  EXPECT_EQ(t.live_bytes_total(), 0u);
  EXPECT_EQ(t.reserved_bytes(LW_KIND_MMAP), 72 * kMiB + 4096);
  expect_sums(t);
  maps[0].rss = 8192;
  maps[3].rss = 16384;
  r = refresh_splits(t, maps, true, false);
  EXPECT_EQ(r.changed, 2u);
  EXPECT_EQ(t.live_bytes_total(), 8192u + 16384u);
  EXPECT_EQ(site(t, 7)->live_bytes, 8192u);
  EXPECT_EQ(site(t, 7)->reserved_bytes, 64 * kMiB - 8192);
  EXPECT_EQ(site(t, 8)->live_bytes, 16384u);
  expect_sums(t);
  // More committed and touched later (mprotect, no event): read again.
  maps[0].map.end = kBase + 8 * kMiB;
  maps[0].rss = 8 * kMiB;
  maps[1].map.start = kBase + 8 * kMiB;
  refresh_splits(t, maps, true, false);
  EXPECT_EQ(site(t, 7)->live_bytes, 8 * kMiB);
  EXPECT_EQ(site(t, 7)->reserved_bytes, 56 * kMiB);
  std::vector<FilteredLive> f = t.filtered_live(LiveFilter{0, 1, UINT64_MAX}, 100);
  EXPECT_EQ(f[0].bytes, 8 * kMiB);
  expect_sums(t);
  // A maps-only pass leaves the split reservations as the smaps read found them.
  refresh_splits(t, maps, false, true);
  EXPECT_EQ(site(t, 7)->live_bytes, 8 * kMiB);
  // Unmapped whole: live, reserved and the split are gone.
  t.apply(mmap_free(kBase, 64 * kMiB, 10));
  EXPECT_EQ(site(t, 7)->live_bytes, 0u);
  EXPECT_EQ(site(t, 7)->reserved_bytes, 0u);
  EXPECT_EQ(t.split_count(), 1u);
  expect_sums(t);
}

// A mapping that was never PROT_NONE keeps its whole size.
TEST(ReservedSpace, CommittedMappingKeepsItsSize) {
  HeapTracker t;
  t.apply(mmap_alloc(kBase, 4 * kMiB, 10));
  std::vector<SmapsMapping> maps = {vma(kBase, kBase + 4 * kMiB, true, 0)};
  refresh_splits(t, maps, false, false);
  refresh_splits(t, maps, true, true);
  EXPECT_EQ(t.live_bytes_total(), 4 * kMiB);
  EXPECT_EQ(t.split_count(), 0u);
}

// A munmap that cuts a partly committed reservation: the pieces are read
// again and a final unmap leaves nothing.
TEST(ReservedSpace, PartialUnmapOfPartlyCommittedRange) {
  HeapTracker t;
  t.apply(mmap_alloc(kBase, 16 * kMiB, 10));
  std::vector<SmapsMapping> maps = {vma(kBase, kBase + 4 * kMiB, true, 4 * kMiB),
                                    vma(kBase + 4 * kMiB, kBase + 16 * kMiB, false)};
  refresh_splits(t, maps, true, false);
  EXPECT_EQ(t.live_bytes_total(), 4 * kMiB);
  // munmap of [2 MiB, 6 MiB): head 2 MiB committed, tail 10 MiB reserved.
  t.apply(mmap_free(kBase, 4 * kMiB, 10, LW_EVF_PARTIAL, 2 * kMiB));
  EXPECT_TRUE(t.has_unchecked_mmap());
  maps = {vma(kBase, kBase + 2 * kMiB, true, 2 * kMiB), vma(kBase + 6 * kMiB, kBase + 16 * kMiB, false)};
  refresh_splits(t, maps, false, false);
  EXPECT_EQ(t.live_bytes_total(), 2 * kMiB);  // the head is no reservation by itself
  EXPECT_EQ(t.reserved_bytes(LW_KIND_MMAP), 10 * kMiB);
  expect_sums(t);
  t.apply(mmap_free(kBase, 2 * kMiB, 10));
  t.apply(mmap_free(kBase + 6 * kMiB, 10 * kMiB, 10));
  EXPECT_EQ(t.live_bytes_total(), 0u);
  EXPECT_EQ(t.reserved_bytes(LW_KIND_MMAP), 0u);
  EXPECT_EQ(t.sites()[0].live_bytes, 0u);
  EXPECT_EQ(t.sites()[0].unmapped_bytes, 0u);
  expect_sums(t);
}

// A tail the probes could not place (glibc unmaps its arena's excess
// 64 MiB inside the region): unmapped, not live, not reserved.
TEST(ReservedSpace, BytesNoLongerMappedAreNotLive) {
  HeapTracker t;
  t.apply(mmap_alloc(kBase, 128 * kMiB, 10));
  std::vector<SmapsMapping> maps = {vma(kBase, kBase + kMiB, true, kMiB),
                                    vma(kBase + kMiB, kBase + 64 * kMiB, false)};
  refresh_splits(t, maps, true, false);
  EXPECT_EQ(t.live_bytes_total(), kMiB);
  EXPECT_EQ(t.reserved_bytes(LW_KIND_MMAP), 63 * kMiB);
  EXPECT_EQ(t.sites()[0].unmapped_bytes, 64 * kMiB);
  expect_sums(t);
}

// A mapping made over part of a reservation (MAP_FIXED: Go's sysMap,
// HotSpot's commit_memory), or where the kernel reused a tail the probes did
// not see unmapped: its bytes count in the newer record only.
TEST(ReservedSpace, NewerMappingOverReservationCountsOnce) {
  HeapTracker t;
  t.apply(mmap_alloc(kBase, 64 * kMiB, 10));
  std::vector<SmapsMapping> maps = {vma(kBase, kBase + 64 * kMiB, false)};
  refresh_splits(t, maps, true, false);
  EXPECT_EQ(t.reserved_bytes(LW_KIND_MMAP), 64 * kMiB);
  t.apply(mmap_alloc(kBase + 8 * kMiB, 4 * kMiB, 20, 8));
  maps = {vma(kBase, kBase + 8 * kMiB, false), vma(kBase + 8 * kMiB, kBase + 12 * kMiB, true, 4 * kMiB),
          vma(kBase + 12 * kMiB, kBase + 64 * kMiB, false)};
  refresh_splits(t, maps, true, false);
  EXPECT_EQ(site(t, 8)->live_bytes, 4 * kMiB);  // all touched
  EXPECT_EQ(site(t, 7)->live_bytes, 0u);
  EXPECT_EQ(site(t, 7)->reserved_bytes, 60 * kMiB);
  EXPECT_EQ(site(t, 7)->unmapped_bytes, 4 * kMiB);
  EXPECT_EQ(t.live_bytes_total(), 4 * kMiB);
  expect_sums(t);
  // The newer mapping unmapped (as a reservation again: MAP_FIXED PROT_NONE
  // would be a third record): the older record's bytes are its own again.
  t.apply(mmap_free(kBase + 8 * kMiB, 4 * kMiB, 20));
  maps = {vma(kBase, kBase + 64 * kMiB, false)};
  refresh_splits(t, maps, true, false);
  EXPECT_EQ(site(t, 7)->reserved_bytes, 64 * kMiB);
  EXPECT_EQ(site(t, 7)->unmapped_bytes, 0u);
  expect_sums(t);
  // A commit over the reservation that is touched only in part: its
  // untouched pages are reserved too.
  t.apply(mmap_alloc(kBase + 16 * kMiB, 16 * kMiB, 30, 9));
  maps = {vma(kBase, kBase + 16 * kMiB, false), vma(kBase + 16 * kMiB, kBase + 32 * kMiB, true, kMiB),
          vma(kBase + 32 * kMiB, kBase + 64 * kMiB, false)};
  refresh_splits(t, maps, true, false);
  EXPECT_EQ(site(t, 9)->live_bytes, kMiB);
  EXPECT_EQ(site(t, 9)->reserved_bytes, 15 * kMiB);
  EXPECT_EQ(site(t, 7)->reserved_bytes, 48 * kMiB);
  EXPECT_EQ(t.live_bytes_total(), kMiB);
  expect_sums(t);
}

// A resync keeps the splits of the records that stay, and has the others
// read again.
TEST(ReservedSpace, ResyncKeepsSplits) {
  HeapTracker t;
  t.apply(mmap_alloc(kBase, 64 * kMiB, 10));
  std::vector<SmapsMapping> maps = {vma(kBase, kBase + kMiB, true, kMiB),
                                    vma(kBase + kMiB, kBase + 64 * kMiB, false)};
  refresh_splits(t, maps, true, false);
  t.resync({KernelRecord{LW_KIND_MMAP, kBase, 64 * kMiB, 10, 7}});
  EXPECT_EQ(t.live_bytes_total(), kMiB);
  EXPECT_EQ(t.reserved_bytes(LW_KIND_MMAP), 63 * kMiB);
  EXPECT_TRUE(t.has_unchecked_mmap());
  expect_sums(t);
  t.resync({});
  EXPECT_EQ(t.live_bytes_total(), 0u);
  EXPECT_EQ(t.reserved_bytes(LW_KIND_MMAP), 0u);
  expect_sums(t);
}

// A split read for a record replaced since (same address, newer alloc_ns)
// is refused.
TEST(ReservedSpace, StaleSplitRefused) {
  HeapTracker t;
  t.apply(mmap_alloc(kBase, 4 * kMiB, 10));
  EXPECT_FALSE(t.set_split(kBase, 9, RecordSplit{kMiB, 0}));
  EXPECT_TRUE(t.set_split(kBase, 10, RecordSplit{kMiB, 0}));
  EXPECT_EQ(t.live_bytes_total(), 3 * kMiB);
  // More than the record holds is cut to it.
  EXPECT_TRUE(t.set_split(kBase, 10, RecordSplit{8 * kMiB, 8 * kMiB}));
  EXPECT_EQ(t.live_bytes_total(), 0u);
  EXPECT_EQ(t.reserved_bytes(LW_KIND_MMAP), 4 * kMiB);
  expect_sums(t);
  t.clear_kind(LW_KIND_MMAP);
  EXPECT_EQ(t.reserved_bytes(LW_KIND_MMAP), 0u);
  EXPECT_EQ(t.split_count(), 0u);
}

// The JSON (top --json, /api/v1/processes/PID/sites) carries reserved bytes
// per process, per kind and per site, apart from live bytes; the RSS
// breakdown carries them beside the anonymous total, not in it.
TEST(ReservedSpace, JsonAndRssCarryReservedApart) {
  ProcessSnapshot snap;
  snap.live_bytes = 65536;
  snap.reserved_bytes = 64 * kMiB;
  snap.kinds[LW_KIND_MMAP].live_bytes = 65536;
  snap.kinds[LW_KIND_MMAP].live_allocations = 8;
  snap.kinds[LW_KIND_MMAP].allocations = 8;
  snap.kinds[LW_KIND_MMAP].reserved_bytes = 64 * kMiB;
  SiteSnapshot site;
  site.kind = LW_KIND_MMAP;
  site.live_bytes = 65536;
  site.live_allocations = 8;
  site.reserved_bytes = 64 * kMiB;
  snap.sites.push_back(site);
  const nlohmann::json j = to_json(snap);
  EXPECT_EQ(j.at("live_bytes").get<uint64_t>(), 65536u);
  EXPECT_EQ(j.at("reserved_bytes").get<uint64_t>(), 64 * kMiB);
  EXPECT_EQ(j.at("kinds").at("mmap").at("reserved_bytes").get<uint64_t>(), 64 * kMiB);
  EXPECT_EQ(j.at("sites").at(0).at("reserved_bytes").get<uint64_t>(), 64 * kMiB);
  EXPECT_EQ(j.at("sites").at(0).at("live_bytes").get<uint64_t>(), 65536u);

  RssRegions regions;
  regions.anon_total = 10 * kMiB;
  TrackedBytes tracked = rss_tracked_bytes(snap);
  EXPECT_EQ(tracked.live_mmap, 65536u);
  EXPECT_EQ(tracked.reserved_mmap, 64 * kMiB);
  const RssBreakdown b = compute_rss_breakdown(regions, tracked);
  EXPECT_EQ(b.reserved, 64 * kMiB);
  EXPECT_EQ(b.live_heap + b.held_or_retained + b.tracked_mmap + b.stacks + b.untracked, b.anon_total);
  EXPECT_EQ(b.tracked_mmap, 65536u);
  EXPECT_EQ(rss_to_json(b).at("reserved_bytes").get<uint64_t>(), 64 * kMiB);
}

}  // namespace
}  // namespace lw
