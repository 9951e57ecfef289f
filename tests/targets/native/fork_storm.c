// SPDX-License-Identifier: Apache-2.0
// A fork loop (tests/integration/tenant_test.cc, issue 32): for SECONDS,
// forks a child that exits at once and waits for it; prints "forks N".
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
  const double t0 = now_s();
  long n = 0;
  while (now_s() - t0 < seconds) {
    pid_t p = fork();
    if (p < 0) return 1;
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
    ++n;
  }
  printf("forks %ld\n", n);
  fflush(stdout);
  return 0;
}
