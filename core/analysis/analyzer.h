/* SPDX-License-Identifier: Apache-2.0 */
// Feeds one traced process's heap tracker into the leak analysis: per kind
// of memory, a ProcessAnalysis sampled at the configured interval with the
// live bytes and age structure of every site. Sites are keyed by the
// kernel's stack hash (per process), so no symbolization is needed to
// sample; snapshots map the verdicts onto their (merged) sites.
// Thread-safety: not thread-safe; owned by the consumer thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <unordered_map>

#include "core/accounting/heap_tracker.h"
#include "core/analysis/leak_analysis.h"

namespace lw {

struct SiteAnalysis {
  AgeBuckets ages;
  LeakVerdict verdict;
};

class ProcessAnalyzer {
 public:
  explicit ProcessAnalyzer(const AnalysisParams& params = {});

  // Samples the heap now (t_s: monotonic seconds; now_ns: the kernel's
  // CLOCK_MONOTONIC in ns, the clock of alloc_ns).
  void sample(const HeapTracker& heap, double t_s, uint64_t now_ns);
  // The process escalated at t_s after its memory had been rising for
  // rise_span_s at rise_rate bytes/s (EscalationState::growth_span_s,
  // growth_rate_bytes_per_s): the heap samples from now on get an early
  // analysis as described above. No-op when the rise is too short to
  // shorten anything, or primed_min_span_s is 0.
  void prime(double t_s, double rise_span_s, double rise_rate_bytes_per_s);
  // The early analysis's minimum span, while one runs (tests, logs); 0 else.
  double primed_span_s() const { return early_ ? early_->analysis.params().min_span_s : 0; }

  // The latest analysis of a site, or nullptr before its first sample.
  const SiteAnalysis* site(uint64_t stack_hash, uint32_t kind) const;
  LeakVerdict process_verdict(uint32_t kind) const;
  const AgeBuckets& process_ages(uint32_t kind) const { return per_kind_[kind].process_ages(); }
  size_t memory_bytes() const;
  const AnalysisParams& params() const { return per_kind_[0].params(); }
  // seconds_until_verdict() at the interval between the last two sample()
  // calls (the ring's spacing before there are two).
  double seconds_until_verdict(const LeakVerdict& v) const;

 private:
  static uint64_t key(uint64_t stack_hash, uint32_t kind);
  // The heap's early analysis after an escalation, until started_t_s +
  // the main min_span_s.
  struct Early {
    ProcessAnalysis analysis;
    double started_t_s = 0;
    double rise_rate = 0;  // bytes/s before the escalation
    LeakVerdict process;  // its process verdict at the latest sample
  };
  std::array<ProcessAnalysis, LW_KIND_MAX> per_kind_;
  std::optional<Early> early_;
  std::unordered_map<uint64_t, SiteAnalysis> latest_;
  double last_t_s_ = -1;
  double interval_s_ = 0;  // between the last two samples; 0 before two
};

}  // namespace lw
