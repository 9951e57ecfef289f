// SPDX-License-Identifier: GPL-2.0
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
