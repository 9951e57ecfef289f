// SPDX-License-Identifier: Apache-2.0
/* Leaks until the kernel kills it, for the OOM report tests
 * (tests/integration/oom_test.cc, decision oom-kill-reports). See
 * target_protocol.h for the protocol; there is no "done": the process dies.
 *
 *   oom_leaker [BLOCK_KIB [INTERVAL_MS]]   after "go": prints "leaking", then
 *       leak_for_oom() takes a BLOCK_KIB block (default 1024: above glibc's
 *       mmap threshold, so light mode sees it as an mmap) and writes every
 *       page of it, every INTERVAL_MS (default 10), until the kill.
 *   oom_leaker idle                        after "go": prints "idle" and
 *       sleeps until killed (the SIGKILL and storm tests).
 */
#define _GNU_SOURCE
#include <time.h>

#include "target_protocol.h"

LW_SITE static void *leak_for_oom(size_t bytes) {
  char *p = malloc(bytes);
  if (p != NULL)
    for (size_t i = 0; i < bytes; i += 4096) p[i] = 1; /* resident: counts against the limit */
  return p;
}

int main(int argc, char **argv) {
  const int idle = argc > 1 && strcmp(argv[1], "idle") == 0;
  const size_t block = (argc > 1 && !idle ? strtoul(argv[1], NULL, 10) : 1024) * 1024;
  const long interval_ms = argc > 2 ? strtol(argv[2], NULL, 10) : 10;
  free(malloc(1)); /* the arena exists before "ready" */
  if (lw_ready_wait_go() != 0) return 0;
  if (idle) {
    lw_write_all(1, "idle\n", 5);
    for (;;) pause();
  }
  lw_write_all(1, "leaking\n", 8);
  const struct timespec pause_ts = {interval_ms / 1000, (interval_ms % 1000) * 1000000L};
  for (;;) {
    if (leak_for_oom(block) == NULL) lw_die("malloc");
    nanosleep(&pause_ts, NULL);
  }
}
