/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * User stacks: captured at the allocation and stored once per distinct
 * stack in the `stacks` map under a 64-bit hash of its frames (object
 * identity and file offset, so one stack is one entry whichever process
 * runs it; decisions stacks-caller-visible and cfi-unwinding).
 */
#ifndef LW_STACK_BPF_H_
#define LW_STACK_BPF_H_

#include "lw_python.bpf.h"
#include "lw_unwind.bpf.h"

/* The kernel's frame-pointer walk (unwind_cfi off): raw addresses, stored
 * as anonymous frames (ino 0) for the daemon to map with the process's
 * mappings. */
static __always_inline void lw_fp_stack(void *ctx, __u64 hint, struct lw_stack *s)
{
  __u64 *ips = (__u64 *)s->frames;  /* converted in place below, last first */
  /* Inside operator new, its caller goes in as frame 1: libstdc++ keeps
   * no frame pointer, so the walk skips it. */
  __u32 first = hint ? 1 : 0;
  long n = bpf_get_stack(ctx, &ips[1], (LW_MAX_STACK_DEPTH - 1) * sizeof(__u64),
                         BPF_F_USER_STACK);
  if (n <= 0) {
    s->nr = 0;
    return;
  }
  __u32 nr = (__u32)n / 8 + 1;
  ips[0] = ips[1];
  if (hint) {
    ips[1] = hint;
  } else {
    for (int i = 1; i < LW_MAX_STACK_DEPTH - 1; i++) {
      if ((__u32)i + 1 >= nr)
        break;
      ips[i] = ips[i + 1];
    }
    nr -= 1;
  }
  if (nr > LW_MAX_STACK_DEPTH)
    nr = LW_MAX_STACK_DEPTH;
  /* frames[i] covers ips[2i] and ips[2i+1]: going down from the end never
   * overwrites an ips[j] still to be read (j <= i). */
  for (int i = LW_MAX_STACK_DEPTH - 1; i >= 0; i--) {
    if ((__u32)i >= nr)
      continue;
    __u64 ip = ips[i];
    s->frames[i].ino = 0;
    s->frames[i].dev = (__u32)(ip >> 32);
    s->frames[i].off = (__u32)ip;
    s->how[i] = i == 0 ? LW_UNWOUND_LEAF : (i == 1 && first) ? LW_UNWOUND_HINT : LW_UNWOUND_FP;
  }
  s->nr = nr;
  s->flags = LW_END_FRAME_POINTERS | LW_STACK_USES_FP;
}

/* Stores the per-CPU scratch stack in `stacks` (once per distinct stack)
 * and returns its hash, or 0 when it is unknown (counted). Global: verified
 * once for every caller. `may_add` 0: only a stack already stored is found
 * (fair shares, decision fair-shares). A hash has bit 63 clear: the answer
 * carries LW_STACK_ADDED when this call stored the stack. */
/* lw_store_stack()'s answer when the stack map is full (no hash maps to it). */
#define LW_STACK_HASH_MAP_FULL 2ULL
#define LW_STACK_ADDED (1ULL << 63)

__noinline __u64 lw_store_stack(__u32 may_add)
{
  __u32 zero = 0;
  struct lw_stack *s = bpf_map_lookup_elem(&stack_scratch, &zero);
  if (!s) {
    count(LW_CNT_SCRATCH_FAILED);
    return 0;
  }
  __u32 nr = s->nr;
  if (nr == 0) {
    count(LW_CNT_STACK_FAILED);
    return 0;
  }
  __u64 h = 0x6c65616b77617463ULL ^ ((__u64)s->flags << 32) ^ nr;
  /* One mix per frame, not two: the mixes form one serial chain (two
   * multiplies each), which was most of this function's 0.4-0.7 us on
   * 50-60 frame stacks. The object's half is spread by a multiply off the
   * chain first, so that it cannot cancel against the offset's bits. */
  for (__u32 i = 0; i < LW_MAX_STACK_DEPTH; i++) {
    if (i >= nr)
      break;
    __u64 obj = (s->frames[i].ino ^ ((__u64)s->how[i] << 56)) * 0x9e3779b97f4a7c15ULL;
    h = mix64(h ^ obj ^ (((__u64)s->frames[i].dev << 32) | s->frames[i].off));
  }
  /* The Python frames (bpf/lw_python.bpf.h): the same native stack runs
   * every Python function, so they are part of the stack's identity. */
  __u32 py_nr = s->py_nr;
  if (py_nr) {
    h = mix64(h ^ ((__u64)s->py_flags << 32) ^ py_nr);
    for (__u32 i = 0; i < LW_MAX_PY_FRAMES; i++) {
      if (i >= py_nr)
        break;
      __u64 code = s->py[i].code * 0x9e3779b97f4a7c15ULL;
      h = mix64(h ^ code ^ (((__u64)(__u32)s->py[i].lasti << 32) | ((__u64)s->py[i].sig << 16) |
                            s->py[i].flags));
    }
  }
  /* 0, 1 (LW_STACK_HEAP_REGROWN, leakwatch_abi.h) and 2 (this function's
   * "stack map full") are reserved: a real stack never hashes to them. */
  h &= ~LW_STACK_ADDED;
  if (h <= LW_STACK_HASH_MAP_FULL)
    h = LW_STACK_HASH_MAP_FULL + 1;
  if (!bpf_map_lookup_elem(&stacks, &h)) {
    /* Over its share of the stack map (decision fair-shares): only the
     * stacks already stored are found. */
    if (!may_add)
      return LW_STACK_HASH_MAP_FULL;
    long err = bpf_map_update_elem(&stacks, &h, s, BPF_NOEXIST);
    if (!err)
      return h | LW_STACK_ADDED;
    if (err != -17 /* EEXIST: another CPU stored it */) {
      count(LW_CNT_STACK_MAP_FULL);
      return LW_STACK_HASH_MAP_FULL; /* the caller counts it on its target */
    }
  }
  return h;
}

/* Stores the current user stack in `stacks` and returns its hash, or 0 when
 * the stack is unknown (counted). `r`: the user registers; `at_return`:
 * r->ip is a return address (a return probe); `hint`: operator new's
 * return address when allocating inside it. The daemon derives the stable,
 * cross-host stack_id from (build-id, offset). */
static __always_inline __u64 capture_stack(void *ctx, const struct lw_target *t, __u32 kind,
                                           const struct lw_regs *r, bool at_return, __u64 hint)
{
  if (!collect_stacks)
    return 0;
  /* The Python frames first: read whole, they stand for the native frames
   * above the evaluation loop, and the native walk stops there (decision
   * python-frames, "Where the native walk stops"). */
  lw_python_stack();
  if (unwind_cfi) {
    /* The target's maps generation validates the frame cache (0: none);
     * passed in, so the walk does not look the target up again. User
     * addresses leave bits 63 and 62 free for the flags. */
    __u64 gen = frame_cache_on ? t->maps_gen : 0;
    __u64 flags = at_return ? LW_HINT_AT_RETURN : 0;
    if (!python_native_above && lw_python_read_whole())
      flags |= LW_HINT_STOP_PY;
    if (lw_unwind_stack(r->ip, r->sp, r->bp, hint | flags, gen)) {
      count(LW_CNT_SCRATCH_FAILED);
      return 0;
    }
  } else {
    __u32 zero = 0;
    struct lw_stack *s = bpf_map_lookup_elem(&stack_scratch, &zero);
    if (!s) {
      count(LW_CNT_SCRATCH_FAILED);
      return 0;
    }
    lw_fp_stack(ctx, hint, s);
  }
  struct lw_target *tw = (struct lw_target *)t; /* the map value is writable */
  const bool over_share = t->stack_limit && t->stacks_added + 1 >= t->stack_limit;
  __u64 h = lw_store_stack(!over_share);
  if (h & LW_STACK_ADDED) {
    __sync_fetch_and_add(&tw->stacks_added, 1);
    return h & ~LW_STACK_ADDED;
  }
  if (h == LW_STACK_HASH_MAP_FULL) {
    /* Per process and kind too (decision unrecorded-per-kind): the map value is
     * writable. `kind` is the record's, a constant at every caller but CUDA's.
     * */
    if (kind < LW_KIND_MAX) {
      struct lw_unrec *u = &tw->unrec[kind];
      __sync_fetch_and_add(over_share ? &u->stack_over_share : &u->stack_full, 1);
    }
    return 0;
  }
  return h;
}

/* The registers of a uprobe's context. */
static __always_inline struct lw_regs lw_probe_regs(struct pt_regs *ctx)
{
  struct lw_regs r = {.ip = PT_REGS_IP(ctx), .sp = PT_REGS_SP(ctx), .bp = PT_REGS_FP(ctx)};
  return r;
}

#endif /* LW_STACK_BPF_H_ */
