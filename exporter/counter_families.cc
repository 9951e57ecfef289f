// SPDX-License-Identifier: Apache-2.0
// The families the kernel counters are exported in (bpf/lw_counters.h names
// one per counter) and their help: a counter added to the list with a new
// family is given its help here (Counters.EveryCounterHasAKnownFamily).
#include <string_view>
#include <utility>

#include "core/accounting/counters.h"
#include "exporter/metrics.h"

namespace lw {

const char* counter_family_help(std::string_view family) {
  // Every family a kernel counter may be exported in (bpf/lw_counters.h).
  static constexpr std::pair<std::string_view, const char*> kFamilies[] = {
      {"leakwatch_events_seen_total", "Events the kernel side tried to emit (seen = delivered + dropped)."},
      {"leakwatch_events_delivered_total", "Events written to the ring buffer."},
      {"leakwatch_events_dropped_total", "Events lost before reaching the daemon, by reason."},
      {LW_FAM_FAILURES, "Kernel-side failures by reason (per-CPU counters summed); see docs/metrics.md."},
      {LW_FAM_TRUNCATED,
       "Stacks that ended before the outermost frame, by reason (no_cfi, depth, table_pending, ...)."},
      {"leakwatch_cuda_nested_calls_total",
       "CUDA driver allocations made inside a runtime call, counted once (at the runtime)."},
      {"leakwatch_cuda_context_released_total", "CUDA records released implicitly by cuCtxDestroy."},
      {"leakwatch_unmatched_frees_total",
       "Frees of addresses not in the live map (allocated before attach, or lost)."},
      {"leakwatch_missed_frees_total",
       "Allocations returned at a still-live address: the old record's free was missed."},
      {"leakwatch_nested_calls_total", "Allocator calls inside another accounted call, not counted twice."},
      {"leakwatch_sampling_skipped_allocations_total",
       "Allocations not recorded because byte sampling skipped them."},
      {"leakwatch_unsampled_frees_total",
       "Frees in sampled processes, or processes traced in bursts, of blocks not in the live map "
       "(blocks not recorded)."},
      {"leakwatch_drain_reallocs_total",
       "Recorded blocks passed to realloc between two bursts (decision busy-processes): retired, since the "
       "new block is not followed; an in-place resize reads as freed."},
      {"leakwatch_drain_brk_growths_total",
       "Program break growths between two bursts (decision busy-processes), not recorded as kind mmap: with "
       "the allocating probes off they cannot be told from malloc's own, which the heap records count."},
      {"leakwatch_python_native_thread_allocations_total",
       "Allocations in CPython processes made on threads without a Python thread state (native frames only)."},
      {"leakwatch_stack_walks_reused_total",
       "Native stacks taken from an earlier walk from the same start whose stack reads all still hold."},
      {"leakwatch_stack_window_fills_total",
       "Blocks of user memory copied for the stack walks' reads; each serves every read inside it."},
      {"leakwatch_tensor_nested_calls_total",
       "libc calls made inside a tensor allocator call (alloc_cpu's posix_memalign, free_cpu's free), "
       "counted once: as the tensor."},
      {"leakwatch_tensor_other_device_reports_total",
       "PyTorch memory reports for a device other than CUDA (its profiler's CPU reports): ignored."},
  };
  for (const auto& [name, help] : kFamilies)
    if (name == family) return help;
  return nullptr;
}

}  // namespace lw
