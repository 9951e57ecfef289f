/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The allocator probes: entry contexts (nesting by stack pointer,
 * decision nesting-by-stack-pointer; calls left without returning,
 * decision orphaned-calls), operator new's entry-only probe
 * (decision operator-new-entry-only), frees, in-place resizes, byte sampling
 * (decision byte-sampling) and the return that records the block.
 */
#ifndef LW_ALLOC_BPF_H_
#define LW_ALLOC_BPF_H_

#include "lw_record.bpf.h"
#include "lw_stack.bpf.h"
#include "lw_sampling.h"

/* ---- overhead: sampling decision ----
 * True when the allocation of `size` bytes is to be recorded. Every
 * allocation of a target without a sampling mean is. */
static __always_inline bool sample_alloc(struct lw_target *t, __u64 size)
{
  __u64 mean = t->sample_mean;
  if (!mean)
    return true;
  __u32 zero = 0;
  __u64 *left = bpf_map_lookup_elem(&sample_state, &zero);
  if (!left)
    return true; /* cannot happen for an array; recording is the safe side */
  if (*left == 0)
    *left = lw_exp_draw_q32(bpf_get_prandom_u32());
  __u64 units = lw_sample_units_q32(size, mean);
  if (units >= *left) {
    *left = lw_exp_draw_q32(bpf_get_prandom_u32());
    return true;
  }
  *left -= units;
  return false;
}
/* ---- end overhead ---- */

/* operator new has no return probe: a uretprobe replaces the return address
 * on the stack, and the C++ unwinder cannot step through the kernel's
 * trampoline, so a bad_alloc thrown by new would terminate the target.
 * Instead its entry records (sp, return address), and the malloc-family
 * call it makes is accounted with that return address as the leaf frame.
 * The record is "in flight" while we are deeper than its sp and the slot at
 * its sp still holds its return address: any later call from the frame that
 * called new overwrites that slot, so a finished new is never mistaken for a
 * live one. */
/* How far into operator new its allocator call may lie: libstdc++ 12 calls
 * malloc at +0x17 in _Znwm, aligned_alloc at +0x41 in the aligned new. */
#define LW_NEW_CALL_SPAN 256

static __always_inline bool new_in_flight(struct lw_ctx_val *c, __u64 sp, __u64 now)
{
  if (now - c->start_ns >= LW_CTX_STALE_NS || sp >= c->sp)
    return false;
  __u64 slot = 0;
  bpf_probe_read_user(&slot, sizeof(slot), (void *)c->sp);
  return slot == c->ret_addr;
}

/* The address of the kernel's uretprobe trampoline in this process (the
 * first slot of its [uprobes] area; uprobe_get_trampoline_vaddr()). */
static __always_inline __u64 uretprobe_trampoline(void)
{
  /* Direct loads through the task's BTF pointer (the verifier makes them
   * fault-safe): no helper call, unlike BPF_CORE_READ's probe reads. */
  struct task_struct *task = bpf_get_current_task_btf();
  struct xol_area *x = task->mm->uprobes_state.xol_area;
  if (!x)
    return 0;
  __u64 v = x->vaddr;
  /* Keeps clang from merging this load with a map value's load in a
   * caller (one instruction on two pointer types: the verifier refuses). */
  asm volatile("" : "+r"(v));
  return v;
}

/* The kernel's uretprobe nesting limit (MAX_URETPROBE_DEPTH, 64, in
 * include/linux/uprobes.h). */
#define LW_URETPROBE_MAX_DEPTH 64

/* Return instances the kernel holds for this thread. prepare_uretprobe()
 * installs no return probe at the limit, and it checks the limit before it
 * drops the instances a longjmp left behind: a thread that longjmps (or
 * throws) out of 64 or more nested return-probed calls gets no return probe
 * again until it exits (decision orphaned-calls). */
static __always_inline __u32 uretprobe_depth(void)
{
  struct task_struct *task = bpf_get_current_task_btf();
  struct uprobe_task *u = task->utask;
  if (!u)
    return 0;
  return u->depth;
}

/* Whether the allocator call that stored c is still on the stack: its
 * return slot (at its entry sp) still holds what the kernel left there, the
 * uretprobe trampoline, or its own return address where no return probe was
 * installed. After a longjmp or an exception out of the call, any call made
 * from at or above that frame overwrites the slot (decision orphaned-calls). */
static __always_inline bool alloc_frame_alive(struct lw_ctx_val *c)
{
  __u64 slot = 0;
  if (bpf_probe_read_user(&slot, sizeof(slot), (void *)c->sp))
    return false;
  if (c->flags & LW_CTXF_NO_RETURN)
    return slot == c->ret_addr;
  return slot == uretprobe_trampoline();
}

/* ---- the tensor tier's calls (bpf/lw_tensor.bpf.h; decision tensor-tier) ---- */

/* The heap tier's check (alloc_enter): a tensor allocator call in flight
 * deeper than which this call runs owns it. */
static __always_inline bool inside_tensor_alloc(struct lw_task_ctxs *tc, __u64 sp, __u64 now)
{
  struct lw_ctx_val *c = ctx_slot(tc, LW_CTX_TENSOR);
  if (!c || (c->func != LW_FUNC_TENSOR_CPU_ALLOC && c->func != LW_FUNC_BFC_ALLOC))
    return false;
  if (now - c->start_ns >= LW_CTX_STALE_NS || sp >= c->sp)
    return false;
  return alloc_frame_alive(c);
}

/* free_enter's check, for a pointer with no heap record: the libc free made
 * by free_cpu for the tensor it just retired. */
static __always_inline bool freed_by_tensor_free(__u64 ptr)
{
  struct lw_ctx_val *c = ctx_get(LW_CTX_TENSOR);
  if (!c || c->func != LW_FUNC_TENSOR_CPU_FREE || c->arg0 != ptr)
    return false;
  ctx_clear(c);
  return bpf_ktime_get_ns() - c->start_ns < LW_CTX_STALE_NS;
}

/* Between two bursts (LW_TARGET_DRAIN; decision busy-processes) only the
 * free side is probed, and a realloc family call is a free of its old block:
 * the new block is not followed, so the old record must not outlive the
 * call. A block resized in place is retired too (counted). */
static __always_inline int drain_enter(struct lw_target *t, __u32 tgid, __u32 func, __u64 arg0)
{
  bool frees_old = func == LW_FUNC_REALLOC || func == LW_FUNC_REALLOCARRAY ||
                   func == LW_FUNC_REALLOCF || func == LW_FUNC_HEAP_REALLOC;
  if (!frees_old || !arg0)
    return 0;
  if (retire(t, tgid, LW_KIND_HEAP, arg0) < 0)
    count(LW_CNT_FREE_UNSAMPLED);
  else
    count(LW_CNT_DRAIN_REALLOC);
  return 0;
}

static __always_inline int alloc_enter(struct pt_regs *ctx, __u32 func, __u64 arg0, __u64 size)
{
  __u32 tgid;
  struct lw_target *t = current_target_hit(LW_TARGET_HEAP, &tgid);
  if (!t)
    return 0;
  if (t->flags & LW_TARGET_DRAIN)
    return drain_enter(t, tgid, func, arg0);

  __u64 sp = PT_REGS_SP(ctx);
  __u64 ret_addr = 0;
  bpf_probe_read_user(&ret_addr, sizeof(ret_addr), (void *)sp);
  __u64 now = bpf_ktime_get_ns();

  /* One storage lookup serves both classes read here and the store. */
  struct lw_task_ctxs *tc = ctx_storage(true);
  struct lw_ctx_val *c = ctx_slot(tc, LW_CTX_ALLOC);
  if (c) {
    bool fresh = now - c->start_ns < LW_CTX_STALE_NS;
    if (fresh && ((sp < c->sp && alloc_frame_alive(c)) ||
                  (sp == c->sp && ret_addr == uretprobe_trampoline()))) {
      /* Deeper than an accounted call in flight (operator new -> malloc,
       * memalign -> malloc), or a tail call from it (operator new[] ->
       * operator new, reallocarray -> realloc): the outer call accounts.
       * The outer function has a return probe, so its return slot holds
       * the uretprobe trampoline (a tail call finds it there), unless the
       * kernel installed none (nesting limit): then the slot keeps the
       * return address, and a tail call cannot be told from a new call
       * made by the same caller (after a longjmp, or in a loop): it is
       * taken as a new call. */
      count(LW_CNT_NESTED_SKIPPED);
      return 0;
    }
    /* The stored call will never return through its probe. One that got no
     * return probe was counted when it entered. */
    if (!(c->flags & LW_CTXF_NO_RETURN))
      count(fresh ? LW_CNT_CTX_ORPHANED : LW_CNT_CTX_STALE);
  }
  if ((t->flags & LW_TARGET_TENSOR) && inside_tensor_alloc(tc, sp, now)) {
    /* The tensor's own block (alloc_cpu -> posix_memalign): counted once,
     * as the tensor (decision tensor-tier). */
    count(LW_CNT_TENSOR_NESTED_SKIPPED);
    return 0;
  }
  struct lw_ctx_val v = {
      .sp = sp, .ret_addr = ret_addr, .start_ns = now, .arg0 = arg0, .arg1 = size, .func = func};
  if (uretprobe_depth() >= LW_URETPROBE_MAX_DEPTH) {
    /* Its return will not be seen, so it cannot be accounted; the context
     * is still stored, so that the calls it makes are known as nested. */
    v.flags |= LW_CTXF_NO_RETURN;
    count(LW_CNT_RET_PROBE_OMITTED);
  }
  struct lw_ctx_val *n = ctx_slot(tc, LW_CTX_NEW);
  /* Only a call made by operator new itself: once the caller of new has
   * returned, a deeper frame may leave new's return slot unwritten, and a
   * malloc made there is not new's. */
  if (n && new_in_flight(n, sp, now) && ret_addr - n->arg0 < LW_NEW_CALL_SPAN) {
    v.arg2 = n->ret_addr; /* leaf = the caller of operator new */
    v.arg1 = n->arg1;     /* the size asked of new: aligned new rounds it up */
  }
  /* overhead: decided at entry, so an unsampled call takes no stack. The
   * context is still stored: nesting and realloc's free of the old block
   * must work whether or not the new block is sampled. */
  if (func != LW_FUNC_SBRK && !sample_alloc(t, v.arg1))
    v.flags |= LW_CTXF_UNSAMPLED;
  ctx_store(tc, LW_CTX_ALLOC, &v);
  return 0;
}

static __always_inline int new_enter(struct pt_regs *ctx, __u64 size)
{
  __u32 tgid;
  struct lw_target *t = current_target_hit(LW_TARGET_HEAP, &tgid);
  if (!t || (t->flags & LW_TARGET_DRAIN))
    return 0;
  __u64 sp = PT_REGS_SP(ctx);
  __u64 now = bpf_ktime_get_ns();
  struct lw_ctx_val *c = ctx_get(LW_CTX_NEW);
  /* nothrow new calls plain new: the outer one names the user's call site,
   * the inner one is the one that calls malloc. */
  if (c && new_in_flight(c, sp, now)) {
    c->arg0 = PT_REGS_IP(ctx);
    count(LW_CNT_NESTED_SKIPPED);
    return 0;
  }
  /* arg0: the entry of the operator new that calls the allocator (the
   * probe sits at the function's first instruction). */
  struct lw_ctx_val v = {
      .sp = sp, .start_ns = now, .arg0 = PT_REGS_IP(ctx), .arg1 = size, .func = LW_FUNC_NEW};
  bpf_probe_read_user(&v.ret_addr, sizeof(v.ret_addr), (void *)sp);
  ctx_put(LW_CTX_NEW, &v);
  return 0;
}

/* Entry-only: it may sit past the function's NULL check (see the attacher's
 * probe placement), so it sees only non-NULL pointers there. */
static __always_inline int free_enter(__u64 ptr)
{
  if (!ptr)
    return 0;
  __u32 tgid;
  struct lw_target *t = current_target_hit(LW_TARGET_HEAP, &tgid);
  if (!t)
    return 0;
  if (retire(t, tgid, LW_KIND_HEAP, ptr) < 0) {
    if ((t->flags & LW_TARGET_TENSOR) && freed_by_tensor_free(ptr)) {
      count(LW_CNT_TENSOR_NESTED_SKIPPED); /* a tensor's block, retired by free_cpu */
      return 0;
    }
    /* overhead: with sampling, and with bursts (a time sample), most
     * unknown frees are of unrecorded blocks */
    count(t->sample_mean || (t->flags & LW_TARGET_BURSTS) ? LW_CNT_FREE_UNSAMPLED : LW_CNT_FREE_UNKNOWN);
  }
  return 0;
}

/* In-place resize (jemalloc xallocx, mimalloc mi_expand): the block keeps
 * its address, allocation site and age; only its size changes. Mirrored to
 * the daemon as a retire plus a new record with the same identity, as
 * mremap does. */
static __always_inline void resize_in_place(void *ctx, struct lw_target *t, __u32 tgid,
                                            __u64 ptr, __u64 new_size)
{
  struct lw_live_key key = {.tgid = tgid, .kind = LW_KIND_HEAP, .addr = ptr};
  struct lw_live_val *p = bpf_map_lookup_elem(&live, &key);
  if (!p) {
    count(LW_CNT_RESIZE_UNKNOWN);
    return;
  }
  struct lw_live_val old = *p;
  if (old.size == new_size)
    return;
  if (retire(t, tgid, LW_KIND_HEAP, ptr) < 0)
    return;
  record_alloc(ctx, t, tgid, LW_KIND_HEAP, ptr, new_size, old.alloc_ns, old.stack_hash);
}

/* The return of an accounted allocator call: commits the entry context
 * stored by alloc_enter() (the outermost call only: its sp matches). */
static __always_inline int alloc_return(struct pt_regs *ctx, __u64 ret)
{
  __u32 tgid;
  struct lw_target *t = current_target(LW_TARGET_HEAP, &tgid);
  if (!t)
    return 0;

  struct lw_ctx_val *c = ctx_get(LW_CTX_ALLOC);
  if (!c) {
    count(LW_CNT_RETURN_NO_CTX);
    return 0;
  }
  /* After `ret`, sp is one slot above the entry sp. Anything else is the
   * return of a nested call whose entry we skipped. */
  if (PT_REGS_SP(ctx) != c->sp + 8)
    return 0;
  struct lw_ctx_val v = *c;
  ctx_clear(c);

  __u64 ptr = ret;
  __u64 size = v.arg1;
  switch (v.func) {
  case LW_FUNC_SBRK: {
    /* sbrk returns the old break. Probed as a function (not only via the
     * brk syscall) because glibc's sbrk keeps no frame pointer: only at its
     * return is its caller visible. */
    if (!(t->flags & LW_TARGET_MMAP))
      return 0;
    if (ret == ~0ULL) {
      count(LW_CNT_ALLOC_FAILED);
      return 0;
    }
    __s64 inc = (__s64)size;
    if (inc > 0) {
      struct lw_regs regs = lw_probe_regs(ctx);
      record_alloc(ctx, t, tgid, LW_KIND_MMAP, ret, (__u64)inc, bpf_ktime_get_ns(),
                   capture_stack(ctx, t, LW_KIND_MMAP, &regs, true, 0));
    }
    else if (inc < 0)
      unmap_range(t, tgid, ret - (__u64)(-inc), (__u64)(-inc));
    return 0;
  }
  case LW_FUNC_POSIX_MEMALIGN:
    if ((int)ret != 0) {
      count(LW_CNT_ALLOC_FAILED);
      return 0;
    }
    ptr = 0;
    if (bpf_probe_read_user(&ptr, sizeof(ptr), (void *)v.arg0) || !ptr) {
      count(LW_CNT_ALLOC_FAILED);
      return 0;
    }
    break;
  case LW_FUNC_XALLOCX:
    /* Returns the usable size now, whether or not it could grow: that is
     * what the block holds from here on. */
    if (v.arg0 && ret)
      resize_in_place(ctx, t, tgid, v.arg0, ret);
    return 0;
  case LW_FUNC_EXPAND:
    if (!ret || !v.arg0) {
      count(LW_CNT_ALLOC_FAILED); /* could not grow in place: unchanged */
      return 0;
    }
    resize_in_place(ctx, t, tgid, v.arg0, size);
    return 0;
  case LW_FUNC_REALLOCF:
    if (!ret) {
      /* Gone either way: reallocf frees the block when it fails. */
      if (v.arg0)
        retire(t, tgid, LW_KIND_HEAP, v.arg0);
      if (size != 0)
        count(LW_CNT_ALLOC_FAILED);
      return 0;
    }
    if (v.arg0)
      retire(t, tgid, LW_KIND_HEAP, v.arg0);
    break;
  case LW_FUNC_REALLOC:
  case LW_FUNC_REALLOCARRAY:
  case LW_FUNC_HEAP_REALLOC:
    if (!ret) {
      /* glibc: realloc(p, 0) frees p and returns NULL; any other NULL is a
       * failure that leaves p live. */
      if (size == 0 && v.arg0)
        retire(t, tgid, LW_KIND_HEAP, v.arg0);
      else
        count(LW_CNT_ALLOC_FAILED);
      return 0;
    }
    if (v.arg0)
      retire(t, tgid, LW_KIND_HEAP, v.arg0);
    break;
  default:
    if (!ret) {
      count(LW_CNT_ALLOC_FAILED);
      return 0;
    }
    break;
  }
  if (v.flags & LW_CTXF_UNSAMPLED) {
    /* overhead: not sampled. Only what a lookup can match was done above
     * (realloc's old block); the new block is not recorded. */
    count(LW_CNT_SAMPLE_SKIPPED);
    return 0;
  }
  struct lw_regs regs = lw_probe_regs(ctx);
  __u64 stack = capture_stack(ctx, t, LW_KIND_HEAP, &regs, true, v.arg2);
  record_alloc(ctx, t, tgid, LW_KIND_HEAP, ptr, size, bpf_ktime_get_ns(), stack);
  return 0;
}

#endif /* LW_ALLOC_BPF_H_ */
