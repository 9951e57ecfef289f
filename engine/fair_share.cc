// SPDX-License-Identifier: Apache-2.0
// RecordBudget's fair shares (decision fair-shares): one process, or the
// processes of one user other than root, hold at most a share of the live
// map and of the stack map. The kernel refuses past a per-target limit the
// daemon sets at attach and every second; the daemon samples or marks a
// process that reaches its share. The rest of RecordBudget is
// engine/record_budget.cc.
#include <algorithm>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/platform/log.h"
#include "engine/record_budget.h"

namespace lw {

void RecordBudget::set_fair_share(uint32_t percent, uint64_t stack_entries) {
  share_percent_ = std::clamp<uint32_t>(percent, 1, 100);
  stack_entries_ = stack_entries;
  update_auto_sampling();
}

uint64_t RecordBudget::stack_share() const {
  return std::max<uint64_t>(stack_entries_ * share_percent_ / 100, 1);
}

void RecordBudget::count_user(const TracedProcess& p, int64_t delta) {
  if (!p.options.uid || *p.options.uid == 0 || delta == 0) return;
  uint64_t& n = user_records_[*p.options.uid];
  n = delta < 0 && static_cast<uint64_t>(-delta) > n ? 0 : n + static_cast<uint64_t>(delta);
}

uint64_t RecordBudget::user_records(const TracedProcess& p) const {
  if (!p.options.uid || *p.options.uid == 0) return 0;
  auto it = user_records_.find(*p.options.uid);
  return it == user_records_.end() ? 0 : it->second;
}

uint64_t RecordBudget::user_share(const TracedProcess& p, uint64_t mine) const {
  if (!share_ || !p.options.uid || *p.options.uid == 0) return share_;
  const uint64_t others = stats_.live_records > mine ? stats_.live_records - mine : 0;
  const uint64_t left = capacity_ > others ? capacity_ - others : 0;
  return std::min(share_, std::max<uint64_t>(left / 4 * 3, 1));
}

bool RecordBudget::user_near_share(const TracedProcess& p, uint64_t mine) const {
  const uint64_t share = user_share(p, mine);
  return mine >= share - share / 100;
}

uint64_t RecordBudget::user_stack_share(const TracedProcess& p) const {
  if (!p.options.uid || *p.options.uid == 0) return stack_share();
  const uint64_t mine = user_stacks(p);
  const uint64_t others = stacks_held_ > mine ? stacks_held_ - mine : 0;
  const uint64_t left = stack_entries_ > others ? stack_entries_ - others : 0;
  return std::min(stack_share(), std::max<uint64_t>(left / 4 * 3, 1));
}

uint64_t RecordBudget::user_stacks(const TracedProcess& p) const {
  if (!p.options.uid || *p.options.uid == 0) return 0;
  auto it = user_stacks_.find(*p.options.uid);
  return it == user_stacks_.end() ? 0 : it->second;
}

// Heap records are what sampling can thin: when they make half of what the
// process holds, sampling is tried first, and the kernel's limit follows at
// once; a process still at its share after it (its mmap records, or
// sampling off for it) is marked: nothing new is recorded for it.
void RecordBudget::enforce_share(TracedProcess& p, const char* whose) {
  const uint64_t all = p.heap.record_count();
  const uint64_t near = share_ - share_ / 100;
  if (p.heap.record_count(LW_KIND_HEAP) * 2 >= all && sample_automatically(p, "fair_share") &&
      p.heap.record_count() < near && !user_near_share(p, user_records(p))) {
    if (std::optional<lw_target> t = session_.get_target(p.pid)) write_limits(p, *t, p.stacks_held);
    return;
  }
  set_over_share(p, whose);
}

void RecordBudget::set_over_share(TracedProcess& p, const char* whose) {
  p.over_share = whose;
  (void)session_.set_target(p.pid, current_flags(p), 0, heap_mean(p));
  ++stats_.fair_share_marks;
  LW_LOG_INFO("fair share: pid %d (%s) holds %llu live records (its user %llu; share %llu, its user's "
              "%llu, limits.fair_share_percent): nothing new is recorded for it (%s share)",
              p.pid, p.comm.c_str(), static_cast<unsigned long long>(p.heap.record_count()),
              static_cast<unsigned long long>(user_records(p)), static_cast<unsigned long long>(share_),
              static_cast<unsigned long long>(user_share(p)), whose);
}

// What the kernel may still insert for `p`, and store of its stacks: its
// share less what it and its user hold, less its records in flight (the
// kernel inserted them; the daemon has not applied them yet). Written only
// when it changes: each write copies the whole target, racing the BPF
// side's counters.
void RecordBudget::write_limits(TracedProcess& p, const lw_target& t, uint64_t stacks_held) {
  const uint64_t in_flight = t.records_added > p.records_added_seen ? t.records_added - p.records_added_seen : 0;
  const auto room = [](uint64_t share, uint64_t held) { return held < share ? share - held : 0; };
  const uint64_t mine = user_records(p);
  const uint64_t records = std::min(room(share_, p.heap.record_count() + in_flight),
                                    room(user_share(p, mine), mine + in_flight));
  const uint64_t record_limit = share_ ? t.records_added + records + 1 : 0;
  const uint64_t stacks = std::min(room(stack_share(), stacks_held), room(user_stack_share(p), user_stacks(p)));
  const uint64_t stack_limit = t.stacks_added + stacks + 1;
  if (record_limit == p.record_limit && stack_limit == p.stack_limit) return;
  if (!session_.set_share_limits(p.pid, record_limit, stack_limit)) return;
  p.record_limit = record_limit;
  p.stack_limit = stack_limit;
}

// A process just attached: what is left of its user's shares, until the
// first look (a process forked a second cannot fill a map between looks).
void RecordBudget::on_attach(TracedProcess& p) {
  if (share_percent_ >= 100) return;
  p.stacks_held = 0;
  if (std::optional<lw_target> t = session_.get_target(p.pid)) write_limits(p, *t, 0);
}

// ---- the 1 s look ----
void RecordBudget::check_shares() {
  if (share_percent_ >= 100) return;
  for (auto& [pid, p] : procs_)
    if (!p->exited && *p->over_share) unmark_under_share(*p);
  // The stacks each holds: those it stored, less those collected since (an
  // approximation where processes share stacks: the collection credits one
  // of them).
  std::vector<std::pair<TracedProcess*, lw_target>> live;
  user_stacks_.clear();
  stacks_held_ = 0;
  for (auto& [pid, p] : procs_) {
    if (p->exited) continue;
    std::optional<lw_target> t = session_.get_target(pid);
    if (!t) continue;
    p->stacks_held = t->stacks_added > p->stacks_freed ? t->stacks_added - p->stacks_freed : 0;
    if (p->options.uid && *p->options.uid != 0) user_stacks_[*p->options.uid] += p->stacks_held;
    stacks_held_ += p->stacks_held;
    live.emplace_back(p.get(), *t);
  }
  const uint64_t share = stack_share();
  for (auto& [p, t] : live) {
    write_limits(*p, t, p->stacks_held);
    const uint64_t user = user_stacks(*p);
    const char* whose = p->stacks_held >= share ? "process" : user >= user_stack_share(*p) ? "user" : "";
    if (*whose && !*p->stack_over_share) {
      ++stats_.fair_share_stack_marks;
      LW_LOG_INFO("fair share: pid %d (%s) holds %llu stacks (its user %llu; share %llu of the stack map, "
                  "limits.fair_share_percent): its new stacks are not stored (%s share)",
                  p->pid, p->comm.c_str(), static_cast<unsigned long long>(p->stacks_held),
                  static_cast<unsigned long long>(user), static_cast<unsigned long long>(share), whose);
    }
    p->stack_over_share = whose;  // shown while it may store no more
  }
}

void RecordBudget::unmark_under_share(TracedProcess& p) {
  if (std::string_view(p.over_share) == "memory_budget") return;  // until exec
  const uint64_t mine = user_records(p);
  if (p.heap.record_count() >= share_ / 8 * 7 || mine >= user_share(p, mine) / 8 * 7) return;
  p.over_share = "";
  (void)session_.set_target(p.pid, current_flags(p), 0, heap_mean(p));
  LW_LOG_INFO("fair share: pid %d (%s) back under its share of the live map: recording again", p.pid,
              p.comm.c_str());
}

}  // namespace lw
