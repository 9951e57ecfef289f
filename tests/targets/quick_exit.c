// SPDX-License-Identifier: Apache-2.0
/* For `leakwatch top -c` (issue 35, item 2): leaks 3 x 4099 bytes from
 * quick_exit_leak() and exits at once, before top's first table. The
 * final snapshot, taken after the exit (/proc/PID/map_files gone), must
 * still name quick_exit_leak from the file on disk. With an argument
 * FILE, it first renames FILE over its own executable (a copy the test
 * made): the file at its path is then not the one it mapped, and the
 * frames in it must say why they have no names. Not a line-protocol
 * target: leakwatch starts it. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "target_protocol.h"

enum { BLOCKS = 3, BLOCK = 4099 };

static void *volatile kept[BLOCKS];

LW_SITE static void quick_exit_leak(void) {
  for (int i = 0; i < BLOCKS; i++) kept[i] = malloc(BLOCK);
}

int main(int argc, char **argv) {
  quick_exit_leak();
  if (argc > 1) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 2;
    self[n] = '\0';
    if (rename(argv[1], self) != 0) return 3;
  }
  return kept[0] == NULL;
}
