/* SPDX-License-Identifier: Apache-2.0 */
// What the daemon holds for each traced process, measured once a second,
// and what is done when that is too much (decision process-cost; the pure
// rules are core/policy/process_cost.h): resolved stacks whose sites hold
// nothing live are pruned (bounded work a pass); a process whose cost
// beside its records passes its cap (limits.max_process_memory_bytes) is
// shed, as is the costliest one when those costs of all processes fill the
// room of the daemon's budget; and the live-record cap is lowered by what
// those costs take, so that limits.max_daemon_memory_bytes covers records
// and costs together.
// Thread-safety: not thread-safe; runs on the tracer's thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/bpf_session.h"
#include "engine/record_budget.h"
#include "engine/traced_process.h"
#include "view/process_view.h"

namespace lw {

class ProcessCostPass {
 public:
  ProcessCostPass(BpfSession& session, ProcessTable& procs, TracerStats& stats, RecordBudget& budget);

  // The live-record cap the daemon's budget allows (0: none); the record
  // budget is given it less what the processes' other costs take.
  void set_live_record_cap(uint64_t cap);
  // A pass, when one is due (after a poll's events).
  void run();
  // The process's figures at the last pass, for its snapshot.
  static void fill(ProcessSnapshot& snap, const TracedProcess& p);

  // Resolved stacks visited by the pruning a pass, all processes.
  static constexpr size_t kStacksVisitedPerPass = 16384;
  static constexpr uint64_t kPassIntervalNs = 1'000'000'000;

 private:
  static ProcessCost measure(const TracedProcess& p);
  // Prunes p's resolved stacks whose sites hold nothing live; at most
  // `budget` visited. Returns how many were visited.
  size_t prune_stacks(TracedProcess& p, size_t budget);
  void shed(TracedProcess& p, ShedReason why);
  void enforce_daemon_budget(uint64_t& capped_total);

  BpfSession& session_;
  ProcessTable& procs_;
  TracerStats& stats_;
  RecordBudget& budget_;
  uint64_t base_cap_ = 0;     // from the daemon's budget
  uint64_t applied_cap_ = 0;  // given to the record budget
  uint64_t due_ns_ = 0;
};

}  // namespace lw
