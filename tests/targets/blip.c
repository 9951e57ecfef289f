// SPDX-License-Identifier: Apache-2.0
/* A process that lives for an instant: allocates, frees part, exits. The
 * soak's process churn (bench/soak.sh) runs copies of it under names that
 * match a `full` and a `light` selector. No protocol: it never reads stdin.
 */
#define _GNU_SOURCE
#include <stdlib.h>

#include "target_protocol.h"

LW_SITE static void blip_allocate(void *volatile *keep) {
  for (int i = 0; i < 4; i++) keep[i] = malloc(100 + 50 * (size_t)i);
  free(keep[1]);
  free(keep[3]);
}

int main(void) {
  void *volatile keep[4];
  blip_allocate(keep);
  return 0;
}
