// SPDX-License-Identifier: Apache-2.0
#include "engine/record_budget.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/accounting/sampling.h"
#include "core/platform/clock.h"
#include "core/platform/log.h"
#include "core/policy/memory_budget.h"

namespace lw {

RecordBudget::RecordBudget(BpfSession& session, ProcessTable& procs, TracerStats& stats)
    : session_(session), procs_(procs), stats_(stats) {
  update_auto_sampling();
}

void RecordBudget::set_live_record_cap(uint64_t cap) {
  stats_.live_record_cap = cap;
  shed_blocked_at_ = 0;
  update_auto_sampling();
}

// Automatic sampling (docs/config.md, "Automatic sampling";
// decision auto-sampling). The capacity is what binds first, the kernel map or
// the daemon's record cap. One process may fill 3/4 of it, so that the others
// keep room while it is thinned; past 7/8 in all, the process with the most
// records is sampled. A sampled process keeps about 160,000 records (at most
// 1/8 of the capacity): then T <= heap/160,000, and a site holding 1% of the
// heap is estimated within sqrt(T / (heap/100)) = 2.5% (one standard error).
void RecordBudget::update_auto_sampling() {
  uint64_t capacity = session_.live_capacity();
  if (stats_.live_record_cap && stats_.live_record_cap < capacity) capacity = stats_.live_record_cap;
  auto_sampling_.share = capacity / 4 * 3;
  auto_sampling_.total = capacity / 8 * 7;
  auto_sampling_.records = std::min<uint64_t>(160000, std::max<uint64_t>(capacity / 8, 1));
  sample_blocked_at_ = 0;
  share_ = share_percent_ < 100 ? std::max<uint64_t>(capacity * share_percent_ / 100, 1) : 0;
  capacity_ = capacity;
}

void RecordBudget::after_record(TracedProcess& p, const Event& e, uint64_t records_before) {
  const uint64_t after = p.heap.record_count();
  stats_.live_records = stats_.live_records + after - records_before;
  count_user(p, static_cast<int64_t>(after) - static_cast<int64_t>(records_before));
  if (e.type != EventType::kAlloc) return;
  if (!(e.flags & LW_EVF_REPLACED)) ++p.records_added_seen;  // in flight no more
  // Fair shares first (decision fair-shares): a process, or its user, at
  // its share (the kernel's limit stops it there) is brought back under
  // before anything else is thinned.
  if (share_ && !*p.over_share) {
    if (after >= share_ - share_ / 100)
      enforce_share(p, "process");
    else if (user_near_share(p, user_records(p)))  // one lookup; none for root
      enforce_share(p, "user");
  }
  if (auto_sampling_.share) {
    if (e.kind == LW_KIND_HEAP && p.heap.record_count(LW_KIND_HEAP) > auto_sampling_.share)
      sample_automatically(p, share_reason());
    else if (stats_.live_records > auto_sampling_.total)
      sample_largest();
  }
  if (stats_.live_record_cap && stats_.live_records > stats_.live_record_cap) shed_largest();
}

void RecordBudget::delete_thinned(TracedProcess& p) {
  std::vector<ThinnedRecord> records = p.heap.take_thinned();
  if (!records.empty()) session_.delete_live(p.pid, LW_KIND_HEAP, records);
}

bool RecordBudget::sample_automatically(TracedProcess& p, const char* reason) {
  if (!p.options.auto_sampling || !p.options.heap || p.heap_shed || p.heap.frozen(LW_KIND_HEAP))
    return false;
  const uint64_t current = p.heap.sample_mean();
  const uint64_t mean = auto_sample_mean(p.heap.live_bytes(LW_KIND_HEAP), auto_sampling_.records, current);
  if (mean <= current) return false;  // nothing held, or already at the largest mean
  // The kernel first: allocations from now on are sampled at the new mean;
  // switch_ns is read after, so every record stamped later was sampled
  // (bar calls in flight across the switch, one per thread at most).
  p.auto_sample_mean = mean;
  (void)session_.set_target(p.pid, current_flags(p), 0, mean);
  const uint64_t switch_ns = monotonic_ns();
  const uint64_t before = p.heap.record_count(LW_KIND_HEAP);
  std::vector<ThinnedRecord> dropped;
  p.heap.thin_to(mean, switch_ns, &dropped);
  session_.delete_live(p.pid, LW_KIND_HEAP, dropped);
  if (!current || !*p.auto_sample_reason) {
    p.auto_sample_reason = reason;
    p.auto_sample_since = unix_seconds_now();
  }
  ++stats_.auto_sampling_switches;
  stats_.auto_sampling_thinned += dropped.size();
  LW_LOG_INFO("automatic sampling: pid %d (%s) heap sampled at a mean of %llu bytes (was %llu; %s): "
              "%llu of %llu records thinned",
              p.pid, p.comm.c_str(), static_cast<unsigned long long>(mean),
              static_cast<unsigned long long>(current), reason,
              static_cast<unsigned long long>(dropped.size()), static_cast<unsigned long long>(before));
  recount_records();
  return true;
}

const char* RecordBudget::share_reason() const {
  return stats_.live_record_cap && stats_.live_record_cap < session_.live_capacity() ? "memory_budget"
                                                                                      : "live_map_share";
}

void RecordBudget::check_auto_sampling() {
  if (!auto_sampling_.share) return;
  for (auto& [pid, proc] : procs_)
    if (!proc->exited && proc->heap.record_count(LW_KIND_HEAP) > auto_sampling_.share)
      sample_automatically(*proc, share_reason());
  if (stats_.live_records > auto_sampling_.total) sample_largest();
}

// The process holding the most records of any kind (decision fair-shares):
// sampled when they are mostly heap, else marked over share. Without shares
// (`top`), the largest heap is sampled, as before.
void RecordBudget::sample_largest() {
  if (sample_blocked_at_ && stats_.live_records < sample_blocked_at_ + 4096) return;
  std::vector<std::pair<uint64_t, TracedProcess*>> by_records;
  for (const auto& [pid, proc] : procs_)
    by_records.emplace_back(share_ ? proc->heap.record_count() : proc->heap.record_count(LW_KIND_HEAP),
                            proc.get());
  std::sort(by_records.begin(), by_records.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [records, proc] : by_records) {
    if (records == 0) break;
    // The holder already records nothing new: the others keep their
    // shares, exact.
    if (*proc->over_share) break;
    const bool mostly_heap = proc->heap.record_count(LW_KIND_HEAP) * 2 >= records;
    if (mostly_heap && sample_automatically(*proc, "live_map_full")) {
      sample_blocked_at_ = 0;
      return;
    }
    if (share_) {
      set_over_share(*proc, "process");
      sample_blocked_at_ = 0;
      return;
    }
  }
  sample_blocked_at_ = stats_.live_records;
}

void RecordBudget::recount_records() {
  uint64_t total = 0;
  user_records_.clear();
  for (const auto& [pid, proc] : procs_) {
    total += proc->heap.record_count();
    count_user(*proc, static_cast<int64_t>(proc->heap.record_count()));
  }
  stats_.live_records = total;
}

void RecordBudget::shed_largest() {
  if (shed_blocked_at_ && stats_.live_records < shed_blocked_at_ + 4096) return;
  // The holder of the most records of any kind (decision fair-shares): an
  // mmap filler is shed, not a bystander's heap.
  std::vector<std::pair<pid_t, uint64_t>> candidates;
  candidates.reserve(procs_.size());
  for (const auto& [pid, proc] : procs_) {
    const bool heap_gone = proc->heap_shed || proc->heap.frozen(LW_KIND_HEAP);
    const uint64_t heap = heap_gone ? 0 : proc->heap.record_count(LW_KIND_HEAP);
    const uint64_t rest = std::string_view(proc->over_share) == "memory_budget"
                              ? 0
                              : proc->heap.record_count() - proc->heap.record_count(LW_KIND_HEAP);
    if (heap + rest > 0) candidates.emplace_back(pid, heap + rest);
  }
  std::optional<pid_t> victim = pick_shed_victim(candidates);
  if (!victim) {
    shed_blocked_at_ = stats_.live_records;
    return;
  }
  shed_blocked_at_ = 0;
  TracedProcess& p = *procs_.at(*victim);
  const uint64_t heap = p.heap_shed || p.heap.frozen(LW_KIND_HEAP) ? 0 : p.heap.record_count(LW_KIND_HEAP);
  if (heap * 2 < p.heap.record_count()) {
    shed_other_kinds(p);
    return;
  }
  p.heap_shed = true;
  // Heap accounting off in the kernel first, so no more heap events come;
  // those already queued are ignored by the frozen tracker.
  (void)session_.set_target(p.pid, current_flags(p), 0, heap_mean(p));
  p.heap.shed_kind(LW_KIND_HEAP);
  p.heap_stale_since = unix_seconds_now();
  sheds_.push_back(p.pid);
  ++stats_.memory_budget_sheds;
  recount_records();
}

// The memory budget's victim holds mostly mmap, CUDA or tensor records:
// those are dropped (figures frozen, as a heap shed's) and nothing new is
// recorded for it until its exec, whatever its share.
void RecordBudget::shed_other_kinds(TracedProcess& p) {
  p.over_share = "memory_budget";
  (void)session_.set_target(p.pid, current_flags(p), 0, heap_mean(p));
  for (uint32_t k = 0; k < LW_KIND_MAX; ++k) {
    if (k == LW_KIND_HEAP || p.heap.record_count(k) == 0) continue;
    p.heap.shed_kind(k);
    (void)session_.purge_live(p.pid, k);
  }
  ++stats_.memory_budget_sheds;
  ++stats_.fair_share_marks;
  LW_LOG_INFO("memory budget: pid %d (%s) holds the most records, not heap: its other records are "
              "dropped and nothing new is recorded for it",
              p.pid, p.comm.c_str());
  recount_records();
}

}  // namespace lw
