// SPDX-License-Identifier: Apache-2.0
/* Issue 35, item 5: leaks from its first moments, built as distributions
 * build (-O2, no frame pointers), so that while its unwind table is still
 * being built (`top --debug-slow-tables-ms`) the frame-pointer fallback
 * cannot climb out of leak_early and its stacks end `table_pending`; once
 * the table is in they are whole. One call path, so one site.
 * Prints "ready <pid>" once it has leaked its first block, then leaks
 * 64 bytes every 2 ms (at most 60 s) until "exit" or EOF on stdin. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_BLOCKS 30000

static void *volatile kept[MAX_BLOCKS];

/* The store after the call keeps it a call (no tail call to malloc), so
 * leak_early is the site's leaf. */
__attribute__((noinline, noclone)) void leak_early(int i) { kept[i] = malloc(64); }

__attribute__((noinline, noclone)) static int asked_to_exit(void) {
  char buf[16];
  ssize_t n = read(0, buf, sizeof buf);
  return n == 0 || (n >= 4 && memcmp(buf, "exit", 4) == 0);
}

int main(void) {
  leak_early(0);
  char line[32];
  int len = snprintf(line, sizeof line, "ready %d\n", (int)getpid());
  if (write(1, line, (size_t)len) != len) return 1;
  fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
  const struct timespec pause = {0, 2000000};
  for (int i = 1; i < MAX_BLOCKS; ++i) {
    leak_early(i);
    if (asked_to_exit()) return 0;
    nanosleep(&pause, NULL);
  }
  while (!asked_to_exit()) nanosleep(&pause, NULL);
  return 0;
}
