/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Walk reuse for the native unwinder (bpf/lw_unwind.bpf.h;
 * decision walk-reuse). Included by lw_unwind.bpf.h after struct lw_unwind.
 */
#ifndef LW_WALK_MEMO_BPF_H_
#define LW_WALK_MEMO_BPF_H_

/* Walk reuse (decision walk-reuse). A walk is a function of
 * its start (pc, sp, the hint, and rbp when a step used it before loading
 * it from the stack), the process's mappings (maps_gen) and the user
 * memory it read. A complete walk is kept with every (address, value) it
 * read; the next walk from the same start reads those addresses again,
 * and only if every value is the same takes the kept frames: one read per
 * frame instead of a mapping lookup, a row and a step. Slots are shared
 * by all CPUs, found by the start (LW_MEMO_WAYS to a set), and guarded by a sequence
 * count (odd while a writer fills one; a reader that saw it change
 * walks). */
#define LW_MEMO_SLOTS 2048
#define LW_MEMO_WAYS 4 /* walks from one start down different chains: kept side by side */
#define LW_MEMO_MAX_READS 128
/* In lw_memo_read.addr, above any user address: */
#define LW_MEMO_READ16 (1ULL << 63) /* a 16-byte read */
#define LW_MEMO_USE0 (1ULL << 62)   /* v[0] decided the walk: it must match */
#define LW_MEMO_USE1 (1ULL << 61)   /* v[1] decided the walk: it must match */
#define LW_MEMO_ADDR ((1ULL << 61) - 1)

struct lw_memo_read {
  __u64 addr; /* | LW_MEMO_READ16 */
  __u64 v[2];
};

struct lw_walk_memo {
  __u64 seq;
  __u64 pc, sp, bp, hint, gen;
  __u32 tgid, nr, flags, nreads;
  __u32 bp_used; /* the walk used the start's rbp: it is part of the key */
  __u32 pad;
  __u8 how[LW_MAX_STACK_DEPTH];
  struct lw_frame frames[LW_MAX_STACK_DEPTH];
  struct lw_memo_read reads[LW_MEMO_MAX_READS];
};

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, LW_MEMO_SLOTS);
  __type(key, __u32);
  __type(value, struct lw_walk_memo);
} walk_memo SEC(".maps");

/* The reads of the walk in progress, on this CPU. */
struct lw_memo_rec {
  __u32 n;
  __u32 ok; /* 0: this walk cannot be kept (a trampoline, a signal frame, too many reads) */
  struct lw_memo_read reads[LW_MEMO_MAX_READS];
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct lw_memo_rec);
} walk_reads SEC(".maps");

/* Set at load time: 0 turns walk reuse off (benchmarks). */
const volatile __u32 walk_memo_on = 1;

/* Walk reuse: this walk cannot be kept. */
static __always_inline void lw_memo_forgo(struct lw_unwind *u)
{
  if (!u->recording)
    return;
  __u32 zero = 0;
  struct lw_memo_rec *rec = bpf_map_lookup_elem(&walk_reads, &zero);
  if (rec)
    rec->ok = 0;
}

/* A user read of the walk: 8 bytes at `addr`, or 16 (`pair`). `use`:
 * which values decided the walk already (LW_MEMO_USE0/1); a value loaded
 * into rbp (`to_bp`, v[0]) decides it only if a later step uses rbp. */
static __always_inline void lw_memo_note(struct lw_unwind *u, __u64 addr, const __u64 *v, bool pair,
                                         __u64 use, bool to_bp)
{
  if (!u->recording)
    return;
  __u32 zero = 0;
  struct lw_memo_rec *rec = bpf_map_lookup_elem(&walk_reads, &zero);
  if (!rec)
    return;
  __u32 n = rec->n;
  if (n >= LW_MEMO_MAX_READS) {
    rec->ok = 0;
    return;
  }
  rec->reads[n].addr = (addr & LW_MEMO_ADDR) | (pair ? LW_MEMO_READ16 : 0) | use;
  rec->reads[n].v[0] = v[0];
  rec->reads[n].v[1] = pair ? v[1] : 0;
  rec->n = n + 1;
  if (to_bp)
    u->bp_src = (__u8)n;
}

/* A step uses rbp: the start's (part of the key then) or a value read
 * from the stack (which must then match). */
static __always_inline void lw_memo_bp_used(struct lw_unwind *u)
{
  if (u->bp_initial) {
    u->bp_used = 1;
    return;
  }
  if (!u->recording || u->bp_src >= LW_MEMO_MAX_READS)
    return;
  __u32 zero = 0;
  struct lw_memo_rec *rec = bpf_map_lookup_elem(&walk_reads, &zero);
  __u32 i = u->bp_src;
  if (rec && i < LW_MEMO_MAX_READS)
    rec->reads[i].addr |= LW_MEMO_USE0;
}

/* Where a walk starts (walk reuse's key). */
struct lw_memo_key {
  __u64 pc, sp, bp, hint, gen;
  __u32 tgid, bp_used;
};

static __always_inline __u32 lw_memo_slot(const struct lw_memo_key *k)
{
  return (__u32)(mix64(k->pc ^ mix64(k->sp ^ ((__u64)k->tgid << 40)) ^ k->hint ^ k->gen) &
                 (LW_MEMO_SLOTS - 1) & ~(LW_MEMO_WAYS - 1));
}

/* Walk reuse: fills the scratch stack from slot `m` if it holds a walk from
 * this start whose every read gives the same value now. Returns 1 if so,
 * 0 if the slot holds another start, 2 if this start down another chain.
 * Global: verified once, not once per way. */
__noinline int lw_memo_take(struct lw_walk_memo *m, struct lw_stack *s, const struct lw_memo_key *k)
{
  if (!m || !s || !k)
    return 0;
  __u64 seq = *(volatile __u64 *)&m->seq;
  if (seq & 1)
    return 0;
  if (m->tgid != k->tgid || m->pc != k->pc || m->sp != k->sp || m->hint != k->hint ||
      m->gen != k->gen)
    return 0;
  if (m->bp_used && m->bp != k->bp)
    return 2;
  __u32 nr = m->nr, n = m->nreads;
  if (nr == 0 || nr > LW_MAX_STACK_DEPTH || n > LW_MEMO_MAX_READS)
    return 0;
  /* The reads go up the stack, mostly within one block: the window's
   * test is made here, not through a call per read (decision user-read-window). */
  __u32 zero = 0;
  struct lw_stack_window *win = bpf_map_lookup_elem(&stack_window, &zero);
  __u64 me = bpf_get_current_pid_tgid();
  for (__u32 i = 0; i < LW_MEMO_MAX_READS; i++) {
    if (i >= n)
      break;
    __u64 a = m->reads[i].addr;
    /* A value that decided nothing (an rbp saved and never used) is not
     * read again. */
    if (!(a & (LW_MEMO_READ16 | LW_MEMO_USE0)))
      continue;
    __u32 len = (a & LW_MEMO_READ16) ? 16 : 8;
    __u64 addr = a & LW_MEMO_ADDR;
    struct lw_u64x2 v = {};
    if (!lw_window_peek(win, me, addr, len, &v) && lw_uread16(addr, &v, len))
      return 2;
    if (((a & LW_MEMO_USE0) && v.v[0] != m->reads[i].v[0]) ||
        ((a & LW_MEMO_USE1) && v.v[1] != m->reads[i].v[1]))
      return 2;
  }
  /* Map value to map value: one copy each, not a loop. */
  bpf_probe_read_kernel(s->frames, sizeof(s->frames), m->frames);
  bpf_probe_read_kernel(s->how, sizeof(s->how), m->how);
  __u32 flags = m->flags;
  /* x86-64 keeps loads in order: a writer that began meanwhile has made
   * the count odd or moved it on. */
  if (*(volatile __u64 *)&m->seq != seq)
    return 2;
  s->nr = nr;
  s->flags = flags;
  return 1;
}

/* Walk reuse: keeps the walk just made (in the scratch stack, its reads
 * in walk_reads) in slot `m`, unless another CPU is writing it. Global:
 * verified once. */
__noinline int lw_memo_keep(struct lw_walk_memo *m, struct lw_stack *s, struct lw_memo_rec *rec,
                                    const struct lw_memo_key *k)
{
  if (!m || !s || !rec || !k)
    return 0;
  __u64 seq = m->seq;
  if ((seq & 1) || __sync_val_compare_and_swap(&m->seq, seq, seq + 1) != seq)
    return 0;
  __u32 n = rec->n;
  if (n > LW_MEMO_MAX_READS)
    n = LW_MEMO_MAX_READS;
  m->tgid = k->tgid;
  m->pc = k->pc;
  m->sp = k->sp;
  m->bp = k->bp;
  m->hint = k->hint;
  m->gen = k->gen;
  m->bp_used = k->bp_used;
  m->nr = s->nr;
  m->flags = s->flags;
  m->nreads = n;
  bpf_probe_read_kernel(m->frames, sizeof(m->frames), s->frames);
  bpf_probe_read_kernel(m->how, sizeof(m->how), s->how);
  if (n)
    bpf_probe_read_kernel(m->reads, n * sizeof(struct lw_memo_read), rec->reads);
  __sync_fetch_and_add(&m->seq, 1);
  return 1;
}

#endif /* LW_WALK_MEMO_BPF_H_ */
