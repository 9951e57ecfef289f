// SPDX-License-Identifier: Apache-2.0
// Oracle target for .debug_frame (tests/unit/test_unwind_oracle.cc): C
// without unwind tables, so GCC writes the CFI to .debug_frame only; the
// build then splits it the way distributions do (CMakeLists.txt here).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static long mix(const char* s, long seed) {
  long h = seed;
  for (size_t i = 0; s[i] != 0; ++i) h = (h ^ s[i]) * 1099511628211L;
  return h;
}

__attribute__((noinline)) static long vla(int n) {
  char buf[n];
  memset(buf, 'a' + n % 26, (size_t)n);
  buf[n - 1] = 0;
  return mix(buf, n);
}

int main(int argc, char** argv) {
  long h = vla(argc + 16);
  for (int i = 0; i < argc; ++i) h = mix(argv[i], h);
  printf("%ld\n", h);
  return 0;
}
