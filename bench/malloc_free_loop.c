// SPDX-License-Identifier: Apache-2.0
// Probe-cost benchmark target: a tight loop of malloc+free pairs.
//
// Usage: malloc_free_loop [--posix-memalign | --getppid | --mmap | --new | --depth N] PAIRS [ROUNDS]
//
// With --posix-memalign each pair is posix_memalign(&p, 64, size)+free
// instead of malloc(size)+free (bench/memalign_run.sh: where a return-probed
// function's probes can sit). With --getppid each "pair" is one getppid
// system call instead, no allocation (bench/syscall_run.sh: what light
// mode's syscall tracepoints cost a syscall-heavy process). With --mmap each
// pair is an anonymous one-page mmap, a write to it, and its munmap
// (bench/syscall_run.sh --mmap: what light mode's probes on libc's
// wrappers cost a process that maps and unmaps a lot). With --new each pair
// is libstdc++'s operator new(size) and operator delete(p), looked up with
// dlsym (bench/README.md, "operator new": what its entry probe costs).
// With --depth N each malloc+free pair is made N frames deep (N distinct
// noinline functions between the loop and malloc): bench/unwind_depth.sh
// measures the unwinder's cost per stack by depth.
//
// Protocol (so a tracer can attach to an already-running process):
//   1. prints `ready <pid>` and waits on stdin;
//   2. every line read from stdin starts one batch: ROUNDS rounds of PAIRS
//      pairs each, or of N pairs when the line holds a number N. Each round
//      prints `round <i> <ns per pair>`, and the batch ends with the
//      machine-readable line `ns_per_pair <median over the rounds>`;
//   3. exits at end of input.
// Several batches per process let a driver run a short calibration batch and
// then a measured batch sized from it, under one attach of the tracer.
//
// The sizes cycle deterministically through 64..319 bytes so every run (bare
// or traced) does the same allocator work, within malloc's tcache/fastbin
// range like the small allocations that dominate real programs.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { kMaxRounds = 100, kDefaultRounds = 5 };

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// Parses a positive decimal count; returns 0 when `s` is not one.
static uint64_t parse_count(const char* s) {
  char* end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || (*end != '\0' && *end != '\n') || s[0] == '-') return 0;
  return (uint64_t)v;
}

static int use_posix_memalign;
static int use_getppid;
static int use_mmap;
static unsigned call_depth;
static void* (*op_new)(size_t);
static void (*op_delete)(void*);

// One malloc+free pair N frames below the caller, through N distinct
// functions (lvl_N calls lvl_{N-1} ... lvl_1 calls malloc), so every frame
// has its own return address as in a real call chain. The asm after each
// call keeps it from being a tail call (which would not leave a frame).
// i == UINT64_MAX: the block stays live (the one kept before is freed), so
// a tracer's snapshot shows the whole chain's stack (bench/unwind_depth.sh
// checks its depth).
static char* kept;
__attribute__((noinline)) static void lvl_0(size_t size, uint64_t i) {
  char* p = malloc(size);
  if (p == NULL) {
    perror("malloc");
    exit(1);
  }
  p[0] = (char)i;
  __asm__ volatile("" : : "r"(p) : "memory");
  if (i == UINT64_MAX) {
    free(kept);
    kept = p;
    return;
  }
  free(p);
}
#define LW_LEVEL(n, m)                                                  \
  __attribute__((noinline)) static void lvl_##n(size_t size, uint64_t i) { \
    lvl_##m(size, i);                                                   \
    __asm__ volatile("" ::: "memory");                                  \
  }
#define LW_LEVELS8(a, b, c, d, e, f, g, h, i) \
  LW_LEVEL(b, a) LW_LEVEL(c, b) LW_LEVEL(d, c) LW_LEVEL(e, d) LW_LEVEL(f, e) LW_LEVEL(g, f) LW_LEVEL(h, g) LW_LEVEL(i, h)
LW_LEVELS8(0, 1, 2, 3, 4, 5, 6, 7, 8)
LW_LEVELS8(8, 9, 10, 11, 12, 13, 14, 15, 16)
LW_LEVELS8(16, 17, 18, 19, 20, 21, 22, 23, 24)
LW_LEVELS8(24, 25, 26, 27, 28, 29, 30, 31, 32)
LW_LEVELS8(32, 33, 34, 35, 36, 37, 38, 39, 40)
LW_LEVELS8(40, 41, 42, 43, 44, 45, 46, 47, 48)
LW_LEVELS8(48, 49, 50, 51, 52, 53, 54, 55, 56)
LW_LEVELS8(56, 57, 58, 59, 60, 61, 62, 63, 64)
enum { kMaxDepth = 64 };
static void (*const levels[kMaxDepth + 1])(size_t, uint64_t) = {
    lvl_0,  lvl_1,  lvl_2,  lvl_3,  lvl_4,  lvl_5,  lvl_6,  lvl_7,  lvl_8,  lvl_9,  lvl_10,
    lvl_11, lvl_12, lvl_13, lvl_14, lvl_15, lvl_16, lvl_17, lvl_18, lvl_19, lvl_20, lvl_21,
    lvl_22, lvl_23, lvl_24, lvl_25, lvl_26, lvl_27, lvl_28, lvl_29, lvl_30, lvl_31, lvl_32,
    lvl_33, lvl_34, lvl_35, lvl_36, lvl_37, lvl_38, lvl_39, lvl_40, lvl_41, lvl_42, lvl_43,
    lvl_44, lvl_45, lvl_46, lvl_47, lvl_48, lvl_49, lvl_50, lvl_51, lvl_52, lvl_53, lvl_54,
    lvl_55, lvl_56, lvl_57, lvl_58, lvl_59, lvl_60, lvl_61, lvl_62, lvl_63, lvl_64};

static double run_round(uint64_t pairs) {
  uint64_t start = now_ns();
  for (uint64_t i = 0; i < pairs; i++) {
    // 97 is odd, so i*97 mod 256 visits every offset: sizes 64..319.
    size_t size = 64 + ((i * 97) & 255);
    if (use_mmap) {
      char* m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) {
        perror("mmap");
        exit(1);
      }
      m[0] = (char)i;
      __asm__ volatile("" : : "r"(m) : "memory");
      if (munmap(m, 4096) != 0) {
        perror("munmap");
        exit(1);
      }
      continue;
    }
    if (call_depth) {
      levels[call_depth - 1](size, i);  // call_depth frames: lvl_{N-1} .. lvl_0
      continue;
    }
    if (use_getppid) {
      // syscall(): glibc may not cache getppid, but be explicit about it.
      long r = syscall(SYS_getppid);
      __asm__ volatile("" : : "r"(r) : "memory");
      continue;
    }
    char* p = NULL;
    if (use_posix_memalign) {
      void* q = NULL;
      int err = posix_memalign(&q, 64, size);
      if (err != 0) {
        fprintf(stderr, "posix_memalign: %s\n", strerror(err));
        exit(1);
      }
      p = q;
    } else if (op_new) {
      p = op_new(size);
    } else {
      p = malloc(size);
    }
    if (p == NULL) {
      perror("malloc");
      exit(1);
    }
    p[0] = (char)i;
    // Without this the compiler may delete the malloc/free pair outright
    // (GCC does at -O2): the empty asm makes `p` and its memory observable.
    __asm__ volatile("" : : "r"(p) : "memory");
    if (op_delete)
      op_delete(p);
    else
      free(p);
  }
  return (double)(now_ns() - start) / (double)pairs;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  if (argc >= 3 && strcmp(argv[1], "--depth") == 0) {
    call_depth = (unsigned)parse_count(argv[2]);
    if (call_depth == 0 || call_depth > kMaxDepth + 1) {
      fprintf(stderr, "--depth must be 1..%d\n", kMaxDepth + 1);
      return 2;
    }
    argv[2] = argv[0];
    argv += 2;
    argc -= 2;
  } else if (argc >= 2 && strcmp(argv[1], "--new") == 0) {
    // libstdc++'s operator new/delete, from C: the pair a C++ program makes.
    void* cxx = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_GLOBAL);
    if (cxx) {
      op_new = (void* (*)(size_t))dlsym(cxx, "_Znwm");
      op_delete = (void (*)(void*))dlsym(cxx, "_ZdlPv");
    }
    if (!op_new || !op_delete) {
      fprintf(stderr, "--new: cannot load libstdc++'s operator new: %s\n", dlerror());
      return 1;
    }
    argv[1] = argv[0];
    argv++;
    argc--;
  } else if (argc >= 2 && (strcmp(argv[1], "--posix-memalign") == 0 || strcmp(argv[1], "--getppid") == 0 ||
                    strcmp(argv[1], "--mmap") == 0)) {
    use_posix_memalign = strcmp(argv[1], "--posix-memalign") == 0;
    use_getppid = strcmp(argv[1], "--getppid") == 0;
    use_mmap = strcmp(argv[1], "--mmap") == 0;
    argv[1] = argv[0];
    argv++;
    argc--;
  }
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s [--posix-memalign | --getppid | --mmap | --new | --depth N] PAIRS [ROUNDS]\n",
            argv[0]);
    return 2;
  }
  uint64_t default_pairs = parse_count(argv[1]);
  uint64_t rounds = argc == 3 ? parse_count(argv[2]) : kDefaultRounds;
  if (default_pairs == 0 || rounds == 0 || rounds > kMaxRounds) {
    fprintf(stderr, "PAIRS must be > 0 and ROUNDS in 1..%d\n", kMaxRounds);
    return 2;
  }
  // stdout is usually a pipe to the driver, which waits on each line.
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("ready %d\n", (int)getpid());

  char line[64];
  while (fgets(line, sizeof(line), stdin) != NULL) {
    uint64_t pairs = default_pairs;
    if (line[0] != '\n') {
      pairs = parse_count(line);
      if (pairs == 0) {
        fprintf(stderr, "bad batch line (want a pair count or nothing): %s", line);
        return 2;
      }
    }
    double ns[kMaxRounds];
    for (uint64_t r = 0; r < rounds; r++) {
      ns[r] = run_round(pairs);
      printf("round %" PRIu64 " %.1f\n", r + 1, ns[r]);
    }
    // One block left live at the bottom of the chain (outside the timing).
    if (call_depth) levels[call_depth - 1](4096, UINT64_MAX);
    qsort(ns, rounds, sizeof(ns[0]), cmp_double);
    double median = rounds % 2 ? ns[rounds / 2] : (ns[rounds / 2 - 1] + ns[rounds / 2]) / 2;
    printf("ns_per_pair %.1f\n", median);
  }
  return 0;
}
