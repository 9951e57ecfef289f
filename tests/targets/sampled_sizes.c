// SPDX-License-Identifier: Apache-2.0
/* Allocation sizes spread over four decades, for the byte-sampling accuracy
 * test (tests/integration/overhead_test.cc). See target_protocol.h for the
 * protocol up to "go".
 *
 * Usage: sampled_sizes BLOCKS_PER_SITE SEED
 *
 * Each "go" starts a round: the blocks of the previous round are freed,
 * then site_small_first and site_large_first each allocate BLOCKS_PER_SITE
 * blocks (interleaved), and a pseudo-random sixth of all blocks is freed
 * again. Sizes are log-uniform by octave from 64 B to 1 MiB: an octave
 * 64<<k (k uniform in 0..13), then a uniform size inside it. "done" reports
 * each site's exact live bytes. "exit" or EOF ends the program.
 */
#include <stdint.h>

#include "target_protocol.h"

enum { MAX_BLOCKS = 20000 };

static void *blocks[2][MAX_BLOCKS];
static size_t sizes[2][MAX_BLOCKS];

static uint64_t rng_state;

static uint64_t next_random(void) {
  /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ULL;
}

static size_t random_size(void) {
  uint64_t r = next_random();
  unsigned octave = (unsigned)(r % 14);
  size_t lo = (size_t)64 << octave;
  return lo + (size_t)((r >> 8) % lo);
}

LW_SITE static void *site_small_first(size_t n) { return malloc(n); }
LW_SITE static void *site_large_first(size_t n) { return malloc(n); }

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: sampled_sizes BLOCKS_PER_SITE SEED\n");
    return 2;
  }
  long per_site = strtol(argv[1], NULL, 10);
  if (per_site < 1 || per_site > MAX_BLOCKS) {
    fprintf(stderr, "BLOCKS_PER_SITE must be 1..%d\n", MAX_BLOCKS);
    return 2;
  }
  rng_state = (uint64_t)strtoull(argv[2], NULL, 10) * 0x9e3779b97f4a7c15ULL + 1;
  if (lw_ready_wait_go() < 0) return 0;
  char line[64];
  for (;;) {
    for (int s = 0; s < 2; s++)
      for (long i = 0; i < per_site; i++) {
        free(blocks[s][i]);
        blocks[s][i] = NULL;
        sizes[s][i] = 0;
      }
    unsigned long long live[2] = {0, 0};
    for (long i = 0; i < per_site; i++) {
      for (int s = 0; s < 2; s++) {
        size_t n = random_size();
        blocks[s][i] = s == 0 ? site_small_first(n) : site_large_first(n);
        if (blocks[s][i] == NULL) lw_die("malloc");
        sizes[s][i] = n;
        live[s] += n;
      }
    }
    for (int s = 0; s < 2; s++)
      for (long i = 0; i < per_site; i++) {
        if (next_random() % 6 != 0) continue;
        free(blocks[s][i]);
        blocks[s][i] = NULL;
        live[s] -= sizes[s][i];
        sizes[s][i] = 0;
      }
    lw_truth_state.sites[0] = '\0';
    lw_truth_site("site_small_first", live[0]);
    lw_truth_site("site_large_first", live[1]);
    lw_done();
    for (;;) {
      if (lw_read_line(line, sizeof line) < 0) return 0;
      if (strcmp(line, "exit") == 0) return 0;
      if (strcmp(line, "go") == 0) break;
    }
  }
}
