/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The maps every program shares, and the settings fixed at load time
 * (sizes are set by the daemon between open and load: one object serves
 * every configuration).
 */
#ifndef LW_MAPS_BPF_H_
#define LW_MAPS_BPF_H_


#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "leakwatch_abi.h"

/* Sizes are set by the daemon between open and load; so is the live map's
 * BPF_F_NO_PREALLOC (decision live-map-sizing: sized from the host, an
 * entry costs memory only while it holds an allocation). */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 262144);
  __type(key, struct lw_live_key);
  __type(value, struct lw_live_val);
} live SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, __u64);
  __type(value, struct lw_stack);
} stacks SEC(".maps");

/* Entry contexts, one slot per class, in the thread's own task storage
 * (decision fewer-map-operations): a pointer the kernel keeps with the task, no
 * hashing, no delete (a slot is free when LW_CTXF_VALID is clear), and freed
 * with the task. A hash keyed by (tid, class) cost an update, two lookups and a
 * delete per allocation. */
struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct lw_task_ctxs);
} ctxs SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __type(value, struct lw_target);
} targets SEC(".maps");

/* A rescan the daemon has been asked for and not yet taken, per tgid
 * (decision lifecycle-budget): the first change of a target's code mappings
 * (exec-mapped file, dlopen, dlclose) after the daemon last read its maps
 * inserts the key and emits one LW_EV_MAP_EXEC; later changes only bump
 * lw_target.maps_gen. The daemon deletes the key just before it reads the
 * maps again. A dlopen loop costs the daemon one ring event per rescan,
 * not one per call. Sized like targets by the loader. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __type(value, __u8);
} rescan_req SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, LW_CNT_MAX);
  __type(key, __u32);
  __type(value, __u64);
} counters SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct lw_stack);
} stack_scratch SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 8 << 20);
} events SEC(".maps");

/* ---- overhead: byte sampling state (bpf/lw_sampling.h) ----
 * Per CPU, not per thread: no map entry to create or reap per thread, and
 * the counter is in units of s/T, so it serves targets of any mean. A
 * preempted update can lose one decrement; the sampling probability of the
 * other allocations is unaffected. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} sample_state SEC(".maps");
/* ---- end overhead ---- */

/* Set at load time. */
const volatile bool collect_stacks = true;
/* Daemon mode: report every exec, so new processes are matched against the
 * selectors within the poll interval, without scanning /proc. */
const volatile bool report_all_execs = false;
/* Allocation and free events wake the consumer only once this much data is
 * waiting (decision batched-wakeups): a wakeup is an irq_work
 * and a cross-CPU wakeup, tens of us per event in a VM, and the consumer
 * polls every 100 ms anyway. Lifecycle events always wake it. 0 = wake on
 * every event. */
const volatile __u64 wakeup_bytes = 0;

#endif /* LW_MAPS_BPF_H_ */
