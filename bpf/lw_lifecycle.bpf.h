/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What a thread's or a process's end (exit, exec) leaves to clean up.
 */
#ifndef LW_LIFECYCLE_BPF_H_
#define LW_LIFECYCLE_BPF_H_

#include "lw_cuda.bpf.h"

static __always_inline void drop_thread_ctxs(__u32 tid)
{
  struct lw_ctx_key key = {.tid = tid, .cls = LW_CTX_ALLOC};
  /* An allocator call still in flight when its thread exits or execs was
   * left without returning (longjmp or exception earlier, or the thread
   * killed mid-call). operator new's context (entry-only) and the syscall
   * one are not orphans: nothing ever consumes the former. */
  struct lw_ctx_val *c = bpf_map_lookup_elem(&ctxs, &key);
  if (c && !(c->flags & LW_CTXF_NO_RETURN))
    count(LW_CNT_CTX_ORPHANED);
  bpf_map_delete_elem(&ctxs, &key);
  key.cls = LW_CTX_SYSCALL;
  bpf_map_delete_elem(&ctxs, &key);
  key.cls = LW_CTX_NEW;
  bpf_map_delete_elem(&ctxs, &key);
  cuda_drop_thread(tid);
}

/* The process is gone: nothing is accounted for its pid any more (only
 * LW_TARGET_EXITED stays set), its CUDA state goes, and the daemon hears. */
static __always_inline void report_exit(struct lw_target *t, __u32 tgid, __u32 ev_flags)
{
  t->flags = LW_TARGET_EXITED;
  cuda_purge_process(t, tgid);
  emit(t, LW_EV_EXIT, tgid, 0, 0, 0, 0, 0, ev_flags);
}

#endif /* LW_LIFECYCLE_BPF_H_ */
