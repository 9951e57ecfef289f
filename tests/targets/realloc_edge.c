// SPDX-License-Identifier: Apache-2.0
/* realloc's edge cases, each from its own call site: realloc(NULL, n) is a
 * malloc, realloc(p, 0) frees p (glibc), a failed realloc leaves p live at
 * its old size, and shrinking or growing, in place or moving, leaves exactly
 * the new size live. See target_protocol.h for the protocol.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>

#include "target_protocol.h"

static void *volatile keep[64];
static unsigned keep_count;

static void keep_ptr(void *p) {
  if (p == NULL) lw_die("allocation failed");
  if (keep_count == sizeof keep / sizeof keep[0]) {
    errno = ENOBUFS;
    lw_die("keep[] full");
  }
  keep[keep_count++] = p;
}

static volatile size_t huge_size = SIZE_MAX / 2;

LW_SITE static unsigned long long edge_realloc_null(void) {
  keep_ptr(realloc(NULL, 301));
  return 301;
}

/* glibc frees p and returns NULL. */
LW_SITE static unsigned long long edge_realloc_zero(void) {
  void *p = malloc(503);
  if (p == NULL) lw_die("malloc");
  if (realloc(p, 0) != NULL) lw_die("realloc(p, 0) did not return NULL");
  return 0;
}

/* The failed realloc returns NULL and leaves the block as it was. */
LW_SITE static unsigned long long edge_realloc_fail(void) {
  void *p = malloc(707);
  keep_ptr(p);
  if (realloc(p, huge_size) != NULL) lw_die("huge realloc succeeded");
  return 707;
}

/* Shrinking stays in place in glibc; only the new size is live. */
LW_SITE static unsigned long long edge_realloc_shrink(void) {
  void *p = malloc(4001);
  if (p == NULL) lw_die("malloc");
  uintptr_t old = (uintptr_t)p;
  p = realloc(p, 1009);
  keep_ptr(p);
  lw_truth_fact("shrink_moved", (uintptr_t)p != old);
  return 1009;
}

/* Grows into the free space behind the block, so glibc need not move it:
 * the neighbour is allocated and freed first. */
LW_SITE static unsigned long long edge_realloc_grow_in_place(void) {
  void *p = malloc(1019);
  void *neighbour = malloc(3000);
  if (p == NULL || neighbour == NULL) lw_die("malloc");
  free(neighbour);
  uintptr_t old = (uintptr_t)p;
  p = realloc(p, 2027);
  keep_ptr(p);
  lw_truth_fact("grow_in_place_moved", (uintptr_t)p != old);
  return 2027;
}

/* A live block from another site sits right behind this one, so growing
 * must move it: the old address is freed, the new one live. */
LW_SITE static unsigned long long edge_blocker(void) {
  keep_ptr(malloc(32));
  return 32;
}

LW_SITE static unsigned long long edge_realloc_move(void) {
  void *p = malloc(1031);
  if (p == NULL) lw_die("malloc");
  unsigned long long blocker = edge_blocker();
  uintptr_t old = (uintptr_t)p;
  p = realloc(p, 50021);
  keep_ptr(p);
  lw_truth_fact("move_moved", (uintptr_t)p != old);
  return blocker == 32 ? 50021 : 0;
}

/* Grows a heap block past the mmap threshold: realloc mmaps inside, and
 * the block still counts once, as heap. */
LW_SITE static unsigned long long edge_realloc_to_mmap(void) {
  void *p = malloc(1049);
  if (p == NULL) lw_die("malloc");
  p = realloc(p, 3u << 20);
  keep_ptr(p);
  return 3u << 20;
}

/* Grows an mmapped block: glibc uses mremap inside realloc, which must not
 * be counted as an mmap-kind allocation. */
LW_SITE static unsigned long long edge_realloc_mremap(void) {
  void *p = malloc(2u << 20);
  if (p == NULL) lw_die("malloc");
  p = realloc(p, 5u << 20);
  keep_ptr(p);
  return 5u << 20;
}

/* Shrinks an mmapped block back to a small one: moved to the heap. */
LW_SITE static unsigned long long edge_realloc_from_mmap(void) {
  void *p = malloc(4u << 20);
  if (p == NULL) lw_die("malloc");
  p = realloc(p, 64);
  keep_ptr(p);
  return 64;
}

static void work(void) {
  struct {
    const char *name;
    unsigned long long (*fn)(void);
  } const edges[] = {
      {"edge_realloc_null", edge_realloc_null},
      {"edge_realloc_zero", edge_realloc_zero},
      {"edge_realloc_fail", edge_realloc_fail},
      {"edge_realloc_shrink", edge_realloc_shrink},
      {"edge_realloc_grow_in_place", edge_realloc_grow_in_place},
      {"edge_realloc_move", edge_realloc_move},
      {"edge_realloc_to_mmap", edge_realloc_to_mmap},
      {"edge_realloc_mremap", edge_realloc_mremap},
      {"edge_realloc_from_mmap", edge_realloc_from_mmap},
  };
  unsigned long long total = 32; /* edge_blocker's block */
  lw_truth_site("edge_blocker", 32);
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
    unsigned long long n = edges[i].fn();
    lw_truth_site(edges[i].name, n);
    total += n;
  }
  lw_truth_total(total);
}

int main(void) {
  if (lw_ready_wait_go() != 0) return 0;
  work();
  lw_done();
  lw_wait_exit();
  return 0;
}
