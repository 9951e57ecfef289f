/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * CPython frames at an allocation (decision python-frames).
 *
 * For a process the daemon found to run CPython 3.11+ (py_procs[tgid],
 * written at attach), the current thread's frame chain is read here and
 * stored next to the native frames in the per-CPU scratch stack: per frame
 * the code object's address, the byte offset of the instruction it is at,
 * and whether it is the first frame of its evaluation loop. The daemon
 * turns (code object, offset) into function, file and line from the
 * target's memory, and splices the frames in where the native stack has
 * _PyEval_EvalFrameDefault frames.
 *
 * The thread state is found through the interpreter's own thread-specific
 * data key (autoTSSkey): glibc keeps the value of keys < 32 inside struct
 * pthread, at a fixed offset from the thread pointer (fs_base), which is
 * what pthread_getspecific() reads. This works whether or not the thread
 * holds the GIL: PyTorch releases it around its kernels, so the GIL
 * holder (_PyRuntime's tstate_current) is the wrong thread, or NULL, at
 * most tensor allocations.
 */
#ifndef LW_PYTHON_BPF_H_
#define LW_PYTHON_BPF_H_

#include "lw_common.bpf.h"
#include "lw_uread.bpf.h"

/* CPython processes: tgid -> layout and where the thread state is. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __type(value, struct lw_py_proc);
} py_procs SEC(".maps");

/* Set at load time: 0 leaves Python frames out (stacks are native only). */
const volatile __u32 python_frames = 1;

/* Set at load time: 1 walks the native frames above the first frame in the
 * evaluation loop too (unwind.native_frames_above_python); 0, the default,
 * stops there when the Python frames were read whole (decision
 * python-frames, "Where the native walk stops"). */
const volatile __u32 python_native_above = 0;

/* Set at load time: 0 reads every code object's first line (benchmarks). */
const volatile __u32 python_code_memo = 1;

/* The first lines of code objects read lately
 * (decision code-object-memo). Each Python frame's signature (co_firstlineno)
 * is in the code object, away from the frame headers the window serves: one
 * direct user read per frame. A first line read less than LW_PY_CODE_MEMO_NS
 * ago on this CPU, for the same process and code address, is taken again: a
 * code object freed and another with another first line made at its address
 * within that time can give a stale signature, which the daemon's check then
 * refuses (the frame is unresolved, never misnamed). Slots are direct-mapped by
 * address and guarded like the window: a writer takes the slot's count from
 * even to odd with a compare-and-swap (a preempted writer's slot is skipped),
 * and a reader that saw it odd or moved reads the code object. */
#define LW_PY_CODE_MEMO_SLOTS 256
#define LW_PY_CODE_MEMO_NS (10ULL * 1000 * 1000)

struct lw_py_code_slot {
  __u64 seq;     /* odd while written */
  __u64 code;    /* PyCodeObject *; 0: empty */
  __u64 stamp;   /* bpf_ktime_get_ns() of the read */
  __u32 tgid;
  __s32 firstlineno;
};

struct lw_py_code_memo {
  struct lw_py_code_slot slot[LW_PY_CODE_MEMO_SLOTS];
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct lw_py_code_memo);
} py_code_memo SEC(".maps");

static __always_inline struct lw_py_code_slot *lw_py_code_slot(__u64 code)
{
  __u32 zero = 0;
  struct lw_py_code_memo *m = bpf_map_lookup_elem(&py_code_memo, &zero);
  if (!m)
    return NULL;
  __u32 i = (__u32)(((code >> 4) * 0x9e3779b97f4a7c15ULL) >> 56) & (LW_PY_CODE_MEMO_SLOTS - 1);
  return &m->slot[i];
}

/* 1 and *firstlineno when this CPU read code's first line lately. */
static __always_inline int lw_py_code_memo_get(struct lw_py_code_slot *e, __u64 code, __u32 tgid,
                                               __u64 now, __s32 *firstlineno)
{
  if (!e)
    return 0;
  __u64 s = *(volatile __u64 *)&e->seq;
  if (s & 1)
    return 0;
  asm volatile("" ::: "memory");
  if (e->code != code || e->tgid != tgid || now - e->stamp > LW_PY_CODE_MEMO_NS)
    return 0;
  __s32 v = e->firstlineno;
  asm volatile("" ::: "memory");
  if (*(volatile __u64 *)&e->seq != s)
    return 0;
  *firstlineno = v;
  return 1;
}

static __always_inline void lw_py_code_memo_put(struct lw_py_code_slot *e, __u64 code, __u32 tgid,
                                                __u64 now, __s32 firstlineno)
{
  if (!e)
    return;
  __u64 s = *(volatile __u64 *)&e->seq;
  if ((s & 1) || __sync_val_compare_and_swap(&e->seq, s, s + 1) != s)
    return;
  e->code = code;
  e->tgid = tgid;
  e->stamp = now;
  e->firstlineno = firstlineno;
  asm volatile("" ::: "memory");
  *(volatile __u64 *)&e->seq = s + 2;
}

/* One step's state, on the global function's stack (bpf_loop's context). */
struct lw_py_walk {
  __u64 frame;           /* the _PyInterpreterFrame to read next; 0 = done */
  __u64 now;             /* bpf_ktime_get_ns() at the walk's start; 0: no code memo */
  struct lw_py_proc p;   /* copied: a map value pointer cannot cross into the callback */
  __u32 end;             /* enum lw_py_end */
  __u32 tgid;
};

/* A u64 field at a byte offset the daemon gave; the mask and the bound
 * keep the verifier's view of the index within the buffer. */
static __always_inline __u64 lw_py_u64(const __u8 *buf, __u16 off)
{
  __u32 o = off & 0x7f;
  if (o > LW_PY_FRAME_HEADER - 8)
    return 0;
  __u64 v = 0;
  __builtin_memcpy(&v, buf + o, 8);
  return v;
}

static __always_inline __u8 lw_py_u8(const __u8 *buf, __u16 off)
{
  __u32 o = off & 0x7f;
  if (o > LW_PY_FRAME_HEADER - 1)
    return 0;
  return buf[o];
}

/* One frame per bpf_loop iteration. Returns 1 to stop. */
static long lw_py_step(__u32 i, struct lw_py_walk *w)
{
  if (!w->frame) {
    w->end = LW_PY_COMPLETE;
    return 1;
  }
  __u32 zero = 0;
  struct lw_stack *s = bpf_map_lookup_elem(&stack_scratch, &zero);
  if (!s)
    return 1;
  /* Frames are contiguous in the thread's data stack (3.11+): their
   * headers come from one window (decision user-read-window). */
  struct lw_ublock blk = {};
  if (lw_uread_block(w->frame, &blk)) {
    w->end = LW_PY_READ_FAILED;
    return 1;
  }
  __u64 previous = lw_py_u64(blk.b, w->p.frame_previous);
  __u8 owner = lw_py_u8(blk.b, w->p.frame_owner);
  if (w->p.owner_cstack != 0xff && owner == w->p.owner_cstack) {
    /* 3.12+: the shim frame an evaluation loop pushes below the frames it
     * runs. The frame just stored was that loop's first. */
    __u32 n = s->py_nr;
    if (n > 0 && n <= LW_MAX_PY_FRAMES)
      s->py[n - 1].flags |= LW_PYF_ENTRY;
    w->frame = previous;
    return 0;
  }
  __u32 n = s->py_nr;
  if (n >= LW_MAX_PY_FRAMES) {
    w->end = LW_PY_DEPTH;
    return 1;
  }
  __u64 code = lw_py_u64(blk.b, w->p.frame_code);
  __u64 instr = lw_py_u64(blk.b, w->p.frame_instr);
  __s32 firstlineno = 0;
  if (!code) {
    w->end = LW_PY_READ_FAILED;
    return 1;
  }
  struct lw_py_code_slot *memo = w->now ? lw_py_code_slot(code) : NULL;
  if (!lw_py_code_memo_get(memo, code, w->tgid, w->now, &firstlineno)) {
    if (bpf_probe_read_user(&firstlineno, sizeof(firstlineno),
                            (void *)(code + w->p.code_firstlineno))) {
      w->end = LW_PY_READ_FAILED;
      return 1;
    }
    lw_py_code_memo_put(memo, code, w->tgid, w->now, firstlineno);
  }
  struct lw_py_frame *f = &s->py[n];
  f->code = code;
  f->lasti = (__s32)(instr - (code + w->p.code_bytecode));
  f->sig = (__u16)firstlineno;
  f->flags = 0;
  if (w->p.frame_is_entry != LW_PY_OFF_NONE && lw_py_u8(blk.b, w->p.frame_is_entry))
    f->flags = LW_PYF_ENTRY;
  s->py_nr = n + 1;
  w->frame = previous;
  return 0;
}

/* Fills the Python part of the per-CPU scratch stack (py_nr, py_flags,
 * py[]) for the current thread; py_nr 0 and LW_PY_NONE when it is not a
 * CPython process. Global: verified once for every caller (a global
 * function's pointer arguments are plain memory to the verifier, so it
 * takes none and looks the maps up itself). */
__noinline int lw_python_stack(void)
{
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  __u32 zero = 0;
  struct lw_stack *s = bpf_map_lookup_elem(&stack_scratch, &zero);
  if (!s)
    return -1;
  s->py_nr = 0;
  s->py_flags = LW_PY_NONE;
  if (!python_frames)
    return 0;
  struct lw_py_proc *pp = bpf_map_lookup_elem(&py_procs, &tgid);
  if (!pp)
    return 0;
  struct lw_py_walk w = {};
  w.p = *pp;
  struct task_struct *task = bpf_get_current_task_btf();
  __u64 fsbase = task->thread.fsbase;
  /* The key is read here, not once by the daemon: a process found at exec
   * makes it during its start, and frames are wanted from then on. */
  __u32 tss[2] = {};
  if (bpf_probe_read_user(tss, sizeof(tss), (void *)w.p.tss_addr)) {
    s->py_flags = LW_PY_READ_FAILED;
    count(LW_CNT_PY_READ_FAILED);
    return 0;
  }
  if (tss[0] != 1) {
    s->py_flags = LW_PY_NOT_STARTED;
    return 0;
  }
  if (tss[1] >= 32) {
    /* glibc keeps keys >= 32 in second-level blocks: not read. */
    s->py_flags = LW_PY_READ_FAILED;
    count(LW_CNT_PY_READ_FAILED);
    return 0;
  }
  __u64 tstate = 0;
  if (!fsbase || bpf_probe_read_user(&tstate, sizeof(tstate),
                                     (void *)(fsbase + w.p.tsd_key0 + tss[1] * 16))) {
    s->py_flags = LW_PY_READ_FAILED;
    count(LW_CNT_PY_READ_FAILED);
    return 0;
  }
  if (!tstate) {
    s->py_flags = LW_PY_NO_THREAD;
    count(LW_CNT_PY_NO_THREAD);
    return 0;
  }
  __u64 frame = 0;
  if (bpf_probe_read_user(&frame, sizeof(frame), (void *)(tstate + w.p.ts_frame))) {
    s->py_flags = LW_PY_READ_FAILED;
    count(LW_CNT_PY_READ_FAILED);
    return 0;
  }
  if (w.p.cframe_frame != LW_PY_OFF_NONE && frame &&
      bpf_probe_read_user(&frame, sizeof(frame), (void *)(frame + w.p.cframe_frame))) {
    s->py_flags = LW_PY_READ_FAILED;
    count(LW_CNT_PY_READ_FAILED);
    return 0;
  }
  w.frame = frame;
  w.end = LW_PY_DEPTH;
  w.tgid = tgid;
  w.now = python_code_memo ? bpf_ktime_get_ns() : 0;
  lw_window_reset();
  bpf_loop(LW_MAX_PY_FRAMES + 1, lw_py_step, &w, 0);
  s->py_flags = w.end;
  if (w.end == LW_PY_READ_FAILED)
    count(LW_CNT_PY_READ_FAILED);
  else if (w.end == LW_PY_DEPTH)
    count(LW_CNT_PY_DEPTH);
  return 0;
}

/* Whether lw_python_stack() just read the thread's Python frames to its
 * first one. */
static __always_inline bool lw_python_read_whole(void)
{
  __u32 zero = 0;
  struct lw_stack *s = bpf_map_lookup_elem(&stack_scratch, &zero);
  return s && s->py_nr && (s->py_flags & LW_PY_END_MASK) == LW_PY_COMPLETE;
}

#endif /* LW_PYTHON_BPF_H_ */
