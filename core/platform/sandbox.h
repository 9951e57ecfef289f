// SPDX-License-Identifier: Apache-2.0
// What the daemon may do once it has started
// (decision sandbox-after-start): only its documented capabilities,
// no_new_privs, and a seccomp allow-list of system calls. It parses HTTP and
// TLS from the network and ELF files and /proc text from traced processes; a
// bug there must not be root with every capability.
//
//   restrict_capabilities(): the calling thread (run before any thread
//     starts, so every later thread inherits it) keeps only `keep` in its
//     permitted and effective sets; inheritable and ambient sets are
//     cleared; with CAP_SETPCAP (root), every other capability leaves the
//     bounding set and the securebits lock root out of regaining any.
//   drop_thread_capabilities(): the calling thread keeps none (the HTTP
//     front's threads: they need none).
//   install_seccomp(): no_new_privs, then the filter built from
//     seccomp_rules() on every thread of the process (TSYNC).
//
// The filter (x86-64 only; another architecture or the x32 ABI kills):
//   allow     what the daemon calls, now and later (attach: bpf,
//             perf_event_open, ioctl; /proc and files: openat, openat2,
//             read, pread64, getdents64, readlinkat...; process_vm_readv;
//             inotify, epoll, eventfd, futex; accept4/recv/send for HTTP),
//             some with their arguments checked: clone without namespace
//             flags, kill with signal 0 (an existence check), socket for
//             AF_UNIX (sd_notify) only;
//   ENOSYS    clone3 (its flags cannot be checked; glibc falls back to clone);
//   kill      what only an attacker would call: execve, ptrace, mount,
//             setns/unshare, module loading, open_by_handle_at, id changes,
//             capset... (SECCOMP_RET_KILL_PROCESS: no second try);
//   trap      anything else: a SIGSYS handler logs the call's number once
//             and makes it return EPERM, so a path the list missed fails
//             with an error the daemon reports instead of killing it.
//
// Thread-safety: call from the main thread; install_seccomp affects every
// thread.
#pragma once

#include <linux/capability.h>
#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>

#include "core/platform/result.h"

namespace lw {

// Sanitizer runtimes make system calls the filter forbids (LeakSanitizer
// stops the world with ptrace, at exit): sanitizer builds
// (scripts/sanitize.sh) run without the filter; capabilities are still
// restricted. Normal builds, the ones shipped and tested in CI, have it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSeccompInThisBuild = false;
#else
inline constexpr bool kSeccompInThisBuild = true;
#endif

// The capabilities the daemon keeps (README, "Capabilities";
// decision five-capabilities).
inline constexpr int kDaemonCapabilities[] = {CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH,
                                              CAP_CHECKPOINT_RESTORE};

struct CapabilityReport {
  uint64_t kept = 0;     // bit per capability, permitted and effective now
  uint64_t dropped = 0;  // bits that were permitted before and are not now
  bool bounding_set_restricted = false;
};

Result<CapabilityReport> restrict_capabilities(std::span<const int> keep);

// Root to `uid`/`gid` (decision unprivileged-uid): no supplementary groups,
// then every gid and every uid (real, effective, saved, and so the file
// system ones) set to them, the permitted capabilities kept across the
// change (PR_SET_KEEPCAPS) and made effective again, so that
// restrict_capabilities() can then keep only the documented ones. Needs
// CAP_SETUID and CAP_SETGID; call before any thread starts.
Status switch_user(uid_t uid, gid_t gid);
Status drop_thread_capabilities();

enum class SeccompAction { kAllow, kEnosys, kKill };

struct SyscallRule {
  int nr;
  const char* name;
  SeccompAction action;
};

// The list, in one place (core/platform/sandbox.cc).
std::span<const SyscallRule> seccomp_rules();

// no_new_privs and the filter, on every thread. Returns how many rules.
Result<size_t> install_seccomp();

// "CAP_BPF,CAP_PERFMON,..." for a bit set.
std::string capability_list(uint64_t bits);

}  // namespace lw
