// SPDX-License-Identifier: Apache-2.0
// The daemon's sandbox (core/platform/sandbox.h), applied in forked children so the
// test process keeps its own capabilities: the filter allows what is listed,
// fails the unlisted with EPERM (and says so), kills on the deadly list, and
// checks the arguments of clone, kill and socket.
#include "core/platform/sandbox.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>

namespace lw {
namespace {

// Runs `body` in a child after install_seccomp(); returns its wait status.
int in_sandbox(const std::function<int()>& body) {
  if (!kSeccompInThisBuild) return 0;
  pid_t child = fork();
  if (child == 0) {
    Result<size_t> rules = install_seccomp();
    if (!rules) _exit(100);
    _exit(body());
  }
  int status = 0;
  waitpid(child, &status, 0);
  return status;
}

bool exited_with(int status, int code) { return WIFEXITED(status) && WEXITSTATUS(status) == code; }

TEST(Sandbox, RulesAreUniqueAndCheckedCallsAreNotListed) {
  std::set<int> seen;
  for (const SyscallRule& r : seccomp_rules()) {
    EXPECT_TRUE(seen.insert(r.nr).second) << r.name << " listed twice";
    EXPECT_NE(r.nr, SYS_clone) << "clone is checked by its flags";
    EXPECT_NE(r.nr, SYS_kill) << "kill is checked by its signal";
    EXPECT_NE(r.nr, SYS_socket) << "socket is checked by its family";
  }
  // What the daemon needs later, whatever else changes (the list).
  for (int nr : {SYS_bpf, SYS_perf_event_open, SYS_process_vm_readv, SYS_inotify_add_watch, SYS_epoll_wait,
                 SYS_openat2, SYS_accept4, SYS_futex}) {
    bool allowed = false;
    for (const SyscallRule& r : seccomp_rules()) allowed |= r.nr == nr && r.action == SeccompAction::kAllow;
    EXPECT_TRUE(allowed) << nr;
  }
}

TEST(Sandbox, ListedCallsWorkUnderTheFilter) {
  if (!kSeccompInThisBuild) GTEST_SKIP() << "no seccomp filter in sanitizer builds (core/platform/sandbox.h)";
  int status = in_sandbox([] {
    // Threads (clone without namespace flags), files, /proc, time.
    std::thread t([] {});
    t.join();
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1;
    char buf[256];
    if (read(fd, buf, sizeof(buf)) <= 0) return 2;
    close(fd);
    if (kill(getppid(), 0) != 0) return 3;  // an existence check
    int unix_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (unix_fd < 0) return 4;
    close(unix_fd);
    std::ifstream self("/proc/self/status");
    std::string line;
    bool nnp = false, filtered = false;
    while (std::getline(self, line)) {
      nnp |= line == "NoNewPrivs:\t1";
      filtered |= line == "Seccomp:\t2";
    }
    return nnp && filtered ? 0 : 5;
  });
  EXPECT_TRUE(exited_with(status, 0)) << status;
}

TEST(Sandbox, UnlistedCallsFailWithEperm) {
  if (!kSeccompInThisBuild) GTEST_SKIP() << "no seccomp filter in sanitizer builds (core/platform/sandbox.h)";
  int status = in_sandbox([] {
    // chdir is on no list: trapped, reported once, EPERM.
    errno = 0;
    if (chdir("/") == 0 || errno != EPERM) return 1;
    // A signal other than 0, a network socket, a new namespace.
    if (kill(getppid(), SIGCONT) == 0 || errno != EPERM) return 2;
    if (socket(AF_INET, SOCK_STREAM, 0) >= 0 || errno != EPERM) return 3;
    long rc = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
    if (rc == 0) _exit(0);
    if (rc > 0 || errno != EPERM) return 4;
    // clone3 pretends not to exist, so glibc falls back to clone.
    if (syscall(SYS_clone3, nullptr, 0) >= 0 || errno != ENOSYS) return 5;
    return 0;
  });
  EXPECT_TRUE(exited_with(status, 0)) << status;
}

TEST(Sandbox, DeadlyCallsKillTheProcess) {
  if (!kSeccompInThisBuild) GTEST_SKIP() << "no seccomp filter in sanitizer builds (core/platform/sandbox.h)";
  for (int which = 0; which < 3; ++which) {
    int status = in_sandbox([which] {
      if (which == 0) {
        char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
        execve("/bin/true", argv, environ);
      } else if (which == 1) {
        unshare(CLONE_NEWNS);
      } else {
        syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0);
      }
      return 0;  // not reached: killed
    });
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) << which << ": " << status;
  }
}

TEST(Sandbox, CapabilitiesAreRestrictedPerThread) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root's capabilities to drop them";
  pid_t child = fork();
  if (child == 0) {
    Result<CapabilityReport> r = restrict_capabilities(kDaemonCapabilities);
    if (!r) _exit(1);
    uint64_t want = 0;
    for (int c : kDaemonCapabilities) want |= uint64_t{1} << c;
    if (r->kept != want || !r->bounding_set_restricted) _exit(2);
    // Dropped means gone: without CAP_DAC_OVERRIDE a 0000 file cannot be
    // opened for writing (CAP_DAC_READ_SEARCH, kept, covers reading only).
    char path[] = "/tmp/lw_sandbox_XXXXXX";
    int fd = mkstemp(path);
    fchmod(fd, 0);
    close(fd);
    int denied = open(path, O_WRONLY);
    unlink(path);
    if (denied >= 0) _exit(3);
    // A thread of its own can drop the rest.
    int thread_result = 0;
    std::thread t([&] { thread_result = drop_thread_capabilities().ok() ? 0 : 4; });
    t.join();
    _exit(thread_result);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(exited_with(status, 0)) << "wait status " << status;
}

}  // namespace
}  // namespace lw
