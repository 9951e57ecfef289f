// SPDX-License-Identifier: Apache-2.0
/* A heap of N small live blocks from two sites, with churn and frees, for
 * automatic sampling (decision auto-sampling): more blocks than
 * a process's share of the live map makes the heap switch from exact to
 * sampled part way, and the figures must stay true. See target_protocol.h.
 *
 * After "go", in this order:
 *   - N blocks: 9 of each 10 from hold_block (16, 32, 48 or 64 bytes), one
 *     from hold_rare (48 bytes), interleaved, so both sites straddle the
 *     switch;
 *   - churn: N/2 blocks of 16..256 bytes from churn_block, each freed at
 *     once (net 0);
 *   - one hold_block block in four freed again: frees of blocks recorded
 *     before the switch, thinned away or kept, and of sampled ones after.
 * The pointer table is mapped before "ready", so the truth is exact.
 */
#define _GNU_SOURCE
#include <sys/mman.h>

#include "target_protocol.h"

static void **blocks;

static size_t block_size(unsigned long i) { return 16 + 16 * ((i / 10) % 4); }

LW_SITE static void *hold_block(size_t size) {
  void *p = malloc(size);
  if (p == NULL) lw_die("malloc");
  memset(p, 1, size);
  return p;
}

LW_SITE static void *hold_rare(size_t size) {
  void *p = malloc(size);
  if (p == NULL) lw_die("malloc");
  memset(p, 2, size);
  return p;
}

LW_SITE static void *churn_block(size_t size) {
  void *p = malloc(size);
  if (p == NULL) lw_die("malloc");
  memset(p, 3, size);
  return p;
}

int main(int argc, char **argv) {
  unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000000ul;
  if (n == 0 || n > 100000000ul) {
    errno = EINVAL;
    lw_die("N must be 1..100000000");
  }
  blocks = mmap(NULL, n * sizeof(void *), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (blocks == MAP_FAILED) lw_die("mmap");
  free(malloc(1)); /* the arena exists before "ready" */
  if (lw_ready_wait_go() != 0) return 0;
  unsigned long long held = 0, rare = 0;
  for (unsigned long i = 0; i < n; i++) {
    if (i % 10 == 0) {
      blocks[i] = hold_rare(48);
      rare += 48;
    } else {
      blocks[i] = hold_block(block_size(i));
      held += block_size(i);
    }
  }
  unsigned long long x = 88172645463325252ull;
  for (unsigned long j = 0; j < n / 2; j++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    free(churn_block(16 + (size_t)(x % 241)));
  }
  for (unsigned long i = 1; i < n; i += 4) { /* odd: never a hold_rare block */
    free(blocks[i]);
    held -= block_size(i);
  }
  lw_truth_site("hold_block", held);
  lw_truth_site("hold_rare", rare);
  lw_truth_site("churn_block", 0);
  lw_truth_fact("blocks", (long long)n);
  lw_truth_total(held + rare);
  lw_done();
  lw_wait_exit();
  return 0;
}
