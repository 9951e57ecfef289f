// SPDX-License-Identifier: Apache-2.0
/* Leaks known bytes through every traced CUDA runtime and driver function,
 * each from its own call site, next to sites that allocate and free, calls
 * that fail, a context destroyed with memory still in it, and VMM physical
 * memory that outlives its handle while mapped. Linked against the test
 * libraries libcudart.so.13 and libcuda.so.1 built next to it (found
 * through its RUNPATH). See ../target_protocol.h for the protocol.
 *
 *   cuda_leaker          leak (ground truth: bytes per site, kind, device)
 *   cuda_leaker control  allocate the same way, free everything: all zero
 *   cuda_leaker grow N   after "go", leak 1 MiB with cudaMalloc every N ms,
 *                        all at site grow_cuda_leak, until "exit" or EOF on
 *                        stdin (for leak classification over time; prints
 *                        no "done")
 *   cuda_leaker bench N  after "go", N cudaMalloc+cudaFree pairs (runtime
 *                        -> driver) and N cuMemAlloc_v2+cuMemFree_v2 pairs;
 *                        "done" carries ns per pair (bench/cuda_run.sh)
 *
 * Every byte allocated after "go" is CUDA memory, so total_live is exact.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "../target_protocol.h"
#include "fake_cuda.h"

static int control;
static void *volatile keep[256];
static unsigned keep_count;
static volatile size_t huge = (size_t)1 << 50;

static void keep_ptr(void *p) {
  if (keep_count == sizeof keep / sizeof keep[0]) lw_die("keep[] full");
  keep[keep_count++] = p;
}

static void ok(int r, const char *what) {
  if (r != 0) {
    errno = EINVAL;
    lw_die(what);
  }
}

/* In control mode every site frees what it took. */
static void rt_done(void *p) {
  if (control)
    ok(cudaFree(p), "cudaFree");
  else
    keep_ptr(p);
}

static void rt_host_done(void *p) {
  if (control)
    ok(cudaFreeHost(p), "cudaFreeHost");
  else
    keep_ptr(p);
}

static void drv_done(CUdeviceptr p) {
  if (control)
    ok(cuMemFree_v2(p), "cuMemFree_v2");
  else
    keep_ptr((void *)(uintptr_t)p);
}

static void drv_host_done(void *p) {
  if (control)
    ok(cuMemFreeHost(p), "cuMemFreeHost");
  else
    keep_ptr(p);
}

static unsigned long long live(unsigned long long n) { return control ? 0 : n; }

/* ---- runtime ---- */

LW_SITE static unsigned long long leak_cuda_malloc(void) {
  for (int i = 0; i < 3; i++) {
    void *p;
    ok(cudaMalloc(&p, 1 << 20), "cudaMalloc");
    rt_done(p);
  }
  return live(3ULL << 20);
}

LW_SITE static unsigned long long leak_cuda_malloc_async(void) {
  for (int i = 0; i < 2; i++) {
    void *p;
    ok(cudaMallocAsync(&p, 40000, NULL), "cudaMallocAsync");
    if (control)
      ok(cudaFreeAsync(p, NULL), "cudaFreeAsync");
    else
      keep_ptr(p);
  }
  return live(2 * 40000);
}

LW_SITE static unsigned long long leak_cuda_malloc_pool(void) {
  void *p;
  ok(cudaMallocFromPoolAsync(&p, 12345, NULL, NULL), "cudaMallocFromPoolAsync");
  rt_done(p);
  return live(12345);
}

LW_SITE static unsigned long long leak_cuda_managed(void) {
  for (int i = 0; i < 2; i++) {
    void *p;
    ok(cudaMallocManaged(&p, 70000, 1), "cudaMallocManaged");
    rt_done(p);
  }
  return live(2 * 70000);
}

LW_SITE static unsigned long long leak_cuda_pitch(void) {
  void *p;
  size_t pitch = 0;
  ok(cudaMallocPitch(&p, &pitch, 1000, 30), "cudaMallocPitch");
  rt_done(p);
  return live(pitch * 30); /* 1024 * 30 */
}

LW_SITE static unsigned long long leak_cuda_3d(void) {
  struct cudaPitchedPtr pp;
  struct cudaExtent ext = {100, 5, 7};
  ok(cudaMalloc3D(&pp, ext), "cudaMalloc3D");
  rt_done(pp.ptr);
  return live(pp.pitch * 5 * 7); /* 512 * 35 */
}

LW_SITE static unsigned long long leak_cuda_host(void) {
  void *p;
  ok(cudaMallocHost(&p, 50000), "cudaMallocHost");
  rt_host_done(p);
  return live(50000);
}

LW_SITE static unsigned long long leak_cuda_host_alloc(void) {
  void *p;
  ok(cudaHostAlloc(&p, 20000, 0), "cudaHostAlloc");
  rt_host_done(p);
  return live(20000);
}

/* Device 1 for this site only: attributed to device 1. */
LW_SITE static unsigned long long leak_cuda_dev1(void) {
  ok(cudaSetDevice(1), "cudaSetDevice");
  void *p;
  ok(cudaMalloc(&p, 300000), "cudaMalloc");
  rt_done(p);
  ok(cudaSetDevice(0), "cudaSetDevice");
  return live(300000);
}

LW_SITE static unsigned long long churn_cuda(void) {
  for (int i = 0; i < 20; i++) {
    void *p;
    ok(cudaMalloc(&p, 4096 + (size_t)i), "cudaMalloc");
    ok(cudaFree(p), "cudaFree");
    ok(cudaMallocAsync(&p, 999, NULL), "cudaMallocAsync");
    ok(cudaFreeAsync(p, NULL), "cudaFreeAsync");
    ok(cudaMallocManaged(&p, 5000, 1), "cudaMallocManaged");
    ok(cudaFree(p), "cudaFree");
    ok(cudaMallocHost(&p, 3000), "cudaMallocHost");
    ok(cudaFreeHost(p), "cudaFreeHost");
  }
  return 0;
}

/* Failures allocate nothing and must count nothing. */
LW_SITE static unsigned long long fail_cuda(void) {
  void *p = NULL;
  CUdeviceptr d = 0;
  if (cudaMalloc(&p, huge) == 0) lw_die("cudaMalloc(huge) succeeded");
  if (cudaMallocHost(&p, huge) == 0) lw_die("cudaMallocHost(huge) succeeded");
  if (cuMemAlloc_v2(&d, huge) == 0) lw_die("cuMemAlloc_v2(huge) succeeded");
  if (cuMemAllocManaged(&d, 0, 1) == 0) lw_die("cuMemAllocManaged(0) succeeded");
  return 0;
}

/* ---- driver ---- */

LW_SITE static unsigned long long leak_cu_mem_alloc(void) {
  for (int i = 0; i < 4; i++) {
    CUdeviceptr p;
    ok(cuMemAlloc_v2(&p, 8192), "cuMemAlloc_v2");
    drv_done(p);
  }
  return live(4 * 8192);
}

LW_SITE static unsigned long long leak_cu_async(void) {
  CUdeviceptr p, q;
  ok(cuMemAllocAsync(&p, 33333, NULL), "cuMemAllocAsync");
  ok(cuMemAllocFromPoolAsync(&q, 44444, NULL, NULL), "cuMemAllocFromPoolAsync");
  if (control) {
    ok(cuMemFreeAsync(p, NULL), "cuMemFreeAsync");
    ok(cuMemFreeAsync(q, NULL), "cuMemFreeAsync");
  } else {
    keep_ptr((void *)(uintptr_t)p);
    keep_ptr((void *)(uintptr_t)q);
  }
  return live(33333 + 44444);
}

LW_SITE static unsigned long long leak_cu_managed(void) {
  CUdeviceptr p;
  ok(cuMemAllocManaged(&p, 65536, 1), "cuMemAllocManaged");
  drv_done(p);
  return live(65536);
}

LW_SITE static unsigned long long leak_cu_pitch(void) {
  CUdeviceptr p;
  size_t pitch = 0;
  ok(cuMemAllocPitch_v2(&p, &pitch, 700, 11, 4), "cuMemAllocPitch_v2");
  drv_done(p);
  return live(pitch * 11); /* 1024 * 11 */
}

LW_SITE static unsigned long long leak_cu_host(void) {
  void *p, *q;
  ok(cuMemAllocHost_v2(&p, 10000), "cuMemAllocHost_v2");
  ok(cuMemHostAlloc(&q, 15000, 0), "cuMemHostAlloc");
  drv_host_done(p);
  drv_host_done(q);
  return live(10000 + 15000);
}

/* VMM: physical memory is what counts. One handle released while still
 * mapped stays live (the driver frees it at the last unmap). */
static CUdeviceptr va_base;

LW_SITE static unsigned long long leak_vmm(void) {
  const size_t chunk = 2 << 20;
  CUmemGenericAllocationHandle h[2];
  for (int i = 0; i < 2; i++) {
    ok(cuMemCreate(&h[i], chunk, NULL, 0), "cuMemCreate");
    ok(cuMemMap(va_base + (CUdeviceptr)i * chunk, chunk, 0, h[i], 0), "cuMemMap");
  }
  ok(cuMemRelease(h[0]), "cuMemRelease"); /* mapped: still live */
  if (control) {
    ok(cuMemUnmap(va_base, 2 * chunk), "cuMemUnmap"); /* both mappings at once */
    ok(cuMemRelease(h[1]), "cuMemRelease");
  }
  return live(2 * chunk);
}

LW_SITE static unsigned long long churn_vmm(void) {
  const size_t chunk = 1 << 20;
  CUdeviceptr va = va_base + (8 << 20);
  for (int i = 0; i < 5; i++) {
    CUmemGenericAllocationHandle h;
    /* create, map, unmap, release */
    ok(cuMemCreate(&h, chunk, NULL, 0), "cuMemCreate");
    ok(cuMemMap(va, chunk, 0, h, 0), "cuMemMap");
    ok(cuMemUnmap(va, chunk), "cuMemUnmap");
    ok(cuMemRelease(h), "cuMemRelease");
    /* create, map, release, unmap */
    ok(cuMemCreate(&h, chunk, NULL, 0), "cuMemCreate");
    ok(cuMemMap(va, chunk, 0, h, 0), "cuMemMap");
    ok(cuMemRelease(h), "cuMemRelease");
    ok(cuMemUnmap(va, chunk), "cuMemUnmap");
    /* create, release */
    ok(cuMemCreate(&h, chunk, NULL, 0), "cuMemCreate");
    ok(cuMemRelease(h), "cuMemRelease");
  }
  return 0;
}

/* A context of its own, on device 2, destroyed with memory in it: the
 * driver releases it all, and so must leakwatch. */
LW_SITE static unsigned long long ctx_destroyed(void) {
  CUcontext ctx;
  ok(cuCtxCreate_v2(&ctx, 0, 2), "cuCtxCreate_v2");
  for (int i = 0; i < 5; i++) {
    CUdeviceptr p;
    ok(cuMemAlloc_v2(&p, 4096), "cuMemAlloc_v2");
  }
  void *h;
  ok(cuMemAllocHost_v2(&h, 8192), "cuMemAllocHost_v2");
  ok(cuCtxDestroy_v2(ctx), "cuCtxDestroy_v2"); /* also pops it */
  return 0;
}

/* Push/pop: an allocation made while device 3's context is pushed. */
LW_SITE static unsigned long long leak_cu_pushed(void) {
  CUcontext saved, ctx;
  ok(cuCtxGetCurrent(&saved), "cuCtxGetCurrent");
  ok(cuCtxCreate_v2(&ctx, 0, 3), "cuCtxCreate_v2");  /* pushed */
  CUdeviceptr p;
  ok(cuMemAlloc_v2(&p, 6000), "cuMemAlloc_v2");
  drv_done(p);
  CUcontext popped;
  ok(cuCtxPopCurrent_v2(&popped), "cuCtxPopCurrent_v2");
  ok(cuCtxPushCurrent_v2(saved), "cuCtxPushCurrent_v2");
  ok(cuCtxPopCurrent_v2(&popped), "cuCtxPopCurrent_v2");
  return live(6000);
}

/* A second thread on device 2 (its own current device: the main thread
 * stays on device 0). Created before "ready", so its stack and TLS are not
 * allocations leakwatch sees; it works when the main thread says so. */
static int to_worker[2], from_worker[2];
static unsigned long long worker_bytes;

LW_SITE static unsigned long long leak_cuda_worker(void) {
  ok(cudaSetDevice(2), "cudaSetDevice");
  void *p;
  ok(cudaMalloc(&p, 123456), "cudaMalloc");
  rt_done(p);
  return live(123456);
}

static void *worker_main(void *arg) {
  (void)arg;
  char c;
  if (read(to_worker[0], &c, 1) != 1) return NULL;
  worker_bytes = leak_cuda_worker();
  if (write(from_worker[1], &c, 1) != 1) lw_die("write");
  lw_park_forever();
}

/* Runs the worker's site and waits for it. */
static unsigned long long run_worker(void) {
  char c = 'w';
  if (write(to_worker[1], &c, 1) != 1 || read(from_worker[0], &c, 1) != 1) lw_die("worker pipe");
  return worker_bytes;
}

/* On the main thread, after the worker switched its own thread to device 2:
 * still device 0. */
LW_SITE static unsigned long long leak_cuda_main_after_worker(void) {
  void *p;
  ok(cudaMalloc(&p, 54321), "cudaMalloc");
  rt_done(p);
  return live(54321);
}

/* The leaf of every grow-mode record: one site that leaks forever. */
LW_SITE static void grow_cuda_leak(long interval_ms) {
  for (;;) {
    void *p;
    ok(cudaMalloc(&p, 1 << 20), "cudaMalloc");
    keep_ptr(p);
    struct pollfd pfd = {.fd = 0, .events = POLLIN};
    if (poll(&pfd, 1, (int)interval_ms) > 0) return; /* "exit" or EOF */
    if (keep_count == sizeof keep / sizeof keep[0]) keep_count = 0; /* keep leaking */
  }
}


static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

LW_SITE static void bench(long n) {
  double t0 = now_ns();
  for (long i = 0; i < n; i++) {
    void *p;
    ok(cudaMalloc(&p, 4096), "cudaMalloc");
    ok(cudaFree(p), "cudaFree");
  }
  double t1 = now_ns();
  for (long i = 0; i < n; i++) {
    CUdeviceptr p;
    ok(cuMemAlloc_v2(&p, 4096), "cuMemAlloc_v2");
    ok(cuMemFree_v2(p), "cuMemFree_v2");
  }
  double t2 = now_ns();
  lw_truth_fact("runtime_ns_per_pair", (long long)((t1 - t0) / (double)n));
  lw_truth_fact("driver_ns_per_pair", (long long)((t2 - t1) / (double)n));
  lw_done();
}

/* ---- GPU OOM (run with LWFAKE_CUDA_DEVICE_CAPACITY set: see fake_libcuda.c) ---- */

#define OOM_CHUNK ((size_t)4 << 20)
#define OOM_MAX 256
static void *oom_held[OOM_MAX];
static CUdeviceptr oom_held_drv[OOM_MAX];

/* Runtime API: allocates until the device is full; the last call failed. */
LW_SITE static int oom_leak_runtime(void) {
  int n = 0;
  while (n < OOM_MAX && cudaMalloc(&oom_held[n], OOM_CHUNK) == cudaSuccess) n++;
  return n;
}

/* Driver API, the same on the current device. */
LW_SITE static int oom_leak_driver(void) {
  int n = 0;
  while (n < OOM_MAX && cuMemAlloc_v2(&oom_held_drv[n], OOM_CHUNK) == CUDA_SUCCESS) n++;
  return n;
}

/* Device 0, runtime API: fill it (OOM, reported), retry at once as a
 * caching allocator does (OOM again, within the minute: suppressed), free
 * one block and retry (success: recovered). On "driver", device 1, driver API:
 * fill it (OOM, reported, not recovered). */
static void gpu_oom(void) {
  int n = oom_leak_runtime();
  if (n == OOM_MAX) lw_die("no OOM on device 0: is LWFAKE_CUDA_DEVICE_CAPACITY set?");
  void *p;
  if (cudaMalloc(&p, OOM_CHUNK) != cudaErrorMemoryAllocation) lw_die("the retry did not fail");
  ok(cudaFree(oom_held[--n]), "cudaFree");
  ok(cudaMalloc(&p, OOM_CHUNK), "cudaMalloc after a free");
  oom_held[n++] = p;
  /* The test reads the device 0 report first, then says "driver". */
  char line[64];
  do
    if (lw_read_line(line, sizeof line) < 0) lw_die("stdin closed before 'driver'");
  while (strcmp(line, "driver") != 0);
  ok(cudaSetDevice(1), "cudaSetDevice");
  int m = oom_leak_driver();
  if (m == OOM_MAX) lw_die("no OOM on device 1");
  lw_truth_fact("oom_chunk", (long long)OOM_CHUNK);
  lw_truth_fact("device_0_chunks", n);
  lw_truth_fact("device_1_chunks", m);
  lw_truth_total((unsigned long long)(n + m) * OOM_CHUNK);
  lw_done();
}

int main(int argc, char **argv) {
  control = argc > 1 && strcmp(argv[1], "control") == 0;
  int growing = argc > 2 && strcmp(argv[1], "grow") == 0;
  int benching = argc > 2 && strcmp(argv[1], "bench") == 0;
  /* Setup before "ready": the runtime's device 0 context and a VMM range.
   * Nothing allocated yet. */
  ok(cudaSetDevice(0), "cudaSetDevice");
  ok(cuMemAddressReserve(&va_base, 64 << 20, 0, 0, 0), "cuMemAddressReserve");
  pthread_t worker;
  if (pipe(to_worker) || pipe(from_worker) || pthread_create(&worker, NULL, worker_main, NULL))
    lw_die("worker");
  if (lw_ready_wait_go() < 0) return 0;
  /* The device was made current before leakwatch attached, where it could
   * not see it; programs select their device again as they go (PyTorch's
   * device guards do). From here on every record's device is known.
   * PyTorch on a real GPU does not (tests/gpu/run.sh, 2026-11-27): with
   * CUDA_LEAKER_NO_RESELECT set, the main thread's device stays unseen. */
  if (!getenv("CUDA_LEAKER_NO_RESELECT")) ok(cudaSetDevice(0), "cudaSetDevice");
  if (argc > 1 && strcmp(argv[1], "oom") == 0) {
    gpu_oom();
    lw_wait_exit();
    return 0;
  }
  if (growing) {
    grow_cuda_leak(atol(argv[2]));
    return 0;
  }
  if (benching) {
    bench(atol(argv[2]));
    lw_wait_exit();
    return 0;
  }

  unsigned long long b0 = lwfake_cuda_live_bytes(2), h0 = lwfake_cuda_live_bytes(3),
                     m0 = lwfake_cuda_live_bytes(4);
  struct {
    const char *name, *kind;
    unsigned long long (*fn)(void);
  } sites[] = {
      {"leak_cuda_malloc", "cuda_device", leak_cuda_malloc},
      {"leak_cuda_malloc_async", "cuda_device", leak_cuda_malloc_async},
      {"leak_cuda_malloc_pool", "cuda_device", leak_cuda_malloc_pool},
      {"leak_cuda_managed", "cuda_managed", leak_cuda_managed},
      {"leak_cuda_pitch", "cuda_device", leak_cuda_pitch},
      {"leak_cuda_3d", "cuda_device", leak_cuda_3d},
      {"leak_cuda_host", "cuda_host", leak_cuda_host},
      {"leak_cuda_host_alloc", "cuda_host", leak_cuda_host_alloc},
      {"leak_cuda_dev1", "cuda_device", leak_cuda_dev1},
      {"churn_cuda", "cuda_device", churn_cuda},
      {"fail_cuda", "cuda_device", fail_cuda},
      {"leak_cu_mem_alloc", "cuda_device", leak_cu_mem_alloc},
      {"leak_cu_async", "cuda_device", leak_cu_async},
      {"leak_cu_managed", "cuda_managed", leak_cu_managed},
      {"leak_cu_pitch", "cuda_device", leak_cu_pitch},
      {"leak_cu_host", "cuda_host", leak_cu_host},
      {"leak_vmm", "cuda_device", leak_vmm},
      {"churn_vmm", "cuda_device", churn_vmm},
      {"ctx_destroyed", "cuda_device", ctx_destroyed},
      {"leak_cu_pushed", "cuda_device", leak_cu_pushed},
      {"leak_cuda_worker", "cuda_device", run_worker},
      {"leak_cuda_main_after_worker", "cuda_device", leak_cuda_main_after_worker},
  };
  unsigned long long total = 0;
  for (size_t i = 0; i < sizeof sites / sizeof sites[0]; i++) {
    unsigned long long n = sites[i].fn();
    lw_truth_kind_site(sites[i].name, sites[i].kind, n);
    total += n;
  }
  /* The test driver's own count must agree with the sites' sum. */
  unsigned long long lib = lwfake_cuda_live_bytes(2) - b0 + lwfake_cuda_live_bytes(3) - h0 +
                           lwfake_cuda_live_bytes(4) - m0;
  if (lib != total) {
    errno = EINVAL;
    lw_die("ground truth: the sites' sum differs from the test driver's count");
  }
  for (int k = 2; k <= 4; k++) lw_truth_fact(k == 2 ? "cuda_device" : k == 3 ? "cuda_host" : "cuda_managed",
                                             (long long)(lwfake_cuda_live_bytes(k) -
                                                         (k == 2 ? b0 : k == 3 ? h0 : m0)));
  /* Bytes per device (device and managed memory; pinned host memory has no
   * device). Nothing was live before "go". */
  for (int d = 0; d < 4; d++) {
    char key[32];
    snprintf(key, sizeof key, "device_%d", d);
    lw_truth_fact(key, (long long)lwfake_cuda_device_live_bytes(d));
  }
  lw_truth_total(total);
  lw_done();
  lw_wait_exit();
  return 0;
}
