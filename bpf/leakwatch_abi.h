/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The one ABI shared by the BPF programs (bpf/leakwatch.bpf.c) and the
 * daemon. Both sides include this file; nothing is copied. Every struct that
 * crosses the boundary has a fixed size checked at compile time on both
 * sides, and no implicit padding (explicit pad fields instead), so the kernel
 * and user space agree byte for byte and hash-map keys hash the same.
 */
#ifndef LEAKWATCH_ABI_H
#define LEAKWATCH_ABI_H

#ifdef __BPF__
/* vmlinux.h provides __u32/__u64. */
#else
#include <linux/types.h>
#endif

#define LW_ABI_VERSION 1

/* Deepest user stack we record. PERF_MAX_STACK_DEPTH is 127 by default. */
#define LW_MAX_STACK_DEPTH 127

/* What kind of memory a live record describes. Frees match only their own
 * kind, so a munmap can never retire a malloc block at the same address. */
enum lw_kind {
  LW_KIND_HEAP = 0,         /* malloc family, operator new */
  LW_KIND_MMAP = 1,         /* anonymous mmap/mremap and brk outside malloc */
  LW_KIND_CUDA_DEVICE = 2,  /* reserved for the GPU work */
  LW_KIND_CUDA_HOST = 3,
  LW_KIND_CUDA_MANAGED = 4,
  LW_KIND_MAX = 5,
};

/* Which allocator function a probe program stands for. The BPF side uses it
 * to decode arguments at entry and the result at return. */
enum lw_func {
  LW_FUNC_MALLOC = 0,        /* (size) -> ptr; also valloc, pvalloc */
  LW_FUNC_CALLOC = 1,        /* (n, size) -> ptr */
  LW_FUNC_REALLOC = 2,       /* (ptr, size) -> ptr */
  LW_FUNC_REALLOCARRAY = 3,  /* (ptr, n, size) -> ptr */
  LW_FUNC_POSIX_MEMALIGN = 4,/* (void **out, align, size) -> int */
  LW_FUNC_ALIGNED = 5,       /* (align, size) -> ptr: aligned_alloc, memalign */
  LW_FUNC_NEW = 6,           /* (size, ...) -> ptr: every operator new variant */
  LW_FUNC_FREE = 7,          /* (ptr): free, cfree */
  LW_FUNC_SBRK = 8,          /* (increment) -> old break; kind mmap */
  /* Allocator-specific entry points (jemalloc, tcmalloc, mimalloc: see
   * daemon/core/allocator_probes.cc for which symbol maps to which). Most
   * of them reuse 0..7: mallocx(size, flags) is MALLOC, rallocx REALLOC,
   * sdallocx/dallocx/tc_free_sized/mi_free_size FREE, mi_mallocn CALLOC,
   * mi_malloc_aligned(size, align) MALLOC. Only new argument layouts or
   * new semantics get a value here. */
  LW_FUNC_XALLOCX = 9,       /* (ptr, size, extra, flags) -> new usable size, in place */
  LW_FUNC_EXPAND = 10,       /* (ptr, size) -> ptr (resized in place) or NULL (unchanged) */
  LW_FUNC_HEAP_MALLOC = 11,  /* (heap, size) -> ptr: mi_heap_malloc, mi_heap_zalloc */
  LW_FUNC_HEAP_CALLOC = 12,  /* (heap, n, size) -> ptr: mi_heap_calloc, mi_heap_mallocn */
  LW_FUNC_HEAP_REALLOC = 13, /* (heap, ptr, size) -> ptr: mi_heap_realloc */
  LW_FUNC_REALLOCF = 14,     /* (ptr, size) -> ptr; ptr is freed even when it fails */
  /* The libc system-call wrappers, probed after their `syscall`
   * instruction (one probe sees the arguments, still in their registers,
   * and the result in %rax; docs/architecture.md, decision 29). Bits 0..7
   * of the attach cookie hold the value; for LW_FUNC_SYS_BRK bits 16..63
   * hold the signed distance from the probe to libc's `__curbrk`, the
   * break before the call. */
  LW_FUNC_SYS_MMAP = 15,
  LW_FUNC_SYS_MUNMAP = 16,
  LW_FUNC_SYS_MREMAP = 17,
  LW_FUNC_SYS_BRK = 18,
  LW_FUNC_DL_STATE = 19,     /* ld.so's _dl_debug_state: the link map changed (dlopen) */
  /* 20..31: free. 32..63: CUDA (see bpf/cuda.bpf.h and
   * docs/architecture.md, "GPU memory"). The name says how the arguments
   * are decoded; several exported symbols share one value. */
  LW_FUNC_CUDA_FIRST = 32,
  /* Runtime (libcudart, or linked into the executable). Return probes. */
  LW_FUNC_CUDART_MALLOC = 32,         /* (void **out, size): cudaMalloc, cudaMallocAsync,
                                       * cudaMallocFromPoolAsync -> device */
  LW_FUNC_CUDART_MALLOC_MANAGED = 33, /* (void **out, size, flags) -> managed */
  LW_FUNC_CUDART_MALLOC_HOST = 34,    /* (void **out, size[, flags]): cudaMallocHost,
                                       * cudaHostAlloc -> host */
  LW_FUNC_CUDART_MALLOC_PITCH = 35,   /* (void **out, size_t *pitch, width, height) */
  LW_FUNC_CUDART_MALLOC_3D = 36,      /* (cudaPitchedPtr *out, cudaExtent by value) */
  LW_FUNC_CUDART_FREE = 37,           /* (ptr[, stream]): cudaFree, cudaFreeAsync; entry only */
  LW_FUNC_CUDART_FREE_HOST = 38,      /* (ptr): cudaFreeHost; entry only */
  LW_FUNC_CUDART_SET_DEVICE = 39,     /* (int device); entry only */
  /* Driver (libcuda.so.1). */
  LW_FUNC_CU_MEM_ALLOC = 40,          /* (CUdeviceptr *out, size): cuMemAlloc_v2,
                                       * cuMemAllocAsync, cuMemAllocFromPoolAsync */
  LW_FUNC_CU_MEM_ALLOC_MANAGED = 41,  /* (CUdeviceptr *out, size, flags) */
  LW_FUNC_CU_MEM_ALLOC_HOST = 42,     /* (void **out, size[, flags]): cuMemAllocHost_v2,
                                       * cuMemHostAlloc */
  LW_FUNC_CU_MEM_ALLOC_PITCH = 43,    /* (CUdeviceptr *out, size_t *pitch, width, height, elt) */
  LW_FUNC_CU_MEM_FREE = 44,           /* (ptr[, stream]): cuMemFree_v2, cuMemFreeAsync */
  LW_FUNC_CU_MEM_FREE_HOST = 45,      /* (ptr) */
  LW_FUNC_CU_MEM_CREATE = 46,         /* (handle *out, size, prop, flags): VMM physical memory */
  LW_FUNC_CU_MEM_RELEASE = 47,        /* (handle) */
  LW_FUNC_CU_MEM_MAP = 48,            /* (va, size, offset, handle, flags) */
  LW_FUNC_CU_MEM_UNMAP = 49,          /* (va, size) */
  LW_FUNC_CU_CTX_CREATE = 50,         /* (CUcontext *out, flags, dev): cuCtxCreate_v2 */
  LW_FUNC_CU_CTX_CREATE_V4 = 51,      /* (CUcontext *out, params, flags, dev): cuCtxCreate_v4 */
  LW_FUNC_CU_PRIMARY_CTX_RETAIN = 52, /* (CUcontext *out, dev) */
  LW_FUNC_CU_CTX_DESTROY = 53,        /* (ctx): cuCtxDestroy_v2, cuCtxDestroy */
  LW_FUNC_CU_CTX_SET_CURRENT = 54,    /* (ctx) */
  LW_FUNC_CU_CTX_PUSH = 55,           /* (ctx): cuCtxPushCurrent_v2 */
  LW_FUNC_CU_CTX_POP = 56,            /* (CUcontext *out): cuCtxPopCurrent_v2 */
  LW_FUNC_CUDA_LAST = 63,
  LW_FUNC_MAX = 64,
};

/* Entry contexts are keyed by (tid, class): one outstanding accounted call
 * per class and thread. Calls nested inside an accounted call of the same
 * class (operator new -> malloc, memalign -> malloc, tail calls) are not
 * accounted again; syscalls made inside an allocator call are its own
 * business (glibc's mmap of a large chunk). */
enum lw_ctx_class {
  LW_CTX_ALLOC = 0,
  LW_CTX_SYSCALL = 1,
  LW_CTX_NEW = 2,   /* operator new in flight: entry-only, see lw_new_enter */
  /* CUDA: one class per library, so a runtime call (cudaMalloc) and the
   * driver call it makes (cuMemAlloc_v2) are told apart: the driver call
   * deeper than a runtime call in flight is not counted again. */
  LW_CTX_CUDA_RUNTIME = 3,
  LW_CTX_CUDA_DRIVER = 4,
  LW_CTX_MAX = 5,
};

/* Per-CPU counters, indexed by this enum. Every path that gives up on an
 * event or fails to update a map increments one of these.
 * Invariant, once the ring buffer is drained and targets are quiet:
 *   EVENTS_SEEN == EVENTS_DELIVERED + EVENTS_DROPPED_RINGBUF */
enum lw_counter {
  LW_CNT_EVENTS_SEEN = 0,          /* events the BPF side tried to emit */
  LW_CNT_EVENTS_DELIVERED = 1,     /* submitted to the ring buffer */
  LW_CNT_EVENTS_DROPPED_RINGBUF = 2, /* ring buffer full */
  LW_CNT_LIVE_INSERT_FAILED = 3,   /* live map full: allocation not tracked */
  LW_CNT_STACK_FAILED = 4,         /* bpf_get_stack failed: stack unknown */
  LW_CNT_STACK_MAP_FULL = 5,       /* stack not stored: stack unknown */
  LW_CNT_CTX_INSERT_FAILED = 6,    /* entry context map full: call not seen */
  LW_CNT_FREE_UNKNOWN = 7,         /* free of an address not in the live map */
  LW_CNT_MISSED_FREE = 8,          /* alloc returned a still-live address */
  LW_CNT_ALLOC_FAILED = 9,         /* allocator returned failure: not counted */
  LW_CNT_NESTED_SKIPPED = 10,      /* nested allocator call not counted again */
  LW_CNT_RETURN_NO_CTX = 11,       /* return probe without a matching entry */
  LW_CNT_MUNMAP_UNKNOWN = 12,      /* munmap/mremap of an untracked range */
  LW_CNT_MUNMAP_PARTIAL = 13,      /* munmap trimmed a tracked region */
  LW_CNT_SCRATCH_FAILED = 14,      /* per-CPU scratch lookup failed */
  LW_CNT_CTX_STALE = 15,           /* stale entry context replaced */
  /* 16..23: overhead (sampling, governor). */
  LW_CNT_SAMPLE_SKIPPED = 16,      /* allocation not sampled: not recorded */
  LW_CNT_FREE_UNSAMPLED = 17,      /* free not in the live map of a sampled target:
                                    * an unsampled block (expected), not an error */
  /* 24..27: CUDA. */
  LW_CNT_CUDA_CALL_FAILED = 24,    /* CUDA allocation returned an error: not counted */
  LW_CNT_CUDA_NESTED_SKIPPED = 25, /* driver call inside a runtime call: counted once */
  LW_CNT_CUDA_CTX_RETIRED = 26,    /* records released by cuCtxDestroy */
  LW_CNT_CUDA_STATE_FAILED = 27,   /* CUDA side map full: context/VMM state lost */
  /* 28..31: allocators. Unused slots read 0. */
  LW_CNT_RESIZE_UNKNOWN = 28,      /* in-place resize (xallocx, mi_expand) of an untracked block */
  /* 29..31: unwinding (longjmp, exceptions; see lw_ctx_orphaned()). */
  LW_CNT_CTX_ORPHANED = 29,        /* entry context of a call left without returning
                                      (longjmp, exception, thread exit mid-call): reclaimed */
  LW_CNT_RET_PROBE_OMITTED = 30,   /* allocator call entered past the kernel's uretprobe
                                      nesting limit: its return is never seen, not counted */
  LW_CNT_MAX = 32,
};

/* Live map key. (tgid, kind, addr): 16 bytes, no padding. */
struct lw_live_key {
  __u32 tgid;
  __u32 kind;
  __u64 addr;
};

/* Live map value. `alloc_ns` (bpf_ktime_get_ns at the allocation) is also
 * the record's identity: events carry it so that a replayed or late event
 * can never retire a newer record at the same address after a resync. */
struct lw_live_val {
  __u64 size;
  __u64 alloc_ns;
  __u64 stack_hash; /* key into the stacks map; 0 = unknown stack */
};

/* lw_stack.flags */
#define LW_STACK_RET_HINT 1u         /* ips[1] is *(user sp) at a syscall, see below */
#define LW_STACK_RET_HINT_TRUSTED 2u /* ips[1] is the return address of operator new */

/* Stored stack: user addresses, leaf first. With LW_STACK_RET_HINT, ips[0]
 * is the ip inside a syscall wrapper and ips[1] the word at the user sp,
 * which is the return address into the wrapper's caller when the wrapper
 * has no frame (glibc's mmap). Frame-pointer walking skips that caller, so
 * the daemon keeps the hint if it validates as a return address. */
struct lw_stack {
  __u32 nr;
  __u32 flags;
  __u64 ips[LW_MAX_STACK_DEPTH];
};

struct lw_ctx_key {
  __u32 tid;
  __u32 cls;
};

struct lw_ctx_val {
  __u64 sp;        /* user sp at entry: nesting and tail-call detection */
  __u64 ret_addr;  /* *(sp) at entry: tells a tail call from a stale ctx */
  __u64 start_ns;
  __u64 arg0;      /* old ptr (realloc), out ptr (posix_memalign), addr (syscalls) */
  __u64 arg1;      /* size */
  __u64 arg2;      /* syscall: old size / flags */
  __u32 func;      /* enum lw_func, or syscall nr */
  __u32 flags;     /* LW_CTXF_* */
};

/* lw_ctx_val.flags */
#define LW_CTXF_UNSAMPLED 1u /* byte sampling skipped this call: not recorded */
#define LW_CTXF_NO_RETURN 2u /* the kernel installs no return probe (nesting limit) */

/* Per-target state, written by the daemon when it attaches. */
enum lw_target_flags {
  LW_TARGET_HEAP = 1u << 0, /* uprobes on the malloc family are attached */
  LW_TARGET_MMAP = 1u << 1, /* account anonymous mmap/munmap/mremap/brk */
  /* Set by the exec tracepoint: nothing is accounted, but executable
   * mappings are still reported so the daemon can attach to the new image's
   * libc as soon as the loader maps it. */
  LW_TARGET_EXEC_PENDING = 1u << 2,
  LW_TARGET_FOLLOW_FORKS = 1u << 3, /* report forked children (LW_EV_FORK) */
  /* Set by the exit tracepoint (nothing else is left set): the exit was
   * reported. An entry without it at the fork of a new process on its pid
   * belongs to a process whose exit was never seen. */
  LW_TARGET_EXITED = 1u << 4,
  /* Probes on the process's libc system-call wrappers are attached
   * (LW_FUNC_SYS_*): the raw syscall tracepoints, if attached for another
   * process, leave this one alone, so no call is counted twice. */
  LW_TARGET_SYSCALL_SITES = 1u << 5,
  /* CUDA runtime/driver probes are attached: account them. Independent of
   * LW_TARGET_HEAP (GPU allocations are rare calls, traced in every mode). */
  LW_TARGET_CUDA = 1u << 8,
};

/* lw_target.seen, written by the BPF side only. */
#define LW_SEEN_CUDA 1u /* the process made a CUDA record: purge CUDA state at exit/exec */

struct lw_target {
  __u32 flags;
  __u32 seen;      /* LW_SEEN_*; the daemon writes 0 */
  __u64 lost;      /* events for this tgid lost in the ring buffer */
  __u64 start_ns;  /* process start time (task->start_time), identity check */
  /* Overhead issue (owned there): */
  __u64 sample_mean; /* byte-sampling mean in bytes (bpf/lw_sampling.h); 0 = record all */
  __u64 hits;        /* allocator probe hits (entries), for the governor's rate */
};

enum lw_event_type {
  LW_EV_ALLOC = 1,     /* new live record (addr, size, stack) */
  LW_EV_FREE = 2,      /* live record retired (addr, size, alloc_ns) */
  LW_EV_EXIT = 3,      /* the process (thread group) exited */
  LW_EV_EXEC = 4,      /* the process exec'd: its image and heap are gone */
  LW_EV_MAP_EXEC = 5,  /* an executable file mapping appeared (dlopen) */
  LW_EV_FORK = 6,      /* a target forked a process: `addr` is the child's pid */
};

/* Event flags. */
#define LW_EVF_UNTRACKED 4u /* EXEC of a process that is not a target (discovery) */
#define LW_EVF_STALE_EXIT 8u /* EXIT of a target found gone at the fork of a new
                                  * process on its pid (its own exit went unreported) */
#define LW_EVF_REPLACED 1u /* ALLOC retired a still-live record (missed free) */
/* CUDA events: bits 8..15 hold the device the record is attributed to,
 * plus one (0 = unknown). See lw_event_device(). */
#define LW_EVF_DEVICE_SHIFT 8
#define LW_EVF_DEVICE_MASK 0xff00u
#define LW_EVF_PARTIAL 2u  /* FREE of part of the region at `addr`: `size` bytes
                            * cut at offset `stack_hash` from its start */

/* One ring-buffer record: 56 bytes, fixed size. */
struct lw_event {
  __u16 type;       /* enum lw_event_type */
  __u16 flags;      /* LW_EVF_* */
  __u32 tgid;
  __u32 tid;
  __u32 kind;       /* enum lw_kind */
  __u64 ts_ns;      /* bpf_ktime_get_ns when emitted */
  __u64 addr;
  __u64 size;       /* ALLOC: bytes; FREE: bytes retired */
  __u64 alloc_ns;   /* identity of the record allocated or retired */
  __u64 stack_hash; /* ALLOC only */
};

/* ---- CUDA state (bpf/cuda.bpf.h) ---- */

#define LW_CUDA_CTX_STACK 4

/* Per thread: the driver's context stack as far as we saw it, and the
 * device current on the thread (cudaSetDevice, or the device of the current
 * context). device is -1 until known. */
struct lw_cuda_thread {
  __u64 ctx[LW_CUDA_CTX_STACK];
  __u32 depth;      /* entries used in ctx[]; 0 = no context seen */
  __s32 device;
};

/* Per live CUDA record (same key as the live map): where it was made, and
 * for a VMM physical handle its mapping state. */
struct lw_cuda_rec {
  __u64 ctx;        /* context current at the allocation; 0 = unknown */
  __s32 device;     /* -1 = unknown */
  __u32 vmm_maps;   /* VMM handle: live cuMemMap mappings of it */
  __u32 vmm_released; /* VMM handle: cuMemRelease seen, retired at the last unmap */
  __u32 pad;
};

/* (tgid, address): a VMM mapping's virtual address, or a context. */
struct lw_cuda_map_key {
  __u32 tgid;
  __u32 pad;
  __u64 va;
};

/* A VMM mapping: the physical handle mapped at a virtual address. */
struct lw_cuda_map_val {
  __u64 handle;
  __u64 size;
};

#ifdef __cplusplus
static_assert(sizeof(struct lw_cuda_thread) == 40, "lw_cuda_thread ABI");
static_assert(sizeof(struct lw_cuda_rec) == 24, "lw_cuda_rec ABI");
static_assert(sizeof(struct lw_cuda_map_key) == 16, "lw_cuda_map_key ABI");
static_assert(sizeof(struct lw_cuda_map_val) == 16, "lw_cuda_map_val ABI");
#else
_Static_assert(sizeof(struct lw_cuda_thread) == 40, "lw_cuda_thread ABI");
_Static_assert(sizeof(struct lw_cuda_rec) == 24, "lw_cuda_rec ABI");
_Static_assert(sizeof(struct lw_cuda_map_key) == 16, "lw_cuda_map_key ABI");
_Static_assert(sizeof(struct lw_cuda_map_val) == 16, "lw_cuda_map_val ABI");
#endif

#ifdef __cplusplus
static_assert(sizeof(struct lw_live_key) == 16, "lw_live_key ABI");
static_assert(sizeof(struct lw_live_val) == 24, "lw_live_val ABI");
static_assert(sizeof(struct lw_stack) == 8 + 8 * LW_MAX_STACK_DEPTH, "lw_stack ABI");
static_assert(sizeof(struct lw_ctx_key) == 8, "lw_ctx_key ABI");
static_assert(sizeof(struct lw_ctx_val) == 56, "lw_ctx_val ABI");
static_assert(sizeof(struct lw_target) == 40, "lw_target ABI");
static_assert(sizeof(struct lw_event) == 56, "lw_event ABI");
#else
_Static_assert(sizeof(struct lw_live_key) == 16, "lw_live_key ABI");
_Static_assert(sizeof(struct lw_live_val) == 24, "lw_live_val ABI");
_Static_assert(sizeof(struct lw_stack) == 8 + 8 * LW_MAX_STACK_DEPTH, "lw_stack ABI");
_Static_assert(sizeof(struct lw_ctx_key) == 8, "lw_ctx_key ABI");
_Static_assert(sizeof(struct lw_ctx_val) == 56, "lw_ctx_val ABI");
_Static_assert(sizeof(struct lw_target) == 40, "lw_target ABI");
_Static_assert(sizeof(struct lw_event) == 56, "lw_event ABI");
#endif

#endif /* LEAKWATCH_ABI_H */
