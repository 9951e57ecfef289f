// SPDX-License-Identifier: Apache-2.0
/* 64 threads: each allocates blocks that its neighbour thread frees, so
 * every free the tracer sees for these blocks comes from a thread other
 * than the allocating one. A quarter of the blocks stay live, plus one
 * leak per thread from another site. See target_protocol.h.
 *
 * The threads, their stacks, TLS and malloc arenas are all set up before
 * "ready", so after "go" the only allocations are the ones counted here and
 * total_live is exact.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>

#include "target_protocol.h"

enum { THREADS = 64, BLOCKS = 200 };

static void *volatile blocks[THREADS][BLOCKS];
static void *volatile leaked[THREADS];
static pthread_barrier_t start_barrier, handoff_barrier, end_barrier;

static size_t block_size(int thread, int block) { return 8 + (size_t)thread * 3 + (size_t)block; }

static int kept(int block) { return block % 4 == 0; }

static size_t leak_size(int thread) { return 100 + (size_t)thread; }

LW_SITE static void *thread_alloc(size_t size) { return malloc(size); }

LW_SITE static void *thread_leak(size_t size) { return malloc(size); }

static void barrier_wait(pthread_barrier_t *barrier) {
  int rc = pthread_barrier_wait(barrier);
  if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD) {
    errno = rc;
    lw_die("pthread_barrier_wait");
  }
}

static void *thread_main(void *arg) {
  int self = (int)(intptr_t)arg;
  /* Creates this thread's tcache and arena now, before leakwatch attaches. */
  free(malloc(1));
  barrier_wait(&start_barrier);

  for (int b = 0; b < BLOCKS; b++) {
    void *p = thread_alloc(block_size(self, b));
    if (p == NULL) lw_die("malloc");
    blocks[self][b] = p;
  }
  leaked[self] = thread_leak(leak_size(self));
  if (leaked[self] == NULL) lw_die("malloc");
  barrier_wait(&handoff_barrier);

  /* Free the neighbour's blocks, from this thread. */
  int victim = (self + 1) % THREADS;
  for (int b = 0; b < BLOCKS; b++) {
    if (!kept(b)) free(blocks[victim][b]);
  }
  barrier_wait(&end_barrier);
  lw_park_forever();
}

int main(void) {
  if (pthread_barrier_init(&start_barrier, NULL, THREADS + 1) != 0 ||
      pthread_barrier_init(&handoff_barrier, NULL, THREADS) != 0 ||
      pthread_barrier_init(&end_barrier, NULL, THREADS + 1) != 0) {
    lw_die("pthread_barrier_init");
  }
  for (int t = 0; t < THREADS; t++) {
    pthread_t thread;
    int rc = pthread_create(&thread, NULL, thread_main, (void *)(intptr_t)t);
    if (rc != 0) {
      errno = rc;
      lw_die("pthread_create");
    }
  }
  if (lw_ready_wait_go() != 0) return 0;
  barrier_wait(&start_barrier);
  barrier_wait(&end_barrier);

  unsigned long long alloc_live = 0, leak_live = 0;
  for (int t = 0; t < THREADS; t++) {
    for (int b = 0; b < BLOCKS; b++) {
      if (kept(b)) alloc_live += block_size(t, b);
    }
    leak_live += leak_size(t);
  }
  lw_truth_site("thread_alloc", alloc_live);
  lw_truth_site("thread_leak", leak_live);
  lw_truth_fact("threads", THREADS);
  lw_truth_total(alloc_live + leak_live);
  lw_done();
  lw_wait_exit();
  return 0;
}
