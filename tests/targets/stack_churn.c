// SPDX-License-Identifier: Apache-2.0
/* Many distinct stacks, each used once by a block freed at once, for the
 * stack map's collection (decision stack-map-gc). See
 * target_protocol.h for "ready"/"go"; after "go" the target holds one
 * block from keep_block (4242 bytes) and answers "ok", then takes:
 *
 *   "round R N"  allocates and frees one 24-byte block from each of the
 *                stacks R*N .. R*N+N-1, then answers "ok"
 *   "hold I"     allocates one 3131-byte block from stack I and keeps it
 *   "rotate R N" frees the blocks the last rotate kept, then allocates and
 *                keeps one 2048-byte block from each of the stacks
 *                R*N .. R*N+N-1 (N at most 8192): the top sites rotate
 *   "exit"       exits
 *
 * Stack I: churn_block called through descend() and, at each of
 * STACK_LEVELS levels, step_a (bit clear) or step_b (bit set) after bit
 * `level` of I; leaf first, the step frames read bits STACK_LEVELS-1 .. 0.
 * 2^STACK_LEVELS = 32,768 distinct stacks, twice the default stack map.
 */
#include "target_protocol.h"

#define STACK_LEVELS 15

static volatile unsigned long lw_sink;

LW_SITE static void *keep_block(void) {
  void *p = malloc(4242);
  if (p == NULL) lw_die("malloc");
  memset(p, 1, 4242);
  return p;
}

LW_SITE static void *churn_block(size_t size) {
  void *p = malloc(size);
  if (p == NULL) lw_die("malloc");
  lw_sink += (unsigned long)p;
  return p;
}

LW_SITE static void *descend(unsigned path, int level, size_t size);

LW_SITE static void *step_a(unsigned path, int level, size_t size) {
  void *p = descend(path, level + 1, size);
  lw_sink++;
  return p;
}

LW_SITE static void *step_b(unsigned path, int level, size_t size) {
  void *p = descend(path, level + 1, size);
  lw_sink--;
  return p;
}

LW_SITE static void *descend(unsigned path, int level, size_t size) {
  void *p;
  if (level == STACK_LEVELS)
    p = churn_block(size);
  else if ((path >> level) & 1u)
    p = step_b(path, level, size);
  else
    p = step_a(path, level, size);
  lw_sink ^= 1;
  return p;
}

static void ok(void) { lw_write_all(1, "ok\n", 3); }

int main(void) {
  free(malloc(1)); /* the arena exists before "ready" */
  if (lw_ready_wait_go() != 0) return 0;
  void *kept = keep_block();
  void *held[64];
  unsigned n_held = 0;
  static void *rotated[8192];
  unsigned n_rotated = 0;
  ok();
  char line[64];
  while (lw_read_line(line, sizeof line) == 0) {
    unsigned a = 0, b = 0;
    if (sscanf(line, "round %u %u", &a, &b) == 2) {
      for (unsigned i = a * b; i < a * b + b; i++) free(descend(i % (1u << STACK_LEVELS), 0, 24));
      ok();
    } else if (sscanf(line, "rotate %u %u", &a, &b) == 2 && b <= 8192) {
      for (unsigned i = 0; i < n_rotated; i++) free(rotated[i]);
      n_rotated = 0;
      for (unsigned i = a * b; i < a * b + b; i++) rotated[n_rotated++] = descend(i % (1u << STACK_LEVELS), 0, 2048);
      ok();
    } else if (sscanf(line, "hold %u", &a) == 1 && n_held < 64) {
      held[n_held++] = descend(a % (1u << STACK_LEVELS), 0, 3131);
      ok();
    } else if (strcmp(line, "exit") == 0) {
      break;
    }
  }
  for (unsigned i = 0; i < n_held; i++) free(held[i]);
  for (unsigned i = 0; i < n_rotated; i++) free(rotated[i]);
  free(kept);
  return 0;
}
