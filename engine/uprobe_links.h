// SPDX-License-Identifier: Apache-2.0
// uprobe links made without libbpf: Debian's libbpf 1.1 predates both
// uprobe_multi links (kernel 6.6) and uprobe sessions (kernel 6.13), so the
// link is created with the bpf() system call directly. Feature probes say
// which the running kernel has.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/platform/result.h"

namespace lw {

// Kernel ABI values newer than the system's linux/bpf.h (6.1).
inline constexpr uint32_t kAttachUprobeMulti = 48;    // BPF_TRACE_UPROBE_MULTI
inline constexpr uint32_t kAttachUprobeSession = 57;  // BPF_TRACE_UPROBE_SESSION

// Whether the kernel takes a kprobe-type program for uprobe_multi links.
bool kernel_has_uprobe_multi();
// Whether it takes uprobe session links (decision tensor-tier, "Uprobe
// sessions"): an entry program returning non-zero skips the return probe.
bool kernel_has_uprobe_session();
// Whether the kernel returns from a uretprobe through the uretprobe system
// call (x86-64, 6.11 and later: a cheaper return than the trap), read from
// /proc/kallsyms (calling it outside the trampoline would kill the caller).
bool kernel_has_uretprobe_syscall();
// Whether a uprobe hit looks up its VMA under the mmap lock, so that the
// hits of one process's threads serialize: kernels before 6.14, which
// added the lock-free lookup. Read from the release (uname): no probe can
// tell, and a release that does not parse counts as serializing
// (release_serializes_uprobe_hits, core/policy/overhead_policy.h).
bool kernel_serializes_uprobe_hits();

// One link over `offsets` (file offsets in `path`), each with its cookie.
// attach_type: kAttachUprobeMulti or kAttachUprobeSession; `retprobe` only
// with the former. Returns the link's fd.
Result<int> create_uprobe_link(int prog_fd, uint32_t attach_type, pid_t pid, const std::string& path,
                               const std::vector<uint64_t>& offsets,
                               const std::vector<uint64_t>& cookies, bool retprobe);

}  // namespace lw
