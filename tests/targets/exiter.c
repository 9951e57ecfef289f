// SPDX-License-Identifier: Apache-2.0
/* Leaks, then exits with the blocks still live on "exit" (or EOF), or with
 * --free-before-exit frees them first. Either way leakwatch must print a
 * final snapshot ("final":true) showing what was live at exit, and exit 0.
 * See target_protocol.h.
 */
#define _GNU_SOURCE
#include <stdlib.h>

#include "target_protocol.h"

enum { BLOCKS = 6, BLOCK = 2057 };

static void *volatile keep[BLOCKS];

LW_SITE static void exiter_leak(void) {
  for (int i = 0; i < BLOCKS; i++) {
    keep[i] = malloc(BLOCK);
    if (keep[i] == NULL) lw_die("malloc");
  }
}

LW_SITE static void exiter_free(void) {
  for (int i = 0; i < BLOCKS; i++) free(keep[i]);
}

int main(int argc, char **argv) {
  int free_before_exit = argc > 1 && strcmp(argv[1], "--free-before-exit") == 0;
  if (lw_ready_wait_go() != 0) return 0;
  exiter_leak();
  lw_truth_site("exiter_leak", BLOCKS * BLOCK);
  lw_truth_site("exiter_free", 0);
  lw_truth_fact("live_at_exit", free_before_exit ? 0 : BLOCKS * BLOCK);
  lw_truth_total(BLOCKS * BLOCK);
  lw_done();
  lw_wait_exit();
  if (free_before_exit) exiter_free();
  return 0;
}
