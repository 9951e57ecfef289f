/* SPDX-License-Identifier: Apache-2.0 */
// Reserved address space (decision reserved-address-space): what of a
// tracked mmap record is memory, and what only address space. A record the
// kernel maps partly PROT_NONE is a reservation (glibc's arena heaps and
// thread stacks, Go's and the JVM's heap reservations): of it, only the
// pages the process has touched are live; the PROT_NONE pages and the
// accessible pages never touched are reserved. A record with no PROT_NONE
// page keeps its whole size, as a malloc block does. Bytes the kernel no
// longer maps (a munmap the probes could not place) are neither. All of it
// is read from the process's own mappings, so mprotect and partial munmaps
// need no probe of their own.
//
// Pure: the caller reads /proc/PID/maps or smaps. Not thread-safe (the
// HeapTracker's owner calls it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/accounting/heap_tracker.h"
#include "core/analysis/rss_breakdown.h"

namespace lw {

// How a range [start, start + len) is mapped.
struct RangeUse {
  uint64_t prot_none = 0;   // bytes mapped PROT_NONE
  uint64_t accessible = 0;  // bytes mapped readable, writable or executable
  uint64_t touched = 0;     // of those, resident (smaps Rss, pro rata when the range covers part of a mapping)
};
// `maps` ascending and disjoint; their rss is used only with `have_rss`.
RangeUse range_use(const std::vector<SmapsMapping>& maps, bool have_rss, uint64_t start, uint64_t len);

// The split of a record of `len` bytes mapped as `u`: `reservation` when it
// has PROT_NONE bytes now or had reserved bytes before; without `have_rss`
// (only /proc/PID/maps read) none of its accessible bytes counts as touched
// yet.
RecordSplit split_of_use(const RangeUse& u, uint64_t len, bool reservation, bool have_rss);

// Address space the process had reserved (PROT_NONE) where no tracked mmap
// record lies, as one read of its mappings found it: Go's heap arenas and
// the JVM's heap, reserved at start-up before the probes follow the exec or
// before an attach. A record made later wholly inside one of these ranges
// was mapped over a reservation (the kernel places no other mapping over a
// mapped range): it commits part of it. Ranges ascending, disjoint,
// neighbours merged.
struct ProtNonePicture {
  static constexpr size_t kMaxRanges = 4096;  // the largest kept
  uint64_t read_ns = 0;  // CLOCK_MONOTONIC, taken before the read
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
};
ProtNonePicture untracked_prot_none(const HeapTracker& heap, const std::vector<SmapsMapping>& maps,
                                    uint64_t read_ns);

// The last two pictures: a record is held against the newest one read
// before it was made (an event polled after a read may predate it).
struct UntrackedReservations {
  static constexpr size_t kMaxRetired = 256;
  ProtNonePicture older, newer;
  // Reservations whose record a commit at their address retired
  // (HeapTracker::take_retired_reservations): a record made after the
  // reservation wholly inside the rest of one commits it too (HotSpot's
  // code heaps after the first, in one reservation). The newest kept.
  std::vector<HeapTracker::RetiredReservation> retired;
  void note(ProtNonePicture p);
  void add_retired(const std::vector<HeapTracker::RetiredReservation>& r);
  void clear() { *this = {}; }
  // Whether the record [addr, addr + size) made at alloc_ns commits an
  // untracked reservation: it lies wholly in one range of the picture read
  // before it, and that range is still wholly mapped in `maps` (a range
  // unmapped since, with a new mapping in its hole, is no reservation).
  bool commits(const std::vector<SmapsMapping>& maps, uint64_t addr, uint64_t size, uint64_t alloc_ns) const;
};

struct SplitRefresh {
  size_t records_read = 0;  // mmap records whose split was read
  size_t changed = 0;       // of those, whose split changed
};

// Reads the split of the mmap records due: those added, cut or moved since
// the last refresh (HeapTracker::take_unchecked_mmap), with `have_rss` the
// reservations (with reserved bytes), and with `all` (or an overflowed
// unchecked list) every mmap record. Without `have_rss` a reservation
// already split is left as the last smaps read found it.
// `untracked` (may be null): records made inside a reservation no record
// holds are commits too.
SplitRefresh refresh_splits(HeapTracker& heap, const std::vector<SmapsMapping>& maps, bool have_rss, bool all,
                            const UntrackedReservations* untracked = nullptr);

// /proc/PID/maps's entries as mappings without resident figures.
std::vector<SmapsMapping> mappings_of(const ParsedMaps& maps);

}  // namespace lw
