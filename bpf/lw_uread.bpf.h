/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * User reads through a per-CPU window (decision user-read-window).
 *
 * A walk reads a few bytes per frame from the thread's stack (a return
 * address, a saved rbp) and per Python frame from the interpreter's data
 * stack, always going up. Each bpf_probe_read_user() pays a fixed cost
 * (the helper, pagefault_disable, the kernel's hardened-usercopy check of
 * the destination) of about 90 ns on these machines, many times the copy
 * of 8 bytes: on the PyTorch conv loop those reads were 65% of the return
 * program. Here a read is served from a copy of the aligned block around
 * it (stack_window_size bytes, a power of two up to a page), and only a
 * read outside the block copies the next one, from the address up to the
 * block's end (native stacks are read going up) or from the block's start
 * up to it (Python frames are read going down).
 *
 * - *Never across a page:* the block is aligned and at most a page, so it
 *   lies in the page of the address asked for; if that page can be read,
 *   so can the block, and a failed copy fails the read as the small one
 *   would have.
 * - *Never stale:* the window belongs to one walk. lw_window_reset() at
 *   the start of each walk empties it (the same thread's stack changes
 *   between calls), and a fill records the thread.
 * - *Preemption:* uprobe programs run with migration, not preemption,
 *   disabled, so another task's program can refill this CPU's window in
 *   the middle of a read. Fills and resets move a sequence count (odd
 *   while a fill runs); a read that saw it move reads the user memory
 *   directly instead.
 */
#ifndef LW_UREAD_BPF_H_
#define LW_UREAD_BPF_H_

#include "lw_common.bpf.h"

#define LW_WINDOW_MAX 4096

struct lw_stack_window {
  __u64 seq;   /* odd while a fill runs */
  __u64 base;  /* the address buf[0] holds; 0: empty */
  __u64 owner; /* pid_tgid of the thread it was read from */
  __u64 len;   /* bytes copied */
  __u8 buf[LW_WINDOW_MAX];
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct lw_stack_window);
} stack_window SEC(".maps");

/* Set at load time: the block's size (a power of two, 64..LW_WINDOW_MAX),
 * 0 = every read on its own (benchmarks). */
const volatile __u32 stack_window_size = LW_WINDOW_MAX;

/* Empties this CPU's window: a walk begins. */
static __always_inline void lw_window_reset(void)
{
  __u32 zero = 0;
  struct lw_stack_window *win = bpf_map_lookup_elem(&stack_window, &zero);
  if (!win)
    return;
  win->base = 0;
  win->seq += 2;
}

/* Where [addr, addr + len) is in this CPU's window, copying its block in
 * if needed: the offset in buf, or -1 (the window is off, the range
 * crosses a block, or the copy failed). *seq: the count to check after
 * taking the bytes. */
static __always_inline int lw_window_at(struct lw_stack_window *win, __u64 addr, __u32 len, bool up,
                                        __u64 *seq)
{
  __u64 size = stack_window_size;
  if (!win || size < 64 || size > LW_WINDOW_MAX || len == 0 || len > size)
    return -1;
  __u64 block = addr & ~(size - 1);
  if (((addr + len - 1) & ~(size - 1)) != block || block == 0)
    return -1;
  __u64 s = win->seq;
  __u64 me = bpf_get_current_pid_tgid();
  __u64 base = win->base;
  if ((s & 1) || win->owner != me || base == 0 || addr < base || addr + len > base + win->len) {
    /* From the address to the block's end when the reads go up (the
     * native stack), from the block's start to it when they go down
     * (Python's frames): the part a walk never reads is not copied. */
    __u64 start = up ? addr : block;
    __u64 n = up ? block + size - addr : addr + len - block;
    if (n < len || n > LW_WINDOW_MAX)
      return -1;
    /* Odd while the copy runs; a fill or reset that came in meanwhile
     * (this program preempted) has moved it on, and this fill gives up. */
    __u64 odd = (s | 1) + 2;
    win->seq = odd;
    win->base = 0;
    long err = bpf_probe_read_user(win->buf, n, (void *)start);
    win->owner = me;
    win->base = start;
    win->len = n;
    if (err || __sync_val_compare_and_swap(&win->seq, odd, odd + 1) != odd) {
      win->base = 0;
      win->seq += 2;
      return -1;
    }
    s = odd + 1;
    base = start;
    count(LW_CNT_UREAD_WINDOW_FILLS);
  }
  *seq = s;
  return (int)(addr - base);
}

struct lw_u64x2 {
  __u64 v[2];
};

/* 8 or 16 bytes at addr (out->v[1] is 0 for 8) when this CPU's window
 * holds them for thread me, without filling it: 1, or 0 (not there, or a
 * fill or reset moved the count while they were taken). */
static __always_inline int lw_window_peek(struct lw_stack_window *win, __u64 me, __u64 addr,
                                          __u32 len, struct lw_u64x2 *out)
{
  if (!win)
    return 0;
  __u64 seq = *(volatile __u64 *)&win->seq;
  __u64 base = win->base;
  if ((seq & 1) || !base || win->owner != me || addr < base || addr + len > base + win->len)
    return 0;
  __u32 off = (__u32)(addr - base) & (LW_WINDOW_MAX - 1);
  if (off > LW_WINDOW_MAX - 16)
    return 0;
  out->v[0] = *(__u64 *)&win->buf[off];
  out->v[1] = len == 16 ? *(__u64 *)&win->buf[off + 8] : 0;
  return *(volatile __u64 *)&win->seq == seq;
}

/* 8 or 16 bytes of the current thread's memory at addr (out->v[1] is 0
 * for 8). Returns 0 or a negative error, as bpf_probe_read_user(). Global:
 * verified once. */
__noinline int lw_uread16(__u64 addr, struct lw_u64x2 *out, __u32 len)
{
  if (!out)
    return -1;
  out->v[0] = 0;
  out->v[1] = 0;
  if (len != 8 && len != 16)
    return -1;
  __u32 zero = 0;
  struct lw_stack_window *win = bpf_map_lookup_elem(&stack_window, &zero);
  __u64 seq = 0;
  int at = lw_window_at(win, addr, len, true, &seq);
  if (win && at >= 0) {
    __u32 off = (__u32)at & (LW_WINDOW_MAX - 1);
    if (off <= LW_WINDOW_MAX - 16) {
      __u64 a = *(__u64 *)&win->buf[off];
      __u64 b = len == 16 ? *(__u64 *)&win->buf[off + 8] : 0;
      if (*(volatile __u64 *)&win->seq == seq) {
        out->v[0] = a;
        out->v[1] = b;
        return 0;
      }
    }
  }
  if (len == 16)
    return bpf_probe_read_user(out->v, 16, (void *)addr);
  return bpf_probe_read_user(out->v, 8, (void *)addr);
}

/* LW_UREAD_BLOCK bytes (a Python frame's header) at addr. Returns 0 or
 * a negative error, as bpf_probe_read_user(). Global: verified once. */
#define LW_UREAD_BLOCK LW_PY_FRAME_HEADER
struct lw_ublock {
  __u8 b[LW_UREAD_BLOCK];
};

__noinline int lw_uread_block(__u64 addr, struct lw_ublock *out)
{
  if (!out)
    return -1;
  __u32 zero = 0;
  struct lw_stack_window *win = bpf_map_lookup_elem(&stack_window, &zero);
  __u64 seq = 0;
  int at = lw_window_at(win, addr, LW_UREAD_BLOCK, false, &seq);
  if (win && at >= 0) {
    __u32 off = (__u32)at & (LW_WINDOW_MAX - 1);
    if (off <= LW_WINDOW_MAX - LW_UREAD_BLOCK &&
        !bpf_probe_read_kernel(out->b, LW_UREAD_BLOCK, &win->buf[off]) &&
        *(volatile __u64 *)&win->seq == seq)
      return 0;
  }
  return bpf_probe_read_user(out->b, LW_UREAD_BLOCK, (void *)addr);
}

#endif /* LW_UREAD_BPF_H_ */
