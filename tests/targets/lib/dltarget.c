// SPDX-License-Identifier: Apache-2.0
/* Loaded by dlopener with dlopen() after leakwatch attached: its leak must
 * be attributed to dltarget_leak_site, in this library's module. */
#include <stdlib.h>

#include "../target_protocol.h"

static void *volatile keep[4];

LW_SITE static void *dltarget_leak_site(size_t size) { return malloc(size); }

/* Leaks 4 blocks; returns the bytes leaked, or 0 if malloc failed. */
unsigned long long dltarget_leak(void) {
  for (int i = 0; i < 4; i++) {
    keep[i] = dltarget_leak_site(1081);
    if (keep[i] == NULL) return 0;
  }
  return 4 * 1081;
}
