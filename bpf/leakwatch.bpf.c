// SPDX-License-Identifier: GPL-2.0-only
/*
 * leakwatch kernel side: allocator uprobes, anonymous-mmap syscall tracing,
 * process lifecycle. See docs/architecture.md for the data path.
 *
 * Invariants kept here:
 *  - The live map is authoritative: a free matches an allocation only by
 *    lookup in it, never by anything the daemon believes.
 *  - Every event attempt is counted (SEEN) and ends as DELIVERED or
 *    DROPPED_RINGBUF; a drop also bumps the target's `lost` so the daemon
 *    knows which process to resync from the live map.
 *  - Every other failure path bumps its own per-CPU counter.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "leakwatch_abi.h"
#include "lw_sampling.h"

char LICENSE[] SEC("license") = "GPL";

/* An entry context older than this is an orphan (longjmp, exception) and
 * never counts as "the outer call" for nesting. No allocator call takes a
 * second; if one is stopped that long, a nested call is counted on its own. */
#define LW_CTX_STALE_NS 1000000000ULL

#define LW_PAGE_SIZE 4096ULL
#define LW_MAP_ANONYMOUS 0x20
#define LW_PROT_EXEC 0x4
#define LW_UNMAP_MAX_RECORDS 8

/* x86-64 syscall numbers. */
#define LW_NR_MMAP 9
#define LW_NR_MUNMAP 11
#define LW_NR_BRK 12
#define LW_NR_MREMAP 25

/* Sizes are set by the daemon between open and load. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 262144);
  __type(key, struct lw_live_key);
  __type(value, struct lw_live_val);
} live SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, __u64);
  __type(value, struct lw_stack);
} stacks SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 65536);
  __type(key, struct lw_ctx_key);
  __type(value, struct lw_ctx_val);
} ctxs SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __type(value, struct lw_target);
} targets SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, LW_CNT_MAX);
  __type(key, __u32);
  __type(value, __u64);
} counters SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct lw_stack);
} stack_scratch SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 8 << 20);
} events SEC(".maps");

/* ---- overhead: byte sampling state (bpf/lw_sampling.h) ----
 * Per CPU, not per thread: no map entry to create or reap per thread, and
 * the counter is in units of s/T, so it serves targets of any mean. A
 * preempted update can lose one decrement; the sampling probability of the
 * other allocations is unaffected. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} sample_state SEC(".maps");
/* ---- end overhead ---- */

/* Set at load time. */
const volatile bool collect_stacks = true;
/* Daemon mode: report every exec, so new processes are matched against the
 * selectors within the poll interval, without scanning /proc. */
const volatile bool report_all_execs = false;
/* Allocation and free events wake the consumer only once this much data is
 * waiting (docs/architecture.md, decision 30): a wakeup is an irq_work
 * and a cross-CPU wakeup, tens of us per event in a VM, and the consumer
 * polls every 100 ms anyway. Lifecycle events always wake it. 0 = wake on
 * every event. */
const volatile __u64 wakeup_bytes = 0;

static __always_inline void count(__u32 which)
{
  __u64 *v = bpf_map_lookup_elem(&counters, &which);
  if (v)
    __sync_fetch_and_add(v, 1); /* a uprobe program can be preempted on its CPU */
}

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

static __always_inline void emit(struct lw_target *t, __u32 type, __u32 tgid, __u32 kind,
                                 __u64 addr, __u64 size, __u64 alloc_ns, __u64 stack_hash,
                                 __u32 flags)
{
  count(LW_CNT_EVENTS_SEEN);
  struct lw_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    count(LW_CNT_EVENTS_DROPPED_RINGBUF);
    if (t)
      __sync_fetch_and_add(&t->lost, 1);
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

/* Stores the current user stack in `stacks` and returns its hash, or 0 when
 * the stack is unknown (counted). The hash is of the raw addresses; the
 * daemon derives the stable, cross-host stack_id from (build-id, offset). */
static __always_inline __u64 capture_stack(void *ctx, __u64 ret_hint, __u32 hint_flags)
{
  if (!collect_stacks)
    return 0;
  __u32 zero = 0;
  struct lw_stack *s = bpf_map_lookup_elem(&stack_scratch, &zero);
  if (!s) {
    count(LW_CNT_SCRATCH_FAILED);
    return 0;
  }
  long n;
  if (ret_hint)
    n = bpf_get_stack(ctx, &s->ips[1], sizeof(s->ips) - sizeof(s->ips[0]), BPF_F_USER_STACK);
  else
    n = bpf_get_stack(ctx, s->ips, sizeof(s->ips), BPF_F_USER_STACK);
  if (n <= 0) {
    count(LW_CNT_STACK_FAILED);
    return 0;
  }
  __u32 nr = (__u32)n / 8;
  s->flags = 0;
  if (ret_hint) {
    s->ips[0] = s->ips[1];
    s->ips[1] = ret_hint;
    s->flags = hint_flags;
    nr += 1;
  }
  s->nr = nr;
  __u64 h = 0x6c65616b77617463ULL ^ nr;
  for (__u32 i = 0; i < LW_MAX_STACK_DEPTH; i++) {
    if (i >= nr)
      break;
    h = mix64(h ^ s->ips[i]);
  }
  if (h == 0)
    h = 1;
  if (!bpf_map_lookup_elem(&stacks, &h)) {
    long err = bpf_map_update_elem(&stacks, &h, s, BPF_NOEXIST);
    if (err && err != -17 /* EEXIST: another CPU stored it */) {
      count(LW_CNT_STACK_MAP_FULL);
      return 0;
    }
  }
  return h;
}

static __always_inline void record_alloc(void *ctx, struct lw_target *t, __u32 tgid,
                                         __u32 kind, __u64 addr, __u64 size, __u64 alloc_ns,
                                         __u64 stack_hash)
{
  struct lw_live_key key = {.tgid = tgid, .kind = kind, .addr = addr};
  struct lw_live_val val = {.size = size, .alloc_ns = alloc_ns, .stack_hash = stack_hash};
  __u32 flags = 0;
  if (bpf_map_lookup_elem(&live, &key)) {
    /* The allocator handed out an address we still think is live: its free
     * was missed (before attach, or lost). Retire the old record. */
    count(LW_CNT_MISSED_FREE);
    flags |= LW_EVF_REPLACED;
  }
  if (bpf_map_update_elem(&live, &key, &val, BPF_ANY)) {
    count(LW_CNT_LIVE_INSERT_FAILED);
    if (flags & LW_EVF_REPLACED)
      bpf_map_delete_elem(&live, &key);
    /* Tell the daemon the old record is gone; the new one is untracked. */
    if (flags & LW_EVF_REPLACED)
      emit(t, LW_EV_FREE, tgid, kind, addr, 0, 0, 0, LW_EVF_REPLACED);
    return;
  }
  emit(t, LW_EV_ALLOC, tgid, kind, addr, size, alloc_ns, stack_hash, flags);
}

/* Retires the record at exactly (tgid, kind, addr). Returns its size, or -1. */
static __always_inline long retire(struct lw_target *t, __u32 tgid, __u32 kind, __u64 addr)
{
  struct lw_live_key key = {.tgid = tgid, .kind = kind, .addr = addr};
  struct lw_live_val *v = bpf_map_lookup_elem(&live, &key);
  if (!v)
    return -1;
  __u64 size = v->size, alloc_ns = v->alloc_ns;
  /* A concurrent free of the same pointer (a double free in the target)
   * loses this race; only the winner reports it. */
  if (bpf_map_delete_elem(&live, &key))
    return -1;
  emit(t, LW_EV_FREE, tgid, kind, addr, size, alloc_ns, 0, 0);
  return (long)size;
}

#define LW_UNMAP_SCAN_PAGES 256

/* The tracked mmap region containing `addr`: an exact start, or a start up
 * to LW_UNMAP_SCAN_PAGES pages below (a munmap inside a region). */
static __always_inline struct lw_live_val *find_region(__u32 tgid, __u64 addr, __u64 *start)
{
  struct lw_live_key key = {.tgid = tgid, .kind = LW_KIND_MMAP, .addr = addr};
  struct lw_live_val *v = bpf_map_lookup_elem(&live, &key);
  if (v) {
    *start = addr;
    return v;
  }
  for (int i = 1; i <= LW_UNMAP_SCAN_PAGES; i++) {
    __u64 s = addr - (__u64)i * LW_PAGE_SIZE;
    if (s > addr)
      return 0; /* wrapped below 0 */
    key.addr = s;
    v = bpf_map_lookup_elem(&live, &key);
    if (v) {
      if (s + v->size <= addr)
        return 0; /* the nearest region below ends before addr */
      *start = s;
      return v;
    }
  }
  return 0;
}

/* munmap of [addr, addr+len): retires or cuts the tracked regions it
 * covers. A cut keeps the head in place (same key) and re-keys the tail;
 * the daemon mirrors it from one PARTIAL event. */
static __always_inline void unmap_range(struct lw_target *t, __u32 tgid, __u64 addr, __u64 len)
{
  for (int i = 0; i < LW_UNMAP_MAX_RECORDS; i++) {
    if (len == 0)
      return;
    __u64 start = 0;
    struct lw_live_val *p = find_region(tgid, addr, &start);
    if (!p) {
      count(LW_CNT_MUNMAP_UNKNOWN);
      return;
    }
    struct lw_live_val v = *p;
    __u64 off = addr - start;
    __u64 cut = v.size - off;
    if (cut > len)
      cut = len;
    struct lw_live_key key = {.tgid = tgid, .kind = LW_KIND_MMAP, .addr = start};
    if (off == 0 && cut == v.size) {
      if (bpf_map_delete_elem(&live, &key) == 0)
        emit(t, LW_EV_FREE, tgid, LW_KIND_MMAP, start, v.size, v.alloc_ns, 0, 0);
    } else {
      count(LW_CNT_MUNMAP_PARTIAL);
      __u64 tail = v.size - off - cut;
      if (tail) {
        struct lw_live_key tail_key = {.tgid = tgid, .kind = LW_KIND_MMAP, .addr = addr + cut};
        struct lw_live_val tail_val = {
            .size = tail, .alloc_ns = v.alloc_ns, .stack_hash = v.stack_hash};
        if (bpf_map_update_elem(&live, &tail_key, &tail_val, BPF_ANY))
          count(LW_CNT_LIVE_INSERT_FAILED);
      }
      if (off)
        p->size = off; /* the head stays under its key */
      else
        bpf_map_delete_elem(&live, &key);
      emit(t, LW_EV_FREE, tgid, LW_KIND_MMAP, start, cut, v.alloc_ns, off, LW_EVF_PARTIAL);
    }
    addr += cut;
    len -= cut;
  }
}

/* ---------------------------------------------------------------------------
 * Allocator entry/return.
 */

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
  struct task_struct *task = bpf_get_current_task_btf();
  return BPF_CORE_READ(task, mm, uprobes_state.xol_area, vaddr);
}

/* The kernel's uretprobe nesting limit (MAX_URETPROBE_DEPTH, 64, in
 * include/linux/uprobes.h). */
#define LW_URETPROBE_MAX_DEPTH 64

/* Return instances the kernel holds for this thread. prepare_uretprobe()
 * installs no return probe at the limit, and it checks the limit before it
 * drops the instances a longjmp left behind: a thread that longjmps (or
 * throws) out of 64 or more nested return-probed calls gets no return probe
 * again until it exits (decision 26). */
static __always_inline __u32 uretprobe_depth(void)
{
  struct task_struct *task = bpf_get_current_task_btf();
  struct uprobe_task *u = BPF_CORE_READ(task, utask);
  if (!u)
    return 0;
  return BPF_CORE_READ(u, depth);
}

/* Whether the allocator call that stored c is still on the stack: its
 * return slot (at its entry sp) still holds what the kernel left there, the
 * uretprobe trampoline, or its own return address where no return probe was
 * installed. After a longjmp or an exception out of the call, any call made
 * from at or above that frame overwrites the slot (decision 26). */
static __always_inline bool alloc_frame_alive(struct lw_ctx_val *c)
{
  __u64 slot = 0;
  if (bpf_probe_read_user(&slot, sizeof(slot), (void *)c->sp))
    return false;
  return slot == ((c->flags & LW_CTXF_NO_RETURN) ? c->ret_addr : uretprobe_trampoline());
}

static __always_inline int alloc_enter(struct pt_regs *ctx, __u32 func, __u64 arg0, __u64 size)
{
  __u64 id = bpf_get_current_pid_tgid();
  __u32 tgid = id >> 32;
  struct lw_target *t = bpf_map_lookup_elem(&targets, &tgid);
  if (!t || !(t->flags & LW_TARGET_HEAP))
    return 0;
  __sync_fetch_and_add(&t->hits, 1); /* overhead: the governor's rate */

  __u64 sp = PT_REGS_SP(ctx);
  __u64 ret_addr = 0;
  bpf_probe_read_user(&ret_addr, sizeof(ret_addr), (void *)sp);
  __u64 now = bpf_ktime_get_ns();

  struct lw_ctx_key key = {.tid = (__u32)id, .cls = LW_CTX_ALLOC};
  struct lw_ctx_val *c = bpf_map_lookup_elem(&ctxs, &key);
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
  struct lw_ctx_val v = {
      .sp = sp, .ret_addr = ret_addr, .start_ns = now, .arg0 = arg0, .arg1 = size, .func = func};
  if (uretprobe_depth() >= LW_URETPROBE_MAX_DEPTH) {
    /* Its return will not be seen, so it cannot be accounted; the context
     * is still stored, so that the calls it makes are known as nested. */
    v.flags |= LW_CTXF_NO_RETURN;
    count(LW_CNT_RET_PROBE_OMITTED);
  }
  struct lw_ctx_key new_key = {.tid = (__u32)id, .cls = LW_CTX_NEW};
  struct lw_ctx_val *n = bpf_map_lookup_elem(&ctxs, &new_key);
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
  if (bpf_map_update_elem(&ctxs, &key, &v, BPF_ANY))
    count(LW_CNT_CTX_INSERT_FAILED);
  return 0;
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

static __always_inline int new_enter(struct pt_regs *ctx, __u64 size)
{
  __u64 id = bpf_get_current_pid_tgid();
  __u32 tgid = id >> 32;
  struct lw_target *t = bpf_map_lookup_elem(&targets, &tgid);
  if (!t || !(t->flags & LW_TARGET_HEAP))
    return 0;
  __sync_fetch_and_add(&t->hits, 1); /* overhead: the governor's rate */
  __u64 sp = PT_REGS_SP(ctx);
  __u64 now = bpf_ktime_get_ns();
  struct lw_ctx_key key = {.tid = (__u32)id, .cls = LW_CTX_NEW};
  struct lw_ctx_val *c = bpf_map_lookup_elem(&ctxs, &key);
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
  if (bpf_map_update_elem(&ctxs, &key, &v, BPF_ANY))
    count(LW_CNT_CTX_INSERT_FAILED);
  return 0;
}

/* Entry-only: it may sit past the function's NULL check (see the attacher's
 * probe placement), so it sees only non-NULL pointers there. */
static __always_inline int free_enter(__u64 ptr)
{
  if (!ptr)
    return 0;
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  struct lw_target *t = bpf_map_lookup_elem(&targets, &tgid);
  if (!t || !(t->flags & LW_TARGET_HEAP))
    return 0;
  __sync_fetch_and_add(&t->hits, 1); /* overhead: the governor's rate */
  if (retire(t, tgid, LW_KIND_HEAP, ptr) < 0)
    /* overhead: with sampling, most unknown frees are of unsampled blocks */
    count(t->sample_mean ? LW_CNT_FREE_UNSAMPLED : LW_CNT_FREE_UNKNOWN);
  return 0;
}

#include "cuda.bpf.h"

static __always_inline int syscall_site(struct pt_regs *ctx, __u32 func, __u64 cookie);
static __always_inline int loader_changed(void);

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
  }
  if (func >= LW_FUNC_CUDA_FIRST && func <= LW_FUNC_CUDA_LAST)
    return cuda_enter(ctx, (__u32)func);
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

SEC("uretprobe")
int BPF_KRETPROBE(lw_alloc_return, __u64 ret)
{
  /* CUDA return probes carry their lw_func as the cookie too. */
  __u64 func = bpf_get_attach_cookie(ctx);
  if (func >= LW_FUNC_CUDA_FIRST && func <= LW_FUNC_CUDA_LAST)
    return cuda_return(ctx, (__u32)func, ret);
  __u64 id = bpf_get_current_pid_tgid();
  __u32 tgid = id >> 32;
  struct lw_target *t = bpf_map_lookup_elem(&targets, &tgid);
  if (!t || !(t->flags & LW_TARGET_HEAP))
    return 0;

  struct lw_ctx_key key = {.tid = (__u32)id, .cls = LW_CTX_ALLOC};
  struct lw_ctx_val *c = bpf_map_lookup_elem(&ctxs, &key);
  if (!c) {
    count(LW_CNT_RETURN_NO_CTX);
    return 0;
  }
  /* After `ret`, sp is one slot above the entry sp. Anything else is the
   * return of a nested call whose entry we skipped. */
  if (PT_REGS_SP(ctx) != c->sp + 8)
    return 0;
  struct lw_ctx_val v = *c;
  bpf_map_delete_elem(&ctxs, &key);

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
    if (inc > 0)
      record_alloc(ctx, t, tgid, LW_KIND_MMAP, ret, (__u64)inc, bpf_ktime_get_ns(),
                   capture_stack(ctx, 0, 0));
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
  __u64 stack = v.arg2 ? capture_stack(ctx, v.arg2, LW_STACK_RET_HINT_TRUSTED)
                       : capture_stack(ctx, 0, 0);
  record_alloc(ctx, t, tgid, LW_KIND_HEAP, ptr, size, bpf_ktime_get_ns(), stack);
  return 0;
}

/* ---------------------------------------------------------------------------
 * Anonymous mmap/munmap/mremap/brk, from raw syscall tracepoints (no kprobes
 * or tracefs needed). Syscalls made inside an allocator call in flight are
 * the allocator's own (glibc maps large chunks) and are not counted twice.
 */

static __always_inline bool inside_alloc_call(__u32 tid, __u64 user_sp)
{
  struct lw_ctx_key key = {.tid = tid, .cls = LW_CTX_ALLOC};
  struct lw_ctx_val *c = bpf_map_lookup_elem(&ctxs, &key);
  if (c && bpf_ktime_get_ns() - c->start_ns < LW_CTX_STALE_NS && user_sp < c->sp &&
      alloc_frame_alive(c))
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
 * address, arg1 = new size, arg2 = old size; brk: arg2 = the break before
 * the call, filled by the caller. */
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

/* Accounts a finished call that syscall_wanted() accepted; `ret` is the
 * kernel's result, `user_sp` the caller's stack pointer in the wrapper. */
static __always_inline void apply_syscall(void *ctx, struct lw_target *t, __u32 tgid, long nr,
                                          const struct lw_ctx_val *v, long ret, __u64 user_sp)
{
  bool failed = ret < 0 && ret > -4096;
  switch (nr) {
  case LW_NR_MMAP: {
    if (failed)
      return;
    __u64 len = (v->arg0 + LW_PAGE_SIZE - 1) & ~(LW_PAGE_SIZE - 1);
    if (v->arg2) {
      /* glibc's mmap wrapper has no frame: the word at the user sp is the
       * return address into its caller (validated by the daemon). */
      __u64 hint = 0;
      bpf_probe_read_user(&hint, sizeof(hint), (void *)user_sp);
      record_alloc(ctx, t, tgid, LW_KIND_MMAP, (__u64)ret, len, bpf_ktime_get_ns(),
                   capture_stack(ctx, hint ? hint : 1, LW_STACK_RET_HINT));
    } else {
      emit(t, LW_EV_MAP_EXEC, tgid, LW_KIND_MMAP, (__u64)ret, len, 0, 0, 0);
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
    __u64 old_brk = v->arg2, new_brk = (__u64)ret;
    if (!old_brk)
      return; /* the break before the call is unknown */
    if (new_brk > old_brk)
      record_alloc(ctx, t, tgid, LW_KIND_MMAP, old_brk, new_brk - old_brk, bpf_ktime_get_ns(),
                   capture_stack(ctx, 0, 0));
    else if (new_brk < old_brk)
      unmap_range(t, tgid, new_brk, old_brk - new_brk);
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
  long nr = func == LW_FUNC_SYS_MMAP     ? LW_NR_MMAP
            : func == LW_FUNC_SYS_MUNMAP ? LW_NR_MUNMAP
            : func == LW_FUNC_SYS_MREMAP ? LW_NR_MREMAP
                                         : LW_NR_BRK;
  __u64 sp = PT_REGS_SP(ctx);
  struct lw_ctx_val v = {};
  if (!syscall_wanted(t, (__u32)id, nr, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx),
                      PT_REGS_PARM3(ctx), ctx->r10, sp, &v))
    return 0;
  if (nr == LW_NR_BRK) {
    /* glibc stores the new break in __curbrk only after this point. */
    __u64 curbrk = PT_REGS_IP(ctx) + (__u64)((__s64)cookie >> 16);
    if (bpf_probe_read_user(&v.arg2, sizeof(v.arg2), (void *)curbrk))
      v.arg2 = 0;
  }
  apply_syscall(ctx, t, tgid, nr, &v, (long)PT_REGS_RC(ctx), sp);
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
  emit(t, LW_EV_MAP_EXEC, tgid, LW_KIND_MMAP, 0, 0, 0, 0, 0);
  return 0;
}

/* The raw syscall tracepoints: only for a target whose system calls bypass
 * any wrapper we can probe (Go, stripped static binaries). They run on
 * every system call of every process while attached (decision 25), so the
 * daemon attaches them only while such a target is traced (decision 29). */
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
  struct lw_ctx_key key = {.tid = (__u32)id, .cls = LW_CTX_SYSCALL};
  if (bpf_map_update_elem(&ctxs, &key, &v, BPF_ANY))
    count(LW_CNT_CTX_INSERT_FAILED);
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
  struct lw_ctx_key key = {.tid = (__u32)id, .cls = LW_CTX_SYSCALL};
  struct lw_ctx_val *c = bpf_map_lookup_elem(&ctxs, &key);
  if (!c)
    return 0;
  struct lw_ctx_val v = *c;
  bpf_map_delete_elem(&ctxs, &key);
  if (v.func != nr)
    return 0;
  __u32 tgid = id >> 32;
  struct lw_target *t = bpf_map_lookup_elem(&targets, &tgid);
  if (!t)
    return 0;
  apply_syscall(ctx, t, tgid, nr, &v, (long)ctx->args[1], BPF_CORE_READ(regs, sp));
  return 0;
}

/* ---------------------------------------------------------------------------
 * Process lifecycle.
 */

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

SEC("tp_btf/sched_process_exec")
int BPF_PROG(lw_exec, struct task_struct *p)
{
  /* The thread keeps its tid across exec, but its stack is new: contexts
   * from the old image would make the new image's calls look nested. */
  drop_thread_ctxs(BPF_CORE_READ(p, pid));
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
  cuda_purge_process(t, tgid);
  emit(t, LW_EV_EXEC, tgid, 0, 0, 0, 0, 0, 0);
  return 0;
}

/* The process is gone: nothing is accounted for its pid any more (only
 * LW_TARGET_EXITED stays set), its CUDA state goes, and the daemon hears. */
static __always_inline void report_exit(struct lw_target *t, __u32 tgid, __u32 ev_flags)
{
  t->flags = LW_TARGET_EXITED;
  cuda_purge_process(t, tgid);
  emit(t, LW_EV_EXIT, tgid, 0, 0, 0, 0, 0, ev_flags);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(lw_exit, struct task_struct *p)
{
  __u32 tid = BPF_CORE_READ(p, pid);
  __u32 tgid = BPF_CORE_READ(p, tgid);
  /* Entry contexts left by this thread (longjmp out of an allocator, a
   * thread killed mid-call) die with it. */
  drop_thread_ctxs(tid);

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
     * mode, until a reconciliation noticed (docs/architecture.md, 27).
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
