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

#define LW_ABI_VERSION 3

#include "lw_unwind_abi.h"

/* What kind of memory a live record describes. Frees match only their own
 * kind, so a munmap can never retire a malloc block at the same address. */
enum lw_kind {
  LW_KIND_HEAP = 0,         /* malloc family, operator new */
  LW_KIND_MMAP = 1,         /* anonymous mmap/mremap and brk outside malloc */
  LW_KIND_CUDA_DEVICE = 2,  /* reserved for the GPU work */
  LW_KIND_CUDA_HOST = 3,
  LW_KIND_CUDA_MANAGED = 4,
  /* The tensor tier (decision tensor-tier): tensors as the framework's own
   * allocator hands them out. Kinds of their own, so a tensor's bytes are
   * never counted again as the libc block beneath it. */
  LW_KIND_TENSOR_CPU = 5,   /* PyTorch c10::alloc_cpu / free_cpu */
  LW_KIND_TENSOR_GPU = 6,   /* a framework pool's GPU tensors: PyTorch's CUDA caching
                             * allocator, TensorFlow's BFC; the device in the event flags */
  LW_KIND_MAX = 7,
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
   * core/probes/allocator_probes.cc for which symbol maps to which). Most
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
   * and the result in %rax; decision libc-syscall-wrappers). Bits 0..7
   * of the attach cookie hold the value; for LW_FUNC_SYS_BRK bits 16..63
   * hold the signed distance from the probe to libc's `__curbrk`, the
   * break before the call, where the probe runs before glibc stores the
   * new break (the site right after `syscall`, single-stepped), or 0
   * where it runs after (the emulated result check;
   * decision brk-emulated-probe): the break before the call is then
   * lw_target.brk_last. */
  LW_FUNC_SYS_MMAP = 15,  /* bit 8 of the cookie: LW_COOKIE_SHARED */
  LW_FUNC_SYS_MUNMAP = 16,
  LW_FUNC_SYS_MREMAP = 17,
  LW_FUNC_SYS_BRK = 18,
  LW_FUNC_DL_STATE = 19,     /* ld.so's _dl_debug_state: the link map changed (dlopen) */
  /* The tensor tier (bpf/lw_tensor.bpf.h; decision tensor-tier). */
  LW_FUNC_TENSOR_CPU_ALLOC = 20, /* c10::alloc_cpu(size) -> ptr (NULL for size 0) */
  LW_FUNC_TENSOR_CPU_FREE = 21,  /* c10::free_cpu(ptr); entry only */
  /* c10::reportMemoryUsageToProfiler(ptr, int64 delta, total_allocated,
   * total_reserved, Device): +size at a block's malloc, -size at its free.
   * Entry only. Device {int8 type, int8 index} by value in %r8. */
  LW_FUNC_TORCH_REPORT = 22,
  LW_FUNC_TORCH_REPORT_SHORT = 23, /* (ptr, int64 delta, Device): releases without the totals */
  LW_FUNC_BFC_ALLOC = 24,    /* BFCAllocator::AllocateRaw(this, alignment, num_bytes[, attr]) -> ptr */
  LW_FUNC_BFC_FREE = 25,     /* BFCAllocator::DeallocateRaw(this, ptr); entry only */
  LW_FUNC_TORCH_REPORT_TOTALS = 26, /* the same hook where the USDTs record the tensors:
                                     * only the pool's totals are kept */
  /* 27..31: free. 32..63: CUDA (see bpf/lw_cuda.bpf.h and
   * decision cuda-memory). The name says how the arguments
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
  /* A tensor allocator call in flight (c10::alloc_cpu, BFC AllocateRaw):
   * the libc calls it makes are not recorded again as heap (decision
   * tensor-tier, "Counted once"). */
  LW_CTX_TENSOR = 5,
  LW_CTX_MAX = 6,
};

/* Per-CPU counters, indexed by enum lw_counter, generated from the one
 * list in lw_counters.h (name, value, metric family, help). */
#include "lw_counters.h"

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

/* Reserved stack hashes (no real stack hashes to them): 0, the stack is
 * unknown; LW_STACK_HEAP_REGROWN, a brk growth at or below the highest
 * break seen, recorded without a stack walk (decision brk-emulated-probe); 2,
 * internal to bpf/lw_stack.bpf.h (LW_STACK_HASH_MAP_FULL, never stored in a
 * record). */
#define LW_STACK_HEAP_REGROWN 1ull

/* How a frame of a stored stack was found (lw_stack.how[i]). */
enum lw_unwound {
  LW_UNWOUND_LEAF = 0,  /* the probe's own pc (frame 0) */
  LW_UNWOUND_CFI = 1,   /* return address found through the object's call-frame information */
  LW_UNWOUND_FP = 2,    /* through the frame pointer (no table for the code above it) */
  LW_UNWOUND_HINT = 3,  /* operator new's return address, read at its entry */
};

/* Why a stored stack ends (lw_stack.flags & LW_STACK_END_MASK). */
enum lw_stack_end {
  LW_END_COMPLETE = 0,      /* reached the outermost frame (_start, thread start) */
  LW_END_NO_CFI = 1,        /* code without call-frame information (JIT, stripped .eh_frame)
                             * and no valid frame pointer above it */
  LW_END_DEPTH = 2,         /* LW_MAX_STACK_DEPTH frames */
  LW_END_TABLE_PENDING = 3, /* the object's table was not built yet, and the frame-pointer
                             * walk stopped */
  LW_END_MEMORY_BUDGET = 4, /* the object's table was refused by the unwind-table memory
                             * bound, and the frame-pointer walk stopped */
  LW_END_UNMAPPED = 5,      /* a return address outside any executable mapping */
  LW_END_READ_FAILED = 6,   /* user stack memory could not be read */
  LW_END_VMA_BUSY = 7,      /* the mapping lookup could not take the mmap lock */
  LW_END_FRAME_POINTERS = 8,/* captured by the kernel's frame-pointer walk (unwinding off):
                             * the end is unknown */
  LW_END_PYTHON = 9,        /* the first frame in CPython's evaluation loop: the thread's
                             * Python frames, read whole, stand for the native frames above
                             * (decision python-frames, "Where the native walk stops") */
};
#define LW_STACK_END_MASK 0xffu
#define LW_STACK_USES_FP 0x100u /* at least one frame was found through a frame pointer */

/* Deepest user stack stored (native frames). */
#define LW_MAX_STACK_DEPTH 96

/* One frame: the object's identity (the inode of the mapped file, as the
 * kernel's vma has it) and the file offset of the address in it, so that
 * one stack is one entry whichever process runs it and wherever the object
 * is mapped. A frame outside any file mapping (JIT code) has ino 0 and the
 * absolute address split over dev (high half) and off (low half). */
struct lw_frame {
  __u64 ino;
  __u32 dev;   /* the inode's super block s_dev (MKDEV(major, minor) as the kernel encodes it) */
  __u32 off;   /* file offset */
};

/* ---- Python frames (bpf/lw_python.bpf.h; decision python-frames) ---- */

/* Deepest Python frame chain stored, innermost first. */
#define LW_MAX_PY_FRAMES 64

/* One CPython frame as read at the allocation: the code object's address
 * and the instruction's byte offset in its bytecode. The daemon turns them
 * into function, file and line from the target's memory. */
struct lw_py_frame {
  __u64 code;    /* PyCodeObject * */
  __s32 lasti;   /* byte offset of the current instruction (-2: not started) */
  __u16 sig;     /* low 16 bits of co_firstlineno: a code object freed and its
                  * address reused by another is a different frame (and stack) */
  __u16 flags;   /* LW_PYF_* */
};

/* lw_py_frame.flags */
#define LW_PYF_ENTRY 1u /* the first frame this evaluation loop ran: the native
                         * _PyEval_EvalFrameDefault frame that runs it owns the
                         * frames up to and including this one */

/* Why the Python part of a stored stack ends (lw_stack.py_flags & LW_PY_END_MASK). */
enum lw_py_end {
  LW_PY_NONE = 0,         /* not a CPython process (or Python frames not wanted) */
  LW_PY_COMPLETE = 1,     /* reached the thread's first frame */
  LW_PY_DEPTH = 2,        /* LW_MAX_PY_FRAMES frames */
  LW_PY_NO_THREAD = 3,    /* this thread has no Python thread state (a native thread) */
  LW_PY_READ_FAILED = 4,  /* interpreter memory could not be read */
  LW_PY_NOT_STARTED = 5,  /* the interpreter has not made its thread-state key yet */
};
#define LW_PY_END_MASK 0xffu

/* Stored stack, leaf first. how[i] says how frame i was found. */
struct lw_stack {
  __u32 nr;
  __u32 flags;  /* enum lw_stack_end | LW_STACK_* */
  __u8 how[LW_MAX_STACK_DEPTH];
  struct lw_frame frames[LW_MAX_STACK_DEPTH];
  __u32 py_nr;     /* Python frames in py[], innermost first */
  __u32 py_flags;  /* enum lw_py_end */
  struct lw_py_frame py[LW_MAX_PY_FRAMES];
};

/* Per CPython process (py_procs, keyed by tgid), written by the daemon at
 * attach from the interpreter binary's version (core/symbols/python_runtime.h):
 * where a thread's state is, and the layout of what leads to its frames.
 * Offsets are bytes; LW_PY_OFF_NONE marks a field this version lacks. */
#define LW_PY_OFF_NONE 0xffffu
struct lw_py_proc {
  __u32 version;          /* PY_VERSION_HEX >> 16 (0x030b for 3.11) */
  __u32 tsd_key0;         /* glibc: key k's value is at fs_base + tsd_key0 + k * 16 */
  __u64 tss_addr;         /* the interpreter's autoTSSkey ({int initialized; key}), read at
                           * each allocation: frames from the first one after it is made */
  __u16 ts_frame;         /* PyThreadState: cframe (3.11/3.12) or current_frame (3.13) */
  __u16 cframe_frame;     /* _PyCFrame.current_frame; LW_PY_OFF_NONE: ts_frame is the frame */
  __u16 frame_code;       /* _PyInterpreterFrame: f_code / f_executable */
  __u16 frame_previous;
  __u16 frame_instr;      /* prev_instr (3.11/3.12) or instr_ptr (3.13) */
  __u16 frame_owner;
  __u16 frame_is_entry;   /* 3.11's is_entry; LW_PY_OFF_NONE from 3.12 (shim frames) */
  __u16 code_firstlineno;
  __u16 code_bytecode;    /* co_code_adaptive */
  __u8 owner_cstack;      /* owner value of the entry shim frame (3.12+); 0xff: none */
  __u8 pad[5];
  /* _PyEval_EvalFrameDefault in the interpreter's object (its kernel dev and
   * inode, as frames carry them), file offsets [eval_start, eval_end), so a
   * return address into it is in (eval_start, eval_end]: the native walk
   * stops at its first frame (decision python-frames, "Where the native
   * walk stops"); eval_ino 0: unknown, the walk goes on. */
  __u64 eval_ino;
  __u32 eval_dev;
  __u32 eval_start;
  __u32 eval_end;
  __u32 pad2;
};

#define LW_PY_FRAME_HEADER 72 /* bytes of _PyInterpreterFrame read at once (every offset above is below it) */

/* The identity of a mapped object in the unwind maps. */
struct lw_obj_key {
  __u64 ino;
  __u32 dev;
  __u32 pad;
};

/* State of an object's unwind table (lw_unwind_obj.state). */
enum lw_table_state {
  LW_TABLE_PENDING = 0,  /* registered, being built: frame pointers meanwhile */
  LW_TABLE_READY = 1,    /* rows in unwind_rows[table], pages in unwind_pages[table] */
  LW_TABLE_NO_CFI = 2,   /* the object has no call-frame information */
  LW_TABLE_BUDGET = 3,   /* refused by unwind.max_table_bytes */
};

struct lw_unwind_obj {
  __u32 state;   /* enum lw_table_state */
  __u32 table;   /* index in unwind_rows / unwind_pages */
  __u32 nrows;
  __u32 npages;
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

/* A thread's entry contexts (BPF task storage), indexed by enum lw_ctx_class. */
struct lw_task_ctxs {
  struct lw_ctx_val c[LW_CTX_MAX];
};

/* lw_ctx_val.flags */
#define LW_CTXF_UNSAMPLED 1u /* byte sampling skipped this call: not recorded */
#define LW_CTXF_NO_RETURN 2u /* the kernel installs no return probe (nesting limit) */
#define LW_CTXF_VALID 4u     /* the slot holds a context (task storage: never deleted) */

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
  /* The process's system-call wrapper probes are the link shared by every
   * process mapping that libc (no pid filter;
   * decision shared-wrapper-links): hits from that link (LW_COOKIE_SHARED)
   * count for it, and a process without this flag counts only its own link's
   * hits. */
  LW_TARGET_SHARED_SITES = 1u << 6,
  /* CUDA runtime/driver probes are attached: account them. Independent of
   * LW_TARGET_HEAP (GPU allocations are rare calls, traced in every mode). */
  LW_TARGET_CUDA = 1u << 8,
  /* Tensor-tier probes are attached: account them (decision tensor-tier).
   * Independent of LW_TARGET_HEAP; their hits count in lw_target.tensor_hits. */
  LW_TARGET_TENSOR = 1u << 9,
  /* Fair shares (decision fair-shares), set by the daemon: the process or
   * its user holds more than its share of the live map, and sampling cannot
   * bring it back under: its new records of every kind are refused
   * (unrec.over_share). The stack map's share is lw_target.stack_limit. */
  LW_TARGET_OVER_SHARE = 1u << 10,
  /* Bursts (decision busy-processes), set by the daemon between two bursts
   * of a process over its governor budget: only the free side of the heap
   * probes is attached (free and the realloc family), so the frees of what
   * the bursts recorded are still seen. Nothing new is recorded: a realloc
   * retires its old block's record (LW_CNT_DRAIN_REALLOC), and a free of an
   * unrecorded block is the norm (counted as free_unsampled). */
  LW_TARGET_DRAIN = 1u << 11,
  /* The process is in bursts (set through bursts and drains alike): most
   * blocks it frees were allocated outside a burst, so a free with no
   * record counts as free_unsampled, not free_unknown. */
  LW_TARGET_BURSTS = 1u << 12,
};

/* Attach cookie bit: the probe's link is shared by every process mapping
 * the object, filtered in BPF by the targets map (decision shared-wrapper-links). */
#define LW_COOKIE_SHARED (1ull << 8)

/* lw_target.seen, written by the BPF side only. */
#define LW_SEEN_CUDA 1u /* the process made a CUDA record: purge CUDA state at exit/exec */
#define LW_SEEN_TENSOR_GPU 2u /* the process reported pool totals: purge gpu_pools at exit/exec */

/* One kind's unrecorded allocations in lw_target.unrec (decision unrecorded-per-kind). */
struct lw_unrec {
  __u64 map_full;        /* live map insert failed: not tracked at all */
  __u64 map_full_bytes;  /* their bytes */
  __u64 stack_full;      /* recorded, but the stack map was full: stack unknown */
  /* Fair shares (decision fair-shares): the process (or its user) held more
   * than its share of the live map (LW_TARGET_OVER_SHARE) or of the stack
   * map (LW_TARGET_STACK_OVER_SHARE). */
  __u64 over_share;        /* not tracked at all */
  __u64 over_share_bytes;  /* their bytes */
  __u64 stack_over_share;  /* recorded, stack unknown */
};

struct lw_target {
  __u32 flags;
  __u32 seen;      /* LW_SEEN_*; the daemon writes 0 */
  __u64 lost;      /* events for this tgid lost in the ring buffer */
  __u64 start_ns;  /* process start time (task->start_time), identity check */
  /* Overhead issue (owned there): */
  __u64 sample_mean; /* byte-sampling mean in bytes (bpf/lw_sampling.h); 0 = record all */
  __u64 hits;        /* allocator probe hits (entries), for the governor's rate */
  __u64 tensor_hits; /* tensor-tier probe hits: budgeted apart (decision tensor-tier) */
  /* Changes whenever the process's executable mappings may have changed
   * (ld.so's link-map hook, an executable file mmap, exec): the unwinder's
   * per-CPU frame cache is keyed by it. The daemon starts it at a random
   * value, so a process on a reused pid never matches an old entry. */
  __u64 maps_gen;
  /* The program break as last seen by the brk wrapper's probe
   * (decision brk-emulated-probe): the previous break of the next brk call,
   * where the probe sits past glibc's store of the new one. 0: unknown (the
   * daemon seeds it from glibc's __curbrk when it attaches the probe; exec
   * clears it). */
  __u64 brk_last;
  /* The highest break seen since the attach (seeded with brk_last): a brk
   * growth that stays at or below it re-grows heap the allocator trimmed
   * before, and is recorded without walking its stack (decision brk-emulated-probe)... */
  __u64 brk_high;
  /* ...unless the last such walk was LW_BRK_REGROWN_WALK_NS ago or more
   * (its bpf_ktime_get_ns). */
  __u64 brk_walk_ns;
  /* Unrecorded issue (decision unrecorded-per-kind): allocations of this
   * process that were not recorded, by kind (enum lw_kind) and reason, added by
   * the BPF side with atomic adds on the pointer the hot path holds, on the
   * failure paths only. The daemon keeps them across set_target. */
  struct lw_unrec unrec[LW_KIND_MAX];
  /* Fair shares of the stack map (decision fair-shares): stacks this
   * process stored (added by the BPF side), and one more than the count at
   * which it stores no more (set by the daemon at attach and every second:
   * what it stored by then plus what is left of its share, plus one; 0: no
   * limit). */
  __u64 stacks_added;
  __u64 stack_limit;
  /* ...and of the live map: records this process inserted (not counting
   * replacements), and the same kind of limit, set by the daemon at attach
   * and every second (its share less what it holds and what is in flight to
   * the daemon). Past it, live_insert refuses (unrec.over_share). */
  __u64 records_added;
  __u64 record_limit;
};

/* At most one stack walk of re-grown heap per process per 100 ms. */
#define LW_BRK_REGROWN_WALK_NS 100000000ull

enum lw_event_type {
  LW_EV_ALLOC = 1,     /* new live record (addr, size, stack) */
  LW_EV_FREE = 2,      /* live record retired (addr, size, alloc_ns) */
  LW_EV_EXIT = 3,      /* the process (thread group) exited */
  LW_EV_EXEC = 4,      /* the process exec'd: its image and heap are gone */
  LW_EV_MAP_EXEC = 5,  /* an executable file mapping appeared (dlopen) */
  LW_EV_FORK = 6,      /* a target forked a process: `addr` is the child's pid */
  /* The kernel's OOM killer chose the process (tp_btf/mark_victim; it has
   * not exited yet). addr: the memory cgroup limit hit, in bytes (with
   * LW_EVF_OOM_MEMCG), else the tightest limit above it (0: none); size:
   * the victim's RSS in bytes; alloc_ns: its memory cgroup's usage in
   * bytes. */
  LW_EV_OOM_KILL = 7,
  /* A SIGKILL sent from user space to the process (systemd-oomd, kubelet
   * eviction). addr: the sender's tgid; size: the victim's RSS in bytes;
   * alloc_ns and stack_hash: the sender's comm (16 bytes, NUL-padded). */
  LW_EV_SIGKILL = 8,
  /* A CUDA allocation returned out-of-memory (bpf/lw_cuda.bpf.h;
   * decision oom-kill-reports, "GPU OOM"); the process lives on. kind: the enum
   * lw_kind asked for; addr: the error code returned
   * (LW_CUDART_ERROR_MEMORY_ALLOCATION or LW_CU_ERROR_OUT_OF_MEMORY); size: the
   * bytes requested (0 for the pitched and 3D calls, whose size the driver
   * chooses); alloc_ns: the enum lw_func of the failing call (below
   * LW_FUNC_CU_MEM_ALLOC: runtime API, else driver API; LW_EVF_GPU_DRIVER says
   * the same); stack_hash: 0. flags: the device current on the thread
   * (LW_EVF_DEVICE_*; 0: unknown). */
  LW_EV_GPU_OOM = 9,
};

/* The out-of-memory results of CUDA allocations (the real headers' values). */
#define LW_CUDART_ERROR_MEMORY_ALLOCATION 2 /* cudaError_t cudaErrorMemoryAllocation */
#define LW_CU_ERROR_OUT_OF_MEMORY 2         /* CUresult CUDA_ERROR_OUT_OF_MEMORY */

/* Event flags. */
#define LW_EVF_UNTRACKED 4u /* EXEC of a process that is not a target (discovery) */
#define LW_EVF_STALE_EXIT 8u /* EXIT of a target found gone at the fork of a new
                                  * process on its pid (its own exit went unreported) */
#define LW_EVF_OOM_MEMCG 16u /* OOM_KILL: a memory cgroup's limit was hit (else a global OOM) */
#define LW_EVF_REPLACED 1u /* ALLOC retired a still-live record (missed free) */
/* CUDA events: bits 8..15 hold the device the record is attributed to,
 * plus one (0 = unknown). See lw_event_device(). */
#define LW_EVF_DEVICE_SHIFT 8
#define LW_EVF_DEVICE_MASK 0xff00u
#define LW_EVF_GPU_DRIVER 32u /* GPU_OOM: a driver API call (cuMemAlloc...), else runtime */
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

/* ---- CUDA state (bpf/lw_cuda.bpf.h) ---- */

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

/* ---- the tensor tier's pool totals (bpf/lw_tensor.bpf.h) ---- */

/* (tgid, device) of a framework pool. */
struct lw_pool_key {
  __u32 tgid;
  __s32 device;
};

/* The pool's own totals as its allocator last reported them
 * (c10::reportMemoryUsageToProfiler): bytes in tensors, bytes reserved
 * from the driver, and when (bpf_ktime_get_ns). */
struct lw_pool_val {
  __u64 allocated;
  __u64 reserved;
  __u64 ts_ns;
};

#ifdef __cplusplus
static_assert(sizeof(struct lw_pool_key) == 8, "lw_pool_key ABI");
static_assert(sizeof(struct lw_pool_val) == 24, "lw_pool_val ABI");
#else
_Static_assert(sizeof(struct lw_pool_key) == 8, "lw_pool_key ABI");
_Static_assert(sizeof(struct lw_pool_val) == 24, "lw_pool_val ABI");
#endif

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
static_assert(sizeof(struct lw_frame) == 16, "lw_frame ABI");
static_assert(sizeof(struct lw_stack) == 8 + 17 * LW_MAX_STACK_DEPTH + 8 + 16 * LW_MAX_PY_FRAMES, "lw_stack ABI");
static_assert(sizeof(struct lw_py_frame) == 16, "lw_py_frame ABI");
static_assert(sizeof(struct lw_py_proc) == 64, "lw_py_proc ABI");
static_assert(sizeof(struct lw_obj_key) == 16, "lw_obj_key ABI");
static_assert(sizeof(struct lw_unwind_obj) == 16, "lw_unwind_obj ABI");
static_assert(sizeof(struct lw_ctx_val) == 56, "lw_ctx_val ABI");
static_assert(sizeof(struct lw_task_ctxs) == 56 * LW_CTX_MAX, "lw_task_ctxs ABI");
static_assert(sizeof(struct lw_unrec) == 48, "lw_unrec ABI");
static_assert(sizeof(struct lw_target) == 112 + 48 * LW_KIND_MAX, "lw_target ABI");
static_assert(sizeof(struct lw_event) == 56, "lw_event ABI");
#else
_Static_assert(sizeof(struct lw_live_key) == 16, "lw_live_key ABI");
_Static_assert(sizeof(struct lw_live_val) == 24, "lw_live_val ABI");
_Static_assert(sizeof(struct lw_frame) == 16, "lw_frame ABI");
_Static_assert(sizeof(struct lw_stack) == 8 + 17 * LW_MAX_STACK_DEPTH + 8 + 16 * LW_MAX_PY_FRAMES, "lw_stack ABI");
_Static_assert(sizeof(struct lw_py_frame) == 16, "lw_py_frame ABI");
_Static_assert(sizeof(struct lw_py_proc) == 64, "lw_py_proc ABI");
_Static_assert(sizeof(struct lw_obj_key) == 16, "lw_obj_key ABI");
_Static_assert(sizeof(struct lw_unwind_obj) == 16, "lw_unwind_obj ABI");
_Static_assert(sizeof(struct lw_ctx_val) == 56, "lw_ctx_val ABI");
_Static_assert(sizeof(struct lw_task_ctxs) == 56 * LW_CTX_MAX, "lw_task_ctxs ABI");
_Static_assert(sizeof(struct lw_unrec) == 48, "lw_unrec ABI");
_Static_assert(sizeof(struct lw_target) == 112 + 48 * LW_KIND_MAX, "lw_target ABI");
_Static_assert(sizeof(struct lw_event) == 56, "lw_event ABI");
#endif

#endif /* LEAKWATCH_ABI_H */
