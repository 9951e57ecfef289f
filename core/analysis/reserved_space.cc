// SPDX-License-Identifier: Apache-2.0
#include "core/analysis/reserved_space.h"

#include <algorithm>

namespace lw {

RangeUse range_use(const std::vector<SmapsMapping>& maps, bool have_rss, uint64_t start, uint64_t len) {
  const uint64_t end = start + len < start ? UINT64_MAX : start + len;
  // The first mapping that ends after `start`.
  auto it = std::upper_bound(maps.begin(), maps.end(), start,
                             [](uint64_t addr, const SmapsMapping& m) { return addr < m.map.end; });
  RangeUse u;
  for (; it != maps.end() && it->map.start < end; ++it) {
    const MapEntry& m = it->map;
    const uint64_t from = std::max(start, m.start), to = std::min(end, m.end);
    if (to <= from) continue;
    const uint64_t bytes = to - from;
    if (!(m.readable || m.writable || m.executable)) {
      u.prot_none += bytes;
      continue;
    }
    u.accessible += bytes;
    if (!have_rss) continue;
    const uint64_t size = m.end - m.start;
    const uint64_t rss = std::min(it->rss, size);
    // Pro rata when the record covers part of the mapping (the kernel
    // merges neighbouring anonymous mappings of the same protection).
    u.touched += bytes == size ? rss
                               : static_cast<uint64_t>(static_cast<double>(rss) * (static_cast<double>(bytes) /
                                                                                   static_cast<double>(size)));
  }
  return u;
}

RecordSplit split_of_use(const RangeUse& u, uint64_t len, bool reservation, bool have_rss) {
  RecordSplit s;
  const uint64_t mapped = std::min(len, u.prot_none + u.accessible);
  s.unmapped = len - mapped;
  if (!reservation) return s;
  // Without resident figures, none of a reservation's pages count yet: the
  // next smaps read (at most 2 s away) says which are touched, where
  // counting them all would show every new thread stack as 8 MiB live.
  const uint64_t touched = have_rss ? std::min(u.touched, u.accessible) : 0;
  s.reserved = std::min(mapped, u.prot_none + (u.accessible - touched));
  return s;
}

namespace {

// range_use() of the bytes of a record that no newer mmap record covers: a
// mapping made over part of it (MAP_FIXED over a reservation, or a new
// mapping where the kernel reused a tail the probes could not see unmapped)
// holds those bytes now, and they count there. A mapping made over a
// reservation commits part of it (Go's sysMap, HotSpot's commit_memory):
// it is a reservation too, its untouched pages reserved.
// `*over_reservation`: the record lies over part of an older reservation
// (it commits part of it).
RangeUse own_range_use(const HeapTracker& heap, const std::vector<SmapsMapping>& maps, bool have_rss,
                       uint64_t addr, uint64_t size, uint64_t alloc_ns, bool* over_reservation) {
  const uint64_t end = addr + size < addr ? UINT64_MAX : addr + size;
  std::vector<std::pair<uint64_t, uint64_t>> newer;
  heap.for_each_mmap_overlapping(addr, end, [&](uint64_t a, uint64_t e, uint64_t ns) {
    if (a != addr && ns > alloc_ns) newer.emplace_back(std::max(a, addr), std::min(e, end));
    if (a != addr && ns < alloc_ns && heap.split_of(a).reserved > 0) *over_reservation = true;
  });
  if (newer.empty()) return range_use(maps, have_rss, addr, size);
  std::sort(newer.begin(), newer.end());
  RangeUse total;
  uint64_t at = addr;
  auto add = [&](uint64_t from, uint64_t to) {
    if (to <= from) return;
    const RangeUse u = range_use(maps, have_rss, from, to - from);
    total.prot_none += u.prot_none;
    total.accessible += u.accessible;
    total.touched += u.touched;
  };
  for (const auto& [from, to] : newer) {
    add(at, from);
    at = std::max(at, to);
  }
  add(at, end);
  return total;
}

}  // namespace

SplitRefresh refresh_splits(HeapTracker& heap, const std::vector<SmapsMapping>& maps, bool have_rss, bool all,
                            const UntrackedReservations* untracked) {
  bool overflow = false;
  std::vector<uint64_t> addrs = heap.take_unchecked_mmap(&overflow);
  // A new record over older ones takes their bytes: they are read again.
  const size_t fresh = addrs.size();
  for (size_t i = 0; i < fresh && !all && !overflow; ++i) {
    const LiveRecord* r = heap.find_mmap(addrs[i]);
    if (!r) continue;
    heap.for_each_mmap_overlapping(addrs[i], addrs[i] + r->size, [&](uint64_t a, uint64_t, uint64_t) {
      if (a != addrs[i]) addrs.push_back(a);
    });
  }
  if (all || overflow) {
    addrs.clear();
    heap.for_each_mmap([&](uint64_t addr, const LiveRecord&) { addrs.push_back(addr); });
  } else if (have_rss) {
    heap.for_each_split([&](uint64_t addr, const RecordSplit&) { addrs.push_back(addr); });
  }
  std::sort(addrs.begin(), addrs.end());
  addrs.erase(std::unique(addrs.begin(), addrs.end()), addrs.end());
  SplitRefresh out;
  for (uint64_t addr : addrs) {
    const LiveRecord* r = heap.find_mmap(addr);
    if (!r) continue;  // freed since it was noted
    const uint64_t alloc_ns = r->alloc_ns, size = r->size;
    const RecordSplit before = heap.split_of(addr);
    // A reservation's (and a commit's) split is kept current by the smaps reads.
    if (!have_rss && (before.reserved > 0 || before.commit)) continue;
    bool over_reservation = false;
    const RangeUse use = own_range_use(heap, maps, have_rss, addr, size, alloc_ns, &over_reservation);
    const bool commit =
        before.commit || over_reservation || (untracked && untracked->commits(maps, addr, size, alloc_ns));
    const bool reservation = use.prot_none > 0 || before.reserved > 0 || commit;
    RecordSplit split = split_of_use(use, size, reservation, have_rss);
    split.commit = commit;
    ++out.records_read;
    if (split == before) continue;
    if (heap.set_split(addr, alloc_ns, split)) ++out.changed;
  }
  return out;
}

ProtNonePicture untracked_prot_none(const HeapTracker& heap, const std::vector<SmapsMapping>& maps,
                                    uint64_t read_ns) {
  ProtNonePicture p;
  p.read_ns = read_ns;
  auto add = [&](uint64_t from, uint64_t to) {
    if (to <= from) return;
    if (!p.ranges.empty() && p.ranges.back().second == from)
      p.ranges.back().second = to;
    else
      p.ranges.emplace_back(from, to);
  };
  for (const SmapsMapping& sm : maps) {
    const MapEntry& m = sm.map;
    if (m.readable || m.writable || m.executable || m.end <= m.start) continue;
    // Less the tracked records in it: their commits are found by their own
    // records (own_range_use).
    uint64_t at = m.start;
    heap.for_each_mmap_overlapping(m.start, m.end, [&](uint64_t a, uint64_t e, uint64_t) {
      add(at, std::max(at, a));
      at = std::max(at, e);
    });
    add(at, m.end);
  }
  // Bounded: the largest ranges are kept (a reservation worth telling
  // apart is large; thread stacks' guard pages are a page each).
  if (p.ranges.size() > ProtNonePicture::kMaxRanges) {
    auto len = [](const std::pair<uint64_t, uint64_t>& r) { return r.second - r.first; };
    std::nth_element(p.ranges.begin(), p.ranges.begin() + ProtNonePicture::kMaxRanges, p.ranges.end(),
                     [&](const auto& a, const auto& b) { return len(a) > len(b); });
    p.ranges.resize(ProtNonePicture::kMaxRanges);
    std::sort(p.ranges.begin(), p.ranges.end());
  }
  return p;
}

void UntrackedReservations::note(ProtNonePicture p) {
  // A second read of the same refresh (maps, then smaps) replaces the
  // first, keeping the read before it for records polled late.
  if (p.read_ns != newer.read_ns) older = std::move(newer);
  newer = std::move(p);
}

void UntrackedReservations::add_retired(const std::vector<HeapTracker::RetiredReservation>& r) {
  retired.insert(retired.end(), r.begin(), r.end());
  if (retired.size() > kMaxRetired) retired.erase(retired.begin(), retired.end() - kMaxRetired);
}

namespace {

// Whether [from, to) is wholly mapped in `maps`.
bool wholly_mapped(const std::vector<SmapsMapping>& maps, uint64_t from, uint64_t to) {
  const RangeUse now = range_use(maps, false, from, to - from);
  return now.prot_none + now.accessible == to - from;
}

}  // namespace

bool UntrackedReservations::commits(const std::vector<SmapsMapping>& maps, uint64_t addr, uint64_t size,
                                    uint64_t alloc_ns) const {
  if (size == 0 || addr + size < addr) return false;
  for (const HeapTracker::RetiredReservation& r : retired)
    if (r.alloc_ns < alloc_ns && addr >= r.start && addr + size <= r.end && wholly_mapped(maps, r.start, r.end))
      return true;
  const ProtNonePicture* p = newer.read_ns != 0 && newer.read_ns < alloc_ns   ? &newer
                             : older.read_ns != 0 && older.read_ns < alloc_ns ? &older
                                                                              : nullptr;
  if (!p) return false;
  const uint64_t end = addr + size;
  // The last range starting at or below `addr`.
  auto it = std::upper_bound(p->ranges.begin(), p->ranges.end(), addr,
                             [](uint64_t a, const std::pair<uint64_t, uint64_t>& r) { return a < r.first; });
  if (it == p->ranges.begin()) return false;
  --it;
  return end <= it->second && wholly_mapped(maps, it->first, it->second);
}

std::vector<SmapsMapping> mappings_of(const ParsedMaps& maps) {
  std::vector<SmapsMapping> out;
  out.reserve(maps.entries.size());
  for (const MapEntry& m : maps.entries) out.push_back({m, 0, 0});
  return out;
}

}  // namespace lw
