// SPDX-License-Identifier: Apache-2.0
/* Control with no leak: 16 threads take and give back blocks of random
 * sizes (small, medium and mmap-sized) through malloc, calloc, realloc and
 * posix_memalign, with a working set that lives across iterations, and
 * free everything before "done". Nothing may stay live. See
 * target_protocol.h.
 *
 * Threads and their arenas are created before "ready", so total_live is 0.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "target_protocol.h"

enum { THREADS = 16, SLOTS = 128, ITERATIONS = 10000 };

static pthread_barrier_t start_barrier, end_barrier;

static size_t random_size(unsigned *seed) {
  unsigned r = (unsigned)rand_r(seed);
  if (r % 100 == 0) return (size_t)(1 + r % 3) << 20; /* served by malloc's own mmap */
  if (r % 100 < 10) return 4096 + r % 60000;
  return 1 + r % 512;
}

/* One allocation, through an allocator picked at random; the callers free
 * with free() whatever this returns. */
LW_SITE static void *churn_alloc(unsigned *seed, void *old) {
  size_t size = random_size(seed);
  void *p = NULL;
  switch ((unsigned)rand_r(seed) % 4) {
    case 0:
      free(old);
      p = malloc(size);
      break;
    case 1:
      free(old);
      p = calloc(1, size);
      break;
    case 2:
      p = realloc(old, size); /* the old block moves or resizes */
      break;
    default:
      free(old);
      if (posix_memalign(&p, 64, size) != 0) p = NULL;
      break;
  }
  if (p == NULL) lw_die("allocation failed");
  return p;
}

LW_SITE static void churn_free_all(void *volatile *slots) {
  for (int i = 0; i < SLOTS; i++) {
    free(slots[i]);
    slots[i] = NULL;
  }
}

static void barrier_wait(pthread_barrier_t *barrier) {
  int rc = pthread_barrier_wait(barrier);
  if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD) {
    errno = rc;
    lw_die("pthread_barrier_wait");
  }
}

static void *churn_thread(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u + 1;
  void *volatile slots[SLOTS] = {0};
  free(malloc(1)); /* this thread's tcache and arena, before "ready" */
  barrier_wait(&start_barrier);
  for (int i = 0; i < ITERATIONS; i++) {
    int slot = rand_r(&seed) % SLOTS;
    slots[slot] = churn_alloc(&seed, slots[slot]);
  }
  churn_free_all(slots);
  barrier_wait(&end_barrier);
  lw_park_forever();
}

int main(void) {
  if (pthread_barrier_init(&start_barrier, NULL, THREADS + 1) != 0 ||
      pthread_barrier_init(&end_barrier, NULL, THREADS + 1) != 0) {
    lw_die("pthread_barrier_init");
  }
  for (int t = 0; t < THREADS; t++) {
    pthread_t thread;
    int rc = pthread_create(&thread, NULL, churn_thread, (void *)(uintptr_t)t);
    if (rc != 0) {
      errno = rc;
      lw_die("pthread_create");
    }
  }
  if (lw_ready_wait_go() != 0) return 0;
  barrier_wait(&start_barrier);
  barrier_wait(&end_barrier);
  lw_truth_site("churn_alloc", 0);
  lw_truth_site("churn_free_all", 0);
  lw_truth_fact("threads", THREADS);
  lw_truth_fact("allocations", (long long)THREADS * ITERATIONS);
  lw_truth_total(0);
  lw_done();
  lw_wait_exit();
  return 0;
}
