/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * CUDA runtime and driver allocations. The entry and return programs
 * (leakwatch.bpf.c) dispatch here on attach cookies >= LW_FUNC_CUDA_FIRST;
 * records go through the one record/retire path (lw_record.bpf.h).
 *
 * Design (decision cuda-memory):
 *  - Allocations are read at return: the output pointer (void **devPtr,
 *    CUdeviceptr *) is read then, and a non-zero cudaError_t / CUresult
 *    means nothing was allocated (counted, not recorded).
 *  - A runtime call counts once: the runtime and the driver have separate
 *    entry contexts (LW_CTX_CUDA_RUNTIME, LW_CTX_CUDA_DRIVER); a driver
 *    allocation deeper on the stack than a runtime call in flight is the
 *    runtime's own and is skipped. Frees are entry-only and match by
 *    lookup, so the nested driver free finds nothing left to retire.
 *  - Every CUDA record also has an lw_cuda_rec (same key as the live map):
 *    the context and device current on the thread at the allocation. Events
 *    carry the device in their flags (LW_EVF_DEVICE_*).
 *  - VMM: a physical handle (cuMemCreate) is the device memory, keyed by the
 *    handle value under kind cuda_device. cuMemMap/cuMemUnmap add no bytes;
 *    they count the handle's mappings, because the driver frees physical
 *    memory only once the handle is released *and* no longer mapped.
 *  - cuCtxDestroy retires, in the kernel, every record made in that context.
 */
#ifndef LW_CUDA_BPF_H_
#define LW_CUDA_BPF_H_

#include "lw_record.bpf.h"
#include "lw_stack.bpf.h"

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, __u32); /* tid */
  __type(value, struct lw_cuda_thread);
} cuda_threads SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, struct lw_cuda_map_key); /* (tgid, CUcontext) */
  __type(value, __s32);                /* its device */
} cuda_ctx_dev SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 65536);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, struct lw_live_key);
  __type(value, struct lw_cuda_rec);
} cuda_recs SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 65536);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, struct lw_cuda_map_key); /* (tgid, va) */
  __type(value, struct lw_cuda_map_val);
} cuda_maps SEC(".maps");

#define LW_CUDA_MAX_UNMAP 8

static __always_inline __u32 cuda_device_flags(__s32 device)
{
  if (device < 0 || device > 254)
    return 0;
  return ((__u32)(device + 1) << LW_EVF_DEVICE_SHIFT) & LW_EVF_DEVICE_MASK;
}

static __always_inline struct lw_cuda_thread *cuda_thread(__u32 tid)
{
  struct lw_cuda_thread *th = bpf_map_lookup_elem(&cuda_threads, &tid);
  if (th)
    return th;
  struct lw_cuda_thread init = {.depth = 0, .device = -1};
  if (bpf_map_update_elem(&cuda_threads, &tid, &init, BPF_NOEXIST) &&
      !bpf_map_lookup_elem(&cuda_threads, &tid)) {
    count(LW_CNT_CUDA_STATE_FAILED);
    return 0;
  }
  return bpf_map_lookup_elem(&cuda_threads, &tid);
}

static __always_inline __u64 cuda_thread_ctx(struct lw_cuda_thread *th)
{
  __u32 d = th->depth;
  if (d == 0 || d > LW_CUDA_CTX_STACK)
    return 0;
  return th->ctx[(d - 1) & (LW_CUDA_CTX_STACK - 1)];
}

/* A context became current on the thread: its device, when we know it,
 * becomes the thread's current device. */
static __always_inline void cuda_ctx_became_current(__u32 tgid, struct lw_cuda_thread *th,
                                                    __u64 ctx)
{
  if (!ctx)
    return;
  struct lw_cuda_map_key k = {.tgid = tgid, .va = ctx};
  __s32 *dev = bpf_map_lookup_elem(&cuda_ctx_dev, &k);
  if (dev)
    th->device = *dev;
}

static __always_inline void cuda_push(__u32 tgid, __u32 tid, __u64 ctx)
{
  struct lw_cuda_thread *th = cuda_thread(tid);
  if (!th)
    return;
  __u32 d = th->depth;
  if (d >= LW_CUDA_CTX_STACK) {
    /* Deeper than we keep: the oldest entry falls off. */
    th->ctx[0] = th->ctx[1];
    th->ctx[1] = th->ctx[2];
    th->ctx[2] = th->ctx[3];
    d = LW_CUDA_CTX_STACK - 1;
  }
  th->ctx[d & (LW_CUDA_CTX_STACK - 1)] = ctx;
  th->depth = d + 1;
  cuda_ctx_became_current(tgid, th, ctx);
}

static __always_inline void cuda_pop(__u32 tgid, __u32 tid)
{
  struct lw_cuda_thread *th = bpf_map_lookup_elem(&cuda_threads, &tid);
  if (!th || th->depth == 0)
    return;
  if (th->depth > LW_CUDA_CTX_STACK)
    th->depth = LW_CUDA_CTX_STACK;
  th->depth -= 1;
  cuda_ctx_became_current(tgid, th, cuda_thread_ctx(th));
}

/* cuCtxSetCurrent replaces the top of the stack (NULL pops it). */
static __always_inline void cuda_set_current(__u32 tgid, __u32 tid, __u64 ctx)
{
  if (!ctx) {
    cuda_pop(tgid, tid);
    return;
  }
  struct lw_cuda_thread *th = cuda_thread(tid);
  if (!th)
    return;
  if (th->depth == 0 || th->depth > LW_CUDA_CTX_STACK)
    th->depth = 1;
  th->ctx[(th->depth - 1) & (LW_CUDA_CTX_STACK - 1)] = ctx;
  cuda_ctx_became_current(tgid, th, ctx);
}

static __always_inline void cuda_record(struct pt_regs *ctx, struct lw_target *t, __u32 tgid, __u32 tid,
                                        __u32 kind, __u64 addr, __u64 size)
{
  struct lw_cuda_rec rec = {.device = -1};
  struct lw_cuda_thread *th = bpf_map_lookup_elem(&cuda_threads, &tid);
  if (th) {
    rec.ctx = cuda_thread_ctx(th);
    rec.device = th->device;
  }
  struct lw_live_key key = {.tgid = tgid, .kind = kind, .addr = addr};
  struct lw_regs regs = lw_probe_regs(ctx);
  struct lw_live_val val = {.size = size, .alloc_ns = bpf_ktime_get_ns(),
                            .stack_hash = capture_stack(ctx, t, kind, &regs, true, 0)};
  bool replaced;
  if (live_insert(t, tgid, kind, addr, &val, &replaced)) {
    if (replaced)
      bpf_map_delete_elem(&cuda_recs, &key);
    return;
  }
  /* The side record before the event: a free racing the event finds it. */
  if (bpf_map_update_elem(&cuda_recs, &key, &rec, BPF_ANY))
    count(LW_CNT_CUDA_STATE_FAILED);
  t->seen |= LW_SEEN_CUDA;
  emit(t, LW_EV_ALLOC, tgid, kind, addr, size, val.alloc_ns, val.stack_hash,
       cuda_device_flags(rec.device) | (replaced ? LW_EVF_REPLACED : 0));
}

/* Retires the CUDA record at (tgid, kind, addr), its device on the event.
 * Returns 0 if there was one. */
static __always_inline int cuda_retire(struct lw_target *t, __u32 tgid, __u32 kind, __u64 addr)
{
  struct lw_live_key key = {.tgid = tgid, .kind = kind, .addr = addr};
  struct lw_cuda_rec *rec = bpf_map_lookup_elem(&cuda_recs, &key);
  __u32 flags = rec ? cuda_device_flags(rec->device) : 0;
  if (retire_flags(t, tgid, kind, addr, flags) < 0)
    return -1;
  bpf_map_delete_elem(&cuda_recs, &key);
  return 0;
}

/* cudaFree / cuMemFree take device and managed pointers alike. */
static __always_inline void cuda_free_device(struct lw_target *t, __u32 tgid, __u64 ptr)
{
  if (!ptr)
    return;
  if (cuda_retire(t, tgid, LW_KIND_CUDA_DEVICE, ptr) == 0)
    return;
  cuda_retire(t, tgid, LW_KIND_CUDA_MANAGED, ptr);
}

/* ---- VMM ---- */

static __always_inline void vmm_release(struct lw_target *t, __u32 tgid, __u64 handle)
{
  struct lw_live_key key = {.tgid = tgid, .kind = LW_KIND_CUDA_DEVICE, .addr = handle};
  struct lw_cuda_rec *rec = bpf_map_lookup_elem(&cuda_recs, &key);
  if (!rec)
    return;
  if (rec->vmm_maps == 0)
    cuda_retire(t, tgid, LW_KIND_CUDA_DEVICE, handle);
  else
    rec->vmm_released = 1; /* retired at its last cuMemUnmap */
}

static __always_inline void vmm_unmap(struct lw_target *t, __u32 tgid, __u64 va, __u64 len)
{
  /* One cuMemUnmap may cover several mappings laid end to end. */
  for (int i = 0; i < LW_CUDA_MAX_UNMAP; i++) {
    if (len == 0)
      return;
    struct lw_cuda_map_key mk = {.tgid = tgid, .va = va};
    struct lw_cuda_map_val *m = bpf_map_lookup_elem(&cuda_maps, &mk);
    if (!m)
      return;
    struct lw_cuda_map_val mv = *m;
    bpf_map_delete_elem(&cuda_maps, &mk);
    struct lw_live_key key = {.tgid = tgid, .kind = LW_KIND_CUDA_DEVICE, .addr = mv.handle};
    struct lw_cuda_rec *rec = bpf_map_lookup_elem(&cuda_recs, &key);
    if (rec) {
      if (rec->vmm_maps > 0)
        rec->vmm_maps -= 1;
      if (rec->vmm_maps == 0 && rec->vmm_released)
        cuda_retire(t, tgid, LW_KIND_CUDA_DEVICE, mv.handle);
    }
    if (mv.size == 0 || mv.size >= len)
      return;
    va += mv.size;
    len -= mv.size;
  }
}

static __always_inline void vmm_mapped(__u32 tgid, __u64 va, __u64 size, __u64 handle)
{
  struct lw_cuda_map_key mk = {.tgid = tgid, .va = va};
  struct lw_cuda_map_val mv = {.handle = handle, .size = size};
  if (bpf_map_update_elem(&cuda_maps, &mk, &mv, BPF_ANY)) {
    count(LW_CNT_CUDA_STATE_FAILED);
    return;
  }
  struct lw_live_key key = {.tgid = tgid, .kind = LW_KIND_CUDA_DEVICE, .addr = handle};
  struct lw_cuda_rec *rec = bpf_map_lookup_elem(&cuda_recs, &key);
  if (rec)
    rec->vmm_maps += 1;
}

/* ---- cuCtxDestroy ---- */

struct cuda_destroy_arg {
  __u64 ctx;
  __u32 tgid;
  __u32 retired;
};

static long cuda_destroy_cb(struct bpf_map *map, struct lw_live_key *key, struct lw_cuda_rec *rec,
                            struct cuda_destroy_arg *arg)
{
  if (key->tgid != arg->tgid || rec->ctx != arg->ctx)
    return 0;
  struct lw_live_key k = *key;
  struct lw_target *t = bpf_map_lookup_elem(&targets, &k.tgid);
  if (retire_flags(t, k.tgid, k.kind, k.addr, cuda_device_flags(rec->device)) >= 0)
    arg->retired++;
  bpf_map_delete_elem(&cuda_recs, &k);
  return 0;
}

struct cuda_purge_arg {
  __u32 tgid;
};

static long cuda_purge_cb(struct bpf_map *map, struct lw_cuda_map_key *key, void *val,
                          struct cuda_purge_arg *arg)
{
  if (key->tgid == arg->tgid)
    bpf_map_delete_elem(map, key);
  return 0;
}

static long cuda_purge_recs_cb(struct bpf_map *map, struct lw_live_key *key, void *val,
                               struct cuda_purge_arg *arg)
{
  if (key->tgid == arg->tgid)
    bpf_map_delete_elem(map, key);
  return 0;
}

/* The process exited or exec'd: its CUDA side state goes with it (the live
 * records themselves are purged by the daemon, as for the heap). */
static __always_inline void cuda_purge_process(struct lw_target *t, __u32 tgid)
{
  if (!t || !(t->seen & LW_SEEN_CUDA))
    return;
  t->seen &= ~LW_SEEN_CUDA;
  struct cuda_purge_arg arg = {.tgid = tgid};
  bpf_for_each_map_elem(&cuda_recs, cuda_purge_recs_cb, &arg, 0);
  bpf_for_each_map_elem(&cuda_maps, cuda_purge_cb, &arg, 0);
  bpf_for_each_map_elem(&cuda_ctx_dev, cuda_purge_cb, &arg, 0);
}

static __always_inline void cuda_ctx_destroy(struct lw_target *t, __u32 tgid, __u32 tid, __u64 c)
{
  if (!c)
    return;
  struct lw_cuda_thread *th = bpf_map_lookup_elem(&cuda_threads, &tid);
  if (th && cuda_thread_ctx(th) == c)
    cuda_pop(tgid, tid); /* destroying the current context pops it */
  struct cuda_destroy_arg arg = {.ctx = c, .tgid = tgid};
  bpf_for_each_map_elem(&cuda_recs, cuda_destroy_cb, &arg, 0);
  struct lw_cuda_map_key k = {.tgid = tgid, .va = c};
  bpf_map_delete_elem(&cuda_ctx_dev, &k);
  for (__u32 i = 0; i < 64; i++) {
    if (i >= arg.retired)
      break;
    count(LW_CNT_CUDA_CTX_RETIRED);
  }
}

/* ---- entry and return ---- */

static __always_inline bool cuda_is_runtime(__u32 func)
{
  return func < LW_FUNC_CU_MEM_ALLOC;
}

/* Allocation-like calls: skipped when nested in an accounted call. */
static __always_inline bool cuda_is_alloc(__u32 func)
{
  switch (func) {
  case LW_FUNC_CUDART_MALLOC:
  case LW_FUNC_CUDART_MALLOC_MANAGED:
  case LW_FUNC_CUDART_MALLOC_HOST:
  case LW_FUNC_CUDART_MALLOC_PITCH:
  case LW_FUNC_CUDART_MALLOC_3D:
  case LW_FUNC_CU_MEM_ALLOC:
  case LW_FUNC_CU_MEM_ALLOC_MANAGED:
  case LW_FUNC_CU_MEM_ALLOC_HOST:
  case LW_FUNC_CU_MEM_ALLOC_PITCH:
  case LW_FUNC_CU_MEM_CREATE:
    return true;
  }
  return false;
}

static __always_inline bool cuda_call_in_flight(__u32 tid, __u32 cls, __u64 sp, __u64 now)
{
  struct lw_ctx_val *c = ctx_get(cls);
  return c && now - c->start_ns < LW_CTX_STALE_NS && sp < c->sp;
}

static __always_inline int cuda_enter(struct pt_regs *ctx, __u32 func)
{
  __u32 tgid, tid = (__u32)bpf_get_current_pid_tgid();
  struct lw_target *t = current_target(LW_TARGET_CUDA, &tgid);
  if (!t)
    return 0;
  __u64 a0 = PT_REGS_PARM1(ctx), a1 = PT_REGS_PARM2(ctx), a2 = PT_REGS_PARM3(ctx),
        a3 = PT_REGS_PARM4(ctx);

  /* Entry-only functions. Frees retire by lookup, so a nested driver free
   * after the runtime's finds nothing. Context switches are taken at entry:
   * they fail only for an invalid context, which owns no records. */
  switch (func) {
  case LW_FUNC_CUDART_FREE:
  case LW_FUNC_CU_MEM_FREE:
    cuda_free_device(t, tgid, a0);
    return 0;
  case LW_FUNC_CUDART_FREE_HOST:
  case LW_FUNC_CU_MEM_FREE_HOST:
    if (a0)
      cuda_retire(t, tgid, LW_KIND_CUDA_HOST, a0);
    return 0;
  case LW_FUNC_CUDART_SET_DEVICE: {
    struct lw_cuda_thread *th = cuda_thread(tid);
    if (th)
      th->device = (__s32)a0;
    return 0;
  }
  case LW_FUNC_CU_CTX_SET_CURRENT:
    cuda_set_current(tgid, tid, a0);
    return 0;
  case LW_FUNC_CU_CTX_PUSH:
    cuda_push(tgid, tid, a0);
    return 0;
  case LW_FUNC_CU_CTX_POP:
    cuda_pop(tgid, tid);
    return 0;
  case LW_FUNC_CU_CTX_DESTROY:
    cuda_ctx_destroy(t, tgid, tid, a0);
    return 0;
  case LW_FUNC_CU_MEM_RELEASE:
    vmm_release(t, tgid, a0);
    return 0;
  case LW_FUNC_CU_MEM_UNMAP:
    vmm_unmap(t, tgid, a0, a1);
    return 0;
  }

  /* Calls read at return. */
  __u64 sp = PT_REGS_SP(ctx);
  __u64 now = bpf_ktime_get_ns();
  __u32 cls = cuda_is_runtime(func) ? LW_CTX_CUDA_RUNTIME : LW_CTX_CUDA_DRIVER;
  if (cuda_is_alloc(func)) {
    if ((!cuda_is_runtime(func) && cuda_call_in_flight(tid, LW_CTX_CUDA_RUNTIME, sp, now)) ||
        cuda_call_in_flight(tid, cls, sp, now)) {
      count(LW_CNT_CUDA_NESTED_SKIPPED);
      return 0;
    }
  }
  struct lw_ctx_val v = {.sp = sp, .start_ns = now, .arg0 = a0, .arg1 = a1, .func = func};
  switch (func) {
  case LW_FUNC_CUDART_MALLOC_PITCH:
  case LW_FUNC_CU_MEM_ALLOC_PITCH:
    v.arg1 = a3; /* height */
    v.arg2 = a1; /* size_t *pitch, read at return */
    break;
  case LW_FUNC_CUDART_MALLOC_3D: {
    /* cudaExtent {width, height, depth} is 24 bytes, passed in memory: it
     * sits above the return address. */
    __u64 ext[3] = {};
    bpf_probe_read_user(ext, sizeof(ext), (void *)(sp + 8));
    v.arg1 = checked_mul(ext[1], ext[2]); /* rows: height * depth */
    break;
  }
  case LW_FUNC_CU_CTX_CREATE:
    v.arg2 = a2; /* dev */
    break;
  case LW_FUNC_CU_CTX_CREATE_V4:
    v.arg2 = a3; /* dev */
    break;
  case LW_FUNC_CU_PRIMARY_CTX_RETAIN:
    v.arg2 = a1; /* dev */
    break;
  case LW_FUNC_CU_MEM_MAP:
    v.arg2 = a3; /* handle */
    break;
  }
  bpf_probe_read_user(&v.ret_addr, sizeof(v.ret_addr), (void *)sp);
  ctx_put(cls, &v);
  return 0;
}

/* An allocation returned out-of-memory: one LW_EV_GPU_OOM (the daemon
 * rate-limits the reports; decision oom-kill-reports, "GPU OOM"). */
/* The kind of memory a CUDA allocation function returns. */
static __always_inline __u32 cuda_alloc_kind(__u32 func)
{
  switch (func) {
  case LW_FUNC_CUDART_MALLOC_MANAGED:
  case LW_FUNC_CU_MEM_ALLOC_MANAGED:
    return LW_KIND_CUDA_MANAGED;
  case LW_FUNC_CUDART_MALLOC_HOST:
  case LW_FUNC_CU_MEM_ALLOC_HOST:
    return LW_KIND_CUDA_HOST;
  default:
    return LW_KIND_CUDA_DEVICE;
  }
}

static __always_inline void cuda_oom(struct lw_target *t, __u32 tgid, __u32 tid, __u32 func,
                                     const struct lw_ctx_val *v, __u32 err)
{
  __s32 device = -1;
  struct lw_cuda_thread *th = bpf_map_lookup_elem(&cuda_threads, &tid);
  if (th)
    device = th->device;
  __u32 kind = cuda_alloc_kind(func);
  __u64 size = v->arg1;
  if (func == LW_FUNC_CUDART_MALLOC_PITCH || func == LW_FUNC_CU_MEM_ALLOC_PITCH ||
      func == LW_FUNC_CUDART_MALLOC_3D)
    size = 0; /* arg1 holds rows: the row pitch is the driver's choice */
  emit(t, LW_EV_GPU_OOM, tgid, kind, err, size, func, 0,
       cuda_device_flags(device) | (cuda_is_runtime(func) ? 0 : LW_EVF_GPU_DRIVER));
}

static __always_inline int cuda_return(struct pt_regs *ctx, __u32 func, __u64 ret)
{
  __u32 tgid, tid = (__u32)bpf_get_current_pid_tgid();
  struct lw_target *t = current_target(LW_TARGET_CUDA, &tgid);
  if (!t)
    return 0;
  __u32 cls = cuda_is_runtime(func) ? LW_CTX_CUDA_RUNTIME : LW_CTX_CUDA_DRIVER;
  struct lw_ctx_val *c = ctx_get(cls);
  /* No context, or not ours: the return of a nested call we skipped. */
  if (!c || PT_REGS_SP(ctx) != c->sp + 8 || c->func != func)
    return 0;
  struct lw_ctx_val v = *c;
  ctx_clear(c);
  if ((__u32)ret != 0) {
    /* cudaError_t / CUresult: anything but success allocated nothing. */
    count(LW_CNT_CUDA_CALL_FAILED);
    if (cuda_is_alloc(func) &&
        (__u32)ret == (cuda_is_runtime(func) ? LW_CUDART_ERROR_MEMORY_ALLOCATION : LW_CU_ERROR_OUT_OF_MEMORY))
      cuda_oom(t, tgid, tid, func, &v, (__u32)ret);
    return 0;
  }
  if (func == LW_FUNC_CU_MEM_MAP) {
    vmm_mapped(tgid, v.arg0, v.arg1, v.arg2);
    return 0;
  }
  __u64 out = 0; /* the output pointer, handle or context */
  bpf_probe_read_user(&out, sizeof(out), (void *)v.arg0);

  switch (func) {
  case LW_FUNC_CU_CTX_CREATE:
  case LW_FUNC_CU_CTX_CREATE_V4:
  case LW_FUNC_CU_PRIMARY_CTX_RETAIN: {
    if (!out)
      return 0;
    struct lw_cuda_map_key k = {.tgid = tgid, .va = out};
    __s32 dev = (__s32)v.arg2;
    if (bpf_map_update_elem(&cuda_ctx_dev, &k, &dev, BPF_ANY))
      count(LW_CNT_CUDA_STATE_FAILED);
    if (func != LW_FUNC_CU_PRIMARY_CTX_RETAIN)
      cuda_push(tgid, tid, out); /* a new context is pushed on the thread's stack */
    return 0;
  }
  }

  __u32 kind = cuda_alloc_kind(func);
  __u64 size = v.arg1;
  switch (func) {
  case LW_FUNC_CUDART_MALLOC_PITCH:
  case LW_FUNC_CU_MEM_ALLOC_PITCH: {
    __u64 pitch = 0;
    bpf_probe_read_user(&pitch, sizeof(pitch), (void *)v.arg2);
    size = checked_mul(pitch, v.arg1);
    break;
  }
  case LW_FUNC_CUDART_MALLOC_3D: {
    /* cudaPitchedPtr {ptr, pitch, xsize, ysize} */
    __u64 pitch = 0;
    bpf_probe_read_user(&pitch, sizeof(pitch), (void *)(v.arg0 + 8));
    size = checked_mul(pitch, v.arg1);
    break;
  }
  }
  if (!out) {
    count(LW_CNT_CUDA_CALL_FAILED); /* success without a pointer: nothing to track */
    return 0;
  }
  cuda_record(ctx, t, tgid, tid, kind, out, size);
  return 0;
}

/* The thread's CUDA state (its entry contexts go with its task storage). */
static __always_inline void cuda_drop_thread(__u32 tid)
{
  bpf_map_delete_elem(&cuda_threads, &tid);
}

#endif /* LW_CUDA_BPF_H_ */
