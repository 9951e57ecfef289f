/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Anonymous mmap/munmap/mremap/brk (kind mmap) and new executable mappings:
 * from probes after the `syscall` in libc's wrappers
 * (decision libc-syscall-wrappers) or, for processes with no probeable wrapper,
 * the raw syscall tracepoints. Syscalls made inside an allocator call in flight
 * are the allocator's own (glibc maps large chunks) and are not counted twice.
 */
#ifndef LW_SYSCALLS_BPF_H_
#define LW_SYSCALLS_BPF_H_

#include "lw_record.bpf.h"
#include "lw_stack.bpf.h"
#include "lw_cuda.bpf.h"

#define LW_MAP_ANONYMOUS 0x20
#define LW_PROT_EXEC 0x4

/* x86-64 syscall numbers. */
#define LW_NR_MMAP 9
#define LW_NR_MUNMAP 11
#define LW_NR_BRK 12
#define LW_NR_MREMAP 25

static __always_inline bool inside_alloc_call(__u32 tid, __u64 user_sp)
{
  struct lw_task_ctxs *tc = ctx_storage(false);
  struct lw_ctx_val *c = ctx_slot(tc, LW_CTX_ALLOC);
  if (c && bpf_ktime_get_ns() - c->start_ns < LW_CTX_STALE_NS && user_sp < c->sp &&
      alloc_frame_alive(c))
    return true;
  /* Inside a tensor allocator call (alloc_cpu's posix_memalign growing the
   * heap): the bytes are the tensor's (decision tensor-tier). */
  if (inside_tensor_alloc(tc, user_sp, bpf_ktime_get_ns()))
    return true;
  /* Inside a CUDA call: the driver maps pinned host memory and its own
   * state; those bytes are the CUDA record's, not the process's mmap. */
  __u64 now = bpf_ktime_get_ns();
  return cuda_call_in_flight(tid, LW_CTX_CUDA_RUNTIME, user_sp, now) ||
         cuda_call_in_flight(tid, LW_CTX_CUDA_DRIVER, user_sp, now);
}

/* Decides whether a call of system call `nr` (arguments a0..a3 as the
 * kernel takes them) concerns this target and, if so, fills `v` with what
 * apply_syscall() needs: mmap: arg0 = length, arg2 = 1 anonymous / 0
 * executable file; munmap: arg0 = addr, arg1 = length; mremap: arg0 = old
 * address, arg1 = new size, arg2 = old size; brk: arg0 = the break asked
 * for, arg2 = the break before the call, both filled by the caller. */
static __always_inline bool syscall_wanted(struct lw_target *t, __u32 tid, long nr, __u64 a0,
                                           __u64 a1, __u64 a2, __u64 a3, __u64 user_sp,
                                           struct lw_ctx_val *v)
{
  if (!(t->flags & (LW_TARGET_MMAP | LW_TARGET_HEAP | LW_TARGET_EXEC_PENDING)))
    return false;
  v->start_ns = bpf_ktime_get_ns();
  v->func = (__u32)nr;
  if (nr == LW_NR_MMAP) {
    bool anon = a3 & LW_MAP_ANONYMOUS;
    if (anon && !(t->flags & LW_TARGET_MMAP))
      return false;
    if (!anon && !(a2 & LW_PROT_EXEC))
      return false; /* a data file mapping: neither a leak nor new code */
    if (anon && inside_alloc_call(tid, user_sp))
      return false;
    v->arg0 = a1;           /* length */
    v->arg2 = anon ? 1 : 0; /* 1 = anonymous, 0 = executable file */
    return true;
  }
  if (!(t->flags & LW_TARGET_MMAP))
    return false;
  if (inside_alloc_call(tid, user_sp))
    return false;
  if (nr == LW_NR_MUNMAP) {
    v->arg0 = a0;
    v->arg1 = a1;
  } else if (nr == LW_NR_MREMAP) {
    v->arg0 = a0; /* old address */
    v->arg1 = a2; /* new size */
    v->arg2 = a1; /* old size */
  }
  return true;
}

/* The target's code mappings changed: the frame cache is stale (maps_gen),
 * and the daemon is asked for a rescan unless one is already asked for and
 * not yet taken (rescan_req; decision lifecycle-budget). A full rescan_req map
 * (never: sized like targets) still reports. */
static __always_inline void code_changed(struct lw_target *t, __u32 tgid, __u64 addr, __u64 len)
{
  __u8 one = 1;

  __sync_fetch_and_add(&t->maps_gen, 1);
  if (bpf_map_update_elem(&rescan_req, &tgid, &one, BPF_NOEXIST) == -17 /* EEXIST */)
    return;
  emit(t, LW_EV_MAP_EXEC, tgid, LW_KIND_MMAP, addr, len, 0, 0, 0);
}

/* Accounts a finished call that syscall_wanted() accepted; `ret` is the
 * kernel's result, `regs` the user registers in the wrapper after the call. */
static __always_inline void apply_syscall(void *ctx, struct lw_target *t, __u32 tgid, long nr,
                                          const struct lw_ctx_val *v, long ret,
                                          const struct lw_regs *regs)
{
  bool failed = ret < 0 && ret > -4096;
  switch (nr) {
  case LW_NR_MMAP: {
    if (failed)
      return;
    __u64 len = (v->arg0 + LW_PAGE_SIZE - 1) & ~(LW_PAGE_SIZE - 1);
    if (v->arg2) {
      /* The leaf is inside the wrapper: its caller is found through the
       * wrapper's call-frame information (the daemon skips the wrapper's
       * own frame when it names the site). */
      record_alloc(ctx, t, tgid, LW_KIND_MMAP, (__u64)ret, len, bpf_ktime_get_ns(),
                   capture_stack(ctx, t, LW_KIND_MMAP, regs, false, 0));
    } else {
      code_changed(t, tgid, (__u64)ret, len);  /* new code */
    }
    return;
  }
  case LW_NR_MUNMAP:
    if (!failed)
      unmap_range(t, tgid, v->arg0, (v->arg1 + LW_PAGE_SIZE - 1) & ~(LW_PAGE_SIZE - 1));
    return;
  case LW_NR_MREMAP: {
    if (failed)
      return;
    struct lw_live_key old_key = {.tgid = tgid, .kind = LW_KIND_MMAP, .addr = v->arg0};
    struct lw_live_val *p = bpf_map_lookup_elem(&live, &old_key);
    if (!p) {
      count(LW_CNT_MUNMAP_UNKNOWN); /* not ours (file-backed or pre-attach) */
      return;
    }
    struct lw_live_val old = *p;
    if (retire(t, tgid, LW_KIND_MMAP, v->arg0) < 0)
      return;
    /* The region keeps its allocation site and age; only address and size
     * change. */
    __u64 len = (v->arg1 + LW_PAGE_SIZE - 1) & ~(LW_PAGE_SIZE - 1);
    record_alloc(ctx, t, tgid, LW_KIND_MMAP, (__u64)ret, len, old.alloc_ns, old.stack_hash);
    return;
  }
  case LW_NR_BRK: {
    /* The kernel returns the new break, or the old one unchanged when it
     * refuses; arg2 is the break before the call (syscall_site). */
    __u64 old_brk = v->arg2, new_brk = (__u64)ret;
    if (!old_brk) {
      /* The break before the call is unknown. brk(0), glibc's first call
       * (it asks the break before its first change), changes nothing. */
      if (v->arg0)
        count(LW_CNT_BRK_UNKNOWN);
      return;
    }
    if (new_brk > old_brk && (t->flags & LW_TARGET_DRAIN)) {
      /* Between bursts (decision busy-processes) the allocating probes are
       * off, so a growth made by malloc cannot be told from one outside
       * it: the heap's growth is its records' (weighted by the bursts), not
       * kind mmap's, which would count the same bytes twice. A trim still
       * retires what was recorded before. */
      count(LW_CNT_BRK_IN_DRAIN);
    } else if (new_brk > old_brk) {
      /* Heap the allocator trimmed and grows again (glibc trims the top of
       * its heap whenever a free leaves 128 KiB there, so a loop that
       * allocates and frees a large block moves the break up and down on
       * every iteration): bytes recorded, stack not walked, but for one
       * re-growth per LW_BRK_REGROWN_WALK_NS, so the sites that re-grow it
       * still show. Growth to a new high has its stack (decision brk-emulated-probe). */
      __u64 now = bpf_ktime_get_ns();
      __u64 stack = LW_STACK_HEAP_REGROWN;
      if (new_brk > t->brk_high || now - t->brk_walk_ns >= LW_BRK_REGROWN_WALK_NS) {
        if (new_brk > t->brk_high)
          t->brk_high = new_brk;
        else
          t->brk_walk_ns = now;
        stack = capture_stack(ctx, t, LW_KIND_MMAP, regs, false, 0);
      }
      record_alloc(ctx, t, tgid, LW_KIND_MMAP, old_brk, new_brk - old_brk, now, stack);
    } else if (new_brk < old_brk) {
      unmap_range(t, tgid, new_brk, old_brk - new_brk);
    }
    return;
  }
  }
}

/* A probe just after the `syscall` instruction of a libc wrapper (mmap,
 * munmap, mremap, brk), or on the flags-only compare before its error
 * branch: the arguments are still in their registers (the kernel preserves
 * everything but rax, rcx and r11) and %rax holds the result, so one
 * probe does what the tracepoint pair does, in the target only. */
static __always_inline int syscall_site(struct pt_regs *ctx, __u32 func, __u64 cookie)
{
  __u64 id = bpf_get_current_pid_tgid();
  __u32 tgid = id >> 32;
  struct lw_target *t = bpf_map_lookup_elem(&targets, &tgid);
  if (!t)
    return 0;
  /* The shared link (decision shared-wrapper-links) counts only for targets
   * that have no link of their own on these wrappers, and theirs only for the
   * others: a process attached before the link was shared keeps its own. */
  if (!(cookie & LW_COOKIE_SHARED) != !(t->flags & LW_TARGET_SHARED_SITES))
    return 0;
  long nr = func == LW_FUNC_SYS_MMAP     ? LW_NR_MMAP
            : func == LW_FUNC_SYS_MUNMAP ? LW_NR_MUNMAP
            : func == LW_FUNC_SYS_MREMAP ? LW_NR_MREMAP
                                         : LW_NR_BRK;
  __u64 sp = PT_REGS_SP(ctx);
  struct lw_ctx_val v = {};
  __u64 prev_brk = 0;
  if (nr == LW_NR_BRK) {
    /* The break before the call: where this site runs before glibc stores
     * the new break in __curbrk (cookie: the distance to it), read there;
     * else the last break this probe saw (decision brk-emulated-probe), kept
     * current on every call, also those not recorded (inside malloc, mode
     * full). No atomic exchange: glibc's malloc calls brk under its main-arena
     * lock, and the kernel serializes brk under the mmap lock. */
    prev_brk = t->brk_last;
    t->brk_last = PT_REGS_RC(ctx);
  }
  if (!syscall_wanted(t, (__u32)id, nr, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx),
                      PT_REGS_PARM3(ctx), ctx->r10, sp, &v))
    return 0;
  if (nr == LW_NR_BRK) {
    v.arg0 = PT_REGS_PARM1(ctx); /* the break asked for; 0: a query */
    v.arg2 = prev_brk;
    if (cookie >> 16) {
      __u64 curbrk = PT_REGS_IP(ctx) + (__u64)((__s64)cookie >> 16);
      if (bpf_probe_read_user(&v.arg2, sizeof(v.arg2), (void *)curbrk))
        v.arg2 = 0;
    }
  }
  struct lw_regs regs = lw_probe_regs(ctx);
  apply_syscall(ctx, t, tgid, nr, &v, (long)PT_REGS_RC(ctx), &regs);
  return 0;
}

/* ld.so calls _dl_debug_state before and after every change of its link
 * map (the initial load after exec, dlopen, dlclose): rescan the target's
 * objects, e.g. for a CUDA library dlopen'ed by a light process. */
static __always_inline int loader_changed(void)
{
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  struct lw_target *t = bpf_map_lookup_elem(&targets, &tgid);
  if (!t || (t->flags & LW_TARGET_EXITED))
    return 0;
  code_changed(t, tgid, 0, 0);  /* dlopen/dlclose */
  return 0;
}

#endif /* LW_SYSCALLS_BPF_H_ */
