// SPDX-License-Identifier: Apache-2.0
// A many-threaded malloc/free loop with a planted leak, for
// bench/busy_threads.sh (issue 33: "a 16-thread malloc/free loop at the
// highest rate this machine reaches: the daemon holds its CPU budget; a
// planted leak of 1 MiB/min is still named within 10 minutes").
//
// Usage: threads_leak [--threads N] [--leak-block B] [--leak-rate R]
//                     [--leak-thread main|worker]
//
// N worker threads (16) each run malloc/free pairs as fast as they can. The
// sizes cycle deterministically: mostly 64..319 B (tcache and fastbins),
// every 8th pair 2,048..8,192 B, above tcache's reach, so glibc's unsorted
// and sorted bins are exercised too. Each worker keeps a ring of 16 blocks:
// a pair frees the block in the ring's next slot and mallocs its
// replacement. A block thus lives 16 pairs, so a large one is usually not
// next to the top chunk when freed and goes to a bin instead of merging
// straight back into the top (a bare malloc-then-free would).
//
// One thread also plants a leak: a block of B bytes (16384), written with a
// non-zero pattern and kept for good in the exported array lw_bench_kept,
// whenever the bytes kept fall behind R bytes a minute (1048576) since the
// start. It goes through the noinline lw_bench_plant_leak, called from the
// noinline lw_bench_leak_caller, so the site is known by those two frames.
// --leak-thread worker (the default): worker 0 plants between its pairs;
// main: the main thread plants while the workers churn (the main thread's
// blocks come from glibc's main arena, a worker's from its own arena).
//
// Protocol (as bench/torch_serve_leak.py's serve loop):
//   1. starts the workers, prints `ready <pid>`;
//   2. for every line `S` read on stdin, measures S seconds (a fraction is
//      fine) and answers `pairs_per_s X cpu_ms_per_mpair Y kept_bytes Z`: the
//      pairs all workers made per second, the process's CPU time (user +
//      system, getrusage) per million pairs, and every byte planted so far;
//   3. exits at end of input.
// The workers and the leak never pause: between chunks (while the driver
// reads the daemon's API) the process keeps churning and leaking, as a
// serving process would; a chunk only reads the counters at its two ends.
//
// Build (bench/busy_threads.sh does): gcc -O2 -pthread threads_leak.c
//
// Thread safety: each worker writes only its own padded counter slot and
// ring; the planted-leak state (lw_bench_kept, kept_count) is written by
// the one planting thread only, and kept_bytes is an atomic the main thread
// reads; stop is an atomic flag the main thread sets at end of input.
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

enum { kMaxThreads = 1024, kRing = 16, kMaxKept = 1 << 16, kCheckEvery = 256 };

// Exported (not static), so -O2 cannot drop the stores and the memset into
// blocks nobody reads: what the planted blocks hold is part of the figure
// (the pages are resident, as a real leak's would be).
char* lw_bench_kept[kMaxKept];

static size_t kept_count;  // the planting thread's only
static _Atomic uint64_t kept_bytes;
static atomic_bool stop;

// One cache line per worker: the main thread reads them all, each worker
// writes only its own, so no line bounces between workers.
struct counter {
  _Alignas(64) _Atomic uint64_t pairs;
};
static struct counter counters[kMaxThreads];

static struct {
  int threads;
  size_t leak_block;
  double leak_rate;  // bytes a minute
  int leak_in_main;
  double start_s;  // CLOCK_MONOTONIC when the workers started
} cfg = {16, 16384, 1048576.0, 0, 0.0};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

// The leak itself: one block, written, kept. noinline and exported so its
// name is a frame of the site's stack.
__attribute__((noinline)) void lw_bench_plant_leak(size_t n) {
  char* block = malloc(n);
  if (block == NULL) return;
  memset(block, (int)(kept_count & 0x7f) | 1, n);
  if (kept_count < kMaxKept) lw_bench_kept[kept_count] = block;
  ++kept_count;
  atomic_fetch_add_explicit(&kept_bytes, n, memory_order_relaxed);
}

// Its caller, a second named frame. The empty asm after the call keeps the
// call out of tail position: a sibling call would leave no frame of ours.
__attribute__((noinline)) void lw_bench_leak_caller(size_t n) {
  lw_bench_plant_leak(n);
  __asm__ volatile("" ::: "memory");
}

// Plants blocks until the bytes kept are no longer behind the rate.
static void plant_owed(void) {
  const double owed = cfg.leak_rate * (now_s() - cfg.start_s) / 60.0;
  while ((double)atomic_load_explicit(&kept_bytes, memory_order_relaxed) + (double)cfg.leak_block <= owed)
    lw_bench_leak_caller(cfg.leak_block);
}

// Pair i's size: every 8th 2,048..8,192 B, the rest 64..319 B; a fixed
// cycle, so bare and traced chunks do the same allocator work.
static size_t pair_size(uint64_t i) {
  if ((i & 7) == 7) return 2048 + (size_t)((i >> 3) * 2053 % 6145);
  return 64 + (size_t)(i * 37 % 256);
}

static void* worker(void* arg) {
  const int id = (int)(intptr_t)arg;
  const int plants = id == 0 && !cfg.leak_in_main;
  void* ring[kRing] = {0};
  uint64_t i = 0;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    for (int k = 0; k < kCheckEvery; ++k, ++i) {
      void** slot = &ring[i % kRing];
      free(*slot);
      char* p = malloc(pair_size(i + (uint64_t)id * 1000003u));
      if (p != NULL) p[0] = (char)i;
      // The pointer escapes to the compiler: the pair cannot be elided.
      __asm__ volatile("" : : "r"(p) : "memory");
      *slot = p;
    }
    atomic_store_explicit(&counters[id].pairs, i, memory_order_relaxed);
    if (plants) plant_owed();
  }
  for (int k = 0; k < kRing; ++k) free(ring[k]);
  return NULL;
}

static uint64_t total_pairs(void) {
  uint64_t sum = 0;
  for (int t = 0; t < cfg.threads; ++t) sum += atomic_load_explicit(&counters[t].pairs, memory_order_relaxed);
  return sum;
}

// A measured chunk under way: its end and the counters at its start.
struct chunk {
  int active;
  double end_s, wall0, cpu0;
  uint64_t pairs0;
};

static void chunk_begin(struct chunk* c, double seconds) {
  c->active = 1;
  c->wall0 = now_s();
  c->end_s = c->wall0 + seconds;
  c->cpu0 = cpu_s();
  c->pairs0 = total_pairs();
}

static void chunk_answer(struct chunk* c) {
  const double wall = now_s() - c->wall0;
  const double cpu = cpu_s() - c->cpu0;
  const uint64_t pairs = total_pairs() - c->pairs0;
  const double mpairs = (double)pairs / 1e6;
  printf("pairs_per_s %.1f cpu_ms_per_mpair %.3f kept_bytes %llu\n", wall > 0 ? (double)pairs / wall : 0.0,
         mpairs > 0 ? cpu * 1e3 / mpairs : 0.0,
         (unsigned long long)atomic_load_explicit(&kept_bytes, memory_order_relaxed));
  fflush(stdout);
  c->active = 0;
}

// Takes one line out of buf (len bytes), if whole, into line; returns 1 then.
static int take_line(char* buf, size_t* len, char* line, size_t cap) {
  char* nl = memchr(buf, '\n', *len);
  if (nl == NULL) return 0;
  size_t n = (size_t)(nl - buf);
  size_t copy = n < cap - 1 ? n : cap - 1;
  memcpy(line, buf, copy);
  line[copy] = '\0';
  memmove(buf, nl + 1, *len - n - 1);
  *len -= n + 1;
  return 1;
}

// The main thread: stdin's lines, the chunks' ends and, with --leak-thread
// main, the planting, in one loop polled every 50 ms at most. Returns at
// end of input.
static void serve(void) {
  char buf[4096], line[256];
  size_t len = 0;
  int eof = 0;
  struct chunk c = {0};
  while (!eof || c.active) {
    if (cfg.leak_in_main) plant_owed();
    if (c.active && now_s() >= c.end_s) chunk_answer(&c);
    if (!c.active && take_line(buf, &len, line, sizeof line)) {
      char* end = NULL;
      double s = strtod(line, &end);
      if (end == line || s <= 0) {
        fprintf(stderr, "threads_leak: expected a number of seconds, got '%s'\n", line);
        continue;
      }
      chunk_begin(&c, s);
      continue;
    }
    if (len == sizeof buf) len = 0;  // a line longer than the buffer: not ours, dropped
    int wait_ms = 50;
    if (c.active) {
      double left_ms = (c.end_s - now_s()) * 1e3;
      if (left_ms < wait_ms) wait_ms = left_ms > 0 ? (int)left_ms + 1 : 0;
    }
    struct pollfd pfd = {.fd = 0, .events = POLLIN};
    int r = eof ? poll(NULL, 0, wait_ms) : poll(&pfd, 1, wait_ms);
    if (r > 0 && (pfd.revents & (POLLIN | POLLHUP))) {
      ssize_t got = read(0, buf + len, sizeof buf - len);
      if (got > 0) len += (size_t)got;
      else if (got == 0 || errno != EINTR) eof = 1;
    }
  }
}

static int usage(void) {
  fprintf(stderr,
          "usage: threads_leak [--threads N] [--leak-block B] [--leak-rate BYTES_PER_MIN] "
          "[--leak-thread main|worker]\n");
  return 2;
}

// Parses the options into cfg; returns 0, or usage()'s status.
static int parse_args(int argc, char** argv) {
  for (int a = 1; a < argc; ++a) {
    const char* v = a + 1 < argc ? argv[a + 1] : NULL;
    if (v == NULL) return usage();
    char* end = NULL;
    if (strcmp(argv[a], "--threads") == 0) {
      long n = strtol(v, &end, 10);
      if (*end != '\0' || n < 1 || n > kMaxThreads) return usage();
      cfg.threads = (int)n;
    } else if (strcmp(argv[a], "--leak-block") == 0) {
      unsigned long long n = strtoull(v, &end, 10);
      if (*end != '\0' || n < 1) return usage();
      cfg.leak_block = (size_t)n;
    } else if (strcmp(argv[a], "--leak-rate") == 0) {
      double r = strtod(v, &end);
      if (*end != '\0' || r < 0) return usage();
      cfg.leak_rate = r;
    } else if (strcmp(argv[a], "--leak-thread") == 0) {
      if (strcmp(v, "main") != 0 && strcmp(v, "worker") != 0) return usage();
      cfg.leak_in_main = strcmp(v, "main") == 0;
    } else {
      return usage();
    }
    ++a;
  }
  return 0;
}

int main(int argc, char** argv) {
  int rc = parse_args(argc, argv);
  if (rc != 0) return rc;
  pthread_t tids[kMaxThreads];
  cfg.start_s = now_s();
  for (int t = 0; t < cfg.threads; ++t) {
    int err = pthread_create(&tids[t], NULL, worker, (void*)(intptr_t)t);
    if (err != 0) {
      fprintf(stderr, "threads_leak: pthread_create: %s\n", strerror(err));
      return 1;
    }
  }
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  serve();
  atomic_store(&stop, 1);
  for (int t = 0; t < cfg.threads; ++t) pthread_join(tids[t], NULL);
  return 0;
}
