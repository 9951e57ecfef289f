// SPDX-License-Identifier: Apache-2.0
// Probe-cost benchmark target: a tight loop of malloc+free pairs.
//
// Usage: malloc_free_loop [--posix-memalign | --getppid | --mmap | --new] PAIRS [ROUNDS]
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
static void* (*op_new)(size_t);
static void (*op_delete)(void*);

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
  if (argc >= 2 && strcmp(argv[1], "--new") == 0) {
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
    fprintf(stderr, "usage: %s [--posix-memalign | --getppid | --mmap | --new] PAIRS [ROUNDS]\n", argv[0]);
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
    qsort(ns, rounds, sizeof(ns[0]), cmp_double);
    double median = rounds % 2 ? ns[rounds / 2] : (ns[rounds / 2 - 1] + ns[rounds / 2]) / 2;
    printf("ns_per_pair %.1f\n", median);
  }
  return 0;
}
