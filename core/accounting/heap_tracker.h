/* SPDX-License-Identifier: Apache-2.0 */
// The daemon's picture of one process's live memory: every live record and
// per-site aggregates, kept in step with the kernel's live map by the event
// stream, and rebuilt from that map (resync) after a counted loss.
//
// Records are identified by (kind, addr, alloc_ns): alloc_ns is the kernel's
// timestamp of the allocation, carried by both ALLOC and FREE events. This
// makes applying events idempotent across a resync: an ALLOC already known
// is ignored, and a FREE retires only the exact record it names, never a
// newer one at the same address.
//
// Thread-safety: not thread-safe; owned by the consumer thread. Snapshots
// are taken by copying out (sites(), for_each_live()).
#pragma once

#include <array>
#include <map>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/accounting/event.h"
#include "core/platform/flat_map.h"

namespace lw {

struct SiteStats {
  uint64_t stack_hash = 0;  // kernel-side hash; 0 = stack unknown
  uint32_t kind = 0;        // enum lw_kind
  uint64_t live_bytes = 0;
  uint64_t live_allocations = 0;
  uint64_t allocated_bytes = 0;
  uint64_t allocations = 0;
  uint64_t freed_bytes = 0;
  uint64_t frees = 0;
  // Of the live mmap records' bytes, those the kernel maps PROT_NONE
  // (reserved address space), and those it no longer maps at all (a munmap
  // the probes could not place); neither counts in live_bytes
  // (decision reserved-address-space). allocated_bytes - freed_bytes ==
  // live_bytes + reserved_bytes + unmapped_bytes.
  uint64_t reserved_bytes = 0;
  uint64_t unmapped_bytes = 0;
};

// What the kernel's mappings make of one mmap record's bytes
// (HeapTracker::set_split()); the rest of the record is committed.
struct RecordSplit {
  uint64_t reserved = 0;  // mapped PROT_NONE, or committed and never touched
  uint64_t unmapped = 0;  // no longer mapped
  // The record commits part of a reservation (it was mapped over PROT_NONE
  // address space, tracked or not): its untouched pages stay reserved, and
  // the split is kept while it has none.
  bool commit = false;
  bool operator==(const RecordSplit&) const = default;
};

// The address is not stored: it is the map key's (HeapTracker::live_key),
// which keeps a tracked allocation at 32 bytes per slot (key + record).
struct LiveRecord {
  uint64_t size = 0;
  uint64_t alloc_ns = 0;
  uint32_t kind = 0;
  uint32_t site = 0;  // index into sites()
};

// A record thinning dropped (automatic sampling): its address and
// identity, so that the kernel's record is deleted only if it is still
// that allocation (the address may have been freed and handed out again).
struct ThinnedRecord {
  uint64_t addr = 0;
  uint64_t alloc_ns = 0;
};

// One entry of the kernel's live map, as read back for a resync.
struct KernelRecord {
  uint32_t kind = 0;
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t alloc_ns = 0;
  uint64_t stack_hash = 0;
};

// Which live records count in what `top` shows (its --older, --min-size,
// --max-size: bcc memleak's -o, -z, -Z). The size is the record's own
// (requested) size, whatever it stands for under byte sampling; the age is
// now minus alloc_ns (a record stamped after now is age 0).
struct LiveFilter {
  uint64_t min_age_ns = 0;
  uint64_t min_size = 0;
  uint64_t max_size = UINT64_MAX;
  bool active() const { return min_age_ns > 0 || min_size > 0 || max_size != UINT64_MAX; }
  bool matches(const LiveRecord& r, uint64_t now_ns) const {
    const uint64_t age = now_ns > r.alloc_ns ? now_ns - r.alloc_ns : 0;
    return age >= min_age_ns && r.size >= min_size && r.size <= max_size;
  }
};

// The live figures of one site (an index of HeapTracker::sites()) counting
// only the records a LiveFilter keeps.
struct FilteredLive {
  uint64_t bytes = 0;
  uint64_t allocations = 0;
};

// A site folded into another of the same kind (fold_sites()): indices of
// HeapTracker::sites().
struct SiteFold {
  uint32_t from = 0;
  uint32_t to = 0;
};

struct HeapCounters {
  uint64_t missed_frees = 0;      // ALLOC over a still-live record
  uint64_t duplicate_allocs = 0;  // ALLOC already applied (resync overlap)
  uint64_t stale_frees = 0;       // FREE of a record not known (resync overlap)
  uint64_t resyncs = 0;
  uint64_t resync_added = 0;      // records found only in the kernel map
  uint64_t resync_removed = 0;    // records found only here
  uint64_t shed_records = 0;      // records dropped by shed_kind() (memory budget)
  uint64_t frozen_events = 0;     // events of a shed kind, ignored while it is frozen
  // Automatic sampling (thin_to()): records dropped by a thinning pass, and
  // records that arrived after it (allocated before the switch: an event
  // still queued, a resync) and were thinned on arrival.
  uint64_t thinned_records = 0;
  uint64_t thinned_late = 0;
  uint64_t thinnings = 0;         // thinning passes
  uint64_t sites_folded = 0;      // sites folded into another (fold_sites())
  // Heap walks (retire()): records whose blocks a walk found freed, and
  // records dropped because nothing could say their block was still live
  // (undecided), with the bytes they counted for.
  uint64_t walk_freed = 0;
  uint64_t walk_undecided = 0;
  uint64_t walk_undecided_bytes = 0;
};

class HeapTracker {
 public:
  HeapTracker();

  // Applies an ALLOC or FREE event; other types are ignored.
  void apply(const Event& e);

  // Replaces the live records with the kernel's. Records only in the kernel
  // map count as allocations whose events were lost; records only here
  // count as frees whose events were lost. Cumulative totals stay consistent:
  // allocated_bytes - freed_bytes == live_bytes per site.
  void resync(const std::vector<KernelRecord>& kernel);

  // Folds each `from` site into its `to` site of the same kind (issue 35,
  // item 5: a stack cut at a pending unwind table into the whole stack it
  // is the start of): its records, live and cumulative figures move to
  // `to`, and records that name its stack later (a queued event, a resync)
  // land there too. `from` stays, at zero, so indices stay valid. Folds
  // whose sites differ in kind, are out of range, or whose `to` was folded
  // itself are ignored. One pass over the live records.
  void fold_sites(const std::vector<SiteFold>& folds);

  // Forgets everything (exec: the image and its heap are gone).
  void clear();
  // Forgets the records and sites of one kind (re-baselining the heap at an
  // escalation: only allocations after it count).
  void clear_kind(uint32_t kind);

  // The memory budget (decision daemon-memory-bound): drops the per-address
  // records of `kind` to give their memory back, keeping the per-site
  // figures as they are, frozen: events of the kind are ignored (counted in
  // frozen_events) and a resync leaves the kind alone until clear_kind() or
  // clear() re-baselines it.
  void shed_kind(uint32_t kind);
  bool frozen(uint32_t kind) const { return kind < LW_KIND_MAX && frozen_[kind]; }
  // Per-address records held (what memory_bytes() grows with).
  uint64_t record_count() const { return live_.size(); }
  uint64_t record_count(uint32_t kind) const { return kind < LW_KIND_MAX ? records_[kind] : 0; }

  // Byte sampling (core/accounting/sampling.h): heap records then count for the
  // bytes and allocations they stand for, not their own size. Changing the
  // mean clears the heap records, which were weighted at the old one.
  void set_sample_mean(uint64_t mean_bytes);
  uint64_t sample_mean() const { return sample_mean_; }

  // Automatic sampling (docs/config.md, "Automatic sampling";
  // decision auto-sampling): switches the heap to sampling at `mean_bytes`
  // (larger than the current mean) from `switch_ns` (CLOCK_MONOTONIC, the
  // kernel's alloc_ns clock, read after the kernel target was switched). The
  // heap records are thinned, not cleared: each is kept with the probability
  // that makes it a sample at the new mean (core/accounting/sampling.h,
  // thin_keeps()), the kept ones re-weighted, so the old bytes (the leak) and
  // their ages survive as unbiased estimates. The dropped records are appended
  // to `dropped`: the caller deletes them from the kernel map. A heap record
  // allocated before the switch that arrives later (a queued event, a resync)
  // is tested on arrival the same way; the addresses of those dropped wait in
  // take_thinned().
  void thin_to(uint64_t mean_bytes, uint64_t switch_ns, std::vector<ThinnedRecord>* dropped);
  std::vector<ThinnedRecord> take_thinned() { return std::exchange(thinned_pending_, {}); }
  bool thinned_pending() const { return !thinned_pending_.empty(); }
  // Heap walks (decision busy-processes, "Windows and walks"): retires the
  // heap record at `addr` if it is still the allocation made at alloc_ns.
  // A walk found its block freed (a free not seen: it counts as one), or
  // (undecided) nothing can say the block is still live: the record leaves
  // the live and the cumulative figures, as a thinned one does, and is
  // counted in walk_undecided. false when there is no such record.
  bool retire(uint64_t addr, uint64_t alloc_ns, bool undecided);
  // The mean the kernel sampled an allocation made at `alloc_ns` with.
  uint64_t mean_at(uint64_t alloc_ns) const;
  // Bursts (core/policy/bursts.h; decision busy-processes): heap records
  // allocated from `from_ns` on were recorded with probability `fraction`
  // (the share of the time the allocating probes are on; 1 when exact) and
  // count 1/fraction times. Records before keep their weight.
  void set_time_fraction(double fraction, uint64_t from_ns);
  // One burst's records, allocated in [from_ns, to_ns), were recorded with
  // probability `fraction` (the share the allocating probes were really on,
  // measured: the nominal share times recorded/scheduled seconds); later
  // records keep the share in force before. Kept for the last
  // kMaxBurstSpans bursts; an older burst's records fall back to the share
  // of the bursts they were made in (decision busy-processes, "Measured
  // bursts").
  void set_burst_span(uint64_t from_ns, uint64_t to_ns, double fraction);
  static constexpr size_t kMaxBurstSpans = 2048;
  double time_fraction() const { return fractions_.back().fraction; }
  double fraction_at(uint64_t alloc_ns) const;
  // Whether any heap record may stand for more than itself by bursts.
  bool time_sampled() const { return fractions_.size() > 1 || fractions_.front().fraction < 1; }
  // What a live record counts for in the figures (its size, or its
  // estimated weight when sampled).
  uint64_t counted_bytes(const LiveRecord& r) const;
  uint64_t counted_allocations(const LiveRecord& r) const;

  // Reserved address space (decision reserved-address-space). The split of
  // the mmap record at `addr` (allocated at alloc_ns) as the kernel's
  // mappings show it, replacing the one it had; false when there is no such
  // record (freed or replaced since the mappings were read). Only records
  // with uncommitted bytes, and commits, are kept in a side map.
  bool set_split(uint64_t addr, uint64_t alloc_ns, RecordSplit split);
  RecordSplit split_of(uint64_t addr) const;
  uint64_t split_count() const { return splits_.size(); }
  const LiveRecord* find_mmap(uint64_t addr) const { return live_.find(live_key(LW_KIND_MMAP, addr)); }
  // What a live record counts for in the live figures: counted_bytes() less
  // its reserved and unmapped bytes.
  uint64_t committed_bytes(uint64_t addr, const LiveRecord& r) const;
  uint64_t reserved_bytes(uint32_t kind) const { return kind == LW_KIND_MMAP ? reserved_bytes_ : 0; }
  // The mmap records' bytes not counted live: reserved and unmapped (what
  // the kernel map's sum holds beyond live_bytes_total()).
  uint64_t withheld_bytes() const { return reserved_bytes_ + unmapped_bytes_; }
  // The mmap records whose mappings were not read since they were added
  // (new, cut or moved), taken; `overflow` when more were added than kept
  // (kMaxUnchecked): then every mmap record is to be read.
  static constexpr size_t kMaxUnchecked = 4096;
  bool has_unchecked_mmap() const { return !unchecked_mmap_.empty() || unchecked_overflow_; }
  // The rest of each reservation whose record a commit at its address
  // retired ([start, end) and the reservation's alloc_ns), taken: that
  // address space is no record's now, and stays a reservation.
  struct RetiredReservation {
    uint64_t start = 0, end = 0, alloc_ns = 0;
  };
  static constexpr size_t kMaxRetired = 256;
  std::vector<RetiredReservation> take_retired_reservations() { return std::exchange(retired_, {}); }
  std::vector<uint64_t> take_unchecked_mmap(bool* overflow);
  template <typename F>
  void for_each_split(F&& fn) const {
    splits_.for_each([&](uint64_t key, const RecordSplit& s) { fn(key ^ (uint64_t{LW_KIND_MMAP} << 58), s); });
  }
  // The live mmap records overlapping [start, end), by address: fn(addr,
  // end, alloc_ns). Records longer than any seen before are found too (the
  // scan starts the longest record's length below `start`).
  template <typename F>
  void for_each_mmap_overlapping(uint64_t start, uint64_t end, F&& fn) const {
    auto it = mmap_index_.lower_bound(start > mmap_longest_ ? start - mmap_longest_ : 0);
    for (; it != mmap_index_.end() && it->first < end; ++it)
      if (it->second.end > start) fn(it->first, it->second.end, it->second.alloc_ns);
  }
  // Every live mmap record with its address.
  template <typename F>
  void for_each_mmap(F&& fn) const {
    for_each_live_at([&](uint64_t addr, const LiveRecord& r) {
      if (r.kind == LW_KIND_MMAP) fn(addr, r);
    });
  }

  const std::vector<SiteStats>& sites() const { return sites_; }
  uint64_t live_bytes(uint32_t kind) const { return live_bytes_[kind]; }
  // Every kind but tensor_gpu, whose tensors lie inside the pool's
  // cuda_device memory (decision tensor-tier).
  uint64_t live_bytes_total() const;
  // Estimated when sampling (sum of counted_allocations()).
  uint64_t live_allocations_total() const;
  // The live bytes of `kind` allocated at or before `before_ns` (records
  // that have lived a while): what escalation takes as explained, so that
  // a serving loop's tensors in flight, allocated and freed within one
  // iteration, do not move the figure from one check to the next
  // (decision tensor-tier, "Tensors in flight"). One pass over the live
  // records; 0 at once when the kind holds none.
  uint64_t live_bytes_settled(uint32_t kind, uint64_t before_ns) const;
  const HeapCounters& counters() const { return counters_; }
  size_t memory_bytes() const;
  // Of memory_bytes(), what the per-site figures and their index hold
  // (the rest is the per-address records; decision process-cost).
  size_t site_memory_bytes() const;
  // Whether a site of this kernel stack hash (any kind) holds live
  // allocations: its resolved stack is still shown (decision process-cost).
  bool stack_live(uint64_t stack_hash) const;

  // Per site, indexed like sites(): the live bytes and allocations of the
  // records `filter` keeps at now_ns (counted_bytes/counted_allocations).
  // One pass over the live records.
  std::vector<FilteredLive> filtered_live(const LiveFilter& filter, uint64_t now_ns) const;

  template <typename F>
  void for_each_live(F&& fn) const {
    live_.for_each([&](uint64_t, const LiveRecord& r) { fn(r); });
  }
  // The same with each record's address, recovered from its key.
  template <typename F>
  void for_each_live_at(F&& fn) const {
    live_.for_each([&](uint64_t key, const LiveRecord& r) {
      fn(key ^ (static_cast<uint64_t>(r.kind) << 58), r);
    });
  }

 private:
  static uint64_t live_key(uint32_t kind, uint64_t addr) {
    // User addresses fit in 57 bits on x86-64; the kind takes the top bits.
    return addr ^ (static_cast<uint64_t>(kind) << 58);
  }
  uint32_t site_index(uint64_t stack_hash, uint32_t kind);
  void add_live(uint64_t addr, const LiveRecord& r);
  void drop_live(uint64_t key, const LiveRecord& r, uint64_t freed_bytes);
  // Adds (sign +1) or takes back (-1) a split's effect on the figures.
  void account_split(const LiveRecord& r, const RecordSplit& split, int sign);
  void drop_split(uint64_t key, const LiveRecord& r);
  void forget_splits();
  void resync_records(const std::vector<KernelRecord>& kernel);

  FlatMap<LiveRecord> live_;
  std::array<FlatMap<uint32_t>, LW_KIND_MAX> site_by_stack_;
  std::vector<SiteStats> sites_;
  std::array<uint64_t, LW_KIND_MAX> live_bytes_{};
  std::array<uint64_t, LW_KIND_MAX> records_{};  // live_ entries by kind
  std::array<bool, LW_KIND_MAX> frozen_{};
  // Whether a heap record allocated at alloc_ns is kept at the current
  // mean (true when no switch happened after it was allocated).
  bool keeps_at_current_mean(uint64_t addr, const LiveRecord& r) const;

  HeapCounters counters_;
  // Reserved address space: mmap records with uncommitted bytes, by key.
  FlatMap<RecordSplit> splits_;
  // The live mmap records by address (few: the overlaps of a reservation
  // and the mappings made over it), and the longest one's length.
  struct MmapSpan {
    uint64_t end = 0;
    uint64_t alloc_ns = 0;
  };
  std::map<uint64_t, MmapSpan> mmap_index_;
  uint64_t mmap_longest_ = 0;
  void index_mmap(uint64_t addr, const LiveRecord& r);
  void rebuild_mmap_index();
  uint64_t reserved_bytes_ = 0;
  uint64_t unmapped_bytes_ = 0;
  std::vector<uint64_t> unchecked_mmap_;
  std::vector<RetiredReservation> retired_;
  bool unchecked_overflow_ = false;
  uint64_t sample_mean_ = 0;
  // The means the kernel sampled the heap with, from when (CLOCK_MONOTONIC
  // ns), oldest first: the first from 0, one more per thin_to().
  struct SampleEpoch {
    uint64_t from_ns = 0;
    uint64_t mean = 0;
  };
  std::vector<SampleEpoch> epochs_{SampleEpoch{}};
  struct FractionEpoch {
    enum Span : uint8_t { kNoSpan, kSpanStart, kSpanEnd };
    uint64_t from_ns = 0;
    double fraction = 1;
    Span span = kNoSpan;  // set_burst_span's
  };
  std::vector<FractionEpoch> fractions_{FractionEpoch{}};  // oldest first, the first from 0
  size_t burst_spans_ = 0;  // set_burst_span's pairs in fractions_
  static uint64_t round_by_draw(double w, uint64_t identity);
  // Takes off (add false) or adds back the counted figures of the live heap
  // records allocated in [from_ns, to_ns) (set_burst_span).
  void reweigh_heap_span(uint64_t from_ns, uint64_t to_ns, bool add);
  std::vector<ThinnedRecord> thinned_pending_;  // dropped on arrival, for the kernel map
};

}  // namespace lw
