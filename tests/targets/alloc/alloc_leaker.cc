// SPDX-License-Identifier: Apache-2.0
/* The same leaking program (C++: site names in the truth are demangled,
 * "leak_malloc()"), built and run five ways by the allocator tests
 * (tests/integration/allocator_test.cc): plain glibc, linked with
 * -ljemalloc, LD_PRELOAD'd with tcmalloc or mimalloc, and -static.
 * Each site leaks a known number of bytes through one entry point, next to
 * sites that allocate and free everything. Entry points specific to one
 * allocator (mallocx, tc_malloc, mi_malloc_aligned, ...) are looked up with
 * dlsym at run time, so one source exercises whichever allocator won, with
 * its own argument orders. See target_protocol.h for the protocol.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#include <new>

#include "../target_protocol.h"

#ifdef LW_WITH_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

static void *volatile keep[512];
static unsigned keep_count;
static void *volatile sink;

static void keep_ptr(void *p) {
  if (p == nullptr) lw_die("allocation failed");
  if (keep_count == sizeof keep / sizeof keep[0]) {
    errno = ENOBUFS;
    lw_die("keep[] full");
  }
  keep[keep_count++] = p;
}

LW_SITE static unsigned long long leak_malloc(void) {
  for (int i = 0; i < 4; i++) keep_ptr(malloc(1000));
  return 4 * 1000;
}

LW_SITE static unsigned long long leak_calloc(void) {
  for (int i = 0; i < 3; i++) keep_ptr(calloc(17, 61));
  return 3 * 17 * 61;
}

LW_SITE static unsigned long long leak_realloc(void) {
  void *p = malloc(100);
  p = realloc(p, 900);
  p = realloc(p, 5003);
  keep_ptr(p);
  return 5003;
}

LW_SITE static unsigned long long leak_posix_memalign(void) {
  void *p = nullptr;
  if (posix_memalign(&p, 64, 6007) != 0) lw_die("posix_memalign");
  keep_ptr(p);
  return 6007;
}

LW_SITE static unsigned long long leak_new(void) {
  for (int i = 0; i < 5; i++) keep_ptr(new char[777]);
  keep_ptr(new (std::nothrow) char[223]);
  return 5 * 777 + 223;
}

LW_SITE static void churn(void) {
  for (int i = 0; i < 200; i++) {
    sink = malloc(64 + (size_t)i);
    free(sink);
    char *c = new char[48 + i];
    sink = c;
    delete[] c;
  }
}

/* Allocator-specific entry points, when the winning allocator has them. */
template <typename F>
static F lookup(const char *name) {
#ifdef LW_NO_DLSYM
  (void)name;
  return nullptr;
#else
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
#endif
}

LW_SITE static unsigned long long leak_tc(void) {
  auto tc_malloc = lookup<void *(*)(size_t)>("tc_malloc");
  auto tc_free_sized = lookup<void (*)(void *, size_t)>("tc_free_sized");
  auto tc_calloc = lookup<void *(*)(size_t, size_t)>("tc_calloc");
  keep_ptr(tc_malloc(3001));
  keep_ptr(tc_calloc(3, 1001));
  for (int i = 0; i < 50; i++) tc_free_sized(tc_malloc(128), 128);
  return 3001 + 3 * 1001;
}

LW_SITE static unsigned long long leak_mi(void) {
  auto mi_malloc_aligned = lookup<void *(*)(size_t, size_t)>("mi_malloc_aligned");
  auto mi_mallocn = lookup<void *(*)(size_t, size_t)>("mi_mallocn");
  auto mi_expand = lookup<void *(*)(void *, size_t)>("mi_expand");
  auto mi_free = lookup<void (*)(void *)>("mi_free");
  auto mi_heap_malloc = lookup<void *(*)(void *, size_t)>("mi_heap_malloc");
  auto mi_heap_get_default = lookup<void *(*)(void)>("mi_heap_get_default");
  keep_ptr(mi_malloc_aligned(4099, 256));  // (size, align): 4099 bytes, not 256
  keep_ptr(mi_mallocn(7, 300));            // (count, size)
  unsigned long long total = 4099 + 7 * 300;
  if (mi_heap_malloc && mi_heap_get_default) {
    keep_ptr(mi_heap_malloc(mi_heap_get_default(), 2222));
    total += 2222;
  }
  // mi_expand grows in place only when the block has room: 1000 bytes sit
  // in a 1024-byte size class, so 1010 fits and 5000 does not.
  void *p = mi_malloc_aligned(1000, 8);
  keep_ptr(p);
  unsigned long long kept = 1000;
  if (mi_expand(p, 1010) == p) kept = 1010;
  if (mi_expand(p, 50000) == p) kept = 50000;  // may not move: stays the same block
  total += kept;
  for (int i = 0; i < 50; i++) mi_free(mi_mallocn(2, 64));
  lw_truth_fact("mi_expand_kept", (long long)kept);
  return total;
}

#ifdef LW_WITH_JEMALLOC
LW_SITE static unsigned long long leak_je(void) {
  keep_ptr(mallocx(2500, 0));
  keep_ptr(mallocx(3000, MALLOCX_ALIGN(4096) | MALLOCX_ZERO));
  void *r = mallocx(100, 0);
  r = rallocx(r, 4321, 0);
  keep_ptr(r);
  // xallocx resizes in place and returns the new usable size: that is what
  // the block holds afterwards, whatever was asked.
  void *x = mallocx(4000, 0);
  size_t usable = xallocx(x, 4096, 0, 0);
  keep_ptr(x);
  for (int i = 0; i < 50; i++) sdallocx(mallocx(200, 0), 200, 0);
  for (int i = 0; i < 50; i++) dallocx(mallocx(300, 0), 0);
  lw_truth_fact("xallocx_usable", (long long)usable);
  return 2500 + 3000 + 4321 + usable;
}
#endif

int main(void) {
  if (lw_ready_wait_go() < 0) return 0;
  lw_truth_site("leak_malloc()", leak_malloc());
  lw_truth_site("leak_calloc()", leak_calloc());
  lw_truth_site("leak_realloc()", leak_realloc());
  lw_truth_site("leak_posix_memalign()", leak_posix_memalign());
  lw_truth_site("leak_new()", leak_new());
  churn();
  lw_truth_site("churn()", 0);
  if (lookup<void *>("tc_malloc") != nullptr) lw_truth_site("leak_tc()", leak_tc());
  if (lookup<void *>("mi_malloc_aligned") != nullptr) lw_truth_site("leak_mi()", leak_mi());
#ifdef LW_WITH_JEMALLOC
  lw_truth_site("leak_je()", leak_je());
#endif
  lw_done();
  lw_wait_exit();
  return 0;
}
