// SPDX-License-Identifier: Apache-2.0
#include "cli/launch.h"

#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace lw {

namespace {

// argv[0] as execv needs it: a path, looked up in PATH like execvp would,
// but here, before fork (the child must only make async-signal-safe calls).
Result<std::string> resolve_program(const std::string& name) {
  if (name.empty()) return Error{ENOENT, "empty command"};
  if (name.find('/') != std::string::npos) return name;
  const char* path = getenv("PATH");
  std::string dirs = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t colon = dirs.find(':', start);
    if (colon == std::string::npos) colon = dirs.size();
    std::string dir = dirs.substr(start, colon - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0)
      return candidate;
    start = colon + 1;
  }
  return Error{ENOENT, name + ": command not found in PATH"};
}

// AT_ENTRY of a process, from its auxiliary vector: where execution of the
// program itself begins (_start), load bias included.
Result<uint64_t> entry_point(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/auxv";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error("open " + path);
  Elf64_auxv_t aux[128];
  ssize_t n = read(fd, aux, sizeof(aux));
  close(fd);
  if (n < 0) return errno_error("read " + path);
  for (size_t i = 0; i < static_cast<size_t>(n) / sizeof(Elf64_auxv_t); ++i)
    if (aux[i].a_type == AT_ENTRY) return static_cast<uint64_t>(aux[i].a_un.a_val);
  return Error{ENOEXEC, path + ": no AT_ENTRY"};
}

int wait_for(pid_t pid, int* status) {
  pid_t r;
  do {
    r = waitpid(pid, status, __WALL);
  } while (r < 0 && errno == EINTR);
  return r < 0 ? -1 : 0;
}

}  // namespace

Result<std::unique_ptr<LaunchedCommand>> LaunchedCommand::start(const std::vector<std::string>& argv,
                                                                 int stdout_fd) {
#if !defined(__x86_64__)
  (void)argv;
  (void)stdout_fd;
  return Error{ENOTSUP, "top -c: only on x86-64"};
#else
  if (argv.empty()) return Error{EINVAL, "empty command"};
  Result<std::string> program = resolve_program(argv[0]);
  if (!program) return program.error();
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  // The exec's outcome: the pipe closes at a successful exec (CLOEXEC), or
  // carries the child's errno.
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return errno_error("pipe2");
  const pid_t pid = fork();
  if (pid < 0) {
    Error e = errno_error("fork");
    close(report[0]);
    close(report[1]);
    return e;
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    close(report[0]);
    signal(SIGPIPE, SIG_DFL);
    if (stdout_fd != STDOUT_FILENO && dup2(stdout_fd, STDOUT_FILENO) < 0) _exit(126);
    if (ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) == 0) execv(program->c_str(), args.data());
    int err = errno;
    ssize_t ignored = write(report[1], &err, sizeof(err));
    (void)ignored;
    _exit(127);
  }
  close(report[1]);
  int child_errno = 0;
  ssize_t got;
  do {
    got = read(report[0], &child_errno, sizeof(child_errno));
  } while (got < 0 && errno == EINTR);
  close(report[0]);
  std::unique_ptr<LaunchedCommand> cmd(new LaunchedCommand(pid));
  if (got == static_cast<ssize_t>(sizeof(child_errno))) {
    cmd->reap(true);
    return errno_error("cannot run " + *program, child_errno);
  }

  // The exec stop: the new image is mapped, ld.so has not run yet.
  int status = 0;
  if (wait_for(pid, &status) != 0) return errno_error("waitpid");
  if (!WIFSTOPPED(status)) {
    cmd->status_ = status;
    return Error{ECHILD, *program + " " + describe(status) + " before it started"};
  }
  Result<uint64_t> entry = entry_point(pid);
  if (!entry) return entry.error();
  errno = 0;
  const long word = ptrace(PTRACE_PEEKTEXT, pid, reinterpret_cast<void*>(*entry), nullptr);
  if (errno != 0) return errno_error("ptrace peek at the entry point of " + *program);
  const long trapped = static_cast<long>((static_cast<unsigned long>(word) & ~0xffUL) | 0xccUL);
  if (ptrace(PTRACE_POKETEXT, pid, reinterpret_cast<void*>(*entry), reinterpret_cast<void*>(trapped)) != 0)
    return errno_error("ptrace poke at the entry point of " + *program);

  // Run ld.so up to the int3, passing on any other signal.
  int deliver = 0;
  for (;;) {
    if (ptrace(PTRACE_CONT, pid, nullptr, reinterpret_cast<void*>(static_cast<long>(deliver))) != 0)
      return errno_error("ptrace cont");
    if (wait_for(pid, &status) != 0) return errno_error("waitpid");
    if (WIFEXITED(status) || WIFSIGNALED(status)) {
      cmd->status_ = status;
      return Error{ECHILD, *program + " " + describe(status) + " before reaching its entry point"};
    }
    deliver = WSTOPSIG(status);
    if (deliver != SIGTRAP) continue;
    struct user_regs_struct regs;
    if (ptrace(PTRACE_GETREGS, pid, nullptr, &regs) != 0) return errno_error("ptrace getregs");
    if (regs.rip != *entry + 1) continue;  // a SIGTRAP of its own: deliver it
    regs.rip = *entry;
    if (ptrace(PTRACE_POKETEXT, pid, reinterpret_cast<void*>(*entry), reinterpret_cast<void*>(word)) != 0 ||
        ptrace(PTRACE_SETREGS, pid, nullptr, &regs) != 0)
      return errno_error("ptrace restore at the entry point of " + *program);
    return cmd;
  }
#endif
}

Status LaunchedCommand::resume() {
  if (resumed_) return ok_status();
  if (ptrace(PTRACE_DETACH, pid_, nullptr, nullptr) != 0) return errno_error("ptrace detach");
  resumed_ = true;
  return ok_status();
}

std::optional<int> LaunchedCommand::reap(bool block) {
  if (status_) return status_;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_ && (WIFEXITED(status) || WIFSIGNALED(status))) status_ = status;
  if (r < 0 && errno == ECHILD) status_ = 0;  // reaped elsewhere: nothing left to wait for
  return status_;
}

void LaunchedCommand::terminate() {
  if (status_) return;
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!reap(false) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (!status_) {
    kill(pid_, SIGKILL);
    reap(true);
  }
}

LaunchedCommand::~LaunchedCommand() {
  if (status_ || pid_ <= 0) return;
  if (!resumed_) {
    // Still ptrace-stopped at its entry (attaching failed): it never ran.
    kill(pid_, SIGKILL);
    reap(true);
    return;
  }
  terminate();
}

std::string LaunchedCommand::describe(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status))
    return "was killed by signal " + std::to_string(WTERMSIG(wait_status)) + " (" +
           strsignal(WTERMSIG(wait_status)) + ")";
  return "stopped";
}

}  // namespace lw
