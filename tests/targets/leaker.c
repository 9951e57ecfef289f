// SPDX-License-Identifier: Apache-2.0
/* Leaks known amounts through every traced C allocation function, each from
 * its own call site, amid sites that allocate and free a lot and sites whose
 * allocations fail. See target_protocol.h for the protocol.
 *
 * Everything allocated after "go" is accounted for, so the ground truth
 * carries total_live: a tracer that counts glibc's own mmap/brk for malloc,
 * a failed allocation, or a block twice, misses it.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "target_protocol.h"

/* Leaked blocks stay reachable here (they are leaks by the tracer's count
 * of unfreed blocks, not by reachability). */
static void *volatile keep[256];
static unsigned keep_count;

/* Where churn sites store each block before freeing it: an observable store,
 * so the compiler cannot elide the allocation/free pair. */
static void *volatile sink;

static void keep_ptr(void *p) {
  if (keep_count == sizeof keep / sizeof keep[0]) {
    errno = ENOBUFS;
    lw_die("keep[] full");
  }
  keep[keep_count++] = p;
}

static void *checked(void *p, const char *what) {
  if (p == NULL) lw_die(what);
  return p;
}

/* Sizes that must fail come through a volatile so the compiler can neither
 * warn about them nor fold the calls away. */
static volatile size_t huge_size = SIZE_MAX;

static size_t page_size;

LW_SITE static unsigned long long leak_malloc(void) {
  for (int i = 0; i < 3; i++) keep_ptr(checked(malloc(1000), "malloc"));
  return 3 * 1000;
}

LW_SITE static unsigned long long leak_calloc(void) {
  for (int i = 0; i < 2; i++) keep_ptr(checked(calloc(17, 61), "calloc"));
  return 2 * 17 * 61;
}

/* Grows one block twice; the final size is what is live. */
LW_SITE static unsigned long long leak_realloc(void) {
  void *p = checked(malloc(100), "malloc");
  p = checked(realloc(p, 900), "realloc");
  p = checked(realloc(p, 5003), "realloc");
  keep_ptr(p);
  return 5003;
}

LW_SITE static unsigned long long leak_reallocarray(void) {
  void *p = checked(reallocarray(NULL, 7, 300), "reallocarray");
  p = checked(reallocarray(p, 7, 610), "reallocarray");
  keep_ptr(p);
  return 7 * 610;
}

LW_SITE static unsigned long long leak_posix_memalign(void) {
  void *p = NULL;
  if (posix_memalign(&p, 64, 6007) != 0) lw_die("posix_memalign");
  keep_ptr(p);
  return 6007;
}

LW_SITE static unsigned long long leak_aligned_alloc(void) {
  keep_ptr(checked(aligned_alloc(256, 2 * 4096), "aligned_alloc"));
  return 2 * 4096;
}

LW_SITE static unsigned long long leak_memalign(void) {
  keep_ptr(checked(memalign(128, 3011), "memalign"));
  return 3011;
}

LW_SITE static unsigned long long leak_valloc(void) {
  keep_ptr(checked(valloc(1013), "valloc"));
  return 1013;
}

/* pvalloc rounds the block up to whole pages, but the tracer counts the
 * requested size, as it does for every allocator: 1019 bytes, not a page. */
LW_SITE static unsigned long long leak_pvalloc(void) {
  keep_ptr(checked(pvalloc(1019), "pvalloc"));
  return 1019;
}

/* 2 MiB is above glibc's mmap threshold: malloc serves it with its own
 * mmap, which must count once, as heap, at this site. */
LW_SITE static unsigned long long leak_big_malloc(void) {
  keep_ptr(checked(malloc(2u << 20), "malloc"));
  return 2u << 20;
}

/* A macro, not a function: the function that calls mmap is the site. */
#define MAP_ANON_OR_DIE(len) \
  check_mapped(mmap(NULL, (len), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))

static void *check_mapped(void *p) {
  if (p == MAP_FAILED) lw_die("mmap");
  return p;
}

LW_SITE static unsigned long long leak_mmap(void) {
  keep_ptr(MAP_ANON_OR_DIE(3 * page_size));
  return 3 * page_size;
}

/* Maps four pages and unmaps the second: three pages stay live, in two
 * pieces. */
LW_SITE static unsigned long long leak_mmap_partial(void) {
  char *p = MAP_ANON_OR_DIE(4 * page_size);
  if (munmap(p + page_size, page_size) != 0) lw_die("munmap");
  keep_ptr(p);
  return 3 * page_size;
}

/* Grows a mapping with mremap; the new length is live, once. */
LW_SITE static unsigned long long leak_mremap(void) {
  void *p = MAP_ANON_OR_DIE(2 * page_size);
  p = mremap(p, 2 * page_size, 5 * page_size, MREMAP_MAYMOVE);
  if (p == MAP_FAILED) lw_die("mremap");
  keep_ptr(p);
  return 5 * page_size;
}

/* Moves the program break by hand. This runs last in the work so glibc's
 * malloc (which copes with foreign sbrk) is not even asked to. */
LW_SITE static unsigned long long leak_sbrk(void) {
  if (sbrk((intptr_t)(2 * page_size)) == (void *)-1) lw_die("sbrk");
  return 2 * page_size;
}

/* A file-backed mapping is not an allocation: it must not be counted. */
LW_SITE static void map_file(void) {
  int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (fd < 0) lw_die("open /proc/self/exe");
  void *p = mmap(NULL, page_size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) lw_die("mmap file");
  close(fd);
  keep_ptr(p);
}

/* The churn sites below take and give back thousands of blocks: each must
 * end at 0 live bytes (or not appear). */
LW_SITE static void churn_malloc(void) {
  void *blocks[64];
  for (int round = 0; round < 50; round++) {
    for (int i = 0; i < 64; i++) blocks[i] = checked(malloc(16 + 37 * (size_t)i), "malloc");
    for (int i = 0; i < 64; i++) free(blocks[(i * 7) % 64]);
  }
}

LW_SITE static void churn_calloc(void) {
  for (int i = 0; i < 500; i++) {
    void *p = checked(calloc((size_t)i + 1, 24), "calloc");
    sink = p;
    free(p);
  }
}

LW_SITE static void churn_realloc(void) {
  for (int i = 0; i < 200; i++) {
    void *p = checked(realloc(NULL, 10), "realloc");
    for (size_t n = 20; n < 40000; n *= 3) p = checked(realloc(p, n), "realloc");
    p = checked(realloc(p, 5), "realloc"); /* shrink */
    free(p);
  }
}

LW_SITE static void churn_aligned(void) {
  for (int i = 0; i < 200; i++) {
    void *p = NULL;
    if (posix_memalign(&p, 32, 100 + (size_t)i) != 0) lw_die("posix_memalign");
    free(p);
    free(checked(aligned_alloc(64, 640), "aligned_alloc"));
    free(checked(memalign(4096, 10), "memalign"));
    free(checked(valloc(77), "valloc"));
    free(checked(pvalloc(88), "pvalloc"));
    free(checked(reallocarray(NULL, 3, 33), "reallocarray"));
  }
}

/* Big blocks served by malloc's own mmap, and freed: neither heap nor mmap
 * bytes may remain. */
LW_SITE static void churn_big(void) {
  for (int i = 0; i < 20; i++) {
    void *p = checked(malloc((size_t)(1 + i % 4) << 20), "malloc");
    sink = p;
    free(p);
  }
}

LW_SITE static void churn_mmap(void) {
  for (int i = 0; i < 50; i++) {
    size_t len = (size_t)(1 + i % 5) * page_size;
    void *p = MAP_ANON_OR_DIE(len);
    if (munmap(p, len) != 0) lw_die("munmap");
  }
}

/* Every call here fails; a failed allocation must not be counted. */
LW_SITE static void fail_alloc(void) {
  void *p;
  if ((p = malloc(huge_size)) != NULL) lw_die("malloc(SIZE_MAX) succeeded");
  if ((p = calloc(huge_size / 2, 4)) != NULL) lw_die("calloc overflow succeeded");
  if ((p = reallocarray(NULL, huge_size / 2, 4)) != NULL) lw_die("reallocarray overflow succeeded");
  if (posix_memalign(&p, 3, 64) != EINVAL) lw_die("posix_memalign(align 3) did not fail");
  if (posix_memalign(&p, 64, huge_size - 4096) != ENOMEM) lw_die("huge posix_memalign did not fail");
  if ((p = aligned_alloc(64, huge_size - 4096)) != NULL) lw_die("huge aligned_alloc succeeded");
  if ((p = memalign(64, huge_size - 4096)) != NULL) lw_die("huge memalign succeeded");
  if ((p = valloc(huge_size - 4096)) != NULL) lw_die("huge valloc succeeded");
  p = mmap(NULL, huge_size - 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p != MAP_FAILED) lw_die("huge mmap succeeded");
}

static void work(void) {
  unsigned long long total = 0, n;

  churn_malloc();
  lw_truth_site("churn_malloc", 0);
  churn_calloc();
  lw_truth_site("churn_calloc", 0);
  churn_realloc();
  lw_truth_site("churn_realloc", 0);
  churn_aligned();
  lw_truth_site("churn_aligned", 0);
  churn_big();
  lw_truth_site("churn_big", 0);
  churn_mmap();
  lw_truth_site("churn_mmap", 0);
  fail_alloc();
  lw_truth_site("fail_alloc", 0);
  map_file();
  lw_truth_site("map_file", 0);

#define LEAK(fn)        \
  n = fn();             \
  lw_truth_site(#fn, n); \
  total += n
#define LEAK_MMAP(fn)        \
  n = fn();                  \
  lw_truth_mmap_site(#fn, n); \
  total += n
  LEAK(leak_malloc);
  LEAK(leak_calloc);
  LEAK(leak_realloc);
  LEAK(leak_reallocarray);
  LEAK(leak_posix_memalign);
  LEAK(leak_aligned_alloc);
  LEAK(leak_memalign);
  LEAK(leak_valloc);
  LEAK(leak_pvalloc);
  LEAK(leak_big_malloc);
  LEAK_MMAP(leak_mmap);
  LEAK_MMAP(leak_mmap_partial);
  LEAK_MMAP(leak_mremap);
  LEAK_MMAP(leak_sbrk);
#undef LEAK
#undef LEAK_MMAP
  lw_truth_total(total);
}

int main(void) {
  page_size = (size_t)sysconf(_SC_PAGESIZE);
  if (lw_ready_wait_go() != 0) return 0;
  work();
  lw_done();
  lw_wait_exit();
  return 0;
}
