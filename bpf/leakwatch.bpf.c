// SPDX-License-Identifier: GPL-2.0-only
/*
 * leakwatch kernel side: the programs. Each is a thin dispatcher; the work
 * is in self-contained headers (docs/architecture.md, "Layers"):
 *   lw_maps.bpf.h       the shared maps and load-time settings
 *   lw_common.bpf.h     counters, the event emitter, the target lookup
 *   lw_record.bpf.h     the one record/retire path of the live map
 *   lw_stack.bpf.h      user stacks
 *   lw_alloc.bpf.h      allocator entry/return, operator new, free, sampling
 *   lw_cuda.bpf.h       CUDA runtime and driver
 *   lw_tensor.bpf.h     the tensor tier: PyTorch and TensorFlow allocators
 *   lw_syscalls.bpf.h   mmap/munmap/mremap/brk and new executable mappings
 *   lw_lifecycle.bpf.h  thread and process end
 *   lw_oom.bpf.h        OOM kills and SIGKILLs from user space
 *
 * Invariants (kept in lw_record.bpf.h and lw_common.bpf.h):
 *  - The live map is authoritative: a free matches an allocation only by
 *    lookup in it, never by anything the daemon believes.
 *  - Every event attempt is counted (SEEN) and ends as DELIVERED or
 *    DROPPED_RINGBUF; a drop also bumps the target's `lost` so the daemon
 *    knows which process to resync from the live map.
 *  - Every other failure path bumps its own per-CPU counter.
 */
#include "lw_alloc.bpf.h"
#include "lw_cuda.bpf.h"
#include "lw_lifecycle.bpf.h"
#include "lw_oom.bpf.h"
#include "lw_syscalls.bpf.h"
#include "lw_tensor.bpf.h"
#include <bpf/usdt.bpf.h>

char LICENSE[] SEC("license") = "GPL";

/* One entry program for every allocator function; the attach cookie says
 * which one (enum lw_func). One program lets the daemon put all of an
 * object's entry probes in a single uprobe_multi link: closing a uprobe
 * link waits out a kernel grace period (~50 ms measured here, serialized),
 * so a process detaches in a few link closes instead of one per probe. */
SEC("uprobe")
int lw_entry(struct pt_regs *ctx)
{
  __u64 a0 = PT_REGS_PARM1(ctx), a1 = PT_REGS_PARM2(ctx), a2 = PT_REGS_PARM3(ctx);
  const __u64 cookie = bpf_get_attach_cookie(ctx);
  const __u64 func = cookie & 0xff;
  switch (func) {
  case LW_FUNC_MALLOC:
    return alloc_enter(ctx, LW_FUNC_MALLOC, 0, a0);
  case LW_FUNC_NEW:
    return new_enter(ctx, a0);
  case LW_FUNC_SBRK:
    return alloc_enter(ctx, LW_FUNC_SBRK, 0, a0);
  case LW_FUNC_CALLOC:
    return alloc_enter(ctx, LW_FUNC_CALLOC, 0, checked_mul(a0, a1));
  case LW_FUNC_REALLOC:
    return alloc_enter(ctx, LW_FUNC_REALLOC, a0, a1);
  case LW_FUNC_REALLOCARRAY:
    return alloc_enter(ctx, LW_FUNC_REALLOCARRAY, a0, checked_mul(a1, a2));
  case LW_FUNC_POSIX_MEMALIGN:
    return alloc_enter(ctx, LW_FUNC_POSIX_MEMALIGN, a0, a2);
  case LW_FUNC_ALIGNED:
    return alloc_enter(ctx, LW_FUNC_ALIGNED, 0, a1);
  case LW_FUNC_FREE:
    return free_enter(a0);
  case LW_FUNC_XALLOCX:
  case LW_FUNC_EXPAND:
  case LW_FUNC_REALLOCF:
    return alloc_enter(ctx, (__u32)func, a0, a1);
  case LW_FUNC_HEAP_MALLOC:
    return alloc_enter(ctx, LW_FUNC_HEAP_MALLOC, 0, a1);
  case LW_FUNC_HEAP_CALLOC:
    return alloc_enter(ctx, LW_FUNC_HEAP_CALLOC, 0, checked_mul(a1, a2));
  case LW_FUNC_HEAP_REALLOC:
    return alloc_enter(ctx, LW_FUNC_HEAP_REALLOC, a1, a2);
  case LW_FUNC_SYS_MMAP:
  case LW_FUNC_SYS_MUNMAP:
  case LW_FUNC_SYS_MREMAP:
  case LW_FUNC_SYS_BRK:
    return syscall_site(ctx, (__u32)func, cookie);
  case LW_FUNC_DL_STATE:
    return loader_changed();
  case LW_FUNC_TENSOR_CPU_ALLOC:
    tensor_alloc_enter(ctx, LW_FUNC_TENSOR_CPU_ALLOC, a0);
    return 0;
  case LW_FUNC_TENSOR_CPU_FREE:
    return tensor_free_enter(ctx, LW_KIND_TENSOR_CPU, a0);
  case LW_FUNC_TORCH_REPORT:
    return torch_report_enter(ctx, true, true);
  case LW_FUNC_TORCH_REPORT_SHORT:
    return torch_report_enter(ctx, false, true);
  case LW_FUNC_TORCH_REPORT_TOTALS:
    return torch_report_enter(ctx, true, false);
  case LW_FUNC_BFC_ALLOC:
    tensor_alloc_enter(ctx, LW_FUNC_BFC_ALLOC, a2);
    return 0;
  case LW_FUNC_BFC_FREE:
    return tensor_free_enter(ctx, LW_KIND_TENSOR_GPU, a1);
  }
  if (func >= LW_FUNC_CUDA_FIRST && func <= LW_FUNC_CUDA_LAST)
    return cuda_enter(ctx, (__u32)func);
  return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(lw_alloc_return, __u64 ret)
{
  /* CUDA return probes carry their lw_func as the cookie too. */
  __u64 func = bpf_get_attach_cookie(ctx);
  if (func >= LW_FUNC_CUDA_FIRST && func <= LW_FUNC_CUDA_LAST)
    return cuda_return(ctx, (__u32)func, ret);
  return alloc_return(ctx, ret);
}

/* The tensor tier's returns (alloc_cpu, BFC AllocateRaw): a program of
 * their own, so that each stays well under the verifier's bound in
 * frame-pointer mode (each inlines a stack capture). */
SEC("uretprobe")
int BPF_KRETPROBE(lw_tensor_return, __u64 ret)
{
  return tensor_alloc_return(ctx, (__u32)bpf_get_attach_cookie(ctx), ret);
}

/* Uprobe sessions (kernel 6.13): weak, so that the object loads where the
 * kernel lacks them; lw_tensor_session is then not loaded at all. */
extern bool bpf_session_is_return(void) __ksym __weak;

/* The tensor tier's allocating calls as one uprobe session (decision
 * tensor-tier, "Uprobe sessions"): the entry's non-zero return skips the
 * return probe for a call that records nothing (0 bytes, not a target), a
 * trap saved on 14 of alloc_cpu's 37 calls an iteration on the conv loop. */
SEC("uprobe")
int lw_tensor_session(struct pt_regs *ctx)
{
  const __u32 func = (__u32)(bpf_get_attach_cookie(ctx) & 0xff);
  if (bpf_session_is_return())
    return tensor_alloc_return(ctx, func, PT_REGS_RC(ctx));
  /* Both read first, and kept apart: clang would otherwise select the
   * context offset, which the verifier refuses. */
  __u64 a0 = PT_REGS_PARM1(ctx), a2 = PT_REGS_PARM3(ctx);
  asm volatile("" : "+r"(a0), "+r"(a2));
  return tensor_alloc_enter(ctx, func, func == LW_FUNC_BFC_ALLOC ? a2 : a0) ? 0 : 1;
}

/* PyTorch's CUDA caching allocator USDTs (decision tensor-tier):
 * pytorch:malloc(ptr, device, size, stream) and pytorch:free(ptr). libbpf
 * decodes the arguments from the probe's note and raises the semaphore
 * while attached. */
SEC("usdt")
int BPF_USDT(lw_torch_usdt_malloc, void *ptr, long device, long size)
{
  __u32 tgid;
  struct lw_target *t = tensor_target(&tgid);
  if (!t)
    return 0;
  torch_gpu_block(ctx, t, tgid, (__u64)ptr, size > 0 ? size : 0, (__s32)(__s8)device);
  return 0;
}

SEC("usdt")
int BPF_USDT(lw_torch_usdt_free, void *ptr)
{
  __u32 tgid;
  struct lw_target *t = tensor_target(&tgid);
  if (!t)
    return 0;
  /* The device is the record's: retire by address. */
  torch_gpu_block(ctx, t, tgid, (__u64)ptr, -1, -1);
  return 0;
}

/* The raw syscall tracepoints: only for a target whose system calls bypass
 * any wrapper we can probe (Go, stripped static binaries). They run on
 * every system call of every process while attached (decision light-mode-cost),
 * so the daemon attaches them only while such a target is traced
 * (decision libc-syscall-wrappers). */
SEC("raw_tp/sys_enter")
int lw_sys_enter(struct bpf_raw_tracepoint_args *ctx)
{
  long nr = (long)ctx->args[1];
  if (nr != LW_NR_MMAP && nr != LW_NR_MUNMAP && nr != LW_NR_MREMAP && nr != LW_NR_BRK)
    return 0;
  __u64 id = bpf_get_current_pid_tgid();
  __u32 tgid = id >> 32;
  struct lw_target *t = bpf_map_lookup_elem(&targets, &tgid);
  if (!t || (t->flags & LW_TARGET_SYSCALL_SITES))
    return 0; /* the wrapper probes see this process's calls */

  struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
  struct lw_ctx_val v = {};
  if (!syscall_wanted(t, (__u32)id, nr, BPF_CORE_READ(regs, di), BPF_CORE_READ(regs, si),
                      BPF_CORE_READ(regs, dx), BPF_CORE_READ(regs, r10),
                      BPF_CORE_READ(regs, sp), &v))
    return 0;
  if (nr == LW_NR_BRK) {
    struct task_struct *task = bpf_get_current_task_btf();
    v.arg2 = BPF_CORE_READ(task, mm, brk); /* break before the call */
  }
  ctx_put(LW_CTX_SYSCALL, &v);
  return 0;
}

SEC("raw_tp/sys_exit")
int lw_sys_exit(struct bpf_raw_tracepoint_args *ctx)
{
  struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
  long nr = BPF_CORE_READ(regs, orig_ax);
  if (nr != LW_NR_MMAP && nr != LW_NR_MUNMAP && nr != LW_NR_MREMAP && nr != LW_NR_BRK)
    return 0;
  __u64 id = bpf_get_current_pid_tgid();
  struct lw_ctx_val *c = ctx_get(LW_CTX_SYSCALL);
  if (!c)
    return 0;
  struct lw_ctx_val v = *c;
  ctx_clear(c);
  if (v.func != nr)
    return 0;
  __u32 tgid = id >> 32;
  struct lw_target *t = bpf_map_lookup_elem(&targets, &tgid);
  if (!t)
    return 0;
  struct lw_regs user = {
      .ip = BPF_CORE_READ(regs, ip), .sp = BPF_CORE_READ(regs, sp), .bp = BPF_CORE_READ(regs, bp)};
  apply_syscall(ctx, t, tgid, nr, &v, (long)ctx->args[1], &user);
  return 0;
}

/* ---------------------------------------------------------------------------
 * Process lifecycle.
 */

SEC("tp_btf/sched_process_exec")
int BPF_PROG(lw_exec, struct task_struct *p)
{
  /* The thread keeps its tid across exec, but its stack is new: contexts
   * from the old image would make the new image's calls look nested. */
  drop_thread_ctxs(p, BPF_CORE_READ(p, pid));
  __u32 tgid = BPF_CORE_READ(p, tgid);
  struct lw_target *t = bpf_map_lookup_elem(&targets, &tgid);
  if (!t) {
    if (report_all_execs)
      emit(0, LW_EV_EXEC, tgid, 0, 0, 0, 0, 0, LW_EVF_UNTRACKED);
    return 0;
  }
  /* The old image is gone. Stop accounting until the daemon has purged the
   * old records and attached to the new image, but keep reporting
   * executable mappings: the loader maps the new libc before the daemon
   * may have caught up. */
  t->flags = LW_TARGET_EXEC_PENDING;
  t->brk_last = 0; /* a new heap: seeded again when the wrappers are attached */
  t->brk_high = 0;
  t->brk_walk_ns = 0;
  __sync_fetch_and_add(&t->maps_gen, 1);  /* a new image: the frame cache is stale */
  cuda_purge_process(t, tgid);
  tensor_purge_process(t, tgid);
  emit(t, LW_EV_EXEC, tgid, 0, 0, 0, 0, 0, 0);
  return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(lw_exit, struct task_struct *p)
{
  __u32 tid = BPF_CORE_READ(p, pid);
  __u32 tgid = BPF_CORE_READ(p, tgid);
  /* Entry contexts left by this thread (longjmp out of an allocator, a
   * thread killed mid-call) die with it. */
  drop_thread_ctxs(p, tid);

  struct lw_target *t = bpf_map_lookup_elem(&targets, &tgid);
  if (!t)
    return 0;
  if (BPF_CORE_READ(p, signal, live.counter) != 0)
    return 0; /* other threads of the process live on */
  report_exit(t, tgid, 0);
  return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(lw_fork, struct task_struct *parent, struct task_struct *child)
{
  __u32 child_tgid = BPF_CORE_READ(child, tgid);
  if (BPF_CORE_READ(child, pid) == child_tgid) {
    /* A new process whose pid still has a target entry that never saw an
     * exit: the entry's process is gone unreported (it exited while the
     * daemon was attaching it, before the entry existed). Without this the
     * new process would be accounted as the old one, with the old one's
     * mode, until a reconciliation noticed (decision pid-reuse).
     * Stop accounting for the pid and report the old process's exit. An
     * entry whose exit was reported merely awaits the daemon's cleanup. */
    struct lw_target *stale = bpf_map_lookup_elem(&targets, &child_tgid);
    if (stale && !(stale->flags & LW_TARGET_EXITED))
      report_exit(stale, child_tgid, LW_EVF_STALE_EXIT);
  }
  __u32 ptgid = BPF_CORE_READ(parent, tgid);
  struct lw_target *t = bpf_map_lookup_elem(&targets, &ptgid);
  if (!t || !(t->flags & LW_TARGET_FOLLOW_FORKS))
    return 0;
  __u32 child_pid = BPF_CORE_READ(child, pid);
  if (child_pid != BPF_CORE_READ(child, tgid))
    return 0; /* a new thread, not a new process */
  emit(t, LW_EV_FORK, ptgid, 0, child_pid, 0, 0, 0, 0);
  return 0;
}

/* ---------------------------------------------------------------------------
 * OOM kills (decision oom-kill-reports). Loaded and attached only when the
 * kernel has the tracepoints (BpfSession::create); both filter on the targets
 * map.
 */

SEC("tp_btf/mark_victim")
int BPF_PROG(lw_oom_victim, struct task_struct *task, uid_t uid)
{
  return report_oom_victim(task);
}

SEC("tp_btf/signal_generate")
int BPF_PROG(lw_signal, int sig, struct kernel_siginfo *info, struct task_struct *task, int group,
             int result)
{
  return report_sigkill(sig, info, task, result);
}
