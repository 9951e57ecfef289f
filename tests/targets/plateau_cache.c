// SPDX-License-Identifier: Apache-2.0
/* A cache that fills, then holds its size: what the leak analysis must not
 * call a leak once it has plateaued (tests/integration/prometheus_test.cc).
 * See target_protocol.h for the protocol up to "go".
 *
 * After "go", cache_insert adds one 64 KiB entry every 75 ms until the cache
 * holds 800 of them, 50 MiB, which takes 60 s; then it prints
 * "filled <unix seconds>" (CLOCK_REALTIME, the clock of Prometheus's sample
 * timestamps). From then on, at the same pace, each insert first evicts the
 * oldest entry (a FIFO, the simplest LRU-like policy), so live bytes stay
 * at 50 MiB while the entries turn over. Runs until "exit" or EOF.
 *
 * --no-churn: no inserts after the fill. Live bytes are as flat, but now the
 * entries age: the bytes older than a minute grow from 0 to 50 MiB during
 * the minute after the fill, which is the evidence of a leak where live
 * bytes grow too, and must not be taken for one here.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <stdint.h>
#include <time.h>

#include "target_protocol.h"

enum { ENTRY_BYTES = 64 * 1024, ENTRIES = 800 };
static const long long INSERT_NS = 75000000LL; /* ENTRIES inserts in 60 s */

static void *volatile cache[ENTRIES];

LW_SITE static void *cache_insert(unsigned long long sequence) {
  unsigned long long *entry = malloc(ENTRY_BYTES);
  if (entry == NULL) lw_die("malloc");
  *entry = sequence;
  return entry;
}

/* Inserts entry number `sequence`, evicting the oldest once the cache is
 * full; returns whether this insert filled it. Fill and turnover must be
 * one allocation site with one stack, as in a real cache, so cache_insert
 * has exactly one caller, here, and this function one call in main. It is
 * a function of its own because GCC duplicated a call written in main's
 * loop (jump threading on the fill test), which made two stacks; noipa
 * keeps what main knows of it from inviting the same there. */
__attribute__((noipa)) static int cache_step(unsigned long long sequence) {
  /* The ring's next slot holds the oldest entry once the cache is full. */
  const unsigned slot = (unsigned)(sequence % ENTRIES);
  if (sequence >= ENTRIES) free(cache[slot]);
  cache[slot] = cache_insert(sequence);
  return sequence + 1 == ENTRIES;
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

int main(int argc, char **argv) {
  int churn = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--no-churn") == 0) {
      churn = 0;
    } else {
      errno = EINVAL;
      lw_die("usage: plateau_cache [--no-churn]");
    }
  }
  free(malloc(1)); /* the arena exists before "ready" */
  if (lw_ready_wait_go() != 0) return 0;
  const long long start_ns = now_ns(CLOCK_MONOTONIC);
  for (unsigned long long sequence = 0;; sequence++) {
    if (cache_step(sequence)) {
      const long long filled_ns = now_ns(CLOCK_REALTIME);
      char line[96];
      int n = snprintf(line, sizeof line, "filled %lld.%09lld\n", filled_ns / 1000000000LL,
                       filled_ns % 1000000000LL);
      lw_write_all(1, line, (size_t)n);
      if (!churn) {
        lw_wait_exit();
        return 0;
      }
    }
    if (sleep_until_or_exit(start_ns + (long long)(sequence + 1) * INSERT_NS) != 0) return 0;
  }
}
