// SPDX-License-Identifier: Apache-2.0
/* The CUDA runtime linked into the executable (as with libcudart_static.a):
 * leakwatch finds cudaMalloc by symbol in the executable itself. The
 * runtime still allocates through libcuda.so.1, whose nested calls must not
 * count again. See ../target_protocol.h.
 *
 *   cuda_leaker_static [control]
 */
#include <stdint.h>

#include "../target_protocol.h"
#include "fake_cuda.h"

static int control;
static void *volatile keep[64];
static unsigned keep_count;

static void ok(int r, const char *what) {
  if (r != 0) {
    errno = EINVAL;
    lw_die(what);
  }
}

LW_SITE static unsigned long long leak_static_malloc(void) {
  for (int i = 0; i < 3; i++) {
    void *p;
    ok(cudaMalloc(&p, 5000), "cudaMalloc");
    if (control)
      ok(cudaFree(p), "cudaFree");
    else
      keep[keep_count++] = p;
  }
  return control ? 0 : 3 * 5000;
}

LW_SITE static unsigned long long leak_static_host(void) {
  void *p;
  ok(cudaMallocHost(&p, 7000), "cudaMallocHost");
  if (control)
    ok(cudaFreeHost(p), "cudaFreeHost");
  else
    keep[keep_count++] = p;
  return control ? 0 : 7000;
}

LW_SITE static unsigned long long churn_static(void) {
  for (int i = 0; i < 10; i++) {
    void *p;
    ok(cudaMallocManaged(&p, 1000, 1), "cudaMallocManaged");
    ok(cudaFree(p), "cudaFree");
  }
  return 0;
}

int main(int argc, char **argv) {
  control = argc > 1 && strcmp(argv[1], "control") == 0;
  ok(cudaSetDevice(0), "cudaSetDevice");
  if (lw_ready_wait_go() < 0) return 0;
  unsigned long long a = leak_static_malloc(), b = leak_static_host(), c = churn_static();
  lw_truth_kind_site("leak_static_malloc", "cuda_device", a);
  lw_truth_kind_site("leak_static_host", "cuda_host", b);
  lw_truth_kind_site("churn_static", "cuda_managed", c);
  if (lwfake_cuda_live_bytes(2) + lwfake_cuda_live_bytes(3) + lwfake_cuda_live_bytes(4) != a + b + c) {
    errno = EINVAL;
    lw_die("ground truth: the sites' sum differs from the test driver's count");
  }
  lw_truth_total(a + b + c);
  lw_done();
  lw_wait_exit();
  return 0;
}
