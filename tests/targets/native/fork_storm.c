// SPDX-License-Identifier: Apache-2.0
// A fork loop (tests/integration/tenant_test.cc, issue 32): for SECONDS,
// forks a child that exits at once and waits for it; prints "forks N".
// With LINGER_MS, each child sleeps that long before it exits and up to
// 256 live at once (reaped as they go): the daemon then finds the loop's
// children alive when it looks, whatever its event latency, so its
// discovery budget has them to defer (with children that exit at once it
// finds most gone, which costs nothing and defers nothing).
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? atof(argv[1]) : 5;
  const long linger_ms = argc > 2 ? atol(argv[2]) : 0;
  const double t0 = now_s();
  long n = 0, live = 0;
  while (now_s() - t0 < seconds) {
    pid_t p = fork();
    if (p < 0) return 1;
    if (p == 0) {
      if (linger_ms > 0) usleep((useconds_t)(linger_ms * 1000));
      _exit(0);
    }
    ++n;
    if (linger_ms <= 0) {
      waitpid(p, NULL, 0);
      continue;
    }
    ++live;
    while (live > 0 && waitpid(-1, NULL, WNOHANG) > 0) --live;
    if (live >= 256 && waitpid(-1, NULL, 0) > 0) --live;
  }
  while (live > 0 && waitpid(-1, NULL, 0) > 0) --live;
  printf("forks %ld\n", n);
  fflush(stdout);
  return 0;
}
