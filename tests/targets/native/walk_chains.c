// SPDX-License-Identifier: Apache-2.0
/* Walk reuse (decision walk-reuse) must never hand one call
 * chain's frames to another. Built -O2 without frame pointers: via_a and
 * via_b have the same frame layout, so common()'s call to malloc starts
 * every walk from the same pc and stack pointer, and only the return
 * address in common()'s frame (into via_a or into via_b) tells the two
 * chains apart. They alternate, so both chains are kept and reused.
 *
 * Sites: via_a (kRounds blocks of kA bytes), via_b (kRounds of kB). */
#include <stdlib.h>
#include <string.h>

#include "../target_protocol.h"

enum { kRounds = 400, kA = 100, kB = 300 };

static void *volatile keep_a[kRounds], *volatile keep_b[kRounds];

LW_SITE static void *common(size_t n) {
  void *p = malloc(n);
  if (!p) lw_die("malloc");
  memset(p, 1, n);
  __asm__ volatile("" ::: "memory");
  return p;
}

LW_SITE static void via_a(int i) {
  keep_a[i] = common(kA);
  __asm__ volatile("" ::: "memory");
}

LW_SITE static void via_b(int i) {
  keep_b[i] = common(kB);
  __asm__ volatile("" ::: "memory");
}

int main(void) {
  if (lw_ready_wait_go() != 0) return 0;
  for (int i = 0; i < kRounds; ++i) {
    via_a(i);
    via_b(i);
  }
  lw_truth_site("via_a", (unsigned long long)kRounds * kA);
  lw_truth_site("via_b", (unsigned long long)kRounds * kB);
  lw_done();
  lw_wait_exit();
  return 0;
}
