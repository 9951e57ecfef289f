/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The native unwinder (decision cfi-unwinding): user stacks from
 * each object's call-frame information, compiled by the daemon into sorted
 * rows (bpf/lw_unwind_abi.h), with frame pointers as the fallback per frame.
 *
 * Per frame: the pc's mapping comes from bpf_find_vma() (the object's inode
 * and the pc's file offset), the object's table from unwind_objs, and the
 * row in effect from a page index plus a bounded binary search. The row
 * says where the CFA is (rsp or rbp plus an offset, a PLT stub, a signal
 * frame...) and where the caller's rbp was saved; the return address is at
 * CFA - 8. Where an object has no table (not built yet, refused by the
 * memory bound, or none at all), the frame pointer is tried, and its frame
 * is kept only if the return address lies in an executable mapping right
 * after a call instruction: otherwise the stack ends there, and says why.
 * A return slot holding the uretprobe trampoline (a return-probed function
 * further up) is replaced by the real return address the kernel keeps for
 * it (utask->return_instances).
 */
#ifndef LW_UNWIND_BPF_H_
#define LW_UNWIND_BPF_H_

#include "lw_common.bpf.h"
#include "lw_python.bpf.h"
#include "lw_uread.bpf.h"

/* What a step returns when it found the caller; any other value is the
 * enum lw_stack_end the stack ends with (LW_END_COMPLETE included). */
#define LW_STEP_OK 0xffffffffu

/* Frames found by bpf_loop, one per iteration. */
#define LW_UNWIND_LOOPS LW_MAX_STACK_DEPTH
/* Return instances looked at for one trampoline slot. */
#define LW_UNWIND_MAX_RI 16
/* A frame pointer further than this above sp is not a frame. */
#define LW_FP_MAX_DISTANCE (64ULL << 20)
/* lw_unwind_stack's hint argument: bit 63 says the pc is a return address. */
#define LW_HINT_AT_RETURN (1ULL << 63)
/* Or'ed into the hint too: stop at the first frame in CPython's evaluation
 * loop (the caller read the thread's Python frames whole). Part of walk
 * reuse's key, as the whole hint is. */
#define LW_HINT_STOP_PY (1ULL << 62)

/* Inner maps: one table per object (sized by the daemon when it creates
 * them; BPF_F_INNER_MAP lets their sizes differ). */
struct lw_rows_map {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(map_flags, BPF_F_INNER_MAP);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct lw_unwind_row);
};

/* The inner maps' value types must be complete in the object's BTF, which
 * a pointer alone does not make them: libbpf sizes the inner map template
 * from it. */
struct lw_unwind_row lw_btf_unwind_row SEC(".maps.btf_anchor");

struct lw_pages_map {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(map_flags, BPF_F_INNER_MAP);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u32);
};

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __array(values, struct lw_rows_map);
} unwind_rows SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __array(values, struct lw_pages_map);
} unwind_pages SEC(".maps");

/* Objects the daemon registered: (inode, device) -> table state. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, struct lw_obj_key);
  __type(value, struct lw_unwind_obj);
} unwind_objs SEC(".maps");

/* A per-CPU, direct-mapped cache of frames already resolved: (process,
 * its mappings' generation, pc) -> the object's identity, the file offset
 * and the row in effect. Allocations come from a few hot call sites, so
 * most frames are found here without a mapping lookup or a table search.
 * Only rows that step on their own (no frame-pointer fallback) are kept;
 * the row is a copy, so a table freed meanwhile does not matter. */
#define LW_FRAME_CACHE_SLOTS 4096
struct lw_frame_cache {
  __u64 key;   /* pc, with bit 63 set when it is a return address */
  __u64 gen;   /* lw_target.maps_gen when cached */
  __u64 ino;
  __u32 tgid;
  __u32 dev;
  __u32 off;
  struct lw_unwind_row row;
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, LW_FRAME_CACHE_SLOTS);
  __type(key, __u32);
  __type(value, struct lw_frame_cache);
} frame_cache SEC(".maps");

/* Set at load time: 0 turns the frame cache off (benchmarks: the cost of
 * frames never seen before). */
const volatile __u32 frame_cache_on = 1;

/* Set at load time: 1 = unwind with call-frame information (default),
 * 0 = the kernel's frame-pointer walk (bpf_get_stack), as before. */
const volatile __u32 unwind_cfi = 1;

/* The user registers the unwinder starts from. */
struct lw_regs {
  __u64 ip, sp, bp;
};

struct lw_unwind {
  __u64 pc, sp, bp;
  /* The mapping of the last pc looked up (most frames share one). */
  __u64 vma_start, vma_end, vma_pgoff, vma_ino;
  __u32 vma_dev, vma_exec;
  __u32 obj_state;        /* enum lw_table_state, or ~0 when not registered */
  __u32 obj_table, obj_nrows, obj_npages;
  __u64 tramp;            /* the uretprobe trampoline's address, 0 if none */
  struct return_instance *ri;
  __u32 end;              /* enum lw_stack_end */
  __u32 uses_fp;
  __u64 hint;             /* operator new's return address, or 0 */
  __u64 gen;              /* lw_target.maps_gen, 0: no frame cache */
  __u32 tgid;
  __u32 pad2;
  __u8 how;               /* how the current pc was found (enum lw_unwound) */
  __u8 pc_is_return;      /* pc is a return address: look up pc - 1 */
  __u8 bp_initial;        /* bp is still the start's rbp */
  __u8 bp_used;           /* a step used the start's rbp */
  __u8 recording;         /* the reads go to walk_reads */
  __u8 bp_src;            /* the read whose v[0] bp is (walk reuse), 0xff: none */
  __u8 pad[2];
  /* Where the walk stops (LW_HINT_STOP_PY): CPython's evaluation loop,
   * file offsets (stop_lo, stop_hi] of the object (stop_dev, stop_ino);
   * stop_ino 0: nowhere. */
  __u64 stop_ino;
  __u32 stop_dev, stop_lo, stop_hi, pad3;
};

#include "lw_walk_memo.bpf.h"

/* What bpf_find_vma()'s callback reports (its context must live on the
 * stack). */
struct lw_vma_info {
  __u64 start, end, pgoff, ino;
  __u32 dev, exec;
};

static long lw_vma_cb(struct task_struct *task, struct vm_area_struct *vma,
                      struct lw_vma_info *v)
{
  v->start = vma->vm_start;
  v->end = vma->vm_end;
  v->pgoff = vma->vm_pgoff;
  v->exec = (vma->vm_flags & 0x4 /* VM_EXEC */) ? 1 : 0;
  struct file *f = vma->vm_file;
  if (f) {
    /* Direct loads (fault-safe, no helper call): this runs for every
     * mapping a walk enters. */
    struct inode *inode = f->f_inode;
    v->ino = inode->i_ino;
    v->dev = inode->i_sb->s_dev;
  } else {
    v->ino = 0;
    v->dev = 0;
  }
  return 0;
}

/* Makes u->vma_* describe the mapping of `pc`. Returns 0, or an enum
 * lw_stack_end why not. */
static __always_inline __u32 lw_find_mapping(struct lw_unwind *u, __u64 pc)
{
  if (pc >= u->vma_start && pc < u->vma_end)
    return 0;
  struct task_struct *task = bpf_get_current_task_btf();
  struct lw_vma_info v = {};
  long err = bpf_find_vma(task, pc, lw_vma_cb, &v, 0);
  if (err == -16 /* EBUSY: the mmap lock is held for writing */) {
    u->vma_start = u->vma_end = 0;
    return LW_END_VMA_BUSY;
  }
  if (err) {
    u->vma_start = u->vma_end = 0;
    return LW_END_UNMAPPED;
  }
  u->vma_start = v.start;
  u->vma_end = v.end;
  u->vma_pgoff = v.pgoff;
  u->vma_ino = v.ino;
  u->vma_dev = v.dev;
  u->vma_exec = v.exec;
  u->obj_state = ~0u;
  if (u->vma_ino) {
    struct lw_obj_key key = {.ino = u->vma_ino, .dev = u->vma_dev};
    struct lw_unwind_obj *o = bpf_map_lookup_elem(&unwind_objs, &key);
    if (o) {
      u->obj_state = o->state;
      u->obj_table = o->table;
      u->obj_nrows = o->nrows;
      u->obj_npages = o->npages;
    }
  }
  return 0;
}

/* The row in effect at file offset `off` of the current object, or NULL.
 * The same steps as lw::find_row() (core/unwind/unwind_table.h), which the unit
 * tests check against readelf. */
static __always_inline struct lw_unwind_row *lw_find_row(struct lw_unwind *u, __u32 off)
{
  __u32 table = u->obj_table;
  void *rows = bpf_map_lookup_elem(&unwind_rows, &table);
  void *pages = bpf_map_lookup_elem(&unwind_pages, &table);
  if (!rows || !pages || u->obj_nrows == 0)
    return 0;
  __u32 page = off >> LW_UNWIND_PAGE_SHIFT;
  if (page >= u->obj_npages)
    page = u->obj_npages - 1;  /* past the last row: the search finds it (a NONE row) */
  __u32 *p = bpf_map_lookup_elem(pages, &page);
  if (!p)
    return 0;
  __u32 lo = *p, hi = u->obj_nrows - 1;
  __u32 next = page + 1;
  if (next < u->obj_npages) {
    __u32 *q = bpf_map_lookup_elem(pages, &next);
    if (q && *q < hi)
      hi = *q;
  }
  struct lw_unwind_row *r = bpf_map_lookup_elem(rows, &lo);
  if (!r || r->pc > off)
    return 0;  /* before the first row */
  /* Last row with pc <= off in [lo, hi]: invariant rows[lo].pc <= off. */
  for (int i = 0; i < LW_UNWIND_MAX_SEARCH_STEPS; i++) {
    if (lo >= hi)
      break;
    __u32 mid = lo + (hi - lo + 1) / 2;
    struct lw_unwind_row *m = bpf_map_lookup_elem(rows, &mid);
    if (!m)
      return 0;
    if (m->pc <= off)
      lo = mid;
    else
      hi = mid - 1;
  }
  return bpf_map_lookup_elem(rows, &lo);
}

/* The real return address behind a trampoline slot at `slot`. */
static __always_inline __u64 lw_untrampoline(struct lw_unwind *u, __u64 slot, __u64 ra)
{
  if (!u->tramp || ra != u->tramp)
    return ra;
  lw_memo_forgo(u);  /* the real address comes from the kernel, not the stack */
  struct return_instance *ri = u->ri;
  for (int i = 0; i < LW_UNWIND_MAX_RI; i++) {
    if (!ri)
      break;
    if (BPF_CORE_READ(ri, stack) == slot) {
      __u64 orig = BPF_CORE_READ(ri, orig_ret_vaddr);
      u->ri = BPF_CORE_READ(ri, next);
      return orig;
    }
    ri = BPF_CORE_READ(ri, next);
  }
  count(LW_CNT_UNWIND_TRAMPOLINE_LOST);
  return 0;
}

/* Whether the bytes before `ra` end with a call instruction: e8 rel32,
 * ff /2 with any addressing form (2 to 7 bytes, optional REX prefix). */
static __always_inline bool lw_after_call(__u64 ra)
{
  __u8 b[8] = {};
  if (ra < 8 || bpf_probe_read_user(b, sizeof(b), (void *)(ra - 8)))
    return false;
  if (b[3] == 0xe8)
    return true;  /* call rel32 */
  /* ff /2: the ModRM byte's reg field is 2. Lengths: 2 (reg or [reg]),
   * 3 (+disp8 or SIB), 4 (SIB+disp8), 6 (disp32 or rip-relative), 7 (SIB+disp32). */
  for (int len = 2; len <= 7; len++) {
    int at = 8 - len;
    if (at < 0 || at > 6)
      continue;
    if (b[at] == 0xff && ((b[at + 1] >> 3) & 7) == 2)
      return true;
  }
  return false;
}

/* Steps from the current frame to its caller through the frame pointer.
 * Returns LW_STEP_OK, or why the stack ends here. */
static __always_inline __u32 lw_step_fp(struct lw_unwind *u, __u32 why_no_table)
{
  __u64 bp = u->bp;
  if (bp < u->sp || bp - u->sp > LW_FP_MAX_DISTANCE || (bp & 7))
    return why_no_table;
  struct lw_u64x2 frame = {};
  if (lw_uread16(bp, &frame, 16))
    return why_no_table;
  __u64 ra = lw_untrampoline(u, bp + 8, frame.v[1]);
  if (!ra)
    return why_no_table;
  /* A frame pointer through code that does not keep one points anywhere:
   * keep the frame only if it returns into code, right after a call. */
  if (lw_find_mapping(u, ra) || !u->vma_exec || !lw_after_call(ra))
    return why_no_table;
  u->bp = frame.v[0];
  u->sp = bp + 16;
  u->pc = ra;
  u->how = LW_UNWOUND_FP;
  u->uses_fp = 1;
  u->pc_is_return = 1;
  return LW_STEP_OK;
}

/* The leaf of an entry probe (a syscall wrapper's site) in an object with
 * no table yet: a frameless function (glibc's mmap) keeps its return
 * address at sp. Taken only if it returns into code right after a call;
 * otherwise the frame pointer is tried. Returns LW_STEP_OK or why not. */
static __always_inline __u32 lw_step_leaf_slot(struct lw_unwind *u, __u32 why_no_table)
{
  struct lw_u64x2 slot = {};
  if (lw_uread16(u->sp, &slot, 8))
    return why_no_table;
  __u64 ra = lw_untrampoline(u, u->sp, slot.v[0]);
  if (!ra || lw_find_mapping(u, ra) || !u->vma_exec || !lw_after_call(ra))
    return why_no_table;
  u->sp += 8;
  u->pc = ra;
  u->how = LW_UNWOUND_FP;
  u->uses_fp = 1;
  u->pc_is_return = 1;
  return LW_STEP_OK;
}

/* The ucontext a signal handler returns through: the kernel pushed it at
 * the handler's sp, and __restore_rt runs with rsp pointing at it
 * (x86-64 rt_sigframe minus its return address; uc_mcontext at 40). */
#define LW_UC_MCONTEXT 40
#define LW_SC_RBP (LW_UC_MCONTEXT + 10 * 8)
#define LW_SC_RSP (LW_UC_MCONTEXT + 15 * 8)
#define LW_SC_RIP (LW_UC_MCONTEXT + 16 * 8)

/* Steps from the current frame to its caller with the row in effect.
 * Returns LW_STEP_OK, LW_END_NO_CFI when the row gives no rule (the caller
 * tries the frame pointer), or why the stack ends here. */
static __always_inline __u32 lw_step_cfi(struct lw_unwind *u, struct lw_unwind_row *r)
{
  __u64 cfa;
  if (r->cfa_type == LW_CFA_RBP || r->cfa_type == LW_CFA_DEREF_RBP)
    lw_memo_bp_used(u);
  switch (r->cfa_type) {
  case LW_CFA_RSP:
    cfa = u->sp + (__s64)r->cfa_offset;
    break;
  case LW_CFA_RBP:
    cfa = u->bp + (__s64)r->cfa_offset;
    break;
  case LW_CFA_PLT:
    /* A PLT entry pushes before it jumps: past the push, the CFA is 8 more. */
    cfa = u->sp + 8 + ((u->pc & 15) >= (__u64)r->cfa_offset ? 8 : 0);
    break;
  case LW_CFA_DEREF_RBP: {
    struct lw_u64x2 v = {};
    if (lw_uread16(u->bp + (__s64)r->cfa_offset, &v, 8))
      return LW_END_READ_FAILED;
    lw_memo_note(u, u->bp + (__s64)r->cfa_offset, v.v, false, LW_MEMO_USE0, false);
    cfa = v.v[0];
    break;
  }
  case LW_CFA_SIGNAL: {
    lw_memo_forgo(u);
    /* rbp, (rbx, rdx, rax, rcx skipped), rsp, rip */
    struct lw_u64x2 rbp = {}, rsp_rip = {};
    if (lw_uread16(u->sp + LW_SC_RBP, &rbp, 8) || lw_uread16(u->sp + LW_SC_RSP, &rsp_rip, 16))
      return LW_END_READ_FAILED;
    u->bp = rbp.v[0];
    u->sp = rsp_rip.v[0];
    u->pc = rsp_rip.v[1];
    u->how = LW_UNWOUND_CFI;
    u->pc_is_return = 0;  /* the interrupted instruction itself */
    return LW_STEP_OK;
  }
  case LW_CFA_END:
    return LW_END_COMPLETE;
  default:
    return LW_END_NO_CFI;  /* NONE or UNSUPPORTED: the caller tries the frame pointer */
  }
  /* rbp saved right below the return address (push %rbp first, the usual
   * prologue): one read for both. Each user read pays the kernel's
   * hardened-usercopy check, a sixth of a frame's cost (bench/README.md). */
  struct lw_u64x2 pair = {};
  bool rbp_below = r->rbp_type == LW_RBP_AT_CFA && r->rbp_offset == -16;
  if (rbp_below) {
    if (lw_uread16(cfa - 16, &pair, 16))
      return LW_END_READ_FAILED;
    lw_memo_note(u, cfa - 16, pair.v, true, LW_MEMO_USE1, true);
  } else {
    struct lw_u64x2 one = {};
    if (lw_uread16(cfa - 8, &one, 8))
      return LW_END_READ_FAILED;
    pair.v[1] = one.v[0];
    lw_memo_note(u, cfa - 8, one.v, false, LW_MEMO_USE0, false);
  }
  __u64 ra = lw_untrampoline(u, cfa - 8, pair.v[1]);
  if (rbp_below) {
    u->bp = pair.v[0];
    u->bp_initial = 0;
  } else if (r->rbp_type == LW_RBP_AT_CFA) {
    struct lw_u64x2 bp = {};
    if (lw_uread16(cfa + (__s64)r->rbp_offset, &bp, 8))
      return LW_END_READ_FAILED;
    lw_memo_note(u, cfa + (__s64)r->rbp_offset, bp.v, false, 0, true);
    u->bp = bp.v[0];
    u->bp_initial = 0;
  } else if (r->rbp_type != LW_RBP_SAME) {
    u->bp = 0;  /* unknown in the caller: no frame-pointer fallback above */
    u->bp_initial = 0;
    u->bp_src = 0xff;
  }
  u->sp = cfa;
  u->pc = ra;
  u->how = LW_UNWOUND_CFI;
  u->pc_is_return = 1;
  return ra ? LW_STEP_OK : LW_END_COMPLETE;  /* a zero return address ends the chain */
}

static __always_inline __u32 lw_cache_slot(__u32 tgid, __u64 key)
{
  return (__u32)(mix64(key ^ ((__u64)tgid << 40)) & (LW_FRAME_CACHE_SLOTS - 1));
}

static __always_inline bool lw_row_steps_alone(const struct lw_unwind_row *r)
{
  return r->cfa_type == LW_CFA_RSP || r->cfa_type == LW_CFA_RBP || r->cfa_type == LW_CFA_PLT ||
         r->cfa_type == LW_CFA_DEREF_RBP || r->cfa_type == LW_CFA_SIGNAL || r->cfa_type == LW_CFA_END;
}

/* Appends the frame at `pc` (its mapping becomes the current one).
 * Returns 0, or why the stack ends here. */
static __always_inline __u32 lw_push_frame(struct lw_unwind *u, struct lw_stack *s, __u64 pc,
                                           __u8 how, __u64 *off)
{
  __u32 n = s->nr;
  if (n >= LW_MAX_STACK_DEPTH)
    return LW_END_DEPTH;
  __u32 why = lw_find_mapping(u, pc);
  if (why == LW_END_VMA_BUSY) {
    /* Another thread holds the mmap lock (thread stacks, arenas): the
     * frame is kept by address, for the daemon to place with the
     * process's maps, and the stack ends here. Without it a stack that
     * meets the lock at its leaf is lost whole (stack_failed). */
    struct lw_frame *f = &s->frames[n];
    f->ino = 0;
    f->dev = (__u32)(pc >> 32);
    f->off = (__u32)pc;
    s->how[n] = how;
    s->nr = n + 1;
    return why;
  }
  if (why)
    return why;
  if (!u->vma_exec)
    return LW_END_UNMAPPED;
  *off = pc - u->vma_start + (u->vma_pgoff << 12);
  struct lw_frame *f = &s->frames[n];
  if (u->vma_ino) {
    f->ino = u->vma_ino;
    f->dev = u->vma_dev;
    f->off = (__u32)*off;
  } else {
    f->ino = 0;
    f->dev = (__u32)(pc >> 32);
    f->off = (__u32)pc;
  }
  s->how[n] = how;
  s->nr = n + 1;
  return 0;
}

/* Whether the frame just recorded is in CPython's evaluation loop, where
 * the walk stops (decision python-frames, "Where the native walk stops").
 * A return address may be its function's end: (lo, hi]. */
static __always_inline bool lw_stop_here(const struct lw_unwind *u, const struct lw_frame *f)
{
  return u->stop_ino && f->ino == u->stop_ino && f->dev == u->stop_dev && f->off > u->stop_lo &&
         f->off <= u->stop_hi;
}

/* One frame: record it, then step to its caller. Returns 1 to stop.
 * A global function, so that the verifier checks it once, not once per
 * caller and loop iteration (it held the programs over the 1M-instruction
 * limit inlined). */
__noinline int lw_unwind_frame(struct lw_unwind *u)
{
  if (!u)
    return 1;
  /* The scratch stack is looked up here: a pointer read from *u would be
   * a plain number to the verifier (u is memory to it, not our stack). */
  __u32 zero = 0;
  struct lw_stack *s = bpf_map_lookup_elem(&stack_scratch, &zero);
  if (!s)
    return 1;
  __u64 off = 0;
  __u32 why;
  /* Inside operator new: its caller's address, read at new's entry, is
   * frame 1 whatever the walk finds (libstdc++'s new keeps no frame
   * pointer, so a walk without its table would skip the caller). */
  if (s->nr == 1 && u->hint) {
    __u64 hint = u->hint;
    u->hint = 0;
    if (u->pc != hint) {
      why = lw_push_frame(u, s, hint, LW_UNWOUND_HINT, &off);
      if (why) {
        u->end = why;
        return 1;
      }
    }
  }
  __u64 ckey = u->pc | ((__u64)u->pc_is_return << 63);
  __u32 slot = lw_cache_slot(u->tgid, ckey);
  struct lw_frame_cache *c = u->gen ? bpf_map_lookup_elem(&frame_cache, &slot) : 0;
  if (c && c->key == ckey && c->gen == u->gen && c->tgid == u->tgid) {
    __u32 n = s->nr;
    if (n >= LW_MAX_STACK_DEPTH) {
      u->end = LW_END_DEPTH;
      return 1;
    }
    s->frames[n].ino = c->ino;
    s->frames[n].dev = c->dev;
    s->frames[n].off = c->off;
    s->how[n] = u->how;
    s->nr = n + 1;
    if (lw_stop_here(u, &s->frames[n])) {
      u->end = LW_END_PYTHON;
      return 1;
    }
    struct lw_unwind_row row = c->row;
    why = lw_step_cfi(u, &row);
    if (why == LW_STEP_OK)
      return 0;
    u->end = why;
    return 1;
  }
  why = lw_push_frame(u, s, u->pc, u->how, &off);
  if (why) {
    u->end = why;
    return 1;
  }
  __u32 last = s->nr - 1;
  if (last < LW_MAX_STACK_DEPTH && lw_stop_here(u, &s->frames[last])) {
    u->end = LW_END_PYTHON;
    return 1;
  }
  __u32 no_table = LW_END_NO_CFI;
  if (!u->vma_ino) {
    /* Anonymous code (JIT): no table. V8, HotSpot with
     * -XX:+PreserveFramePointer and .NET keep frame pointers in it, so the
     * frame pointer is tried below, validated as for any code without CFI
     * (decision jit-perf-maps); the daemon names the frame from the
     * runtime's perf map. */
  } else if (u->obj_state == LW_TABLE_READY) {
    __u32 lookup = (__u32)off;
    if (u->pc_is_return && lookup > 0)
      lookup -= 1;  /* the call instruction, which may be a function's last */
    struct lw_unwind_row *r = lw_find_row(u, lookup);
    if (r && c && lw_row_steps_alone(r)) {
      c->key = ckey;
      c->gen = u->gen;
      c->tgid = u->tgid;
      c->ino = u->vma_ino;
      c->dev = u->vma_dev;
      c->off = (__u32)off;
      c->row = *r;
    }
    if (r) {
      why = lw_step_cfi(u, r);
      if (why == LW_STEP_OK)
        return 0;
      if (why != LW_END_NO_CFI) {
        u->end = why;
        return 1;
      }
    }
  } else if (u->obj_state == LW_TABLE_BUDGET) {
    no_table = LW_END_MEMORY_BUDGET;
  } else if (u->obj_state != LW_TABLE_NO_CFI) {
    no_table = LW_END_TABLE_PENDING;  /* pending, or not registered yet */
  }
  if (s->nr == 1 && !u->pc_is_return && lw_step_leaf_slot(u, no_table) == LW_STEP_OK)
    return 0;
  why = lw_step_fp(u, no_table);
  if (why == LW_STEP_OK)
    return 0;
  u->end = why;
  return 1;
}

/* The walk's state lives in a per-CPU map, not on the stack: a probe's
 * program, lw_unwind_stack, this callback and lw_unwind_frame with its
 * reads are one call chain, whose frames a kernel without private BPF
 * stacks for uprobe programs adds up against 512 bytes (6.18.44 refused
 * 544: lw_entry 192 + lw_unwind_stack 256 + lw_memo_take 96; decision
 * bpf-stack-budget, checked by tests/layout/check_bpf_stack.py). */
struct lw_unwind_scratch {
  struct lw_unwind u;
  struct lw_memo_key key;
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct lw_unwind_scratch);
} unwind_scratch SEC(".maps");

static long lw_unwind_step(__u32 i, void *unused)
{
  __u32 zero = 0;
  struct lw_unwind_scratch *sc = bpf_map_lookup_elem(&unwind_scratch, &zero);
  if (!sc)
    return 1;
  return lw_unwind_frame(&sc->u) ? 1 : 0;
}

/* Unwinds the user stack from (ip, sp, bp) into the per-CPU scratch stack
 * (nr, flags, how, frames). `at_return`: ip is a return address (a return
 * probe), not the next instruction to run (an entry probe, a syscall).
 * `hint`: operator new's return address when the allocation is made inside
 * it, else 0, with LW_HINT_AT_RETURN or'ed in. `gen`: the target's maps
 * generation, which validates the frame cache (0: no cache). Returns 0, or
 * -1 without a scratch buffer. Global: verified once. */
__noinline int lw_unwind_stack(__u64 ip, __u64 sp, __u64 bp, __u64 hint_flags, __u64 gen)
{
  __u64 hint = hint_flags & ~(LW_HINT_AT_RETURN | LW_HINT_STOP_PY);
  bool at_return = (hint_flags & LW_HINT_AT_RETURN) != 0;
  __u32 zero = 0;
  struct lw_stack *s = bpf_map_lookup_elem(&stack_scratch, &zero);
  if (!s)
    return -1;
  struct lw_unwind_scratch *sc = bpf_map_lookup_elem(&unwind_scratch, &zero);
  if (!sc)
    return -1;
  struct lw_unwind *up = &sc->u;
  __builtin_memset(up, 0, sizeof(*up));
  up->pc = ip;
  up->sp = sp;
  up->bp = bp;
  up->hint = hint;
  up->how = LW_UNWOUND_LEAF;
  up->pc_is_return = at_return ? 1 : 0;
  up->tgid = bpf_get_current_pid_tgid() >> 32;
  up->gen = gen;
  struct task_struct *task = bpf_get_current_task_btf();
  struct xol_area *x = task->mm->uprobes_state.xol_area;
  up->tramp = x ? x->vaddr : 0;
  struct uprobe_task *ut = task->utask;
  if (ut)
    up->ri = ut->return_instances;
  up->bp_initial = 1;
  up->bp_src = 0xff;
  if (hint_flags & LW_HINT_STOP_PY) {
    struct lw_py_proc *pp = bpf_map_lookup_elem(&py_procs, &up->tgid);
    if (pp && pp->eval_ino && pp->eval_end > pp->eval_start) {
      up->stop_ino = pp->eval_ino;
      up->stop_dev = pp->eval_dev;
      up->stop_lo = pp->eval_start;
      up->stop_hi = pp->eval_end;
    }
  }
  lw_window_reset();  /* decision user-read-window: this thread's stack changed since the last walk */
  /* Walk reuse (decision walk-reuse): the frame cache's generation validates it too. */
  struct lw_walk_memo *m = 0;
  struct lw_memo_rec *rec = 0;
  struct lw_memo_key *key = &sc->key;
  __builtin_memset(key, 0, sizeof(*key));
  key->pc = ip;
  key->sp = sp;
  key->bp = bp;
  key->hint = hint_flags;
  key->gen = gen;
  key->tgid = up->tgid;
  if (walk_memo_on && gen) {
    __u32 base = lw_memo_slot(key), victim = LW_MEMO_WAYS;
    for (__u32 w = 0; w < LW_MEMO_WAYS; w++) {
      __u32 slot = base + w;
      struct lw_walk_memo *way = bpf_map_lookup_elem(&walk_memo, &slot);
      int got = lw_memo_take(way, s, key);
      if (got == 1) {
        count(LW_CNT_WALKS_REUSED);
        if ((s->flags & LW_STACK_END_MASK) == LW_END_DEPTH)
          count(LW_CNT_STACK_END_DEPTH);
        return 0;
      }
      if (got == 0 && victim == LW_MEMO_WAYS)
        victim = w;  /* another start's, or empty: replaced first */
    }
    if (victim == LW_MEMO_WAYS)
      victim = bpf_get_prandom_u32() & (LW_MEMO_WAYS - 1);
    __u32 vslot = base + victim;
    m = bpf_map_lookup_elem(&walk_memo, &vslot);
    rec = bpf_map_lookup_elem(&walk_reads, &zero);
    if (rec) {
      rec->n = 0;
      rec->ok = 1;
      up->recording = 1;
    }
  }
  s->nr = 0;
  up->end = LW_END_DEPTH;
  bpf_loop(LW_UNWIND_LOOPS + 1, lw_unwind_step, NULL, 0);
  s->flags = up->end | (up->uses_fp ? LW_STACK_USES_FP : 0);
  if (up->end >= LW_END_NO_CFI && up->end <= LW_END_VMA_BUSY)
    count(LW_CNT_STACK_END_NO_CFI - LW_END_NO_CFI + up->end);
  /* Only walks that end for good are kept: a table that is pending now
   * gives a longer stack later. */
  if (m && rec && rec->ok && !up->uses_fp &&
      (up->end == LW_END_COMPLETE || up->end == LW_END_DEPTH || up->end == LW_END_PYTHON)) {
    key->bp_used = up->bp_used;
    lw_memo_keep(m, s, rec, key);
  }
  return 0;
}

#endif /* LW_UNWIND_BPF_H_ */
