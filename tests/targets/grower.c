// SPDX-License-Identifier: Apache-2.0
/* A process whose anonymous memory keeps growing, or one that calls the
 * allocator as fast as it can, for the escalation and governor tests
 * (tests/integration/daemon_overhead_test.cc). See target_protocol.h for
 * the protocol up to "go".
 *
 * Usage: grower grow | grower hot
 *
 * grow: after "go", grow_steadily takes a 256 KiB block every 100 ms and
 *   writes every page of it (anonymous RSS grows ~2.5 MiB/s). "free" frees
 *   every block taken so far and answers "freed"; growth goes on. "count"
 *   answers "held N": the blocks held now.
 * hot: after "go", hot_loop mallocs and frees a 64-byte block in a tight
 *   loop (the governor's case).
 * "exit" or EOF ends the program.
 */
#include <poll.h>
#include <stdint.h>

#include "target_protocol.h"

enum { BLOCK_BYTES = 256 * 1024, MAX_BLOCKS = 16384 };

static void *blocks[MAX_BLOCKS];
static int nblocks;

LW_SITE static void grow_steadily(void) {
  if (nblocks == MAX_BLOCKS) return;
  char *b = malloc(BLOCK_BYTES);
  if (b == NULL) lw_die("malloc");
  memset(b, 1, BLOCK_BYTES);
  blocks[nblocks++] = b;
}

LW_SITE static void hot_loop(void) {
  for (int i = 0; i < 10000; i++) {
    void *volatile p = malloc(64);
    free(p);
  }
}

/* A line from stdin if one is waiting (or EOF: returns -1), else 0. */
static int poll_line(char *line, size_t cap, int timeout_ms) {
  struct pollfd pfd = {.fd = 0, .events = POLLIN};
  int n = poll(&pfd, 1, timeout_ms);
  if (n <= 0) return 0;
  return lw_read_line(line, cap) < 0 ? -1 : 1;
}

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "grow") != 0 && strcmp(argv[1], "hot") != 0)) {
    fprintf(stderr, "usage: grower grow|hot\n");
    return 2;
  }
  const int hot = strcmp(argv[1], "hot") == 0;
  if (lw_ready_wait_go() < 0) return 0;
  lw_write_all(1, "going\n", 6);
  char line[64];
  for (;;) {
    if (hot)
      hot_loop();
    else
      grow_steadily();
    int r = poll_line(line, sizeof line, hot ? 0 : 100);
    if (r < 0) return 0;
    if (r == 0) continue;
    if (strcmp(line, "exit") == 0) return 0;
    if (strcmp(line, "free") == 0) {
      for (int i = 0; i < nblocks; i++) free(blocks[i]);
      nblocks = 0;
      lw_write_all(1, "freed\n", 6);
    } else if (strcmp(line, "count") == 0) {
      char out[64];
      int n = snprintf(out, sizeof out, "held %d\n", nblocks);
      lw_write_all(1, out, (size_t)n);
    }
  }
}
