// SPDX-License-Identifier: Apache-2.0
/* A tiny process for the many-processes bench and test (issue 17): it
 * costs the host next to nothing while hundreds of copies are traced.
 *
 *   mp_idle              idles: one mmap+munmap pair a second (so its
 *                        wrapper probes fire now and then), until killed
 *   mp_idle live MS      one mmap+munmap pair, then exits after MS
 *                        milliseconds (a churn step: an exec, then an exit)
 *   mp_idle keep KIB     after 1 s (attached by then), maps KIB KiB of
 *                        anonymous memory it never unmaps, then idles
 *   mp_idle pairs N      prints "ready PID", then for every line read on
 *                        stdin runs N anonymous mmap+munmap pairs of one
 *                        page and prints the nanoseconds per pair; ends at EOF
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void pair(void) {
  void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p != MAP_FAILED) munmap(p, 4096);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "live") == 0) {
    long ms = strtol(argv[2], NULL, 10);
    pair();
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    pair();
    return 0;
  }
  if (argc == 3 && strcmp(argv[1], "keep") == 0) {
    size_t bytes = (size_t)strtol(argv[2], NULL, 10) << 10;
    sleep(1);
    void *volatile kept = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    (void)kept;
    for (;;) pause();
  }
  if (argc == 3 && strcmp(argv[1], "pairs") == 0) {
    long n = strtol(argv[2], NULL, 10);
    if (n <= 0) return 2;
    printf("ready %d\n", getpid());
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof(line), stdin)) {
      long long t0 = now_ns();
      for (long i = 0; i < n; i++) pair();
      printf("%.1f\n", (double)(now_ns() - t0) / (double)n);
      fflush(stdout);
    }
    return 0;
  }
  for (;;) {
    pair();
    sleep(1);
  }
}
