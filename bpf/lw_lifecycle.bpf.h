/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What a thread's or a process's end (exit, exec) leaves to clean up.
 */
#ifndef LW_LIFECYCLE_BPF_H_
#define LW_LIFECYCLE_BPF_H_

#include "lw_cuda.bpf.h"
#include "lw_tensor.bpf.h"

/* `p` is the current thread, at its exit or exec. */
static __always_inline void drop_thread_ctxs(struct task_struct *p, __u32 tid)
{
  /* An allocator call still in flight when its thread exits or execs was
   * left without returning (longjmp or exception earlier, or the thread
   * killed mid-call). operator new's context (entry-only) and the syscall
   * one are not orphans: nothing ever consumes the former. */
  struct lw_task_ctxs *tc = bpf_task_storage_get(&ctxs, p, 0, 0);
  if (tc) {
    struct lw_ctx_val *c = &tc->c[LW_CTX_ALLOC];
    if ((c->flags & LW_CTXF_VALID) && !(c->flags & LW_CTXF_NO_RETURN))
      count(LW_CNT_CTX_ORPHANED);
    bpf_task_storage_delete(&ctxs, p);
  }
  cuda_drop_thread(tid);
}

/* The process is gone: nothing is accounted for its pid any more (only
 * LW_TARGET_EXITED stays set), its CUDA state and pool totals go, and the daemon hears. */
static __always_inline void report_exit(struct lw_target *t, __u32 tgid, __u32 ev_flags)
{
  t->flags = LW_TARGET_EXITED;
  cuda_purge_process(t, tgid);
  tensor_purge_process(t, tgid);
  emit(t, LW_EV_EXIT, tgid, 0, 0, 0, 0, 0, ev_flags);
}

#endif /* LW_LIFECYCLE_BPF_H_ */
