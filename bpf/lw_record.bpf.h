/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The one record/retire path of the live map
 * (decisions live-map-authoritative and losses-counted-repaired): every kind
 * (heap, mmap, CUDA) inserts and removes its records here, so "the kernel map
 * is authoritative" and "every loss is counted" hold in one place.
 */
#ifndef LW_RECORD_BPF_H_
#define LW_RECORD_BPF_H_

#include "lw_common.bpf.h"

#define LW_PAGE_SIZE 4096ULL
#define LW_UNMAP_MAX_RECORDS 8

/* Counts an allocation of `kind` the live map could not hold on its target
 * (decision unrecorded-per-kind): a failure path only. The bound is for the
 * verifier (the kind indexes the target's array). */
static __always_inline void count_unrec_map_full(struct lw_target *t, __u32 kind, __u64 bytes)
{
  if (kind >= LW_KIND_MAX)
    return;
  __sync_fetch_and_add(&t->unrec[kind].map_full, 1);
  __sync_fetch_and_add(&t->unrec[kind].map_full_bytes, bytes);
}

/* Inserts the record (tgid, kind, addr). The allocator may hand out an
 * address we still think is live: its free was missed (before attach, or
 * lost), and the old record is replaced (*replaced set, counted). On
 * failure (map full, counted) the old record is gone too, and the daemon is
 * told (a FREE marked REPLACED); the new allocation is then untracked.
 * Returns 0 when inserted. The caller emits the ALLOC (record_alloc()), so
 * that side state (CUDA) can be written first. */
static __always_inline int live_insert(struct lw_target *t, __u32 tgid, __u32 kind, __u64 addr,
                                       const struct lw_live_val *val, bool *replaced)
{
  struct lw_live_key key = {.tgid = tgid, .kind = kind, .addr = addr};
  *replaced = false;
  if ((t->flags & LW_TARGET_OVER_SHARE) || (t->record_limit && t->records_added + 1 >= t->record_limit)) {
    /* Over its share (decision fair-shares): nothing new is recorded. A
     * record still at the address is of a block freed unseen: it goes too. */
    if (kind < LW_KIND_MAX) {
      __sync_fetch_and_add(&t->unrec[kind].over_share, 1);
      __sync_fetch_and_add(&t->unrec[kind].over_share_bytes, val->size);
    }
    if (!bpf_map_delete_elem(&live, &key)) {
      *replaced = true;
      emit(t, LW_EV_FREE, tgid, kind, addr, 0, 0, 0, LW_EVF_REPLACED);
    }
    return -1;
  }
  /* One map operation in the common case (no record at the address). */
  long err = bpf_map_update_elem(&live, &key, val, BPF_NOEXIST);
  if (!err) {
    __sync_fetch_and_add(&t->records_added, 1);
    return 0;
  }
  if (err == -17 /* EEXIST */) {
    count(LW_CNT_MISSED_FREE);
    *replaced = true;
    err = bpf_map_update_elem(&live, &key, val, BPF_EXIST);
    if (err == -2 /* ENOENT: a free on another thread took it meanwhile */)
      err = bpf_map_update_elem(&live, &key, val, BPF_ANY);
  }
  if (err) {
    count(LW_CNT_LIVE_INSERT_FAILED);
    count_unrec_map_full(t, kind, val->size);
    if (*replaced) {
      bpf_map_delete_elem(&live, &key);
      emit(t, LW_EV_FREE, tgid, kind, addr, 0, 0, 0, LW_EVF_REPLACED);
    }
    return -1;
  }
  return 0;
}

/* Records an allocation and tells the daemon. */
static __always_inline void record_alloc(void *ctx, struct lw_target *t, __u32 tgid,
                                         __u32 kind, __u64 addr, __u64 size, __u64 alloc_ns,
                                         __u64 stack_hash)
{
  struct lw_live_val val = {.size = size, .alloc_ns = alloc_ns, .stack_hash = stack_hash};
  bool replaced;
  if (live_insert(t, tgid, kind, addr, &val, &replaced))
    return;
  emit(t, LW_EV_ALLOC, tgid, kind, addr, size, alloc_ns, stack_hash,
       replaced ? LW_EVF_REPLACED : 0);
}

/* Removes the record at exactly (tgid, kind, addr), filling its size and
 * identity. Returns 0 when this call removed it: a concurrent free of the
 * same pointer (a double free in the target) loses the race, and only the
 * winner reports it. */
static __always_inline int live_remove(__u32 tgid, __u32 kind, __u64 addr, __u64 *size,
                                       __u64 *alloc_ns)
{
  struct lw_live_key key = {.tgid = tgid, .kind = kind, .addr = addr};
  struct lw_live_val *v = bpf_map_lookup_elem(&live, &key);
  if (!v)
    return -1;
  *size = v->size;
  *alloc_ns = v->alloc_ns;
  return bpf_map_delete_elem(&live, &key) ? -1 : 0;
}

/* Retires the record at exactly (tgid, kind, addr) and tells the daemon,
 * with `ev_flags` on the FREE. Returns its size, or -1. */
static __always_inline long retire_flags(struct lw_target *t, __u32 tgid, __u32 kind, __u64 addr,
                                         __u32 ev_flags)
{
  __u64 size, alloc_ns;
  if (live_remove(tgid, kind, addr, &size, &alloc_ns))
    return -1;
  emit(t, LW_EV_FREE, tgid, kind, addr, size, alloc_ns, 0, ev_flags);
  return (long)size;
}

static __always_inline long retire(struct lw_target *t, __u32 tgid, __u32 kind, __u64 addr)
{
  return retire_flags(t, tgid, kind, addr, 0);
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
        if (bpf_map_update_elem(&live, &tail_key, &tail_val, BPF_ANY)) {
          count(LW_CNT_LIVE_INSERT_FAILED);
          count_unrec_map_full(t, LW_KIND_MMAP, tail);
        }
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

#endif /* LW_RECORD_BPF_H_ */
