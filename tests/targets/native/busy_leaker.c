// SPDX-License-Identifier: Apache-2.0
/* A process too busy to trace every call (issue 33; decision busy-processes),
 * built -O2 without frame pointers. After "go", every TICK_NS (on an
 * absolute clock, so its call rate does not depend on what the probes
 * cost) it serves REQUESTS requests (serve_request: 9 blocks made and
 * freed, one grown by realloc: 19 allocator calls, 10 of them on the free
 * side), leak_block keeps a 4 KiB block for good, and hold_block replaces a
 * 4 KiB block it has held HOLD_NS (a short-lived cache: none may read as
 * live once freed; argv[1], when given, is HOLD_NS in milliseconds: a
 * cache whose blocks outlive a window). About 9,500 allocator calls a second, 5,000 of them
 * frees and reallocs. "stop" ends the loop: the held blocks are freed, the
 * leaked ones stay; it prints "leaked <bytes> <blocks>" and idles until
 * "exit" or EOF.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <stdint.h>
#include <time.h>

#include "../target_protocol.h"

enum { BLOCK = 4096, HELD_SLOTS = 64, REQUESTS = 5 };
static const long long TICK_NS = 10000000LL; /* one leaked block a tick: 400 KiB/s */
static long long HOLD_NS = 300000000LL;

static void *volatile leaked_head;
static unsigned long long leaked_blocks;
static void *held[HELD_SLOTS];
static long long held_at[HELD_SLOTS];

static long long now_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) lw_die("clock_gettime");
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline, noclone)) static void leak_block(void) {
  void **b = malloc(BLOCK);
  if (b == NULL) lw_die("malloc");
  *b = leaked_head;
  leaked_head = b;
  ++leaked_blocks;
  __asm__ volatile("" ::: "memory");
}

__attribute__((noinline, noclone)) static void hold_block(unsigned slot, long long now) {
  free(held[slot]);
  held[slot] = malloc(BLOCK);
  if (held[slot] == NULL) lw_die("malloc");
  held_at[slot] = now;
  __asm__ volatile("" ::: "memory");
}

/* A request's worth of short-lived blocks, one of them grown by realloc. */
__attribute__((noinline, noclone)) static void serve_request(unsigned *seed) {
  void *tmp[8];
  for (int i = 0; i < 8; i++) {
    *seed = *seed * 1103515245u + 12345u;
    tmp[i] = malloc(16 + (*seed >> 16) % 512);
    if (tmp[i] == NULL) lw_die("malloc");
  }
  void *grown = realloc(tmp[0], 2048);
  if (grown == NULL) lw_die("realloc");
  tmp[0] = grown;
  for (int i = 0; i < 8; i++) free(tmp[i]);
  __asm__ volatile("" ::: "memory");
}

static int stop_requested(void) {
  struct pollfd pfd = {.fd = 0, .events = POLLIN};
  if (poll(&pfd, 1, 0) <= 0) return 0;
  char line[64];
  return lw_read_line(line, sizeof line) < 0 || strcmp(line, "stop") == 0;
}

int main(int argc, char **argv) {
  if (argc > 1) HOLD_NS = atoll(argv[1]) * 1000000LL;
  if (lw_ready_wait_go() != 0) return 0;
  unsigned seed = 1, slot = 0;
  struct timespec tick;
  if (clock_gettime(CLOCK_MONOTONIC, &tick) != 0) lw_die("clock_gettime");
  for (unsigned n = 1;; n++) {
    for (int i = 0; i < REQUESTS; i++) serve_request(&seed);
    leak_block();
    long long now = now_ns();
    if (now - held_at[slot] >= HOLD_NS) {
      hold_block(slot, now);
      slot = (slot + 1) % HELD_SLOTS;
    }
    if (n % 10 == 0 && stop_requested()) break;
    tick.tv_nsec += TICK_NS;
    if (tick.tv_nsec >= 1000000000L) {
      tick.tv_nsec -= 1000000000L;
      tick.tv_sec++;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &tick, NULL) == EINTR) {
    }
  }
  for (unsigned i = 0; i < HELD_SLOTS; i++) free(held[i]);
  char line[128];
  int n = snprintf(line, sizeof line, "leaked %llu %llu\n", leaked_blocks * BLOCK, leaked_blocks);
  lw_write_all(1, line, (size_t)n);
  lw_wait_exit();
  return 0;
}
