/* SPDX-License-Identifier: Apache-2.0 */
// The tracer's bounds on live records: automatic sampling (decision
// auto-sampling) and the daemon's memory budget (decision
// daemon-memory-bound), both checked as records are applied (EventRouter)
// and after a poll's resyncs (Tracer). Keeps TracerStats::live_records.
// Thread-safety: not thread-safe; runs on the tracer's thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/accounting/event.h"
#include "engine/bpf_session.h"
#include "engine/traced_process.h"
#include "view/process_view.h"

namespace lw {

class RecordBudget {
 public:
  RecordBudget(BpfSession& session, ProcessTable& procs, TracerStats& stats);

  // The memory budget: at most `cap` live records across all processes (0:
  // no cap). Checked on every insert: past it, the process with the most
  // heap records is shed at once (heap accounting off in the kernel, its
  // heap records dropped, its per-site figures frozen) and reported by
  // take_sheds().
  void set_live_record_cap(uint64_t cap);
  std::vector<pid_t> take_sheds() { return std::exchange(sheds_, {}); }

  // Automatic sampling's thresholds, from the live map's capacity and the
  // record cap: a process is switched when its heap records pass `share`,
  // and the process with the most when all records pass `total`; it then
  // keeps about `records` heap records.
  struct AutoSampling {
    uint64_t share = 0;
    uint64_t total = 0;
    uint64_t records = 0;
  };
  const AutoSampling& auto_sampling() const { return auto_sampling_; }

  // After `e` was applied to `p`, which held `records_before` records:
  // counts the change and applies both rules.
  void after_record(TracedProcess& p, const Event& e, uint64_t records_before);
  // Both of automatic sampling's rules over every process (after a resync).
  void check_auto_sampling();
  // Deletes from the kernel map the records `p`'s tracker thinned on
  // arrival (automatic sampling).
  void delete_thinned(TracedProcess& p);
  // TracerStats::live_records from every tracker (after whole record sets
  // were replaced), and each user's records.
  void recount_records();

  // Fair shares (decision fair-shares): one process, or the processes of
  // one user other than root, may hold `percent` of the live-record capacity
  // and of the stack map's `stack_entries` (100: no shares).
  void set_fair_share(uint32_t percent, uint64_t stack_entries);
  uint64_t process_share() const { return share_; }
  // Once a second (engine/fair_share.cc): unmarks the processes back under
  // 7/8 of their shares, and sets each one's limits in the kernel.
  void check_shares();
  // A process just attached: its stack-map allowance until the first look.
  void on_attach(TracedProcess& p);

 private:
  void update_auto_sampling();
  // Switches `p`'s heap to sampling at a larger mean, thinning its records.
  // False when it cannot (not allowed, nothing to thin).
  bool sample_automatically(TracedProcess& p, const char* reason);
  void sample_largest();
  const char* share_reason() const;
  void shed_largest();
  // A record change of `p` by `delta` records: its user's count.
  void count_user(const TracedProcess& p, int64_t delta);
  uint64_t user_records(const TracedProcess& p) const;
  // What `p`'s user may hold (decision fair-shares, "Two users"): its share,
  // and at most three quarters of what every other process leaves of the
  // capacity, so that users together never fill a map. share_ for root.
  // `mine`: user_records(p), when the caller has it.
  uint64_t user_share(const TracedProcess& p, uint64_t mine) const;
  uint64_t user_share(const TracedProcess& p) const { return user_share(p, user_records(p)); }
  // Whether `p`'s user (holding `mine`) is within 1% of its share.
  bool user_near_share(const TracedProcess& p, uint64_t mine) const;
  uint64_t user_stack_share(const TracedProcess& p) const;
  // `p` or its user passed its share of the live map: sample its heap, or
  // mark it over share. "process" or "user".
  void enforce_share(TracedProcess& p, const char* whose);
  void set_over_share(TracedProcess& p, const char* whose);
  // The live-map share's 7/8 check of check_shares().
  void unmark_under_share(TracedProcess& p);
  uint64_t stack_share() const;
  uint64_t user_stacks(const TracedProcess& p) const;
  void write_limits(TracedProcess& p, const lw_target& t, uint64_t stacks_held);
  void shed_other_kinds(TracedProcess& p);

  BpfSession& session_;
  ProcessTable& procs_;
  TracerStats& stats_;
  std::vector<pid_t> sheds_;
  // Above the cap with nothing left to shed: look again only once this many
  // more records were added (not one scan per event).
  uint64_t shed_blocked_at_ = 0;
  AutoSampling auto_sampling_;
  uint64_t sample_blocked_at_ = 0;  // as shed_blocked_at_, for sample_largest()
  uint32_t share_percent_ = 100;
  uint64_t share_ = 0;           // live records, per process and per user; 0: none
  uint64_t capacity_ = 0;        // the live-record capacity the shares are of
  uint64_t stack_entries_ = 0;
  uint64_t stacks_held_ = 0;     // every process's stacks in use at the last look
  std::unordered_map<uint32_t, uint64_t> user_records_;  // users other than root
  std::unordered_map<uint32_t, uint64_t> user_stacks_;   // ...their stacks in use at the last look
};

}  // namespace lw
