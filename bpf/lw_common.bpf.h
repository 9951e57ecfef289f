/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Helpers every program uses: the counters (every loss is counted here),
 * the one event emitter (ring-buffer accounting: SEEN = DELIVERED +
 * DROPPED), and the target lookup that starts every probe.
 */
#ifndef LW_COMMON_BPF_H_
#define LW_COMMON_BPF_H_

#include "lw_maps.bpf.h"

/* An entry context older than this is an orphan (longjmp, exception) and
 * never counts as "the outer call" for nesting. No allocator call takes a
 * second; if one is stopped that long, a nested call is counted on its own. */
#define LW_CTX_STALE_NS 1000000000ULL

static __always_inline void count(__u32 which)
{
  __u64 *v = bpf_map_lookup_elem(&counters, &which);
  if (v)
    __sync_fetch_and_add(v, 1); /* a uprobe program can be preempted on its CPU */
}

/* The current thread's contexts (created when `create`), or 0. */
static __always_inline struct lw_task_ctxs *ctx_storage(bool create)
{
  return bpf_task_storage_get(&ctxs, bpf_get_current_task_btf(), 0,
                              create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

/* The context of class `cls` in `tc`, or 0 when none is stored. */
static __always_inline struct lw_ctx_val *ctx_slot(struct lw_task_ctxs *tc, __u32 cls)
{
  if (!tc || cls >= LW_CTX_MAX)
    return 0;
  struct lw_ctx_val *c = &tc->c[cls];
  return (c->flags & LW_CTXF_VALID) ? c : 0;
}

/* The current thread's context of class `cls`, or 0 when none is stored. */
static __always_inline struct lw_ctx_val *ctx_get(__u32 cls)
{
  return ctx_slot(ctx_storage(false), cls);
}

/* Stores `v` in `tc` as the context of class `cls` (replacing any).
 * Counted when the thread's storage could not be created. */
static __always_inline void ctx_store(struct lw_task_ctxs *tc, __u32 cls,
                                      const struct lw_ctx_val *v)
{
  if (!tc || cls >= LW_CTX_MAX) {
    count(LW_CNT_CTX_INSERT_FAILED);
    return;
  }
  tc->c[cls] = *v;
  tc->c[cls].flags |= LW_CTXF_VALID;
}

/* Stores `v` as the current thread's context of class `cls`. */
static __always_inline void ctx_put(__u32 cls, const struct lw_ctx_val *v)
{
  ctx_store(ctx_storage(true), cls, v);
}

static __always_inline void ctx_clear(struct lw_ctx_val *c)
{
  c->flags = 0;
}

static __always_inline void emit(struct lw_target *t, __u32 type, __u32 tgid, __u32 kind,
                                 __u64 addr, __u64 size, __u64 alloc_ns, __u64 stack_hash,
                                 __u32 flags)
{
  count(LW_CNT_EVENTS_SEEN);
  struct lw_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    /* The target's count first: user space reads the global one, then the
     * target's, and a loss it saw globally must already show there. */
    if (t)
      __sync_fetch_and_add(&t->lost, 1);
    count(LW_CNT_EVENTS_DROPPED_RINGBUF);
    return;
  }
  __u64 id = bpf_get_current_pid_tgid();
  e->type = (__u16)type;
  e->flags = (__u16)flags;
  e->tgid = tgid;
  e->tid = (__u32)id;
  e->kind = kind;
  e->ts_ns = bpf_ktime_get_ns();
  e->addr = addr;
  e->size = size;
  e->alloc_ns = alloc_ns;
  e->stack_hash = stack_hash;
  __u64 wake = 0;
  if (wakeup_bytes && (type == LW_EV_ALLOC || type == LW_EV_FREE))
    wake = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP
                                                                           : BPF_RB_NO_WAKEUP;
  /* A kill report must be taken within a second (decision oom-kill-reports):
   * wake the consumer now even when batched allocation events wait unconsumed
   * (the default, adaptive wakeup skips the wakeup then). */
  if (type == LW_EV_OOM_KILL || type == LW_EV_SIGKILL || type == LW_EV_GPU_OOM)
    wake = BPF_RB_FORCE_WAKEUP;
  /* So must an exec, a fork and a target's new code mapping: the attach
   * waits for them. Adaptive wakeup skipped them while light processes'
   * mmap events sat unconsumed, and they waited for the consumer's 100 ms
   * poll timeout: the exec->attached tail under churn (decision shared-wrapper-links). */
  if (type == LW_EV_EXEC || type == LW_EV_FORK || type == LW_EV_MAP_EXEC)
    wake = BPF_RB_FORCE_WAKEUP;
  bpf_ringbuf_submit(e, wake);
  count(LW_CNT_EVENTS_DELIVERED);
}

static __always_inline __u64 mix64(__u64 h)
{
  /* splitmix64 finalizer: cheap, and good enough that a 64-bit collision
   * between two distinct stacks is not a practical concern. */
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

/* The current process's target entry when it carries any of `flags`, else
 * NULL; `tgid` receives the process id. The prologue of every probe. */
static __always_inline struct lw_target *current_target(__u32 flags, __u32 *tgid)
{
  *tgid = bpf_get_current_pid_tgid() >> 32;
  struct lw_target *t = bpf_map_lookup_elem(&targets, tgid);
  if (!t || !(t->flags & flags))
    return 0;
  return t;
}

/* The same, also counting the call as an allocator probe hit (the
 * governor's rate, decision governor-kill-switch). */
static __always_inline struct lw_target *current_target_hit(__u32 flags, __u32 *tgid)
{
  struct lw_target *t = current_target(flags, tgid);
  if (t)
    __sync_fetch_and_add(&t->hits, 1);
  return t;
}

/* n * size, or ~0 on overflow: the call then fails, and the product must
 * not be mistaken for a small (or zero: realloc's free) size. */
static __always_inline __u64 checked_mul(__u64 n, __u64 size)
{
  if (!n)
    return 0;
  __u64 limit = ~0ULL / n;
  /* Keep clang from folding this into a 128-bit multiply (__multi3), which
   * BPF cannot call. */
  asm volatile("" : "+r"(limit));
  if (size > limit)
    return ~0ULL;
  return n * size;
}

#endif /* LW_COMMON_BPF_H_ */
