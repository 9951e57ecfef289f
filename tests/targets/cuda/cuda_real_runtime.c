// SPDX-License-Identifier: Apache-2.0
/* Calls the real CUDA runtime (/usr/local/cuda/lib64/libcudart.so.13, or
 * the path in argv[1]) where it is installed, on a machine without a GPU:
 * every allocation fails, so leakwatch must attach its probes by name and
 * count nothing. Loaded with dlopen so this builds without CUDA; prints
 * "skip <reason>" instead of "ready" when the library cannot be loaded.
 * See ../target_protocol.h.
 */
#include <dlfcn.h>
#include <stddef.h>

#include "../target_protocol.h"

typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);

static malloc_fn cuda_malloc, cuda_malloc_host;
static free_fn cuda_free;
static int (*cuda_malloc_managed)(void **, size_t, unsigned);

LW_SITE static long long try_allocations(void) {
  long long failures = 0;
  for (int i = 0; i < 5; i++) {
    void *p = NULL;
    int r = cuda_malloc(&p, 1 << 20);
    if (r != 0) failures++;
    else cuda_free(p);
    r = cuda_malloc_host(&p, 4096);
    if (r != 0) failures++;
    r = cuda_malloc_managed(&p, 8192, 1);
    if (r != 0) failures++;
  }
  return failures;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "/usr/local/cuda/lib64/libcudart.so.13";
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    char line[512];
    int n = snprintf(line, sizeof line, "skip cannot load %s: %s\n", path, dlerror());
    lw_write_all(1, line, (size_t)n);
    return 0;
  }
  cuda_malloc = (malloc_fn)dlsym(h, "cudaMalloc");
  cuda_malloc_host = (malloc_fn)dlsym(h, "cudaMallocHost");
  cuda_malloc_managed = (int (*)(void **, size_t, unsigned))dlsym(h, "cudaMallocManaged");
  cuda_free = (free_fn)dlsym(h, "cudaFree");
  if (!cuda_malloc || !cuda_malloc_host || !cuda_malloc_managed || !cuda_free) lw_die("dlsym");
  if (lw_ready_wait_go() < 0) return 0;
  long long failures = try_allocations();
  lw_truth_kind_site("try_allocations", "cuda_device", 0);
  lw_truth_fact("failures", failures);
  lw_done();
  lw_wait_exit();
  return 0;
}
