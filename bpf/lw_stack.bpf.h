/* SPDX-License-Identifier: GPL-2.0 */
/*
 * User stacks: captured at the allocation and stored once per distinct
 * stack in the `stacks` map under a 64-bit hash (docs/architecture.md,
 * decision 7).
 */
#ifndef LW_STACK_BPF_H_
#define LW_STACK_BPF_H_

#include "lw_common.bpf.h"

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

#endif /* LW_STACK_BPF_H_ */
