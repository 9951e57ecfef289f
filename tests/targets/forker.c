// SPDX-License-Identifier: Apache-2.0
/* The parent leaks, then forks. The child frees the blocks it inherited,
 * leaks from another site and stays alive. Traced by pid, the parent must
 * show its own leak only: the child's leak is another process's, and the
 * child's frees act on its own copy of the heap. See target_protocol.h.
 *
 * The child's pid is reported as the fact "child_pid". It dies with the
 * parent (PR_SET_PDEATHSIG) or when the test kills the process group.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "target_protocol.h"

enum { PARENT_BLOCKS = 4, PARENT_BLOCK = 1501, CHILD_LEAK = 7777 };

static void *volatile parent_blocks[PARENT_BLOCKS];
static void *volatile child_block;

LW_SITE static void forker_parent_leak(void) {
  for (int i = 0; i < PARENT_BLOCKS; i++) {
    parent_blocks[i] = malloc(PARENT_BLOCK);
    if (parent_blocks[i] == NULL) lw_die("malloc");
  }
}

LW_SITE static void forker_child_leak(void) {
  child_block = malloc(CHILD_LEAK);
  if (child_block == NULL) lw_die("malloc");
}

LW_SITE static void forker_child_free_inherited(void) {
  for (int i = 0; i < PARENT_BLOCKS; i++) free(parent_blocks[i]);
}

/* Runs in the child: never returns, never touches stdio or stdin (they
 * belong to the parent's conversation with the test). */
static void child_main(int report_fd) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) lw_die("prctl");
  forker_child_free_inherited();
  forker_child_leak();
  char ok = 1;
  if (write(report_fd, &ok, 1) != 1) lw_die("write report pipe");
  lw_park_forever();
}

int main(void) {
  if (lw_ready_wait_go() != 0) return 0;
  forker_parent_leak();

  int report[2];
  if (pipe(report) != 0) lw_die("pipe");
  pid_t child = fork();
  if (child < 0) lw_die("fork");
  if (child == 0) {
    close(report[0]);
    child_main(report[1]);
  }
  close(report[1]);
  /* Wait until the child has done its frees and its leak, so "done" means
   * all of it happened. */
  char ok;
  if (read(report[0], &ok, 1) != 1) lw_die("child did not report");
  close(report[0]);

  lw_truth_site("forker_parent_leak", PARENT_BLOCKS * PARENT_BLOCK);
  lw_truth_site("forker_child_leak", 0);
  lw_truth_site("forker_child_free_inherited", 0);
  lw_truth_fact("child_pid", child);
  lw_truth_total(PARENT_BLOCKS * PARENT_BLOCK);
  lw_done();
  lw_wait_exit();
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  return 0;
}
