// SPDX-License-Identifier: Apache-2.0
#include "core/accounting/heap_tracker.h"

#include <algorithm>

#include "core/accounting/sampling.h"

namespace lw {

// Daemon memory per tracked allocation is a budget (bench/README.md): one
// FlatMap slot is the 8-byte key plus this.
static_assert(sizeof(LiveRecord) == 24, "LiveRecord grew: check the per-allocation memory budget");

HeapTracker::HeapTracker() = default;

uint32_t HeapTracker::site_index(uint64_t stack_hash, uint32_t kind) {
  FlatMap<uint32_t>& by_stack = site_by_stack_[kind];
  if (const uint32_t* idx = by_stack.find(stack_hash)) return *idx;
  auto idx = static_cast<uint32_t>(sites_.size());
  SiteStats s;
  s.stack_hash = stack_hash;
  s.kind = kind;
  sites_.push_back(s);
  by_stack.insert(stack_hash, idx);
  return idx;
}

uint64_t HeapTracker::counted_bytes(const LiveRecord& r) const {
  if (r.kind != LW_KIND_HEAP) return r.size;
  const uint64_t bytes = sample_mean_ == 0 ? r.size : sample_weight_bytes(r.size, sample_mean_);
  if (fractions_.size() == 1 && fractions_.front().fraction >= 1) return bytes;
  return round_by_draw(static_cast<double>(bytes) / fraction_at(r.alloc_ns), r.alloc_ns ^ r.size);
}

// w rounded down or up by a draw from `identity`, up with probability its
// fraction: whole figures that average to w (a record's bytes and count
// under bursts; the same answer every time for one record).
uint64_t HeapTracker::round_by_draw(double w, uint64_t identity) {
  const auto whole = static_cast<uint64_t>(w);
  const double draw = static_cast<double>((identity * 0x9e3779b97f4a7c15ull) >> 11) / 9007199254740992.0;
  return whole + (draw < w - static_cast<double>(whole) ? 1 : 0);
}

void HeapTracker::set_time_fraction(double fraction, uint64_t from_ns) {
  fraction = fraction > 0 && fraction < 1 ? fraction : 1;
  if (fraction == fractions_.back().fraction) return;
  // A burst's span stays (set_burst_span): its records were made under it.
  if (fractions_.back().from_ns >= from_ns && fractions_.size() > 1 && fractions_.back().span == FractionEpoch::kNoSpan)
    fractions_.pop_back();
  fractions_.push_back(FractionEpoch{from_ns, fraction});
}

void HeapTracker::set_burst_span(uint64_t from_ns, uint64_t to_ns, double fraction) {
  const FractionEpoch after = fractions_.back();
  if (!(fraction > 0) || to_ns <= from_ns || from_ns <= after.from_ns) return;
  // The span's live records were counted at the share in force: they are
  // counted again at the measured one, so that their frees take off what
  // they added (allocated - freed = live stays).
  reweigh_heap_span(from_ns, to_ns, false);
  fractions_.push_back(FractionEpoch{from_ns, std::min(fraction, 1.0), FractionEpoch::kSpanStart});
  fractions_.push_back(FractionEpoch{to_ns, after.fraction, FractionEpoch::kSpanEnd});
  reweigh_heap_span(from_ns, to_ns, true);
  if (++burst_spans_ <= kMaxBurstSpans) return;
  // The oldest span goes: its live records fall back to the epoch before
  // it, counted again at that weight.
  for (size_t i = 1; i + 1 < fractions_.size(); ++i)
    if (fractions_[i].span == FractionEpoch::kSpanStart) {
      const uint64_t old_from = fractions_[i].from_ns, old_to = fractions_[i + 1].from_ns;
      reweigh_heap_span(old_from, old_to, false);
      fractions_.erase(fractions_.begin() + static_cast<std::ptrdiff_t>(i),
                       fractions_.begin() + static_cast<std::ptrdiff_t>(i + 2));
      reweigh_heap_span(old_from, old_to, true);
      --burst_spans_;
      return;
    }
}

void HeapTracker::reweigh_heap_span(uint64_t from_ns, uint64_t to_ns, bool add) {
  live_.for_each([&](uint64_t, const LiveRecord& r) {
    if (r.kind != LW_KIND_HEAP || r.alloc_ns < from_ns || r.alloc_ns >= to_ns) return;
    SiteStats& s = sites_[r.site];
    const uint64_t bytes = counted_bytes(r), count = counted_allocations(r);
    if (add) {
      s.live_bytes += bytes, s.allocated_bytes += bytes, live_bytes_[LW_KIND_HEAP] += bytes;
      s.live_allocations += count, s.allocations += count;
    } else {
      s.live_bytes -= bytes, s.allocated_bytes -= bytes, live_bytes_[LW_KIND_HEAP] -= bytes;
      s.live_allocations -= count, s.allocations -= count;
    }
  });
}

double HeapTracker::fraction_at(uint64_t alloc_ns) const {
  for (auto it = fractions_.rbegin(); it != fractions_.rend(); ++it)
    if (it->from_ns <= alloc_ns) return it->fraction;
  return fractions_.front().fraction;
}

std::vector<FilteredLive> HeapTracker::filtered_live(const LiveFilter& filter, uint64_t now_ns) const {
  std::vector<FilteredLive> out(sites_.size());
  for_each_live_at([&](uint64_t addr, const LiveRecord& r) {
    if (!filter.matches(r, now_ns)) return;
    out[r.site].bytes += committed_bytes(addr, r);
    out[r.site].allocations += counted_allocations(r);
  });
  return out;
}

uint64_t HeapTracker::live_bytes_settled(uint32_t kind, uint64_t before_ns) const {
  if (kind >= LW_KIND_MAX || live_bytes_[kind] == 0) return 0;
  uint64_t bytes = 0;
  for_each_live_at([&](uint64_t addr, const LiveRecord& r) {
    if (r.kind == kind && r.alloc_ns <= before_ns) bytes += committed_bytes(addr, r);
  });
  return bytes;
}

uint64_t HeapTracker::counted_allocations(const LiveRecord& r) const {
  if (r.kind != LW_KIND_HEAP) return 1;
  const uint64_t count = sample_mean_ == 0 ? 1 : sample_weight_count(r.size, sample_mean_, r.alloc_ns);
  if (fractions_.size() == 1 && fractions_.front().fraction >= 1) return count;
  return round_by_draw(static_cast<double>(count) / fraction_at(r.alloc_ns), r.alloc_ns);
}

void HeapTracker::add_live(uint64_t addr, const LiveRecord& r) {
  const uint64_t key = live_key(r.kind, addr);
  // A record already there (the tail of a cut region landing on another
  // record: inconsistent input, found by fuzz_event) is retired first, as a
  // missed free, so the per-site sums stay exact.
  if (const LiveRecord* old = live_.find(key)) {
    ++counters_.missed_frees;
    const LiveRecord gone = *old;
    drop_live(key, gone, gone.size);
  }
  live_.insert(key, r);
  ++records_[r.kind];
  SiteStats& s = sites_[r.site];
  const uint64_t bytes = counted_bytes(r);
  s.live_bytes += bytes;
  s.live_allocations += counted_allocations(r);
  live_bytes_[r.kind] += bytes;
  // New, cut or moved: its mappings are read at the next refresh
  // (decision reserved-address-space).
  if (r.kind == LW_KIND_MMAP) {
    index_mmap(addr, r);
    if (unchecked_mmap_.size() < kMaxUnchecked)
      unchecked_mmap_.push_back(addr);
    else
      unchecked_overflow_ = true;
  }
}

void HeapTracker::drop_live(uint64_t key, const LiveRecord& r, uint64_t freed_bytes) {
  if (r.kind == LW_KIND_MMAP) {
    drop_split(key, r);
    mmap_index_.erase(key ^ (uint64_t{LW_KIND_MMAP} << 58));
  }
  SiteStats& s = sites_[r.site];
  const uint64_t bytes = counted_bytes(r);
  const uint64_t count = counted_allocations(r);
  s.live_bytes -= bytes;
  s.live_allocations -= count;
  // Partial unmaps (kind mmap, never sampled) free part of a record.
  s.freed_bytes += freed_bytes == r.size ? bytes : freed_bytes;
  s.frees += count;
  live_bytes_[r.kind] -= bytes;
  if (live_.erase(key)) --records_[r.kind];
}

void HeapTracker::apply(const Event& e) {
  if (e.kind >= LW_KIND_MAX) return;
  if (frozen_[e.kind] && (e.type == EventType::kAlloc || e.type == EventType::kFree)) {
    ++counters_.frozen_events;
    return;
  }
  const uint64_t key = live_key(e.kind, e.addr);
  if (e.type == EventType::kAlloc) {
    bool commit = false;
    if (LiveRecord* old = live_.find(key)) {
      if (old->alloc_ns == e.alloc_ns) {
        ++counters_.duplicate_allocs;
        return;
      }
      // The kernel saw this address handed out again while live: the old
      // record's free was missed. It is retired, not leaked.
      ++counters_.missed_frees;
      LiveRecord gone = *old;
      // A mapping over the head of one at least its size (mmap MAP_FIXED:
      // Go's first sysMap of a heap arena, HotSpot's -Xms commit of its
      // heap, or its MmapArrayAllocator committing what it just reserved)
      // commits that reservation (decision reserved-address-space).
      commit = e.kind == LW_KIND_MMAP && gone.size >= e.size;
      if (commit && gone.size > e.size && retired_.size() < kMaxRetired)
        retired_.push_back({e.addr + e.size, e.addr + gone.size, gone.alloc_ns});
      drop_live(key, gone, gone.size);
    }
    LiveRecord r{e.size, e.alloc_ns, e.kind, site_index(e.stack_hash, e.kind)};
    if (!keeps_at_current_mean(e.addr, r)) {
      ++counters_.thinned_late;
      thinned_pending_.push_back({e.addr, e.alloc_ns});
      return;
    }
    SiteStats& s = sites_[r.site];
    s.allocated_bytes += counted_bytes(r);
    s.allocations += counted_allocations(r);
    add_live(e.addr, r);
    if (commit) set_split(e.addr, r.alloc_ns, RecordSplit{0, 0, true});
    return;
  }
  if (e.type != EventType::kFree) return;
  LiveRecord* rec = live_.find(key);
  // The kernel retires records with a REPLACED-flagged FREE (alloc_ns 0)
  // when the replacement could not be stored: drop whatever is there.
  bool matches = rec && (rec->alloc_ns == e.alloc_ns || (e.flags & LW_EVF_REPLACED));
  if (!matches) {
    ++counters_.stale_frees;
    return;
  }
  LiveRecord r = *rec;
  if (e.flags & LW_EVF_PARTIAL) {
    // munmap cut `size` bytes at offset `stack_hash` out of the region: the
    // head keeps its address, the tail moves past the hole.
    const uint64_t off = e.stack_hash;
    if (off > r.size || e.size > r.size - off) {
      ++counters_.stale_frees;  // inconsistent with what we hold; a resync repairs it
      return;
    }
    // The pieces of a commit stay commits (decision reserved-address-space);
    // what of them is touched is read again.
    const bool commit = split_of(e.addr).commit;
    drop_live(key, r, e.size);
    sites_[r.site].frees -= counted_allocations(r);  // a cut is not a whole free
    if (off > 0) {
      LiveRecord head = r;
      head.size = off;
      add_live(e.addr, head);
      if (commit) set_split(e.addr, r.alloc_ns, RecordSplit{0, 0, true});
    }
    if (const uint64_t tail = r.size - off - e.size; tail > 0) {
      LiveRecord rest = r;
      rest.size = tail;
      add_live(e.addr + off + e.size, rest);
      if (commit) set_split(e.addr + off + e.size, r.alloc_ns, RecordSplit{0, 0, true});
    }
    return;
  }
  drop_live(key, r, r.size);
}

void HeapTracker::resync(const std::vector<KernelRecord>& kernel) {
  ++counters_.resyncs;
  // Splits are taken back first (the figures below are rebuilt from whole
  // records) and put back on the records that stay the same.
  std::vector<std::pair<uint64_t, RecordSplit>> splits;
  for_each_split([&](uint64_t addr, const RecordSplit& sp) { splits.emplace_back(addr, sp); });
  std::vector<uint64_t> split_ns;
  for (const auto& e : splits) {
    const LiveRecord* r = live_.find(live_key(LW_KIND_MMAP, e.first));
    split_ns.push_back(r ? r->alloc_ns : 0);
  }
  forget_splits();
  resync_records(kernel);
  for (size_t i = 0; i < splits.size(); ++i) set_split(splits[i].first, split_ns[i], splits[i].second);
  // Records the resync brought have not had their mappings read.
  if (records_[LW_KIND_MMAP] > 0) unchecked_overflow_ = true;
}

void HeapTracker::resync_records(const std::vector<KernelRecord>& kernel) {
  FlatMap<LiveRecord> fresh;
  std::vector<uint64_t> site_live(sites_.size(), 0), site_count(sites_.size(), 0);
  std::array<uint64_t, LW_KIND_MAX> kind_live{};
  std::array<uint64_t, LW_KIND_MAX> kind_records{};
  for (const KernelRecord& k : kernel) {
    if (k.kind >= LW_KIND_MAX || frozen_[k.kind]) continue;  // a shed kind stays as frozen
    const uint64_t key = live_key(k.kind, k.addr);
    const LiveRecord* known = live_.find(key);
    LiveRecord r;
    if (known && known->alloc_ns == k.alloc_ns && known->size == k.size) {
      r = *known;
    } else {
      r = LiveRecord{k.size, k.alloc_ns, k.kind, site_index(k.stack_hash, k.kind)};
      if (!keeps_at_current_mean(k.addr, r)) {
        ++counters_.thinned_late;
        thinned_pending_.push_back({k.addr, k.alloc_ns});
        site_live.resize(sites_.size(), 0);
        site_count.resize(sites_.size(), 0);
        continue;
      }
      SiteStats& s = sites_[r.site];
      s.allocated_bytes += counted_bytes(r);
      s.allocations += counted_allocations(r);
      ++counters_.resync_added;
      site_live.resize(sites_.size(), 0);
      site_count.resize(sites_.size(), 0);
    }
    if (fresh.insert(key, r).second) ++kind_records[r.kind];
    site_live[r.site] += counted_bytes(r);
    site_count[r.site] += counted_allocations(r);
    kind_live[r.kind] += counted_bytes(r);
  }
  // Records only on our side were freed while their FREE events were lost.
  live_.for_each([&](uint64_t key, const LiveRecord& r) {
    const LiveRecord* now = fresh.find(key);
    if (now && now->alloc_ns == r.alloc_ns && now->size == r.size) return;
    SiteStats& s = sites_[r.site];
    s.freed_bytes += counted_bytes(r);
    s.frees += counted_allocations(r);
    ++counters_.resync_removed;
  });
  for (size_t i = 0; i < sites_.size(); ++i) {
    if (frozen_[sites_[i].kind]) continue;
    sites_[i].live_bytes = site_live[i];
    sites_[i].live_allocations = site_count[i];
  }
  for (uint32_t k = 0; k < LW_KIND_MAX; ++k) {
    if (frozen_[k]) continue;
    live_bytes_[k] = kind_live[k];
  }
  records_ = kind_records;
  live_ = std::move(fresh);
  rebuild_mmap_index();
}

void HeapTracker::fold_sites(const std::vector<SiteFold>& folds) {
  std::vector<uint32_t> into;
  for (const SiteFold& f : folds) {
    if (f.from >= sites_.size() || f.to >= sites_.size() || f.from == f.to) continue;
    SiteStats& from = sites_[f.from];
    SiteStats& to = sites_[f.to];
    const uint32_t* to_now = site_by_stack_[to.kind].find(to.stack_hash);
    if (from.kind != to.kind || !to_now || *to_now != f.to) continue;  // `to` was folded itself
    to.live_bytes += from.live_bytes;
    to.live_allocations += from.live_allocations;
    to.allocated_bytes += from.allocated_bytes;
    to.allocations += from.allocations;
    to.freed_bytes += from.freed_bytes;
    to.frees += from.frees;
    to.reserved_bytes += from.reserved_bytes;
    to.unmapped_bytes += from.unmapped_bytes;
    from = SiteStats{from.stack_hash, from.kind};
    if (uint32_t* idx = site_by_stack_[from.kind].find(from.stack_hash)) *idx = f.to;
    if (into.empty()) {
      into.resize(sites_.size());
      for (uint32_t i = 0; i < into.size(); ++i) into[i] = i;
    }
    into[f.from] = f.to;
    ++counters_.sites_folded;
  }
  if (into.empty()) return;
  live_.for_each_value([&](uint64_t, LiveRecord& r) { r.site = into[r.site]; });
}

void HeapTracker::clear() {
  live_.clear();
  mmap_index_.clear();
  mmap_longest_ = 0;
  splits_.clear();
  reserved_bytes_ = 0;
  unmapped_bytes_ = 0;
  unchecked_mmap_.clear();
  unchecked_overflow_ = false;
  for (auto& m : site_by_stack_) m.clear();
  sites_.clear();
  live_bytes_ = {};
  records_ = {};
  frozen_ = {};
  // A new image starts at the mean the caller sets (set_sample_mean()).
  epochs_.assign(1, SampleEpoch{0, sample_mean_});
  fractions_.assign(1, FractionEpoch{0, fractions_.back().fraction});
  burst_spans_ = 0;
  thinned_pending_.clear();
}

void HeapTracker::shed_kind(uint32_t kind) {
  if (kind >= LW_KIND_MAX || frozen_[kind]) return;
  frozen_[kind] = true;
  // A new map holding only the other kinds: erasing one by one would rehash
  // down step by step, and the old arrays are released when it is replaced.
  FlatMap<LiveRecord> kept;
  live_.for_each([&](uint64_t key, const LiveRecord& r) {
    if (r.kind != kind) kept.insert(key, r);
  });
  counters_.shed_records += records_[kind];
  records_[kind] = 0;
  live_ = std::move(kept);
  // The kind's figures stay as they are, frozen, reserved bytes with them.
  if (kind == LW_KIND_MMAP) {
    splits_.clear();
    unchecked_mmap_.clear();
    unchecked_overflow_ = false;
    mmap_index_.clear();
  }
}

bool HeapTracker::retire(uint64_t addr, uint64_t alloc_ns, bool undecided) {
  const uint64_t key = live_key(LW_KIND_HEAP, addr);
  const LiveRecord* found = live_.find(key);
  if (found == nullptr || found->alloc_ns != alloc_ns) return false;
  const LiveRecord r = *found;
  if (!undecided) {
    drop_live(key, r, r.size);
    ++counters_.walk_freed;
    return true;
  }
  // Out of the cumulative figures too, as a thinned record: drop_live()
  // counts it freed, taken back here, and allocated - freed stays live.
  const uint64_t bytes = counted_bytes(r);
  const uint64_t count = counted_allocations(r);
  drop_live(key, r, r.size);
  SiteStats& s = sites_[r.site];
  auto sub = [](uint64_t& v, uint64_t d) { v = v > d ? v - d : 0; };
  sub(s.freed_bytes, bytes);
  sub(s.frees, count);
  sub(s.allocated_bytes, bytes);
  sub(s.allocations, count);
  ++counters_.walk_undecided;
  counters_.walk_undecided_bytes += bytes;
  return true;
}

void HeapTracker::clear_kind(uint32_t kind) {
  if (kind >= LW_KIND_MAX) return;
  std::vector<uint64_t> keys;
  live_.for_each([&](uint64_t key, const LiveRecord& r) {
    if (r.kind == kind) keys.push_back(key);
  });
  for (uint64_t key : keys) live_.erase(key);
  records_[kind] = 0;
  frozen_[kind] = false;
  if (kind == LW_KIND_HEAP) {
    fractions_.assign(1, FractionEpoch{0, fractions_.back().fraction});
    burst_spans_ = 0;
  }
  if (kind == LW_KIND_MMAP) {
    splits_.clear();
    mmap_index_.clear();
    reserved_bytes_ = 0;
    unmapped_bytes_ = 0;
    unchecked_mmap_.clear();
    unchecked_overflow_ = false;
  }
  // Sites of the kind are zeroed, not removed: indices stay valid for the
  // other kinds and the site keeps its identity for the next window.
  for (SiteStats& s : sites_) {
    if (s.kind != kind) continue;
    s.live_bytes = s.live_allocations = 0;
    s.allocated_bytes = s.allocations = s.freed_bytes = s.frees = 0;
    s.reserved_bytes = s.unmapped_bytes = 0;
  }
  live_bytes_[kind] = 0;
}

void HeapTracker::set_sample_mean(uint64_t mean_bytes) {
  if (mean_bytes == sample_mean_ && epochs_.size() == 1) return;
  clear_kind(LW_KIND_HEAP);
  sample_mean_ = mean_bytes;
  epochs_.assign(1, SampleEpoch{0, mean_bytes});
  thinned_pending_.clear();
}

uint64_t HeapTracker::mean_at(uint64_t alloc_ns) const {
  for (auto it = epochs_.rbegin(); it != epochs_.rend(); ++it)
    if (it->from_ns <= alloc_ns) return it->mean;
  return epochs_.front().mean;
}

bool HeapTracker::keeps_at_current_mean(uint64_t addr, const LiveRecord& r) const {
  if (r.kind != LW_KIND_HEAP || epochs_.size() == 1 || r.alloc_ns >= epochs_.back().from_ns) return true;
  return thin_keeps(addr, r.alloc_ns, r.size, mean_at(r.alloc_ns), sample_mean_);
}

void HeapTracker::thin_to(uint64_t mean_bytes, uint64_t switch_ns, std::vector<ThinnedRecord>* dropped) {
  if (mean_bytes <= sample_mean_ || frozen_[LW_KIND_HEAP]) return;
  ++counters_.thinnings;
  const uint64_t old_mean = sample_mean_;
  epochs_.push_back(SampleEpoch{switch_ns, mean_bytes});
  sample_mean_ = mean_bytes;
  // Every record here is a sample at old_mean: one it was allocated under
  // a smaller mean has passed that mean's test already (the tests of one
  // record are against one draw, so passing the new one implies the old).
  std::vector<uint64_t> gone;
  uint64_t heap_live = 0;
  live_.for_each([&](uint64_t key, const LiveRecord& r) {
    if (r.kind != LW_KIND_HEAP) return;
    const uint64_t addr = key ^ (static_cast<uint64_t>(r.kind) << 58);
    SiteStats& s = sites_[r.site];
    const uint64_t old_bytes = old_mean ? sample_weight_bytes(r.size, old_mean) : r.size;
    const uint64_t old_count = old_mean ? sample_weight_count(r.size, old_mean, r.alloc_ns) : 1;
    // The record leaves the cumulative figures with its old weight, and a
    // kept one comes back with its new one: allocated - freed stays live.
    auto sub = [](uint64_t& v, uint64_t d) { v = v > d ? v - d : 0; };
    sub(s.live_bytes, old_bytes);
    sub(s.live_allocations, old_count);
    sub(s.allocated_bytes, old_bytes);
    sub(s.allocations, old_count);
    if (!thin_keeps(addr, r.alloc_ns, r.size, mean_at(r.alloc_ns), mean_bytes)) {
      gone.push_back(key);
      if (dropped) dropped->push_back({addr, r.alloc_ns});
      return;
    }
    const uint64_t bytes = counted_bytes(r);
    const uint64_t count = counted_allocations(r);
    s.live_bytes += bytes;
    s.live_allocations += count;
    s.allocated_bytes += bytes;
    s.allocations += count;
    heap_live += bytes;
  });
  if (gone.size() * 2 > live_.size()) {
    // Most go: a new map of the rest (erasing one by one would rehash
    // down step by step), as shed_kind() does.
    std::sort(gone.begin(), gone.end());
    FlatMap<LiveRecord> kept;
    live_.for_each([&](uint64_t key, const LiveRecord& r) {
      if (!std::binary_search(gone.begin(), gone.end(), key)) kept.insert(key, r);
    });
    live_ = std::move(kept);
  } else {
    for (uint64_t key : gone) live_.erase(key);
  }
  records_[LW_KIND_HEAP] -= gone.size();
  counters_.thinned_records += gone.size();
  live_bytes_[LW_KIND_HEAP] = heap_live;
}

uint64_t HeapTracker::live_allocations_total() const {
  bool any_frozen = false;
  for (bool f : frozen_) any_frozen |= f;
  // A shed kind's count lives on in its frozen sites, not in records.
  if (sample_mean_ == 0 && !any_frozen) return live_.size();
  uint64_t total = 0;
  for (const SiteStats& s : sites_) total += s.live_allocations;
  return total;
}

uint64_t HeapTracker::live_bytes_total() const {
  uint64_t total = 0;
  // tensor_gpu lies inside its pool's cuda_device memory: counted once, as
  // that (decision tensor-tier, "Counted once").
  for (uint32_t k = 0; k < LW_KIND_MAX; ++k)
    if (k != LW_KIND_TENSOR_GPU) total += live_bytes_[k];
  return total;
}

size_t HeapTracker::memory_bytes() const {
  // A map node: the pair and about three pointers and a colour.
  size_t bytes = live_.memory_bytes() + sites_.capacity() * sizeof(SiteStats) + splits_.memory_bytes() +
                 unchecked_mmap_.capacity() * sizeof(uint64_t) +
                 mmap_index_.size() * (sizeof(std::pair<const uint64_t, MmapSpan>) + 32);
  for (const auto& m : site_by_stack_) bytes += m.memory_bytes();
  return bytes;
}

size_t HeapTracker::site_memory_bytes() const {
  size_t bytes = sites_.capacity() * sizeof(SiteStats);
  for (const auto& m : site_by_stack_) bytes += m.memory_bytes();
  return bytes;
}

bool HeapTracker::stack_live(uint64_t stack_hash) const {
  for (const auto& by_stack : site_by_stack_) {
    const uint32_t* idx = by_stack.find(stack_hash);
    if (idx && *idx < sites_.size() && sites_[*idx].live_allocations > 0) return true;
  }
  return false;
}

// Reserved address space (decision reserved-address-space).

uint64_t HeapTracker::committed_bytes(uint64_t addr, const LiveRecord& r) const {
  const uint64_t bytes = counted_bytes(r);
  if (r.kind != LW_KIND_MMAP) return bytes;
  const RecordSplit* sp = splits_.find(live_key(LW_KIND_MMAP, addr));
  if (!sp) return bytes;
  const uint64_t withheld = sp->reserved + sp->unmapped;
  return bytes > withheld ? bytes - withheld : 0;
}

RecordSplit HeapTracker::split_of(uint64_t addr) const {
  const RecordSplit* sp = splits_.find(live_key(LW_KIND_MMAP, addr));
  return sp ? *sp : RecordSplit{};
}

void HeapTracker::account_split(const LiveRecord& r, const RecordSplit& split, int sign) {
  SiteStats& s = sites_[r.site];
  const uint64_t withheld = split.reserved + split.unmapped;
  if (sign > 0) {
    s.live_bytes -= withheld;
    s.reserved_bytes += split.reserved;
    s.unmapped_bytes += split.unmapped;
    live_bytes_[LW_KIND_MMAP] -= withheld;
    reserved_bytes_ += split.reserved;
    unmapped_bytes_ += split.unmapped;
  } else {
    s.live_bytes += withheld;
    s.reserved_bytes -= split.reserved;
    s.unmapped_bytes -= split.unmapped;
    live_bytes_[LW_KIND_MMAP] += withheld;
    reserved_bytes_ -= split.reserved;
    unmapped_bytes_ -= split.unmapped;
  }
}

void HeapTracker::drop_split(uint64_t key, const LiveRecord& r) {
  const RecordSplit* sp = splits_.find(key);
  if (!sp) return;
  account_split(r, *sp, -1);
  splits_.erase(key);
}

void HeapTracker::forget_splits() {
  std::vector<uint64_t> keys;
  splits_.for_each([&](uint64_t key, const RecordSplit&) { keys.push_back(key); });
  for (uint64_t key : keys) {
    if (const LiveRecord* r = live_.find(key)) drop_split(key, *r);
  }
  splits_.clear();
}

bool HeapTracker::set_split(uint64_t addr, uint64_t alloc_ns, RecordSplit split) {
  if (frozen_[LW_KIND_MMAP]) return false;
  const uint64_t key = live_key(LW_KIND_MMAP, addr);
  const LiveRecord* r = live_.find(key);
  if (!r || r->kind != LW_KIND_MMAP || r->alloc_ns != alloc_ns) return false;
  const LiveRecord rec = *r;
  // Never more than the record holds: the mappings were read after the
  // record's events, and may describe a newer mapping at its address.
  split.reserved = std::min(split.reserved, rec.size);
  split.unmapped = std::min(split.unmapped, rec.size - split.reserved);
  drop_split(key, rec);
  if (split.reserved == 0 && split.unmapped == 0 && !split.commit) return true;
  account_split(rec, split, +1);
  splits_.insert(key, split);
  return true;
}

void HeapTracker::index_mmap(uint64_t addr, const LiveRecord& r) {
  mmap_index_[addr] = MmapSpan{addr + r.size < addr ? UINT64_MAX : addr + r.size, r.alloc_ns};
  mmap_longest_ = std::max(mmap_longest_, r.size);
}

void HeapTracker::rebuild_mmap_index() {
  mmap_index_.clear();
  for_each_mmap([&](uint64_t addr, const LiveRecord& r) { index_mmap(addr, r); });
}

std::vector<uint64_t> HeapTracker::take_unchecked_mmap(bool* overflow) {
  *overflow = unchecked_overflow_;
  unchecked_overflow_ = false;
  return std::exchange(unchecked_mmap_, {});
}

}  // namespace lw
