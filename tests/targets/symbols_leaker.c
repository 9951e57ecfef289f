// SPDX-License-Identifier: Apache-2.0
/* Leaks from two known call sites, for the symbolization tests
 * (tests/integration/symbols_test.cc, tests/unit/test_debug_file.cc). See
 * target_protocol.h for the protocol.
 *
 * leak_named calls malloc itself. leak_through_inline calls
 * inlined_alloc, which is always inlined (also under the targets'
 * -fno-inline), so the return address of its malloc call lies in code that
 * DWARF attributes to inlined_alloc, inlined into leak_through_inline: one
 * address, two frames.
 *
 * CMake also builds copies of this program (tests/targets/CMakeLists.txt):
 * stripped/symbols_leaker (strip --strip-all, with a .gnu_debuglink to
 * symbols_leaker.debug), debug/symbols_leaker.debug (objcopy
 * --only-keep-debug) and mini/symbols_leaker (stripped, with MiniDebugInfo
 * in .gnu_debugdata). The lines below are what the tests expect: keep the
 * LW_LINE_* markers next to the calls they name.
 */
#include "target_protocol.h"

enum { NAMED_BLOCKS = 16, NAMED_BYTES = 4096, INLINE_BLOCKS = 8, INLINE_BYTES = 8192 };

static void *volatile kept[NAMED_BLOCKS + INLINE_BLOCKS];

LW_SITE static void *leak_named(void) {
  return malloc(NAMED_BYTES); /* LW_LINE_NAMED_MALLOC */
}

static inline __attribute__((always_inline)) void *inlined_alloc(size_t n) {
  return malloc(n); /* LW_LINE_INLINED_MALLOC */
}

LW_SITE static void *leak_through_inline(void) {
  return inlined_alloc(INLINE_BYTES); /* LW_LINE_INLINE_CALL */
}

int main(void) {
  free(malloc(1)); /* the arena exists before "ready" */
  if (lw_ready_wait_go() != 0) return 0;
  for (int i = 0; i < NAMED_BLOCKS; i++) {
    kept[i] = leak_named();
    if (kept[i] == NULL) lw_die("malloc");
  }
  for (int i = 0; i < INLINE_BLOCKS; i++) {
    kept[NAMED_BLOCKS + i] = leak_through_inline();
    if (kept[NAMED_BLOCKS + i] == NULL) lw_die("malloc");
  }
  lw_truth_site("leak_named", (unsigned long long)NAMED_BLOCKS * NAMED_BYTES);
  /* The physical leaf; inlined_alloc is the frame shown above it. */
  lw_truth_site("leak_through_inline", (unsigned long long)INLINE_BLOCKS * INLINE_BYTES);
  lw_truth_total((unsigned long long)NAMED_BLOCKS * NAMED_BYTES +
                 (unsigned long long)INLINE_BLOCKS * INLINE_BYTES);
  lw_done();
  lw_wait_exit();
  return 0;
}
