/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The tensor tier (decision tensor-tier): tensors as the frameworks' own
 * allocators hand them out, traced at far fewer events than the libc calls
 * beneath them.
 *  - PyTorch CPU: c10::alloc_cpu (entry + return) and c10::free_cpu (entry),
 *    kind tensor_cpu.
 *  - PyTorch CUDA: the caching allocator's pytorch:malloc / pytorch:free
 *    USDTs (semaphore-gated; libbpf raises the semaphore through the
 *    uprobe's ref_ctr_offset), or, where they are absent, the entry of
 *    c10::reportMemoryUsageToProfiler, called on every block malloc (+size)
 *    and free (-size), kind tensor_gpu. The hook also carries the pool's own
 *    totals (allocated, reserved), kept per (process, device) in gpu_pools.
 *  - TensorFlow: BFCAllocator::AllocateRaw (entry + return) and
 *    DeallocateRaw (entry), kind tensor_gpu, device unknown.
 * Counted once: a tensor allocator call in flight (LW_CTX_TENSOR) makes the
 * heap tier skip the libc calls inside it (lw_alloc.bpf.h), and the libc
 * free inside free_cpu finds no heap record and is not counted as unknown.
 * Hits count in lw_target.tensor_hits, budgeted apart from the heap's.
 */
#ifndef LW_TENSOR_BPF_H_
#define LW_TENSOR_BPF_H_

#include "lw_record.bpf.h"
#include "lw_stack.bpf.h"
#include "lw_cuda.bpf.h"

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, struct lw_pool_key);
  __type(value, struct lw_pool_val);
} gpu_pools SEC(".maps");

/* c10::DeviceType::CUDA */
#define LW_C10_DEVICE_CUDA 1

static __always_inline struct lw_target *tensor_target(__u32 *tgid)
{
  struct lw_target *t = current_target(LW_TARGET_TENSOR, tgid);
  if (t)
    __sync_fetch_and_add(&t->tensor_hits, 1);
  return t;
}

/* Entry of an allocating call read at return (alloc_cpu, AllocateRaw).
 * Returns whether its return has anything to record: not in a process that
 * is not a target, nor for 0 bytes (alloc_cpu(0) and AllocateRaw of 0 return
 * NULL without allocating; 14 of alloc_cpu's 37 calls an iteration on the
 * conv loop). Under a uprobe session a false skips the return probe. */
static __always_inline bool tensor_alloc_enter(struct pt_regs *ctx, __u32 func, __u64 size)
{
  __u32 tgid;
  if (!tensor_target(&tgid) || !size)
    return false;
  __u64 sp = PT_REGS_SP(ctx);
  struct lw_ctx_val v = {.sp = sp, .start_ns = bpf_ktime_get_ns(), .arg1 = size, .func = func};
  bpf_probe_read_user(&v.ret_addr, sizeof(v.ret_addr), (void *)sp);
  ctx_put(LW_CTX_TENSOR, &v);
  return true;
}

static __always_inline int tensor_alloc_return(struct pt_regs *ctx, __u32 func, __u64 ret)
{
  __u32 tgid;
  struct lw_target *t = current_target(LW_TARGET_TENSOR, &tgid);
  if (!t)
    return 0;
  struct lw_ctx_val *c = ctx_get(LW_CTX_TENSOR);
  if (!c || c->func != func || PT_REGS_SP(ctx) != c->sp + 8)
    return 0;
  __u64 size = c->arg1;
  ctx_clear(c);
  if (!ret) {
    /* alloc_cpu(0) returns NULL and is never freed: not a failure. */
    if (size)
      count(LW_CNT_ALLOC_FAILED);
    return 0;
  }
  __u32 kind = func == LW_FUNC_TENSOR_CPU_ALLOC ? LW_KIND_TENSOR_CPU : LW_KIND_TENSOR_GPU;
  struct lw_regs regs = lw_probe_regs(ctx);
  __u64 stack = capture_stack(ctx, t, kind, &regs, true, 0);
  record_alloc(ctx, t, tgid, kind, ret, size, bpf_ktime_get_ns(), stack);
  return 0;
}

/* free_cpu / DeallocateRaw. The libc free that free_cpu tail-calls finds
 * no heap record (its block was never recorded as heap): the context left
 * here tells free_enter() not to count it as unknown. */
static __always_inline int tensor_free_enter(struct pt_regs *ctx, __u32 kind, __u64 ptr)
{
  if (!ptr)
    return 0;
  __u32 tgid;
  struct lw_target *t = tensor_target(&tgid);
  if (!t)
    return 0;
  if (retire(t, tgid, kind, ptr) < 0)
    count(LW_CNT_TENSOR_FREE_UNKNOWN);
  if (kind == LW_KIND_TENSOR_CPU) {
    __u64 sp = PT_REGS_SP(ctx);
    struct lw_ctx_val v = {.sp = sp, .start_ns = bpf_ktime_get_ns(), .arg0 = ptr,
                           .func = LW_FUNC_TENSOR_CPU_FREE};
    ctx_put(LW_CTX_TENSOR, &v);
  }
  return 0;
}

/* One GPU tensor made (+) or released (-) in a PyTorch pool. */
static __always_inline void torch_gpu_block(struct pt_regs *ctx, struct lw_target *t, __u32 tgid,
                                            __u64 ptr, __s64 delta, __s32 device)
{
  if (!ptr || !delta)
    return;
  __u32 flags = cuda_device_flags(device);
  if (delta < 0) {
    if (retire_flags(t, tgid, LW_KIND_TENSOR_GPU, ptr, flags) < 0)
      count(LW_CNT_TENSOR_FREE_UNKNOWN);
    return;
  }
  struct lw_regs regs = lw_probe_regs(ctx);
  struct lw_live_val val = {.size = (__u64)delta, .alloc_ns = bpf_ktime_get_ns(),
                            .stack_hash = capture_stack(ctx, t, LW_KIND_TENSOR_GPU, &regs, false, 0)};
  bool replaced;
  if (live_insert(t, tgid, LW_KIND_TENSOR_GPU, ptr, &val, &replaced))
    return;
  emit(t, LW_EV_ALLOC, tgid, LW_KIND_TENSOR_GPU, ptr, val.size, val.alloc_ns, val.stack_hash,
       flags | (replaced ? LW_EVF_REPLACED : 0));
}

/* c10::reportMemoryUsageToProfiler. The Device is {int8 type, int8 index}
 * passed by value in one register. `totals`: the arity with the pool's
 * totals; `record`: false where the pool's USDTs record the tensors and
 * this probe only keeps the totals. */
static __always_inline int torch_report_enter(struct pt_regs *ctx, bool totals, bool record)
{
  __u32 tgid;
  struct lw_target *t = tensor_target(&tgid);
  if (!t)
    return 0;
  __u64 dev_raw = totals ? PT_REGS_PARM5(ctx) : PT_REGS_PARM3(ctx);
  if ((__s8)(dev_raw & 0xff) != LW_C10_DEVICE_CUDA) {
    count(LW_CNT_TENSOR_OTHER_DEVICE);
    return 0;
  }
  __s32 device = (__s8)((dev_raw >> 8) & 0xff);
  if (totals) {
    struct lw_pool_key k = {.tgid = tgid, .device = device};
    struct lw_pool_val v = {.allocated = PT_REGS_PARM3(ctx), .reserved = PT_REGS_PARM4(ctx),
                            .ts_ns = bpf_ktime_get_ns()};
    if (bpf_map_update_elem(&gpu_pools, &k, &v, BPF_ANY))
      count(LW_CNT_CUDA_STATE_FAILED);
    t->seen |= LW_SEEN_TENSOR_GPU;
  }
  if (!record)
    return 0;
  torch_gpu_block(ctx, t, tgid, PT_REGS_PARM1(ctx), (__s64)PT_REGS_PARM2(ctx), device);
  return 0;
}

static long pool_purge_cb(struct bpf_map *map, struct lw_pool_key *key, void *val, __u32 *tgid)
{
  if (key->tgid == *tgid)
    bpf_map_delete_elem(map, key);
  return 0;
}

/* The process exited or exec'd: its pools' totals go with it. */
static __always_inline void tensor_purge_process(struct lw_target *t, __u32 tgid)
{
  if (!t || !(t->seen & LW_SEEN_TENSOR_GPU))
    return;
  t->seen &= ~LW_SEEN_TENSOR_GPU;
  bpf_for_each_map_elem(&gpu_pools, pool_purge_cb, &tgid, 0);
}

#endif /* LW_TENSOR_BPF_H_ */
