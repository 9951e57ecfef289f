// SPDX-License-Identifier: Apache-2.0
/* glibc's heap moving up and down (decision brk-emulated-probe): a loop that
 * allocates and frees a block too large for the free lists grows the break
 * and trims it back on every iteration, as PyTorch's inference loop does.
 * Then one site grows the heap to a new high and keeps it.
 *
 * Then two blocks are kept in heap re-grown below that high (keep_regrown).
 *
 * Facts: "cycles", how many re-growths the loop made (each one brk growth
 * below the highest break seen); "kept_bytes", what keep_regrown keeps.
 * Site: regrow_high, the growth past the highest break, kept. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "target_protocol.h"

enum { kCycles = 300, kPage = 4096 };
static const size_t kBlock = 2u << 20; /* 2 MiB: below the mmap threshold set below */
static const size_t kKept = 512u << 10;

static void *volatile keep[2];

static void *volatile sink;

LW_SITE static void cycle(void) {
  void *p = malloc(kBlock);
  if (!p) lw_die("malloc");
  memset(p, 1, 64);
  sink = p;
  free(p); /* the top chunk is over the trim threshold: brk shrinks */
}

/* Two blocks in re-grown heap, one right after the other: at most one of
 * the two growths is walked (one walk per 100 ms). */
LW_SITE static void keep_regrown(void) {
  for (int i = 0; i < 2; ++i) {
    keep[i] = malloc(kKept);
    if (!keep[i]) lw_die("malloc");
    memset(keep[i], 1, 64);
  }
}

LW_SITE static unsigned long long regrow_high(void) {
  /* Past the highest break: the loop's blocks reached at most 2 MiB plus
   * glibc's headers above the break it started from. */
  const intptr_t grow = 4 * (intptr_t)kBlock;
  if (sbrk(grow) == (void *)-1) lw_die("sbrk");
  return (unsigned long long)grow;
}

int main(void) {
  /* Every block from the heap, and the heap trimmed as soon as 128 KiB are
   * free at its top, with no padding. */
  if (!mallopt(M_MMAP_THRESHOLD, 64 << 20) || !mallopt(M_TRIM_THRESHOLD, 128 << 10) ||
      !mallopt(M_TOP_PAD, 0))
    lw_die("mallopt");
  free(malloc(16)); /* the heap exists before the attach */
  if (lw_ready_wait_go() != 0) return 0;
  /* The first growth is to a new high (walked); every later one re-grows. */
  for (int i = 0; i < kCycles; ++i) cycle();
  keep_regrown();
  lw_truth_mmap_site("regrow_high", regrow_high());
  lw_truth_fact("cycles", kCycles - 1);
  lw_truth_fact("kept_bytes", 2 * (long long)kKept);
  lw_done();
  lw_wait_exit();
  return 0;
}
