// SPDX-License-Identifier: Apache-2.0
// `leakwatch top -c COMMAND`: start a program stopped at its entry point,
// so the probes are attached before it runs any code of its own.
//
// Mechanism (docs/cli.md): the child calls ptrace(PTRACE_TRACEME) and execs
// the program; at the exec stop the parent reads AT_ENTRY (the address of
// _start) from /proc/PID/auxv and writes an int3 there, then lets ld.so run:
// by the time _start is reached ld.so has mapped every library (and run
// their constructors). At that breakpoint the instruction is restored and
// the program waits, ptrace-stopped, until resume() detaches ptrace.
// Nothing of ptrace remains after resume(): only uprobes trace it.
//
// Thread-safety: not thread-safe; use from the thread that started it
// (ptrace requests must come from the tracer thread).
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/platform/result.h"

namespace lw {

class LaunchedCommand {
 public:
  // Starts argv (argv[0] looked up in PATH unless it holds a '/'), with its
  // stdout on `stdout_fd`, stopped at its entry point. Errors: ENOENT/
  // EACCES (cannot exec), ECHILD (it ended before its entry point),
  // ENOTSUP (not x86-64).
  static Result<std::unique_ptr<LaunchedCommand>> start(const std::vector<std::string>& argv, int stdout_fd);
  // Sends SIGKILL if still stopped (never resumed), else terminate(); reaps.
  ~LaunchedCommand();
  LaunchedCommand(const LaunchedCommand&) = delete;
  LaunchedCommand& operator=(const LaunchedCommand&) = delete;

  pid_t pid() const { return pid_; }
  // Lets the program run from its entry point (PTRACE_DETACH).
  Status resume();
  // The wait status once it has exited (reaped here), else nullopt; with
  // `block`, waits for it.
  std::optional<int> reap(bool block);
  // SIGTERM, up to 5 s for it to exit, then SIGKILL; reaps.
  void terminate();
  // "exited with status 0", "killed by signal 15", for the operator.
  static std::string describe(int wait_status);

 private:
  explicit LaunchedCommand(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
  bool resumed_ = false;
  std::optional<int> status_;
};

}  // namespace lw
