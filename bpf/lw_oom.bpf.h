/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * OOM kills of traced processes (decision oom-kill-reports): the
 * kernel's OOM killer choosing a victim (tp_btf/mark_victim, global or
 * memory cgroup), and SIGKILLs sent from user space (systemd-oomd, kubelet
 * eviction, an operator: tp_btf/signal_generate). Both only emit for
 * processes in the targets map, and before the process exits, so the
 * daemon still holds its live sites when the event arrives.
 */
#ifndef LW_OOM_BPF_H_
#define LW_OOM_BPF_H_

#include "lw_common.bpf.h"

#define LW_SIGKILL 9
/* Levels of memory cgroups walked up from the victim's, looking for the
 * one whose limit was hit (v1 hierarchies and v2 both nest). */
#define LW_MEMCG_MAX_DEPTH 8
/* page_counter's "no limit" is PAGE_COUNTER_MAX (LONG_MAX / PAGE_SIZE,
 * ~2^51 pages); anything at or above 2^50 pages is no limit in practice. */
#define LW_MEMCG_NO_LIMIT_PAGES (1ULL << 50)

/* Resident pages of the task's mm: file + anon + shmem (MM_FILEPAGES,
 * MM_ANONPAGES, MM_SHMEMPAGES; MM_SWAPENTS is index 2 and not resident).
 * percpu_counter.count is the folded value, off by at most the per-CPU
 * batches: close enough for a report. Kernels before 6.2 kept an
 * mm_rss_stat array here: the read then fails and gives 0, and the daemon
 * falls back to its last statm sample. */
static __always_inline __u64 task_rss_bytes(struct task_struct *task)
{
  struct mm_struct *mm = BPF_CORE_READ(task, mm);
  if (!mm)
    return 0;
  __s64 file = BPF_CORE_READ(mm, rss_stat[0].count);
  __s64 anon = BPF_CORE_READ(mm, rss_stat[1].count);
  __s64 shmem = BPF_CORE_READ(mm, rss_stat[3].count);
  __s64 pages = (file > 0 ? file : 0) + (anon > 0 ? anon : 0) + (shmem > 0 ? shmem : 0);
  return (__u64)pages << 12;
}

/* The victim's memory cgroup at the kill: the nearest level (its own, then
 * its parents) with a limit that its usage has reached (>= 95%: a charge
 * failed there, and reclaim may have given back a little since). Found:
 * a memory-cgroup OOM, *limit and *usage in bytes. Not found: a global
 * OOM; *limit is the tightest limit seen (0 when none), *usage the
 * victim's own cgroup's usage. */
static __always_inline bool memcg_limit_hit(struct task_struct *task, __u64 *limit, __u64 *usage)
{
  *limit = 0;
  *usage = 0;
  struct css_set *cgs = BPF_CORE_READ(task, cgroups);
  if (!cgs)
    return false;
  int id = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
  if (id < 0 || id >= 12)
    return false;
  struct cgroup_subsys_state *css = 0;
  bpf_core_read(&css, sizeof(css), &cgs->subsys[id]);
  if (!css)
    return false;
  /* css is the first member of struct mem_cgroup. */
  struct mem_cgroup *memcg = (struct mem_cgroup *)css;
  struct page_counter *pc = &memcg->memory;
  for (int level = 0; level < LW_MEMCG_MAX_DEPTH && pc; level++) {
    __u64 max = BPF_CORE_READ(pc, max);
    __s64 used = BPF_CORE_READ(pc, usage.counter);
    __u64 pages = used > 0 ? (__u64)used : 0;
    if (level == 0)
      *usage = pages << 12;
    if (max < LW_MEMCG_NO_LIMIT_PAGES) {
      if (!*limit || (max << 12) < *limit)
        *limit = max << 12;
      if (pages * 100 >= max * 95) {
        *limit = max << 12;
        *usage = pages << 12;
        return true;
      }
    }
    pc = BPF_CORE_READ(pc, parent);
  }
  return false;
}

static __always_inline int report_oom_victim(struct task_struct *victim)
{
  __u32 tgid = BPF_CORE_READ(victim, tgid);
  struct lw_target *t = bpf_map_lookup_elem(&targets, &tgid);
  if (!t || (t->flags & LW_TARGET_EXITED))
    return 0;
  __u64 limit = 0, usage = 0;
  __u32 flags = memcg_limit_hit(victim, &limit, &usage) ? LW_EVF_OOM_MEMCG : 0;
  emit(t, LW_EV_OOM_KILL, tgid, 0, limit, task_rss_bytes(victim), usage, 0, flags);
  return 0;
}

/* A SIGKILL from user space to a traced process: kill(), tgkill(),
 * pidfd_send_signal() (si_code <= 0). The kernel's own SIGKILLs (the OOM
 * killer sends SEND_SIG_PRIV, i.e. info == 1) are left out: the OOM killer
 * is reported by mark_victim. The sender is the current task. */
static __always_inline int report_sigkill(int sig, struct kernel_siginfo *info,
                                          struct task_struct *task, int result)
{
  if (sig != LW_SIGKILL || result != TRACE_SIGNAL_DELIVERED)
    return 0;
  if ((unsigned long)info <= 1) /* SEND_SIG_NOINFO (0), SEND_SIG_PRIV (1): from the kernel */
    return 0;
  __u32 tgid = BPF_CORE_READ(task, tgid);
  struct lw_target *t = bpf_map_lookup_elem(&targets, &tgid);
  if (!t || (t->flags & LW_TARGET_EXITED))
    return 0;
  int code = BPF_CORE_READ(info, si_code);
  if (code > 0) /* SI_KERNEL and the fault codes */
    return 0;
  __u64 comm[2] = {};
  bpf_get_current_comm(comm, sizeof(comm));
  __u32 sender = bpf_get_current_pid_tgid() >> 32;
  emit(t, LW_EV_SIGKILL, tgid, 0, sender, task_rss_bytes(task), comm[0], comm[1], 0);
  return 0;
}

#endif /* LW_OOM_BPF_H_ */
