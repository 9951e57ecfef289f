// SPDX-License-Identifier: GPL-2.0-only
/*
 * No-op uprobe programs for the probe-cost floor (bench/README.md).
 *
 * They do nothing on purpose: what a run measures with them attached is the
 * kernel's own cost per hit (the breakpoint trap, emulating or single-stepping
 * the probed instruction, the return-address hijack of a uretprobe, and the
 * BPF dispatch), which no tracer built on these probes can go below.
 * Attach points are chosen in user space (noop_probes.cc), so the sections
 * carry no target and the skeleton does not auto-attach them.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

SEC("uprobe")
int noop_malloc_entry(struct pt_regs *ctx) { return 0; }

SEC("uretprobe")
int noop_malloc_return(struct pt_regs *ctx) { return 0; }

SEC("uprobe")
int noop_free_entry(struct pt_regs *ctx) { return 0; }

/*
 * posix_memalign layouts (bench/memalign_run.sh, lw_bench_noop --memalign):
 * almost no-op as well, but they count their hits and check what a tracer
 * would read, so a layout that measures cheap but reads the wrong thing
 * shows: the return program checks rax == 0 (posix_memalign's success) and
 * keeps the last return address it saw (ctx->ip, which must lie in the
 * caller); a plain probe at a `ret` site keeps the return address at [sp].
 * The same work is done in every layout, so the rows differ only by where
 * the probes sit.
 */
__u64 memalign_entry_hits;
__u64 memalign_return_hits;
__u64 memalign_return_nonzero;
__u64 memalign_last_caller;

SEC("uprobe")
int memalign_entry(struct pt_regs *ctx) {
  __sync_fetch_and_add(&memalign_entry_hits, 1);
  return 0;
}

SEC("uretprobe")
int memalign_return(struct pt_regs *ctx) {
  __sync_fetch_and_add(&memalign_return_hits, 1);
  if (ctx->ax != 0) __sync_fetch_and_add(&memalign_return_nonzero, 1);
  memalign_last_caller = ctx->ip;
  return 0;
}

/* A plain uprobe on a `ret` instruction: the caller is at [sp]. */
SEC("uprobe")
int memalign_ret_site(struct pt_regs *ctx) {
  __u64 caller = 0;
  __sync_fetch_and_add(&memalign_return_hits, 1);
  if (ctx->ax != 0) __sync_fetch_and_add(&memalign_return_nonzero, 1);
  bpf_probe_read_user(&caller, sizeof(caller), (void *)ctx->sp);
  memalign_last_caller = caller;
  return 0;
}

/*
 * What `light` mode's host-wide syscall tracepoints cost a syscall-heavy
 * process (bench/syscall_run.sh, lw_bench_noop --syscall-tp): the same
 * attach points as leakwatch's lw_sys_enter/lw_sys_exit, doing nothing.
 * Any program on raw_syscalls sys_enter/sys_exit makes every task take the
 * traced syscall entry/exit path; these separate that from the programs'
 * own work.
 */
SEC("raw_tp/sys_enter")
int noop_sys_enter(struct bpf_raw_tracepoint_args *ctx) { return 0; }

SEC("raw_tp/sys_exit")
int noop_sys_exit(struct bpf_raw_tracepoint_args *ctx) { return 0; }

/*
 * The tensor tier's layout (bench/tensor_tier_cost.py, config noop-tensors;
 * lw_bench_noop --tensor): c10::alloc_cpu as one uprobe session whose entry
 * skips the return for alloc_cpu(0), as leakwatch's lw_tensor_session does,
 * and c10::free_cpu at its entry. What is left is the traps and the return
 * hijacks of the calls leakwatch records: the floor its tier cannot go below
 * on these probes. Without session support, entry + uretprobe
 * (noop_malloc_entry, noop_malloc_return).
 */
extern bool bpf_session_is_return(void) __ksym __weak;
__u64 tensor_entries;
__u64 tensor_returns;
__u64 tensor_frees;

SEC("uprobe")
int noop_tensor_session(struct pt_regs *ctx) {
  if (bpf_session_is_return()) {
    __sync_fetch_and_add(&tensor_returns, 1);
    return 0;
  }
  __sync_fetch_and_add(&tensor_entries, 1);
  return ctx->di == 0;
}

SEC("uprobe")
int noop_tensor_free(struct pt_regs *ctx) {
  __sync_fetch_and_add(&tensor_frees, 1);
  return 0;
}

/*
 * Any layout read from a file (lw_bench_noop --layout; bench/torch_run.sh,
 * row noop-full): the places a running leakwatch attached to a process,
 * taken from its /api/v1/status. Entries and returns count their hits;
 * sessions use noop_tensor_session above.
 */
__u64 layout_entries;
__u64 layout_returns;

SEC("uprobe")
int noop_layout_entry(struct pt_regs *ctx) {
  __sync_fetch_and_add(&layout_entries, 1);
  return 0;
}

SEC("uretprobe")
int noop_layout_return(struct pt_regs *ctx) {
  __sync_fetch_and_add(&layout_returns, 1);
  return 0;
}
