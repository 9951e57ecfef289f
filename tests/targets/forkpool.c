// SPDX-License-Identifier: Apache-2.0
/* A worker pool: on "go" the parent forks WORKERS workers; each leaks its
 * own, distinct amount from forkpool_worker_leak and stays alive. Traced by
 * the daemon with follow_forks, every worker must show up as a process of
 * its own with exactly its leak, and the parent with only its own.
 * See target_protocol.h for the protocol; this target adds one step:
 *
 *   test   -> "go"
 *   target -> "forked <pid> <pid> <pid>"   the workers exist, idle
 *   test   -> "leak"                       (once the tracer has them)
 *   target -> "done <json>"
 *
 * The gate exists because a tracer that follows forks attaches to a child
 * only after the fork event reached it (uprobes are filtered per process,
 * and a child starts out unprobed): what a worker allocated before that is
 * not what this target tests.
 *
 * Ground truth: "sites" is the parent's (the workers' site holds 0 there);
 * for each worker i the facts carry "worker<i>_pid" and "worker<i>_bytes".
 * Workers die with the parent (PR_SET_PDEATHSIG), on "exit", or when the
 * test kills the process group.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "target_protocol.h"

enum { WORKERS = 3, WORKER_BLOCKS = 3, PARENT_LEAK = 1234 };

static void *volatile worker_blocks[WORKER_BLOCKS];
static void *volatile parent_block;

/* Distinct per worker, and never a multiple of another: a worker credited
 * with a sibling's bytes shows. */
static unsigned long long worker_block_bytes(int index) { return 1000ull * (unsigned)(index + 1) + 11; }

LW_SITE static void forkpool_worker_leak(int index) {
  for (int i = 0; i < WORKER_BLOCKS; i++) {
    worker_blocks[i] = malloc(worker_block_bytes(index));
    if (worker_blocks[i] == NULL) lw_die("malloc");
  }
}

LW_SITE static void forkpool_parent_leak(void) {
  parent_block = malloc(PARENT_LEAK);
  if (parent_block == NULL) lw_die("malloc");
}

/* Runs in a worker: waits for the parent's go-ahead on `gate_fd`, leaks,
 * reports on `report_fd`, parks. Never touches stdin/stdout (they belong to
 * the parent's conversation with the test). */
static void worker_main(int index, int gate_fd, int report_fd) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) lw_die("prctl");
  /* The parent may have died between fork and prctl. */
  if (getppid() == 1) _exit(1);
  char c;
  if (read(gate_fd, &c, 1) != 1) _exit(1); /* parent gone: nothing to do */
  forkpool_worker_leak(index);
  if (write(report_fd, &c, 1) != 1) lw_die("write report pipe");
  lw_park_forever();
}

int main(void) {
  if (lw_ready_wait_go() != 0) return 0;

  pid_t workers[WORKERS];
  int gates[WORKERS];
  int report[2];
  if (pipe(report) != 0) lw_die("pipe");
  for (int i = 0; i < WORKERS; i++) {
    int gate[2];
    if (pipe(gate) != 0) lw_die("pipe");
    workers[i] = fork();
    if (workers[i] < 0) lw_die("fork");
    if (workers[i] == 0) {
      close(gate[1]);
      close(report[0]);
      worker_main(i, gate[0], report[1]);
    }
    close(gate[0]);
    gates[i] = gate[1];
  }
  close(report[1]);

  char line[128];
  int n = snprintf(line, sizeof line, "forked %d %d %d\n", (int)workers[0], (int)workers[1], (int)workers[2]);
  lw_write_all(1, line, (size_t)n);
  for (;;) {
    if (lw_read_line(line, sizeof line) < 0) return 0;
    if (strcmp(line, "leak") == 0) break;
  }

  forkpool_parent_leak();
  for (int i = 0; i < WORKERS; i++) {
    if (write(gates[i], "l", 1) != 1) lw_die("write gate pipe");
  }
  /* "done" only once every worker has leaked. */
  for (int i = 0; i < WORKERS; i++) {
    char c;
    if (read(report[0], &c, 1) != 1) lw_die("a worker did not report");
  }

  lw_truth_site("forkpool_parent_leak", PARENT_LEAK);
  lw_truth_site("forkpool_worker_leak", 0);
  for (int i = 0; i < WORKERS; i++) {
    char key[32];
    snprintf(key, sizeof key, "worker%d_pid", i);
    lw_truth_fact(key, workers[i]);
    snprintf(key, sizeof key, "worker%d_bytes", i);
    lw_truth_fact(key, (long long)(WORKER_BLOCKS * worker_block_bytes(i)));
  }
  lw_truth_total(PARENT_LEAK);
  lw_done();
  lw_wait_exit();
  for (int i = 0; i < WORKERS; i++) kill(workers[i], SIGKILL);
  for (int i = 0; i < WORKERS; i++) waitpid(workers[i], NULL, 0);
  return 0;
}
