// SPDX-License-Identifier: Apache-2.0
// libnative_dl.so: dlopen()ed by native_stacks, built like it (-O2, no
// frame pointers). Its leak goes through three of its own frames; the
// program passes in its backtrace recorder (this library has no ground
// truth of its own).
#include <cstdlib>

#include "../target_protocol.h"

#define LW_FN extern "C" __attribute__((noinline, noclone))
#define LW_NO_TAIL_CALL() __asm__ volatile("" ::: "memory")

namespace {
void *volatile kept;
}

LW_FN unsigned long long native_dl_site(unsigned long size, void (*record)(const char *)) {
  kept = malloc(size);
  if (kept == nullptr) return 0;
  record("native_dl_site");
  return size;
}

LW_FN unsigned long long native_dl_chain(void (*record)(const char *)) {
  unsigned long long r = native_dl_site(1601, record);
  LW_NO_TAIL_CALL();
  return r;
}

// Returns the bytes leaked, or 0 if malloc failed.
LW_FN unsigned long long native_dl_leak(void (*record)(const char *)) {
  unsigned long long r = native_dl_chain(record);
  LW_NO_TAIL_CALL();
  return r;
}
