/* SPDX-License-Identifier: Apache-2.0 */
// Applies each decoded ring-buffer event (core/accounting/event.h) to the
// process table: records to the heap trackers (and the record budget),
// execs, forks and map changes to the deferred work the tracer does after
// the poll, kills and GPU OOMs to the kill queue.
// Thread-safety: not thread-safe; runs on the tracer's thread, inside poll().
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/accounting/event.h"
#include "core/accounting/process_notices.h"
#include "engine/record_budget.h"
#include "engine/traced_process.h"
#include "view/process_view.h"

namespace lw {

class EventRouter {
 public:
  EventRouter(ProcessTable& procs, RecordBudget& budget, TracerStats& stats)
      : procs_(procs), budget_(budget), stats_(stats) {}

  // `e` of a process in the table; an event of another is counted, and an
  // untracked exec reported as a discovery.
  void route(DecodedEvent& e);

  // OOM kills and user-space SIGKILLs of traced processes since the last
  // call; the processes are still attached (their exit is reaped later).
  std::vector<KillNotice> take_kills() { return std::exchange(kills_, {}); }
  // Execs and forks seen since the last call (daemon discovery).
  std::vector<Discovery> take_discoveries() { return std::exchange(discoveries_, {}); }

 private:
  void on_record(TracedProcess& p, Event& e);
  void on_exit(TracedProcess& p, const ExitEvent& e);
  void on_exec(TracedProcess& p, const ExecEvent& e);
  void on_map_exec(TracedProcess& p, const MapExecEvent& e);
  void on_fork(TracedProcess& p, const ForkEvent& e);
  void on_oom_kill(TracedProcess& p, const OomKillEvent& e);
  void on_sigkill(TracedProcess& p, const SigkillEvent& e);
  void on_gpu_oom(TracedProcess& p, GpuOomEvent& e);
  // The device of CUDA events that carry none: the process's only one.
  int sole_device(TracedProcess& p);
  // A GPU OOM on the device of `e` (a CUDA device allocation) is over.
  void note_gpu_recovery(TracedProcess& p, const Event& e);
  void push_kill(KillNotice k);

  static constexpr size_t kMaxPendingKills = 4096;
  ProcessTable& procs_;
  RecordBudget& budget_;
  TracerStats& stats_;
  std::vector<Discovery> discoveries_;
  std::vector<KillNotice> kills_;  // bounded (kMaxPendingKills): `top` never takes them
};

}  // namespace lw
