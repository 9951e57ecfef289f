// SPDX-License-Identifier: Apache-2.0
// Leaks tensors through the framework allocator stand-ins of this
// directory (tests/integration/tensor_test.cc): known bytes from named call
// sites, next to sites that churn and a tensor freed on another thread than
// the one that made it. Built -O2 without frame pointers, as users' code is;
// each site is its own noinline function that never tail-calls the
// allocator, so it is a frame of every stack it allocates in.
//
//   tensor_leaker VARIANT ITEM...
//
// VARIANT: a directory next to this program, tensor/VARIANT, whose
// libraries are dlopen()ed before "ready": libc10.so, libc10_cuda.so,
// libtensorflow_framework.so.2, those of them it has. ITEM:
//   cpu   c10::alloc_cpu / free_cpu:
//           keep_cpu_tensors           24 x 64 KiB kept (tensor_cpu)
//           churn_cpu_tensors          2000 tensors made and freed, and alloc_cpu(0)
//           make_cpu_tensors_on_worker 8 x 32 KiB made on a worker thread; the main
//                                      thread frees 7 (free_worker_cpu_tensors)
//   gpu   the caching allocator stand-in (raw_alloc / raw_delete):
//           keep_gpu_tensors           12 x 256 KiB kept (tensor_gpu, device 0)
//           churn_gpu_tensors          1000 x 1.5 MiB made and freed (its chunk stays cached)
//           make_gpu_tensors_on_worker 6 x 64 KiB on the worker, 5 freed on main
//           keep_outside_pool          1 MiB straight from cudaMalloc (cuda_device),
//                                      outside the pool
//   bfc   the BFC stand-in (tsl::BFCAllocator::AllocateRaw / DeallocateRaw):
//           keep_bfc_tensors           10 x 128 KiB kept (tensor_gpu, device unknown)
//           churn_bfc_tensors          500 made and freed
//   spin  spin_cpu_tensors: 4 KiB tensors made and freed without end, until a
//         line arrives on stdin (the tier's governor budget); then "done"
//   bad   keep_cpu_tensors_bad: 4 x 64 KiB through the c10::alloc_cpu(size_t, int)
//         of the c10_bad variant (fact bad_kept_bytes; no tensor_cpu site)
//
// Protocol: ../target_protocol.h ("ready", "go", "done <truth>"); the
// truth's facts carry the pool's totals and the USDTs' semaphores and
// counts. After "done" it also answers, until "exit" or EOF:
//   "usdt"   -> "usdt {"malloc_semaphore":N,"free_semaphore":N,"malloc_fired":N,"free_fired":N}"
//   "empty"  -> emptyCache(), then "empty {"allocated":N,"reserved":N}"
// With ITEM cpu alone, every byte allocated after "go" is a tensor's, so
// total_live is exact (and holds with the heap tier on: counted once).
#include <dlfcn.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "../target_protocol.h"
#include "tensor_standin.h"

namespace {

constexpr int kCpuKept = 24;
constexpr size_t kCpuTensor = 64 << 10;
constexpr int kCpuChurn = 2000;
constexpr int kCpuWorker = 8;
constexpr size_t kCpuWorkerTensor = 32 << 10;
constexpr int kGpuKept = 12;
constexpr size_t kGpuTensor = 256 << 10;
constexpr int kGpuChurn = 1000;
// Fits no chunk the kept tensors use: a chunk of its own, cached once the
// churn is over, which emptyCache() gives back.
constexpr size_t kGpuChurnTensor = 1536 << 10;
constexpr int kGpuWorker = 6;
constexpr size_t kGpuWorkerTensor = 64 << 10;
constexpr size_t kOutsidePool = 1 << 20;
constexpr int kBfcKept = 10;
constexpr size_t kBfcTensor = 128 << 10;
constexpr int kBfcChurn = 500;
constexpr int kBadKept = 4;

void *(*alloc_cpu)(size_t);
void *(*alloc_cpu_bad)(size_t, int);
void (*free_cpu)(void *);
void *(*raw_alloc)(size_t);
void (*raw_delete)(void *);
void (*empty_cache)();
void (*pool_stats)(lw_pool_stats *);
void (*usdt_stats)(lw_usdt_stats *);
int (*cuda_set_device)(int);
int (*cuda_malloc)(void **, size_t);
void *bfc;
void *(*bfc_allocate_raw)(void *self, size_t alignment, size_t num_bytes);
void (*bfc_deallocate_raw)(void *self, void *ptr);

void *volatile kept[256];
unsigned kept_count;
void *volatile worker_made[16];

void keep(void *p) {
  if (!p) lw_die("allocation returned NULL");
  if (kept_count == sizeof kept / sizeof kept[0]) lw_die("kept[] full");
  kept[kept_count++] = p;
}

// Touches a tensor's memory, as a kernel writing it would.
void touch(void *p) {
  if (!p) lw_die("allocation returned NULL");
  static_cast<volatile char *>(p)[0] = 1;
}

// After the last call: no tail call, so the site stays on the stack.
inline void barrier() { asm volatile("" ::: "memory"); }

template <typename T>
T must(void *lib, const char *name) {
  void *sym = lib ? dlsym(lib, name) : dlsym(RTLD_DEFAULT, name);
  if (!sym) {
    errno = ENOENT;
    lw_die(name);
  }
  return reinterpret_cast<T>(sym);
}

}  // namespace

// ---- sites (extern "C": their frames are named as written) ----

extern "C" {

LW_SITE unsigned long long keep_cpu_tensors(void) {
  for (int i = 0; i < kCpuKept; ++i) keep(alloc_cpu(kCpuTensor));
  barrier();
  return kCpuKept * kCpuTensor;
}

LW_SITE void churn_cpu_tensors(void) {
  for (int i = 0; i < kCpuChurn; ++i) {
    void *p = alloc_cpu(4096 + static_cast<size_t>(i % 4) * 1024);
    touch(p);
    free_cpu(p);
  }
  // alloc_cpu(0) is NULL, and free_cpu(NULL) does nothing: nothing recorded.
  free_cpu(alloc_cpu(0));
  barrier();
}

LW_SITE void make_cpu_tensors_on_worker(void) {
  for (int i = 0; i < kCpuWorker; ++i) {
    worker_made[i] = alloc_cpu(kCpuWorkerTensor);
    touch(worker_made[i]);
  }
  barrier();
}

LW_SITE void free_worker_cpu_tensors(void) {
  for (int i = 1; i < kCpuWorker; ++i) free_cpu(worker_made[i]);
  barrier();
}

LW_SITE unsigned long long spin_cpu_tensors(void) {
  struct pollfd in = {0, POLLIN, 0};
  unsigned long long made = 0;
  for (;;) {
    void *p = alloc_cpu(4096);
    touch(p);
    free_cpu(p);
    if ((++made & 1023) == 0 && poll(&in, 1, 0) > 0) break;
  }
  barrier();
  return made;
}

LW_SITE unsigned long long keep_cpu_tensors_bad(void) {
  for (int i = 0; i < kBadKept; ++i) keep(alloc_cpu_bad(kCpuTensor, 0));
  barrier();
  return kBadKept * kCpuTensor;
}

LW_SITE unsigned long long keep_gpu_tensors(void) {
  for (int i = 0; i < kGpuKept; ++i) keep(raw_alloc(kGpuTensor));
  barrier();
  return kGpuKept * kGpuTensor;
}

LW_SITE void churn_gpu_tensors(void) {
  for (int i = 0; i < kGpuChurn; ++i) {
    void *p = raw_alloc(kGpuChurnTensor);
    touch(p);
    raw_delete(p);
  }
  barrier();
}

LW_SITE void make_gpu_tensors_on_worker(void) {
  for (int i = 0; i < kGpuWorker; ++i) {
    worker_made[i] = raw_alloc(kGpuWorkerTensor);
    touch(worker_made[i]);
  }
  barrier();
}

LW_SITE void free_worker_gpu_tensors(void) {
  for (int i = 1; i < kGpuWorker; ++i) raw_delete(worker_made[i]);
  barrier();
}

LW_SITE unsigned long long keep_outside_pool(void) {
  void *p = nullptr;
  if (cuda_set_device(0) != 0 || cuda_malloc(&p, kOutsidePool) != 0) lw_die("cudaMalloc");
  keep(p);
  barrier();
  return kOutsidePool;
}

LW_SITE unsigned long long keep_bfc_tensors(void) {
  for (int i = 0; i < kBfcKept; ++i) keep(bfc_allocate_raw(bfc, 64, kBfcTensor));
  barrier();
  return kBfcKept * kBfcTensor;
}

LW_SITE void churn_bfc_tensors(void) {
  for (int i = 0; i < kBfcChurn; ++i) {
    void *p = bfc_allocate_raw(bfc, 64, 16384);
    touch(p);
    bfc_deallocate_raw(bfc, p);
  }
  barrier();
}

}  // extern "C"

// ---- the worker thread: makes tensors on command, for the main thread to free ----

namespace {

int to_worker[2], from_worker[2];

void *worker_main(void *) {
  // Its malloc arena exists before "ready" (a new arena is an mmap).
  free(malloc(64));
  for (;;) {
    char cmd;
    if (read(to_worker[0], &cmd, 1) != 1) lw_park_forever();
    if (cmd == 'c') make_cpu_tensors_on_worker();
    if (cmd == 'g') make_gpu_tensors_on_worker();
    lw_write_all(from_worker[1], &cmd, 1);
  }
}

void on_worker(char cmd) {
  lw_write_all(to_worker[1], &cmd, 1);
  char reply;
  if (read(from_worker[0], &reply, 1) != 1) lw_die("worker");
}

std::string exe_dir() {
  static char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) lw_die("readlink /proc/self/exe");
  path[n] = '\0';
  std::string p(path);
  return p.substr(0, p.rfind('/'));
}

void *open_if_present(const std::string &dir, const char *file) {
  const std::string path = dir + "/" + file;
  if (access(path.c_str(), F_OK) != 0) return nullptr;
  void *lib = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    const char *err = dlerror();
    lw_write_all(2, err, strlen(err));
    lw_die("dlopen");
  }
  return lib;
}

bool has_item(int argc, char **argv, const char *item) {
  for (int i = 2; i < argc; ++i)
    if (strcmp(argv[i], item) == 0) return true;
  return false;
}

void usdt_fact_line(const char *prefix) {
  lw_usdt_stats u{};
  if (usdt_stats) usdt_stats(&u);
  char line[256];
  int n = snprintf(line, sizeof line,
                   "%s {\"malloc_semaphore\":%u,\"free_semaphore\":%u,\"malloc_fired\":%llu,\"free_fired\":%llu}\n",
                   prefix, u.malloc_semaphore, u.free_semaphore, static_cast<unsigned long long>(u.malloc_fired),
                   static_cast<unsigned long long>(u.free_fired));
  lw_write_all(1, line, static_cast<size_t>(n));
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 3) {
    static const char usage[] = "usage: tensor_leaker VARIANT cpu|gpu|bfc|spin|bad|none...\n";
    lw_write_all(2, usage, sizeof usage - 1);
    return 2;
  }
  const std::string dir = exe_dir() + "/tensor/" + argv[1];
  if (access(dir.c_str(), F_OK) != 0) lw_die(dir.c_str());
  void *c10 = open_if_present(dir, "libc10.so");
  void *c10_cuda = open_if_present(dir, "libc10_cuda.so");
  void *tf = open_if_present(dir, "libtensorflow_framework.so.2");
  const bool cpu = has_item(argc, argv, "cpu"), gpu = has_item(argc, argv, "gpu"),
             bfc_item = has_item(argc, argv, "bfc"), bad = has_item(argc, argv, "bad");
  if (cpu || has_item(argc, argv, "spin")) {
    alloc_cpu = must<void *(*)(size_t)>(c10, LW_C10_ALLOC_CPU);
    free_cpu = must<void (*)(void *)>(c10, LW_C10_FREE_CPU);
  }
  if (bad) alloc_cpu_bad = must<void *(*)(size_t, int)>(c10, LW_C10_ALLOC_CPU_BAD);
  if (c10_cuda) {
    raw_alloc = must<void *(*)(size_t)>(c10_cuda, LW_C10_CUDA_RAW_ALLOC);
    raw_delete = must<void (*)(void *)>(c10_cuda, LW_C10_CUDA_RAW_DELETE);
    empty_cache = must<void (*)()>(c10_cuda, LW_C10_CUDA_EMPTY_CACHE);
    pool_stats = must<void (*)(lw_pool_stats *)>(c10_cuda, "lw_standin_pool_stats");
    usdt_stats = must<void (*)(lw_usdt_stats *)>(c10_cuda, "lw_standin_usdt_stats");
    cuda_set_device = must<int (*)(int)>(nullptr, "cudaSetDevice");
    cuda_malloc = must<int (*)(void **, size_t)>(nullptr, "cudaMalloc");
  } else if (gpu) {
    errno = ENOENT;
    lw_die("item gpu needs libc10_cuda.so in the variant");
  }
  if (tf) {
    bfc = must<void *(*)()>(tf, "lw_standin_bfc_new")();
    bfc_allocate_raw = must<void *(*)(void *, size_t, size_t)>(tf, LW_TSL_BFC_ALLOCATE_RAW);
    bfc_deallocate_raw = must<void (*)(void *, void *)>(tf, LW_TSL_BFC_DEALLOCATE_RAW);
  } else if (bfc_item) {
    errno = ENOENT;
    lw_die("item bfc needs libtensorflow_framework.so.2 in the variant");
  }
  // The heap stays as it is: no trimming or growing of the main arena
  // between "go" and "done" outside what the tensors need.
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  if (pipe(to_worker) != 0 || pipe(from_worker) != 0) lw_die("pipe");
  pthread_t worker;
  if (pthread_create(&worker, nullptr, worker_main, nullptr) != 0) lw_die("pthread_create");
  lw_usdt_stats before{};
  if (usdt_stats) usdt_stats(&before);
  lw_truth_fact("semaphore_before_attach", before.malloc_semaphore + before.free_semaphore);

  if (lw_ready_wait_go() != 0) return 0;

  unsigned long long total = 0;
  if (cpu) {
    const unsigned long long kept_bytes = keep_cpu_tensors();
    churn_cpu_tensors();
    on_worker('c');
    free_worker_cpu_tensors();
    lw_truth_kind_site("keep_cpu_tensors", "tensor_cpu", kept_bytes);
    lw_truth_kind_site("churn_cpu_tensors", "tensor_cpu", 0);
    lw_truth_kind_site("make_cpu_tensors_on_worker", "tensor_cpu", kCpuWorkerTensor);
    lw_truth_kind_site("free_worker_cpu_tensors", "tensor_cpu", 0);
    lw_truth_fact("tensor_cpu_bytes", static_cast<long long>(kept_bytes + kCpuWorkerTensor));
    total += kept_bytes + kCpuWorkerTensor;
  }
  if (has_item(argc, argv, "spin")) {
    lw_truth_fact("spun", static_cast<long long>(spin_cpu_tensors()));
    char line[64];
    lw_read_line(line, sizeof line);  // what ended the spin
  }
  if (bad) lw_truth_fact("bad_kept_bytes", static_cast<long long>(keep_cpu_tensors_bad()));
  if (gpu) {
    const unsigned long long kept_bytes = keep_gpu_tensors();
    churn_gpu_tensors();
    on_worker('g');
    free_worker_gpu_tensors();
    const unsigned long long outside = keep_outside_pool();
    lw_truth_kind_site("keep_gpu_tensors", "tensor_gpu", kept_bytes);
    lw_truth_kind_site("churn_gpu_tensors", "tensor_gpu", 0);
    lw_truth_kind_site("make_gpu_tensors_on_worker", "tensor_gpu", kGpuWorkerTensor);
    lw_truth_kind_site("free_worker_gpu_tensors", "tensor_gpu", 0);
    lw_truth_kind_site("keep_outside_pool", "cuda_device", outside);
    lw_pool_stats pool{};
    pool_stats(&pool);
    lw_usdt_stats u{};
    usdt_stats(&u);
    lw_truth_fact("tensor_gpu_bytes", static_cast<long long>(kept_bytes + kGpuWorkerTensor));
    lw_truth_fact("pool_allocated_bytes", static_cast<long long>(pool.allocated_bytes));
    lw_truth_fact("pool_reserved_bytes", static_cast<long long>(pool.reserved_bytes));
    lw_truth_fact("pool_chunks", static_cast<long long>(pool.chunks));
    lw_truth_fact("outside_pool_bytes", static_cast<long long>(outside));
    lw_truth_fact("block_mallocs", kGpuKept + kGpuChurn + kGpuWorker);
    lw_truth_fact("block_frees", kGpuChurn + kGpuWorker - 1);
    lw_truth_fact("has_usdt", u.has_usdt);
    lw_truth_fact("usdt_malloc_semaphore", u.malloc_semaphore);
    lw_truth_fact("usdt_free_semaphore", u.free_semaphore);
    lw_truth_fact("usdt_malloc_fired", static_cast<long long>(u.malloc_fired));
    lw_truth_fact("usdt_free_fired", static_cast<long long>(u.free_fired));
  }
  if (bfc_item) {
    const unsigned long long kept_bytes = keep_bfc_tensors();
    churn_bfc_tensors();
    lw_truth_kind_site("keep_bfc_tensors", "tensor_gpu", kept_bytes);
    lw_truth_kind_site("churn_bfc_tensors", "tensor_gpu", 0);
    lw_truth_fact("bfc_bytes", static_cast<long long>(kept_bytes));
  }
  if (cpu && !gpu && !bfc_item && !bad) lw_truth_total(total);
  lw_done();

  char line[64];
  while (lw_read_line(line, sizeof line) == 0) {
    if (strcmp(line, "exit") == 0) break;
    if (strcmp(line, "usdt") == 0) usdt_fact_line("usdt");
    if (strcmp(line, "empty") == 0 && empty_cache) {
      empty_cache();
      lw_pool_stats pool{};
      pool_stats(&pool);
      char out[128];
      int n = snprintf(out, sizeof out, "empty {\"allocated\":%llu,\"reserved\":%llu}\n",
                       static_cast<unsigned long long>(pool.allocated_bytes),
                       static_cast<unsigned long long>(pool.reserved_bytes));
      lw_write_all(1, out, static_cast<size_t>(n));
    }
  }
  (void)c10;
  return 0;
}
