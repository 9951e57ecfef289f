// SPDX-License-Identifier: Apache-2.0
/* Leaks, then execs itself with --after-exec; the new image leaks from
 * another site and speaks the rest of the protocol. The pid stays the same,
 * so a tracer following it must drop the old image's bytes (that address
 * space is gone) and count the new image's. See target_protocol.h.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <time.h>

#include "target_protocol.h"

enum { OLD_BLOCKS = 5, OLD_BLOCK = 1003, NEW_BLOCKS = 3, NEW_BLOCK = 2011 };

/* How long the new image waits before it allocates. Nothing tells a target
 * when the tracer has re-resolved its probes for the new image, so this is
 * the grace the tracer gets; it is generous, not a tuned minimum. */
static const struct timespec reattach_grace = {.tv_sec = 1, .tv_nsec = 0};

static void *volatile keep[OLD_BLOCKS + NEW_BLOCKS];

LW_SITE static void execer_old_leak(void) {
  for (int i = 0; i < OLD_BLOCKS; i++) {
    keep[i] = malloc(OLD_BLOCK);
    if (keep[i] == NULL) lw_die("malloc");
  }
}

LW_SITE static void execer_new_leak(void) {
  for (int i = 0; i < NEW_BLOCKS; i++) {
    keep[i] = malloc(NEW_BLOCK);
    if (keep[i] == NULL) lw_die("malloc");
  }
}

static int after_exec(void) {
  while (nanosleep(&reattach_grace, NULL) != 0 && errno == EINTR) {
  }
  execer_new_leak();
  lw_truth_site("execer_new_leak", NEW_BLOCKS * NEW_BLOCK);
  lw_truth_site("execer_old_leak", 0);
  lw_truth_fact("old_image_leaked", OLD_BLOCKS * OLD_BLOCK);
  lw_done();
  lw_wait_exit();
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--after-exec") == 0) return after_exec();

  if (lw_ready_wait_go() != 0) return 0;
  execer_old_leak();
  /* Exec the real path, not /proc/self/exe, so comm stays "execer". */
  static char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len < 0) lw_die("readlink /proc/self/exe");
  self[len] = '\0';
  char *const new_argv[] = {argv[0], "--after-exec", NULL};
  execv(self, new_argv);
  lw_die("execv");
}
