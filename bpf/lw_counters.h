/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The one list of the kernel side's per-CPU counters (docs/architecture.md,
 * "Counters"). Each entry gives, in order:
 *   the enum suffix (LW_CNT_<suffix>), its index in the per-CPU array (the
 *   ABI: never renumber), the name used in JSON, the Prometheus family it is
 *   exported in, the `reason` label it carries there (0: none), and what it
 *   counts.
 * The enum (here), the names and the export (core/accounting/counters.cc,
 * exporter/metrics.cc) are all generated from it, so a new counter cannot
 * be added without saying where it is exported; a unit test
 * (Counters.EveryCounterHasAKnownFamily) checks the exporter knows each family.
 *
 * Invariant, once the ring buffer is drained and targets are quiet:
 *   EVENTS_SEEN == EVENTS_DELIVERED + EVENTS_DROPPED_RINGBUF
 * Every path that gives up on an event or fails to update a map increments
 * one of these.
 */
#ifndef LEAKWATCH_COUNTERS_H
#define LEAKWATCH_COUNTERS_H

#define LW_FAM_FAILURES "leakwatch_bpf_failures_total"
#define LW_FAM_TRUNCATED "leakwatch_stacks_truncated_total"

#define LW_COUNTERS(X)                                                                          \
  X(EVENTS_SEEN, 0, "events_seen", "leakwatch_events_seen_total", 0,                            \
    "events the BPF side tried to emit")                                                        \
  X(EVENTS_DELIVERED, 1, "events_delivered", "leakwatch_events_delivered_total", 0,             \
    "events submitted to the ring buffer")                                                      \
  X(EVENTS_DROPPED_RINGBUF, 2, "events_dropped_ringbuf", "leakwatch_events_dropped_total",      \
    "ringbuf_full", "events lost: ring buffer full")                                            \
  X(LIVE_INSERT_FAILED, 3, "live_insert_failed", LW_FAM_FAILURES, "live_insert_failed",         \
    "live map full: allocation not tracked")                                                    \
  X(STACK_FAILED, 4, "stack_failed", LW_FAM_FAILURES, "stack_failed",                           \
    "the stack could not be read: stack unknown")                                               \
  X(STACK_MAP_FULL, 5, "stack_map_full", LW_FAM_FAILURES, "stack_map_full",                     \
    "stack not stored (stack map full): stack unknown")                                         \
  X(CTX_INSERT_FAILED, 6, "ctx_insert_failed", LW_FAM_FAILURES, "ctx_insert_failed",            \
    "entry context map full: call not seen")                                                    \
  X(FREE_UNKNOWN, 7, "free_unknown", "leakwatch_unmatched_frees_total", 0,                      \
    "free of an address not in the live map")                                                   \
  X(MISSED_FREE, 8, "missed_free", "leakwatch_missed_frees_total", 0,                           \
    "allocation returned a still-live address")                                                 \
  X(ALLOC_FAILED, 9, "alloc_failed", LW_FAM_FAILURES, "alloc_failed",                           \
    "allocator returned failure: not counted")                                                  \
  X(NESTED_SKIPPED, 10, "nested_skipped", "leakwatch_nested_calls_total", 0,                    \
    "nested allocator call not counted again")                                                  \
  X(RETURN_NO_CTX, 11, "return_no_ctx", LW_FAM_FAILURES, "return_no_ctx",                       \
    "return probe without a matching entry")                                                    \
  X(MUNMAP_UNKNOWN, 12, "munmap_unknown", LW_FAM_FAILURES, "munmap_unknown",                    \
    "munmap/mremap of an untracked range")                                                      \
  X(MUNMAP_PARTIAL, 13, "munmap_partial", LW_FAM_FAILURES, "munmap_partial",                    \
    "munmap trimmed a tracked region")                                                          \
  X(SCRATCH_FAILED, 14, "scratch_failed", LW_FAM_FAILURES, "scratch_failed",                    \
    "per-CPU scratch lookup failed")                                                            \
  X(CTX_STALE, 15, "ctx_stale", LW_FAM_FAILURES, "ctx_stale",                                   \
    "stale entry context replaced")                                                             \
  /* 16..23: overhead (sampling, governor). */                                                  \
  X(SAMPLE_SKIPPED, 16, "sample_skipped", "leakwatch_sampling_skipped_allocations_total", 0,    \
    "allocation not sampled: not recorded")                                                     \
  X(FREE_UNSAMPLED, 17, "free_unsampled", "leakwatch_unsampled_frees_total", 0,                 \
    "free in a sampled target of a block not in the live map (an unsampled block)")             \
  /* 24..27: CUDA. */                                                                           \
  X(CUDA_CALL_FAILED, 24, "cuda_call_failed", LW_FAM_FAILURES, "cuda_call_failed",              \
    "CUDA allocation returned an error: not counted")                                           \
  X(CUDA_NESTED_SKIPPED, 25, "cuda_nested_skipped", "leakwatch_cuda_nested_calls_total", 0,     \
    "driver call inside a runtime call: counted once")                                          \
  X(CUDA_CTX_RETIRED, 26, "cuda_ctx_retired", "leakwatch_cuda_context_released_total", 0,       \
    "records released by cuCtxDestroy")                                                         \
  X(CUDA_STATE_FAILED, 27, "cuda_state_failed", LW_FAM_FAILURES, "cuda_state_failed",           \
    "CUDA side map full: context/VMM state lost")                                               \
  /* 28: allocators. */                                                                         \
  X(RESIZE_UNKNOWN, 28, "resize_unknown", LW_FAM_FAILURES, "resize_unknown",                    \
    "in-place resize (xallocx, mi_expand) of an untracked block")                               \
  /* 29..30: calls left without returning (longjmp, exceptions; decision orphaned-calls). */ \
  X(CTX_ORPHANED, 29, "ctx_orphaned", LW_FAM_FAILURES, "ctx_orphaned",                          \
    "entry context of a call left without returning: reclaimed")                                \
  X(RET_PROBE_OMITTED, 30, "ret_probe_omitted", LW_FAM_FAILURES, "ret_probe_omitted",           \
    "allocator call entered past the kernel's uretprobe nesting limit: not counted")            \
  /* 31..39: the native unwinder (decision cfi-unwinding). */ \
  X(UNWIND_TRAMPOLINE_LOST, 31, "unwind_trampoline_lost", LW_FAM_FAILURES,                      \
    "unwind_trampoline_lost",                                                                   \
    "a return slot held the uretprobe trampoline and no return instance matched it")           \
  X(STACK_END_NO_CFI, 32, "stack_end_no_cfi", LW_FAM_TRUNCATED, "no_cfi",                       \
    "stack ended at code without call-frame information")                                       \
  X(STACK_END_DEPTH, 33, "stack_end_depth", LW_FAM_TRUNCATED, "depth",                          \
    "stack cut at LW_MAX_STACK_DEPTH frames")                                                   \
  X(STACK_END_TABLE_PENDING, 34, "stack_end_table_pending", LW_FAM_TRUNCATED, "table_pending",  \
    "stack ended in an object whose unwind table was not built yet")                            \
  X(STACK_END_MEMORY_BUDGET, 35, "stack_end_memory_budget", LW_FAM_TRUNCATED, "memory_budget",  \
    "stack ended in an object whose unwind table the memory bound refused")                     \
  X(STACK_END_UNMAPPED, 36, "stack_end_unmapped", LW_FAM_TRUNCATED, "unmapped",                 \
    "stack ended at a return address outside any executable mapping")                           \
  X(STACK_END_READ_FAILED, 37, "stack_end_read_failed", LW_FAM_TRUNCATED, "read_failed",        \
    "stack ended: user stack memory unreadable")                                                \
  X(STACK_END_VMA_BUSY, 38, "stack_end_vma_busy", LW_FAM_TRUNCATED, "vma_busy",                 \
    "stack ended: the mapping lookup could not take the mmap lock")                             \
  /* 39..41: Python frames (bpf/lw_python.bpf.h). */                                            \
  X(PY_READ_FAILED, 39, "python_read_failed", LW_FAM_TRUNCATED, "python_read_failed",           \
    "Python frames ended: interpreter memory unreadable")                                       \
  X(PY_DEPTH, 40, "python_depth", LW_FAM_TRUNCATED, "python_depth",                             \
    "Python frames cut at LW_MAX_PY_FRAMES")                                                    \
  X(PY_NO_THREAD, 41, "python_no_thread", "leakwatch_python_native_thread_allocations_total", 0,\
    "allocation in a CPython process on a thread without a Python thread state")              \
  /* 42: the brk wrapper's probe (decision brk-emulated-probe). */ \
  X(BRK_UNKNOWN, 42, "brk_unknown", LW_FAM_FAILURES, "brk_unknown",                             \
    "brk call whose previous break was unknown: its growth or trim not recorded")              \
  /* 43: walk reuse (decision walk-reuse). */ \
  X(WALKS_REUSED, 43, "walks_reused", "leakwatch_stack_walks_reused_total", 0,                   \
    "native stacks taken from an earlier walk from the same start whose reads all still hold")   \
  /* 44: user reads through the per-CPU window (decision user-read-window). */ \
  X(UREAD_WINDOW_FILLS, 44, "stack_window_fills", "leakwatch_stack_window_fills_total", 0,      \
    "blocks of user memory copied for the stack walks' reads (each serves the reads inside it)") \
  X(TENSOR_NESTED_SKIPPED, 45, "tensor_nested_skipped", "leakwatch_tensor_nested_calls_total", 0, \
    "libc calls made inside a tensor allocator call (alloc_cpu's posix_memalign, free_cpu's "     \
    "free): counted once, as the tensor")                                                         \
  X(TENSOR_FREE_UNKNOWN, 46, "tensor_free_unknown", LW_FAM_FAILURES, "tensor_free_unknown",      \
    "tensor frees of no tracked tensor (made before the tier was attached, or lost)")            \
  X(TENSOR_OTHER_DEVICE, 47, "tensor_other_device", "leakwatch_tensor_other_device_reports_total", 0, \
    "PyTorch memory reports for a device other than CUDA (its profiler's CPU reports): ignored") \
  /* 48: bursts (decision busy-processes). */ \
  X(DRAIN_REALLOC, 48, "drain_realloc", "leakwatch_drain_reallocs_total", 0,                     \
    "recorded blocks passed to realloc between two bursts: the record is retired (the new "       \
    "block is not followed), so an in-place resize reads as freed")                            \
  X(BRK_IN_DRAIN, 49, "brk_in_drain", "leakwatch_drain_brk_growths_total", 0,                   \
    "brk growths between two bursts, not recorded as kind mmap: the allocating probes being off, " \
    "they cannot be told from malloc's own, whose bytes the heap records count")

enum lw_counter {
#define LW_COUNTER_ENUM(e, v, name, family, reason, help) LW_CNT_##e = v,
  LW_COUNTERS(LW_COUNTER_ENUM)
#undef LW_COUNTER_ENUM
  LW_CNT_MAX = 50, /* size of the per-CPU array; unused slots read 0 */
};

/* The values are the ABI (they index the per-CPU array that user space
 * reads): each is pinned here, so an edit of the list cannot move one. */
#ifdef __cplusplus
#define LW_CNT_PIN(e, v) static_assert(LW_CNT_##e == (v), "counter " #e " moved")
#else
#define LW_CNT_PIN(e, v) _Static_assert(LW_CNT_##e == (v), "counter " #e " moved")
#endif
LW_CNT_PIN(EVENTS_SEEN, 0);
LW_CNT_PIN(EVENTS_DELIVERED, 1);
LW_CNT_PIN(EVENTS_DROPPED_RINGBUF, 2);
LW_CNT_PIN(LIVE_INSERT_FAILED, 3);
LW_CNT_PIN(STACK_FAILED, 4);
LW_CNT_PIN(STACK_MAP_FULL, 5);
LW_CNT_PIN(CTX_INSERT_FAILED, 6);
LW_CNT_PIN(FREE_UNKNOWN, 7);
LW_CNT_PIN(MISSED_FREE, 8);
LW_CNT_PIN(ALLOC_FAILED, 9);
LW_CNT_PIN(NESTED_SKIPPED, 10);
LW_CNT_PIN(RETURN_NO_CTX, 11);
LW_CNT_PIN(MUNMAP_UNKNOWN, 12);
LW_CNT_PIN(MUNMAP_PARTIAL, 13);
LW_CNT_PIN(SCRATCH_FAILED, 14);
LW_CNT_PIN(CTX_STALE, 15);
LW_CNT_PIN(SAMPLE_SKIPPED, 16);
LW_CNT_PIN(FREE_UNSAMPLED, 17);
LW_CNT_PIN(CUDA_CALL_FAILED, 24);
LW_CNT_PIN(CUDA_NESTED_SKIPPED, 25);
LW_CNT_PIN(CUDA_CTX_RETIRED, 26);
LW_CNT_PIN(CUDA_STATE_FAILED, 27);
LW_CNT_PIN(RESIZE_UNKNOWN, 28);
LW_CNT_PIN(CTX_ORPHANED, 29);
LW_CNT_PIN(RET_PROBE_OMITTED, 30);
LW_CNT_PIN(UNWIND_TRAMPOLINE_LOST, 31);
LW_CNT_PIN(BRK_UNKNOWN, 42);
LW_CNT_PIN(WALKS_REUSED, 43);
LW_CNT_PIN(UREAD_WINDOW_FILLS, 44);
LW_CNT_PIN(TENSOR_NESTED_SKIPPED, 45);
LW_CNT_PIN(TENSOR_FREE_UNKNOWN, 46);
LW_CNT_PIN(TENSOR_OTHER_DEVICE, 47);
LW_CNT_PIN(STACK_END_NO_CFI, 32);
LW_CNT_PIN(STACK_END_DEPTH, 33);
LW_CNT_PIN(STACK_END_TABLE_PENDING, 34);
LW_CNT_PIN(STACK_END_MEMORY_BUDGET, 35);
LW_CNT_PIN(STACK_END_UNMAPPED, 36);
LW_CNT_PIN(STACK_END_READ_FAILED, 37);
LW_CNT_PIN(STACK_END_VMA_BUSY, 38);
LW_CNT_PIN(PY_READ_FAILED, 39);
LW_CNT_PIN(PY_DEPTH, 40);
LW_CNT_PIN(PY_NO_THREAD, 41);
#undef LW_CNT_PIN

#endif /* LEAKWATCH_COUNTERS_H */
