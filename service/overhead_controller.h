// SPDX-License-Identifier: Apache-2.0
// The overhead controller: carries out the overhead policies' decisions
// through the tracer (decisions light-mode-escalation, governor-kill-switch and
// daemon-memory-bound). The decisions themselves are pure and unit-tested in
// core/: escalation (core/policy/escalation.h), the governor
// (core/policy/overhead_policy.h GovernorState) and the memory budget
// (core/policy/memory_budget.h); this class reads what they need (statm, probe
// hits, budget sheds), feeds them, and attaches or detaches heap probes to
// match. Time is passed in (seconds since the daemon started), so the unit
// tests drive it with a fake tracer and a fake statm reader.
//
// Thread-safety: not thread-safe; only the consumer thread (Daemon::run)
// calls it, with the DaemonState and TracerControl it was built on.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <random>
#include <optional>

#include "core/policy/overhead_policy.h"
#include "service/daemon_state.h"
#include "service/tracer_control.h"

namespace lw {

class OverheadController {
 public:
  // Reads a process's memory for the escalation (/proc/PID/statm).
  using MemoryReader = std::function<std::optional<StatmBytes>(pid_t)>;

  OverheadController(DaemonState& state, TracerControl& tracer,
                     MemoryReader read_memory = read_proc_statm);

  // Governor and escalation, at most once a second (earlier calls return at
  // once); nothing while the kill switch is engaged.
  void tick(double now_s);
  // Engages or releases the kill switch: every target's accounting off,
  // every probe of every process closed in one teardown, the raw syscall
  // tracepoints off; on release the accounting and wanted heap probes come
  // back. The caller publishes afterwards.
  void apply_kill_switch(bool engage, const char* why);
  // The memory budget: the tracer's live-record cap from
  // limits.max_daemon_memory_bytes and the daemon's baseline RSS.
  void apply_memory_budget(uint64_t baseline_rss);
  // Suspends (through the governor's backoff) the heap tracing of the
  // processes the tracer shed at the live-record cap.
  void handle_budget_sheds(double now_s);

  // Where the bursts' offsets come from (uniform in [0, 1]); by default a
  // generator seeded at random. Tests give fixed draws.
  void set_offset_source(std::function<double()> draw) { draw_ = std::move(draw); }
  // Where a process's thread count comes from (tests; /proc/PID/stat's
  // num_threads by default), and the CPUs it is bounded by.
  void set_thread_source(std::function<uint64_t(pid_t)> threads, uint64_t cpus) {
    read_threads_ = std::move(threads);
    cpus_ = cpus;
  }

  // /proc/PID/statm, one read of at most 255 bytes.
  static std::optional<StatmBytes> read_proc_statm(pid_t pid);

 private:
  // Attaches or detaches pid's heap probes to match what is wanted now.
  void sync_heap(pid_t pid, TrackedProcess& t, const char* why);
  void govern(pid_t pid, TrackedProcess& t, double now_s, const GovernorParams& gp);
  // The tensor tier's own budget (decision tensor-tier).
  void govern_tensors(pid_t pid, TrackedProcess& t, double now_s, const GovernorParams& gp);
  void escalate(pid_t pid, TrackedProcess& t, double now_s);
  GovernorParams governor_params() const;
  // Bursts (decision busy-processes, engine side: Tracer::set_bursts).
  BurstParams burst_params(pid_t pid) const;
  void enter_bursts(pid_t pid, TrackedProcess& t, double now_s, uint64_t hits, const GovernorParams& gp);
  void leave_bursts(pid_t pid, TrackedProcess& t, bool exact_again);
  // Every call (the daemon loop's 0.1 s): the phase switches due.
  void tick_bursts(double now_s);
  void burst_step(pid_t pid, TrackedProcess& t, double now_s, const GovernorParams& gp);
  void close_burst(pid_t pid, TrackedProcess& t);
  // gp with its budget divided by t's threads where hits serialize.
  GovernorParams params_for(const TrackedProcess& t, GovernorParams gp) const;
  void refresh_threads(pid_t pid, TrackedProcess& t);
  void leave_drain_over_budget(pid_t pid, TrackedProcess& t, double now_s, const GovernorParams& gp);
  double uniform() { return draw_ ? draw_() : std::uniform_real_distribution<double>(0, 1)(rng_); }

  DaemonState& state_;
  TracerControl& tracer_;
  MemoryReader read_memory_;
  double last_tick_s_ = -1e18;
  std::mt19937_64 rng_{std::random_device{}()};  // burst offsets
  std::function<double()> draw_;                 // set_offset_source()
  std::function<uint64_t(pid_t)> read_threads_;  // set_thread_source()
  uint64_t cpus_ = 1;
};

}  // namespace lw
