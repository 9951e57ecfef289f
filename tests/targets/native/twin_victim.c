// SPDX-License-Identifier: Apache-2.0
/* The victim of a copied build-id (issue 32, item 3; file_identity_test.cc):
 * twin_attacker is linked with this program's build-id but has other
 * functions, another layout and other call-frame information. Built -O2
 * without frame pointers, so only its own .eh_frame finds main above
 * victim_leak_site.
 *
 *   twin_victim KIB   after "go" on stdin, maps KIB KiB of anonymous memory
 *                     in victim_leak_site (called by victim_middle, called
 *                     by main) that it never unmaps, prints "leaked", then
 *                     waits for EOF on stdin */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../target_protocol.h"

static void *volatile kept;

LW_SITE void victim_leak_site(size_t bytes) {
  kept = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (kept == MAP_FAILED) lw_die("mmap");
  __asm__ volatile("" ::: "memory");
}

LW_SITE void victim_middle(size_t bytes) {
  victim_leak_site(bytes);
  __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  const size_t bytes = (size_t)strtol(argv[1], NULL, 10) << 10;
  char line[64];
  if (!fgets(line, sizeof(line), stdin)) return 0;
  victim_middle(bytes);
  printf("leaked\n");
  fflush(stdout);
  while (fgets(line, sizeof(line), stdin)) {
  }
  return 0;
}
