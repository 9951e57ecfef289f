// SPDX-License-Identifier: Apache-2.0
/* A target under a strict seccomp filter: an allow-list of the syscalls this
 * program itself needs, everything else kills the process
 * (SECCOMP_RET_KILL_PROCESS). Tracing must not make it call anything else:
 * uprobes and uretprobes run in the kernel, and the uretprobe trampoline's
 * own syscall (x86-64, kernel >= 6.11) is let through seccomp by the kernel.
 * See target_protocol.h for the protocol.
 *
 * Usage: seccomp_leaker [--no-filter]
 * After "go": leak_under_seccomp leaks 40 blocks of 3000 bytes and frees 40
 * others, from 4 threads started after the filter is installed.
 */
#define _GNU_SOURCE
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "target_protocol.h"

enum { THREADS = 4, PER_THREAD = 10, LEAK_BYTES = 3000 };

static void *volatile keep[THREADS * PER_THREAD];

#define ALLOW(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

static void install_filter(void) {
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      ALLOW(SYS_read), ALLOW(SYS_write), ALLOW(SYS_exit), ALLOW(SYS_exit_group),
      ALLOW(SYS_brk), ALLOW(SYS_mmap), ALLOW(SYS_munmap), ALLOW(SYS_mremap),
      ALLOW(SYS_mprotect), ALLOW(SYS_madvise), ALLOW(SYS_futex),
      ALLOW(SYS_rt_sigprocmask), ALLOW(SYS_rt_sigreturn), ALLOW(SYS_rt_sigaction), ALLOW(SYS_clone3),
      ALLOW(SYS_clone), ALLOW(SYS_set_robust_list), ALLOW(SYS_rseq),
      ALLOW(SYS_getpid), ALLOW(SYS_gettid), ALLOW(SYS_getrandom), ALLOW(SYS_pause),
      ALLOW(SYS_ppoll), ALLOW(SYS_nanosleep), ALLOW(SYS_clock_nanosleep),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
  };
  struct sock_fprog prog = {.len = sizeof filter / sizeof filter[0], .filter = filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) lw_die("PR_SET_NO_NEW_PRIVS");
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) lw_die("seccomp");
}

static pthread_barrier_t done_barrier;

LW_SITE static void leak_under_seccomp(int t) {
  for (int i = 0; i < PER_THREAD; i++) {
    keep[t * PER_THREAD + i] = malloc(LEAK_BYTES);
    if (keep[t * PER_THREAD + i] == NULL) lw_die("malloc");
    void *volatile churn = malloc(LEAK_BYTES + 1);
    free(churn);
  }
}

static void *worker(void *arg) {
  leak_under_seccomp((int)(intptr_t)arg);
  pthread_barrier_wait(&done_barrier);
  lw_park_forever();
}

int main(int argc, char **argv) {
  int filtered = !(argc > 1 && strcmp(argv[1], "--no-filter") == 0);
  if (pthread_barrier_init(&done_barrier, NULL, THREADS + 1) != 0) lw_die("barrier");
  if (filtered) install_filter();
  if (lw_ready_wait_go() < 0) return 0;
  for (int t = 0; t < THREADS; t++) {
    pthread_t th;
    if (pthread_create(&th, NULL, worker, (void *)(intptr_t)t) != 0) lw_die("pthread_create");
  }
  pthread_barrier_wait(&done_barrier);
  lw_truth_site("leak_under_seccomp", (unsigned long long)THREADS * PER_THREAD * LEAK_BYTES);
  lw_truth_fact("filtered", filtered);
  lw_done();
  lw_wait_exit();
  return 0;
}
