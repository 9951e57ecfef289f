// SPDX-License-Identifier: Apache-2.0
/* The "RSS explained" scenarios (tests/integration/rss_test.cc; docs/analysis.md,
 * "RSS explained"). See target_protocol.h for the protocol.
 *
 * Usage: rss_parts leak|half|pre|pre_small MIB
 *
 * leak: after "go", leaks MIB MiB in 1 KiB blocks, every byte written.
 * half: after "go", takes MIB MiB in 1 KiB blocks, writes them, then frees
 *   every other block: glibc keeps the freed half (its neighbours are in
 *   use, so nothing can be trimmed) and the process's RSS stays.
 * pre: before "ready" (so before leakwatch attaches), takes MIB MiB in
 *   1 MiB blocks (glibc serves them by mmap, outside its heap) and writes
 *   them; after "go" it does nothing.
 * pre_small: the same in 1 KiB blocks, which glibc serves from its heap:
 *   a leak from before the attach, inside the heap regions.
 * "exit" or EOF ends the program.
 */
#include <stdlib.h>

#include "target_protocol.h"

enum { SMALL = 1024, BIG = 1 << 20, MAX_BLOCKS = 1 << 20 };

static void *blocks[MAX_BLOCKS];

LW_SITE static void *rss_take(size_t bytes) {
  char *b = malloc(bytes);
  if (b == NULL) lw_die("malloc");
  memset(b, 1, bytes);
  return b;
}

int main(int argc, char **argv) {
  if (argc != 3) lw_die("usage: rss_parts leak|half|pre|pre_small MIB");
  const long mib = atol(argv[2]);
  if (mib <= 0 || mib > 4096) lw_die("MIB");
  const char *mode = argv[1];
  long n = 0;
  if (strcmp(mode, "pre") == 0 || strcmp(mode, "pre_small") == 0) {
    const size_t size = strcmp(mode, "pre") == 0 ? BIG : SMALL;
    n = mib * (BIG / (long)size);
    if (n > MAX_BLOCKS) lw_die("too many blocks");
    for (long i = 0; i < n; i++) blocks[i] = rss_take(size);
  }
  if (lw_ready_wait_go() < 0) return 0;
  unsigned long long live = 0;
  if (strcmp(mode, "leak") == 0 || strcmp(mode, "half") == 0) {
    n = mib * (BIG / SMALL);
    if (n > MAX_BLOCKS) lw_die("too many blocks");
    for (long i = 0; i < n; i++) blocks[i] = rss_take(SMALL);
    live = (unsigned long long)n * SMALL;
    if (strcmp(mode, "half") == 0) {
      for (long i = 0; i < n; i += 2) free(blocks[i]);
      live -= (unsigned long long)((n + 1) / 2) * SMALL;
    }
  }
  lw_truth_site("rss_take", live);
  lw_truth_total(live);
  lw_done();
  char line[64];
  while (lw_read_line(line, sizeof(line)) == 0 && strcmp(line, "exit") != 0) {
  }
  return 0;
}
