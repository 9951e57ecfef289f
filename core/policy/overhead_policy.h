/* SPDX-License-Identifier: Apache-2.0 */
// The decisions of the overhead controls, pure and unit-tested: when an
// `auto` process escalates from light to full (GrowthWatch), and when the
// governor suspends or resumes a process's heap probes (GovernorState).
// The escalation's whole light/full/cooldown cycle is core/policy/escalation.h.
// The daemon's overhead controller (service/overhead_controller.cc) feeds
// them /proc and kernel counters and carries the decisions out. Thread-safety: not thread-safe; plain data.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string_view>
#include <utility>

#include "core/proc/procfs.h"

namespace lw {

// What an `auto` process's growth is measured on, from the text of
// /proc/PID/statm ("size resident shared text lib data dt", in pages):
// `data` (VmData: private writable mappings and the brk heap, touched or
// not) and `resident - shared` (anonymous resident memory). A leak of
// blocks that are never written grows VmData but hardly RSS; a leak inside
// memory reserved earlier grows RSS but not VmData. nullopt for malformed
// text.
struct StatmBytes {
  uint64_t data = 0;
  uint64_t anon_resident = 0;
};
std::optional<StatmBytes> parse_statm(std::string_view statm, uint64_t page_size);
StatmBytes statm_bytes(const StatmPages& pages, uint64_t page_size);

// A process "keeps growing" when its memory rose by at least growth_bytes
// within the window and is at its high now: a plateau or a drop after a
// spike does not escalate.
class GrowthWatch {
 public:
  void add(double t_s, uint64_t bytes, double window_s);
  bool growing(uint64_t growth_bytes) const;
  // How long the rise has lasted: from the latest sample at the window's
  // low to the newest sample (0 with fewer than two). The evidence an
  // escalation hands the heap analysis (core/analysis/analyzer.h, prime()).
  double rise_span_s() const;
  // How much it rose over that span: the newest sample minus the low.
  uint64_t rise_bytes() const;
  void clear() { samples_.clear(); }
  size_t size() const { return samples_.size(); }

 private:
  std::deque<std::pair<double, uint64_t>> samples_;  // (time, bytes), oldest first
};

struct GovernorParams {
  uint64_t max_hits_per_second = 50000;  // 0: no budget
  double backoff_initial_s = 60;
  double backoff_max_s = 3600;
  // Over the budget, bursts instead of a suspension (decision busy-processes).
  bool bursts = false;
};

// The budget of a process whose uprobe hits serialize across its threads
// (kernels before 6.14): a hit can hold up to min(threads, cpus) - 1 of the
// process's other threads, so the budget in hits a second, set for one
// thread, is divided by min(threads, cpus) (at least 1).
uint64_t thread_scaled_budget(uint64_t max_hits_per_second, uint64_t threads, uint64_t cpus);
// Whether a kernel of this release (uname -r) serializes uprobe hits: before
// 6.14, which looks up a hit's VMA without the mmap lock. A release that
// does not parse counts as serializing (the smaller budget).
bool release_serializes_uprobe_hits(const char* release);

// kBursts: over the budget with GovernorParams::bursts; the caller puts the
// process in bursts (core/policy/bursts.h) and stops observing it meanwhile.
enum class GovernorAction { kNone, kSuspend, kResume, kBursts };

// One process's governor. observe() takes the kernel's cumulative hit count
// (which keeps its value while suspended: the probes do not fire) once a
// second or so.
class GovernorState {
 public:
  GovernorAction observe(double t_s, uint64_t hits, const GovernorParams& p);
  // Suspends now, whatever the rate (the memory budget,
  // decision daemon-memory-bound), with the same backoff as a rate suspension:
  // doubled when it comes soon after a resume. Returns the wait. No-op (returns
  // the current wait) while already suspended.
  double suspend(double t_s, const GovernorParams& p);
  bool suspended() const { return suspended_; }
  double rate() const { return rate_; }
  double backoff_s() const { return backoff_s_; }

 private:
  std::optional<std::pair<double, uint64_t>> last_;
  double rate_ = 0;
  bool suspended_ = false;
  double resume_at_ = 0;
  double backoff_s_ = 0;       // the wait of the current or last suspension
  double calm_since_ = -1;     // resumed and under budget since (resets backoff)
};

}  // namespace lw
