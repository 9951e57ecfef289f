// SPDX-License-Identifier: Apache-2.0
/* A service with a slow, steady leak, for the leak analysis end to end
 * (tests/integration/prometheus_test.cc). See target_protocol.h for the
 * protocol up to "go".
 *
 * After "go", leak_steadily keeps one 32 KiB block every 1.875 s, which is
 * exactly 1 MiB per minute, until "exit" or EOF; churn_requests meanwhile
 * allocates and frees a small working set every step, as request handling
 * would, so the process is not one clean ramp.
 *
 * After each leaked block it prints "leaked <bytes> <unix seconds>": the
 * bytes leak_steadily holds live in total, and when the block was taken
 * (CLOCK_REALTIME, the clock of Prometheus's sample timestamps). The test
 * derives the truth at any instant from these lines. The first block is
 * taken right after "go", so the first line also says when the leak began.
 *
 * Why 32 KiB every 1.875 s rather than smaller blocks more often: the
 * daemon publishes a snapshot every second and a scrape reads the latest
 * one, so a scraped value trails the process by up to about 1.2 s. With more
 * time than that between blocks, a scrape is never more than one block away
 * from the truth at its timestamp: "equal within one allocation" is then an
 * exact check, not one that fails whenever two blocks fall into the lag.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <stdint.h>
#include <time.h>

#include "target_protocol.h"

enum { BLOCK_BYTES = 32 * 1024, CHURN_BUFFERS = 4 };
static const long long STEP_NS = 1875000000LL; /* 32 blocks a minute */

/* Leaked blocks stay reachable through their first word, a list of all of
 * them: no bookkeeping array that would itself grow (and allocate). */
static void *volatile leaked_head;

LW_SITE static void leak_steadily(void) {
  void **block = malloc(BLOCK_BYTES);
  if (block == NULL) lw_die("malloc");
  *block = leaked_head;
  leaked_head = block;
}

/* Frees the previous step's buffers and takes new ones of other sizes:
 * live bytes here go up and down but do not grow. */
LW_SITE static void churn_requests(unsigned *seed) {
  static void *volatile buffers[CHURN_BUFFERS];
  for (int i = 0; i < CHURN_BUFFERS; i++) {
    free(buffers[i]);
    *seed = *seed * 1103515245u + 12345u;
    buffers[i] = malloc(1024 + (*seed >> 16) % 7168);
    if (buffers[i] == NULL) lw_die("malloc");
  }
}

static long long now_ns(clockid_t clock) {
  struct timespec ts;
  if (clock_gettime(clock, &ts) != 0) lw_die("clock_gettime");
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Waits until CLOCK_MONOTONIC reaches deadline_ns. Returns -1 if "exit" or
 * EOF arrived on stdin meanwhile, else 0. */
static int sleep_until_or_exit(long long deadline_ns) {
  for (;;) {
    long long left_ns = deadline_ns - now_ns(CLOCK_MONOTONIC);
    if (left_ns <= 0) return 0;
    struct pollfd pfd = {.fd = 0, .events = POLLIN};
    /* Rounded up, so the wait never returns just before the deadline. */
    int ready = poll(&pfd, 1, (int)((left_ns + 999999) / 1000000));
    if (ready < 0) {
      if (errno == EINTR) continue;
      lw_die("poll");
    }
    if (ready > 0) {
      char line[64];
      if (lw_read_line(line, sizeof line) < 0 || strcmp(line, "exit") == 0) return -1;
    }
  }
}

int main(void) {
  unsigned seed = 1;
  free(malloc(1)); /* the arena exists before "ready" */
  if (lw_ready_wait_go() != 0) return 0;
  const long long start_ns = now_ns(CLOCK_MONOTONIC);
  unsigned long long leaked = 0;
  for (long long step = 0;; step++) {
    leak_steadily();
    leaked += BLOCK_BYTES;
    const long long taken_ns = now_ns(CLOCK_REALTIME);
    churn_requests(&seed);
    char line[96];
    int n = snprintf(line, sizeof line, "leaked %llu %lld.%09lld\n", leaked, taken_ns / 1000000000LL,
                     taken_ns % 1000000000LL);
    lw_write_all(1, line, (size_t)n);
    if (sleep_until_or_exit(start_ns + (step + 1) * STEP_NS) != 0) return 0;
  }
}
