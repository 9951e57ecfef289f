/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <sys/resource.h>

#include <cerrno>

#include "core/platform/result.h"

// Exit codes of the leakwatch binary (documented in docs/cli.md).
namespace lw::exit_code {
constexpr int kOk = 0;
constexpr int kError = 1;           // runtime failure, message on stderr
constexpr int kUsage = 2;           // bad command line
constexpr int kNoSuchProcess = 3;
constexpr int kPermissionDenied = 4;
constexpr int kUnsupportedKernel = 5;  // no BTF, no uprobes, BPF not loadable
// `leakwatch test`: the leak gate failed (--error-exitcode changes it). 23,
// LeakSanitizer's default exitcode, far from a program's usual 1 and 2; any
// other code of `test` after the program ran is the program's own.
constexpr int kLeaksFound = 23;
}  // namespace lw::exit_code

namespace lw {

// The exit code for an error that ends a command.
inline int exit_code_for(const Error& e) {
  switch (e.code) {
    case ESRCH: return exit_code::kNoSuchProcess;
    case EPERM:
    case EACCES: return exit_code::kPermissionDenied;
    case ENOTSUP: return exit_code::kUnsupportedKernel;
    default: return exit_code::kError;
  }
}

// Each attached probe and the ring buffer hold an fd, and a daemon tracing
// hundreds of processes needs more than the default 1024: raise the soft
// limit to the hard one. Returns false if that failed.
inline bool raise_fd_limit() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return false;
  if (rl.rlim_cur >= rl.rlim_max) return true;
  rl.rlim_cur = rl.rlim_max;
  return setrlimit(RLIMIT_NOFILE, &rl) == 0;
}

}  // namespace lw
