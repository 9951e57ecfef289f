// SPDX-License-Identifier: Apache-2.0
#include "core/platform/sandbox.h"

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <vector>

#include "core/platform/capabilities.h"

#ifndef SECBIT_NOROOT
#include <linux/securebits.h>
#endif

namespace lw {

namespace {

// capget/capset without libcap: version 3 has two 32-bit words per set.
struct CapSets {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  uint64_t permitted() const { return data[0].permitted | (uint64_t{data[1].permitted} << 32); }
  uint64_t effective() const { return data[0].effective | (uint64_t{data[1].effective} << 32); }
  void set(uint64_t permitted, uint64_t effective, uint64_t inheritable) {
    for (int w = 0; w < 2; ++w) {
      data[w].permitted = static_cast<uint32_t>(permitted >> (32 * w));
      data[w].effective = static_cast<uint32_t>(effective >> (32 * w));
      data[w].inheritable = static_cast<uint32_t>(inheritable >> (32 * w));
    }
  }
};

Status capget_self(CapSets& sets) {
  if (syscall(SYS_capget, &sets.header, sets.data) != 0) return errno_error("capget");
  return ok_status();
}

Status capset_self(CapSets& sets) {
  sets.header = {_LINUX_CAPABILITY_VERSION_3, 0};
  if (syscall(SYS_capset, &sets.header, sets.data) != 0) return errno_error("capset");
  return ok_status();
}

int last_capability() {
  int last = CAP_LAST_CAP;
  if (FILE* f = fopen("/proc/sys/kernel/cap_last_cap", "re")) {
    if (fscanf(f, "%d", &last) != 1) last = CAP_LAST_CAP;
    fclose(f);
  }
  return last;
}

constexpr SyscallRule allow(int nr, const char* name) { return {nr, name, SeccompAction::kAllow}; }
constexpr SyscallRule fatal(int nr, const char* name) { return {nr, name, SeccompAction::kKill}; }
#define LW_ALLOW(name) allow(SYS_##name, #name)
#define LW_KILL(name) fatal(SYS_##name, #name)

// Calls handled before the list, with their arguments checked.
constexpr int kCheckedClone = SYS_clone, kCheckedKill = SYS_kill, kCheckedSocket = SYS_socket;

const SyscallRule kRules[] = {
    // Files, /proc, the config, ELF objects of traced processes.
    LW_ALLOW(read), LW_ALLOW(readv), LW_ALLOW(pread64), LW_ALLOW(preadv), LW_ALLOW(write), LW_ALLOW(writev),
    LW_ALLOW(lseek), LW_ALLOW(close), LW_ALLOW(openat), LW_ALLOW(openat2), LW_ALLOW(fstat), LW_ALLOW(stat),
    LW_ALLOW(lstat), LW_ALLOW(newfstatat), LW_ALLOW(statx), LW_ALLOW(statfs), LW_ALLOW(fstatfs),
    LW_ALLOW(access), LW_ALLOW(faccessat), LW_ALLOW(faccessat2), LW_ALLOW(readlink), LW_ALLOW(readlinkat),
    LW_ALLOW(getdents64), LW_ALLOW(getcwd), LW_ALLOW(fcntl), LW_ALLOW(dup), LW_ALLOW(dup3),
    LW_ALLOW(fadvise64), LW_ALLOW(pipe2),
    // Writing its own files: the unwind-table cache (unwind.cache_dir),
    // through a temporary name, fsync and rename (engine/unwind_tables.cc).
    LW_ALLOW(mkdir), LW_ALLOW(mkdirat), LW_ALLOW(rename), LW_ALLOW(renameat), LW_ALLOW(renameat2),
    LW_ALLOW(unlink), LW_ALLOW(unlinkat), LW_ALLOW(fsync), LW_ALLOW(fdatasync), LW_ALLOW(ftruncate),
    // Memory: malloc, malloc_trim, mapped ELF files, thread stacks.
    LW_ALLOW(mmap), LW_ALLOW(munmap), LW_ALLOW(mprotect), LW_ALLOW(mremap), LW_ALLOW(madvise), LW_ALLOW(brk),
    // Threads, time, signals (the daemon's own; kill is checked above).
    LW_ALLOW(futex), LW_ALLOW(set_robust_list), LW_ALLOW(rseq), LW_ALLOW(sched_yield),
    LW_ALLOW(sched_getaffinity), LW_ALLOW(nanosleep), LW_ALLOW(clock_nanosleep), LW_ALLOW(clock_gettime),
    LW_ALLOW(clock_getres), LW_ALLOW(gettimeofday), LW_ALLOW(time), LW_ALLOW(exit), LW_ALLOW(exit_group),
    LW_ALLOW(rt_sigaction), LW_ALLOW(rt_sigprocmask), LW_ALLOW(rt_sigreturn), LW_ALLOW(sigaltstack),
    LW_ALLOW(tgkill), LW_ALLOW(restart_syscall), LW_ALLOW(prctl),
    // Identity and limits, read only (setrlimit can only lower without
    // CAP_SYS_RESOURCE).
    LW_ALLOW(getpid), LW_ALLOW(gettid), LW_ALLOW(getppid), LW_ALLOW(getuid), LW_ALLOW(geteuid),
    LW_ALLOW(getgid), LW_ALLOW(getegid), LW_ALLOW(getresuid), LW_ALLOW(getresgid), LW_ALLOW(getgroups),
    LW_ALLOW(capget), LW_ALLOW(getrlimit), LW_ALLOW(setrlimit), LW_ALLOW(prlimit64), LW_ALLOW(getrusage),
    LW_ALLOW(sysinfo), LW_ALLOW(uname), LW_ALLOW(getrandom),
    // Event loops: the consumer's ring buffer and config watch, the HTTP
    // front, the wake-ups between them.
    LW_ALLOW(epoll_create1), LW_ALLOW(epoll_ctl), LW_ALLOW(epoll_wait), LW_ALLOW(epoll_pwait),
    LW_ALLOW(epoll_pwait2), LW_ALLOW(poll), LW_ALLOW(ppoll), LW_ALLOW(eventfd2), LW_ALLOW(inotify_init1),
    LW_ALLOW(inotify_add_watch), LW_ALLOW(inotify_rm_watch),
    // The HTTP front's accepted connections, sd_notify's datagrams. No
    // bind, listen or connect: the listener exists before the filter.
    LW_ALLOW(accept4), LW_ALLOW(recvfrom), LW_ALLOW(recvmsg), LW_ALLOW(sendto), LW_ALLOW(sendmsg),
    LW_ALLOW(shutdown), LW_ALLOW(setsockopt), LW_ALLOW(getsockopt), LW_ALLOW(getsockname),
    LW_ALLOW(getpeername),
    // Tracing: load and attach, read the targets' memory (never write it).
    LW_ALLOW(bpf), LW_ALLOW(perf_event_open), LW_ALLOW(ioctl), LW_ALLOW(process_vm_readv),
    // glibc's pthread_create tries clone3 first and falls back to clone on
    // ENOSYS; clone3's flags live in memory seccomp cannot read.
    {SYS_clone3, "clone3", SeccompAction::kEnosys},
    // Only an attacker calls these: the daemon is killed on the spot.
    LW_KILL(execve), LW_KILL(execveat), LW_KILL(fork), LW_KILL(vfork), LW_KILL(ptrace),
    LW_KILL(process_vm_writev), LW_KILL(open_by_handle_at), LW_KILL(name_to_handle_at), LW_KILL(mount),
    LW_KILL(umount2), LW_KILL(pivot_root), LW_KILL(chroot), LW_KILL(unshare), LW_KILL(setns),
    LW_KILL(init_module), LW_KILL(finit_module), LW_KILL(delete_module), LW_KILL(kexec_load),
    LW_KILL(kexec_file_load), LW_KILL(reboot), LW_KILL(swapon), LW_KILL(swapoff), LW_KILL(iopl),
    LW_KILL(ioperm), LW_KILL(keyctl), LW_KILL(add_key), LW_KILL(request_key), LW_KILL(userfaultfd),
    LW_KILL(personality), LW_KILL(setuid), LW_KILL(setgid), LW_KILL(setreuid), LW_KILL(setregid),
    LW_KILL(setresuid), LW_KILL(setresgid), LW_KILL(setgroups), LW_KILL(setfsuid), LW_KILL(setfsgid),
    LW_KILL(capset), LW_KILL(open_tree), LW_KILL(move_mount), LW_KILL(fsopen), LW_KILL(fsmount),
    LW_KILL(fspick), LW_KILL(mount_setattr), LW_KILL(quotactl), LW_KILL(acct), LW_KILL(settimeofday),
    LW_KILL(clock_settime), LW_KILL(adjtimex), LW_KILL(sethostname), LW_KILL(setdomainname),
};
#undef LW_ALLOW
#undef LW_KILL

// SIGSYS from SECCOMP_RET_TRAP: say which call once, make it return EPERM.
std::atomic<bool> g_reported[1024];

void append_number(char*& p, long v) {
  char digits[24];
  int n = 0;
  if (v < 0) {
    *p++ = '-';
    v = -v;
  }
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v && n < 20);
  while (n) *p++ = digits[--n];
}

void on_sigsys(int, siginfo_t* info, void* context) {
  // Async-signal-safe only: no malloc, no stdio.
  const int nr = info->si_syscall;
  if (nr < 0 || nr >= 1024 || !g_reported[nr].exchange(true)) {
    char line[160];
    char* p = line;
    for (const char* s = "warn: seccomp: system call "; *s;) *p++ = *s++;
    append_number(p, nr);
    for (const char* s = " is not on leakwatch's list (core/platform/sandbox.cc); it failed with EPERM\n"; *s;) *p++ = *s++;
    ssize_t ignored = write(STDERR_FILENO, line, static_cast<size_t>(p - line));
    (void)ignored;
  }
  auto* uc = static_cast<ucontext_t*>(context);
  uc->uc_mcontext.gregs[REG_RAX] = -EPERM;
}

sock_filter stmt(uint16_t code, uint32_t k) { return BPF_STMT(code, k); }
sock_filter jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { return BPF_JUMP(code, k, jt, jf); }

std::vector<sock_filter> build_filter() {
  constexpr uint32_t kArch = offsetof(seccomp_data, arch);
  constexpr uint32_t kNr = offsetof(seccomp_data, nr);
  constexpr uint32_t kArg0 = offsetof(seccomp_data, args[0]);
  constexpr uint32_t kArg1 = offsetof(seccomp_data, args[1]);
  constexpr uint32_t kNamespaces = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
                                   CLONE_NEWNET | CLONE_NEWCGROUP | CLONE_NEWTIME;
  const uint32_t kTrap = SECCOMP_RET_TRAP;
  const uint32_t kAllow = SECCOMP_RET_ALLOW;
  const uint32_t kKill = SECCOMP_RET_KILL_PROCESS;
  std::vector<sock_filter> f;
  f.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kArch));
  f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
  f.push_back(stmt(BPF_RET | BPF_K, kKill));
  f.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kNr));
  // The x32 ABI shares the architecture value: refuse it outright.
  f.push_back(jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));
  f.push_back(stmt(BPF_RET | BPF_K, kKill));
  // clone: threads yes, new namespaces no (flags are in the low 32 bits).
  f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, kCheckedClone, 0, 4));
  f.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kArg0));
  f.push_back(jump(BPF_JMP | BPF_JSET | BPF_K, kNamespaces, 0, 1));
  f.push_back(stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM));
  f.push_back(stmt(BPF_RET | BPF_K, kAllow));
  // kill: signal 0 only (does the process exist).
  f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, kCheckedKill, 0, 4));
  f.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kArg1));
  f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1));
  f.push_back(stmt(BPF_RET | BPF_K, kAllow));
  f.push_back(stmt(BPF_RET | BPF_K, kTrap));
  // socket: AF_UNIX only (sd_notify).
  f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, kCheckedSocket, 0, 4));
  f.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kArg0));
  f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, 1));
  f.push_back(stmt(BPF_RET | BPF_K, kAllow));
  f.push_back(stmt(BPF_RET | BPF_K, kTrap));
  for (const SyscallRule& r : kRules) {
    uint32_t action = r.action == SeccompAction::kAllow    ? kAllow
                      : r.action == SeccompAction::kEnosys ? (SECCOMP_RET_ERRNO | ENOSYS)
                                                           : kKill;
    f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(r.nr), 0, 1));
    f.push_back(stmt(BPF_RET | BPF_K, action));
  }
  f.push_back(stmt(BPF_RET | BPF_K, kTrap));
  return f;
}

}  // namespace

std::span<const SyscallRule> seccomp_rules() { return kRules; }

std::string capability_list(uint64_t bits) {
  std::string out;
  for (int cap = 0; cap < 64; ++cap) {
    if (!(bits & (uint64_t{1} << cap))) continue;
    out += (out.empty() ? "" : ",") + capability_name(cap);
  }
  return out.empty() ? "none" : out;
}

Result<CapabilityReport> restrict_capabilities(std::span<const int> keep) {
  CapSets sets;
  if (Status st = capget_self(sets); !st) return st.error();
  uint64_t keep_bits = 0;
  for (int cap : keep) keep_bits |= uint64_t{1} << cap;
  CapabilityReport report;
  const uint64_t before = sets.permitted();
  if (sets.effective() & (uint64_t{1} << CAP_SETPCAP)) {
    // Root: the bounding set loses everything else, so nothing (an exec, a
    // file capability) can bring it back, and the securebits stop uid 0
    // from regaining the full set.
    for (int cap = 0; cap <= last_capability(); ++cap) {
      if (keep_bits & (uint64_t{1} << cap)) continue;
      if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
        return errno_error("dropping " + capability_name(cap) + " from the bounding set");
    }
    report.bounding_set_restricted = true;
    const int wanted = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                       SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                       SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    const int current = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
    if (current >= 0 && (current | wanted) != current) prctl(PR_SET_SECUREBITS, current | wanted, 0, 0, 0);
  }
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  const uint64_t kept = before & keep_bits;
  sets.set(kept, kept, 0);
  if (Status st = capset_self(sets); !st) return st.error();
  report.kept = kept;
  report.dropped = before & ~kept;
  return report;
}

Status switch_user(uid_t uid, gid_t gid) {
  if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) return errno_error("prctl(PR_SET_KEEPCAPS)");
  // Groups first: once the uid is not 0, CAP_SETGID is no longer effective.
  if (setgroups(0, nullptr) != 0) return errno_error("setgroups(0)");
  if (setresgid(gid, gid, gid) != 0) return errno_error("setresgid(" + std::to_string(gid) + ")");
  if (setresuid(uid, uid, uid) != 0) return errno_error("setresuid(" + std::to_string(uid) + ")");
  prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
  // The kernel kept the permitted set and cleared the effective one.
  CapSets sets;
  if (Status st = capget_self(sets); !st) return st.error();
  sets.set(sets.permitted(), sets.permitted(), 0);
  return capset_self(sets);
}

Status drop_thread_capabilities() {
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  CapSets sets;
  sets.set(0, 0, 0);
  return capset_self(sets);
}

Result<size_t> install_seccomp() {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno_error("prctl(PR_SET_NO_NEW_PRIVS)");
  struct sigaction sa = {};
  sa.sa_sigaction = on_sigsys;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSYS, &sa, nullptr) != 0) return errno_error("sigaction(SIGSYS)");
  std::vector<sock_filter> filter = build_filter();
  sock_fprog prog = {static_cast<unsigned short>(filter.size()), filter.data()};
  long rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
  if (rc < 0) return errno_error("seccomp(SECCOMP_SET_MODE_FILTER)");
  if (rc > 0) return Error{EBUSY, "seccomp: thread " + std::to_string(rc) + " could not take the filter"};
  return std::size(kRules) + 3;
}

}  // namespace lw
