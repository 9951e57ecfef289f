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
#include <unordered_map>

#include "core/heap_tracker.h"
#include "core/leak_analysis.h"

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

  // The latest analysis of a site, or nullptr before its first sample.
  const SiteAnalysis* site(uint64_t stack_hash, uint32_t kind) const;
  LeakVerdict process_verdict(uint32_t kind) const { return per_kind_[kind].process_verdict(); }
  const AgeBuckets& process_ages(uint32_t kind) const { return per_kind_[kind].process_ages(); }
  size_t memory_bytes() const;
  const AnalysisParams& params() const { return per_kind_[0].params(); }
  // seconds_until_verdict() at the interval between the last two sample()
  // calls (the ring's spacing before there are two).
  double seconds_until_verdict(const LeakVerdict& v) const;

 private:
  static uint64_t key(uint64_t stack_hash, uint32_t kind);
  std::array<ProcessAnalysis, LW_KIND_MAX> per_kind_;
  std::unordered_map<uint64_t, SiteAnalysis> latest_;
  double last_t_s_ = -1;
  double interval_s_ = 0;  // between the last two samples; 0 before two
};

// CLOCK_MONOTONIC now, in ns: the clock bpf_ktime_get_ns() uses.
uint64_t monotonic_ns();

}  // namespace lw
