// SPDX-License-Identifier: Apache-2.0
/* Holds N live heap blocks (N from argv[1], default 1,000,000), all from one
 * call site, for the daemon memory-bound tests (decision daemon-memory-bound).
 * See target_protocol.h for the protocol.
 *
 * Block i is 16 + 16 * (i % 4) bytes (16, 32, 48, 64): small blocks, so the
 * count, not the bytes, is what the daemon must hold. The pointer table is
 * mapped before "ready", so everything allocated after "go" is the N blocks
 * and total_live is exact.
 */
#define _GNU_SOURCE
#include <sys/mman.h>

#include "target_protocol.h"

static void **blocks;

LW_SITE static unsigned long long hold_block(unsigned long i) {
  size_t size = 16 + 16 * (i % 4);
  void *p = malloc(size);
  if (p == NULL) lw_die("malloc");
  memset(p, 0, size);
  blocks[i] = p;
  return size;
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
  unsigned long long live = 0;
  for (unsigned long i = 0; i < n; i++) live += hold_block(i);
  lw_truth_site("hold_block", live);
  lw_truth_fact("blocks", (long long)n);
  lw_truth_total(live);
  lw_done();
  lw_wait_exit();
  /* The blocks are not freed: a million traced frees take seconds, and the
   * exit hands the memory back all the same. */
  return 0;
}
