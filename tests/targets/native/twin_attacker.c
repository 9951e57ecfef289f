// SPDX-License-Identifier: Apache-2.0
/* The attacker of a copied build-id (issue 32, item 3; file_identity_test.cc):
 * linked with twin_victim's build-id, but its functions are its own, and
 * its text is laid out and described otherwise: every function keeps a
 * 4 KiB frame, so a row of its call-frame information read at one of the
 * victim's addresses finds no return address there.
 *
 *   twin_attacker KIB   after "go" on stdin, maps KIB KiB in
 *                       attacker_leak_site (through attacker_pad_1..4 and
 *                       attacker_middle), prints "leaked", then waits for
 *                       EOF on stdin */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../target_protocol.h"

static void *volatile kept;

// A 4 KiB frame the compiler cannot drop.
#define ATTACKER_FRAME()            \
  volatile char frame[4096];        \
  frame[0] = 1;                     \
  frame[sizeof(frame) - 1] = frame[0]

LW_SITE void attacker_leak_site(size_t bytes) {
  ATTACKER_FRAME();
  kept = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (kept == MAP_FAILED) lw_die("mmap");
  __asm__ volatile("" ::: "memory");
}

LW_SITE void attacker_middle(size_t bytes) {
  ATTACKER_FRAME();
  attacker_leak_site(bytes);
  __asm__ volatile("" ::: "memory");
}

#define ATTACKER_PAD(n, next)                                      \
  LW_SITE void attacker_pad_##n(size_t bytes) {                    \
    ATTACKER_FRAME();                                              \
    if (bytes != 0) next(bytes);                                   \
    __asm__ volatile("" ::: "memory");                             \
    __asm__ volatile(".rept 64\n nop\n .endr" ::: "memory");       \
  }
ATTACKER_PAD(4, attacker_middle)
ATTACKER_PAD(3, attacker_pad_4)
ATTACKER_PAD(2, attacker_pad_3)
ATTACKER_PAD(1, attacker_pad_2)

int main(int argc, char **argv) {
  ATTACKER_FRAME();
  if (argc != 2) return 2;
  const size_t bytes = (size_t)strtol(argv[1], NULL, 10) << 10;
  char line[64];
  if (!fgets(line, sizeof(line), stdin)) return 0;
  attacker_pad_1(bytes);
  printf("leaked\n");
  fflush(stdout);
  while (fgets(line, sizeof(line), stdin)) {
  }
  return 0;
}
