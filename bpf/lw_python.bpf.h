/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * CPython frames at an allocation (docs/architecture.md, "Python frames").
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

/* One step's state, on the global function's stack (bpf_loop's context). */
struct lw_py_walk {
  __u64 frame;           /* the _PyInterpreterFrame to read next; 0 = done */
  struct lw_py_proc p;   /* copied: a map value pointer cannot cross into the callback */
  __u32 end;             /* enum lw_py_end */
  __u32 pad;
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
   * headers come from one window (decision 50). */
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
  if (!code || bpf_probe_read_user(&firstlineno, sizeof(firstlineno),
                                   (void *)(code + w->p.code_firstlineno))) {
    w->end = LW_PY_READ_FAILED;
    return 1;
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
  lw_window_reset();
  bpf_loop(LW_MAX_PY_FRAMES + 1, lw_py_step, &w, 0);
  s->py_flags = w.end;
  if (w.end == LW_PY_READ_FAILED)
    count(LW_CNT_PY_READ_FAILED);
  else if (w.end == LW_PY_DEPTH)
    count(LW_CNT_PY_DEPTH);
  return 0;
}

#endif /* LW_PYTHON_BPF_H_ */
