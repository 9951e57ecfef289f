// SPDX-License-Identifier: Apache-2.0
/* A single-threaded burst of tens of thousands of allocations, meant to
 * overflow a small ring buffer while leakwatch's consumer is stalled
 * (--ringbuf-bytes 4096 --debug-stall-consumer-ms ...). Most blocks are
 * freed right away, every 16th is kept. After the tracer resyncs from its
 * kernel map, live bytes must equal total_live exactly: no phantom bytes
 * from dropped frees, no missing ones from dropped allocations. See
 * target_protocol.h.
 */
#define _GNU_SOURCE
#include <stdlib.h>

#include "target_protocol.h"

enum { ALLOCATIONS = 40000, KEEP_EVERY = 16 };

static void *volatile kept[ALLOCATIONS / KEEP_EVERY];
static void *volatile sink;

static size_t burst_size(int i) { return 24 + (size_t)(i * 7919) % 1000; }

LW_SITE static void *burst_keep(size_t size) { return malloc(size); }

LW_SITE static void burst_churn(size_t size) {
  void *p = malloc(size);
  if (p == NULL) lw_die("malloc");
  sink = p;
  free(p);
}

int main(void) {
  if (lw_ready_wait_go() != 0) return 0;
  unsigned long long live = 0;
  for (int i = 0; i < ALLOCATIONS; i++) {
    if (i % KEEP_EVERY == 0) {
      void *p = burst_keep(burst_size(i));
      if (p == NULL) lw_die("malloc");
      kept[i / KEEP_EVERY] = p;
      live += burst_size(i);
    } else {
      burst_churn(burst_size(i));
    }
  }
  lw_truth_site("burst_keep", live);
  lw_truth_site("burst_churn", 0);
  lw_truth_fact("allocations", ALLOCATIONS);
  lw_truth_total(live);
  lw_done();
  lw_wait_exit();
  return 0;
}
