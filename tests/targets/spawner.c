// SPDX-License-Identifier: Apache-2.0
/* Process churn for the soak (bench/soak.sh): after "go", fork+execs
 * PROGRAM at RATE per second (paced, not bursty) until "exit" or EOF;
 * "count" answers "spawned N skipped M" (M: spawns dropped because the
 * machine could not keep up, more than 1 s behind). Children are reaped by the kernel
 * (SA_NOCLDWAIT), so pids are recycled as fast as the kernel hands them out.
 * See target_protocol.h for the protocol up to "go".
 *
 * Usage: spawner RATE PROGRAM
 */
#define _GNU_SOURCE
#include <poll.h>
#include <signal.h>
#include <time.h>

#include "target_protocol.h"

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc != 3 || atol(argv[1]) <= 0) {
    fprintf(stderr, "usage: spawner RATE PROGRAM\n");
    return 2;
  }
  const long rate = atol(argv[1]);
  struct sigaction sa = {.sa_handler = SIG_DFL, .sa_flags = SA_NOCLDWAIT};
  if (sigaction(SIGCHLD, &sa, NULL) != 0) lw_die("sigaction");
  if (lw_ready_wait_go() < 0) return 0;
  const long long period = 1000000000LL / rate;
  long long next = now_ns();
  long long spawned = 0, skipped = 0;
  char line[64];
  for (;;) {
    long long wait_ms = (next - now_ns()) / 1000000;
    struct pollfd pfd = {.fd = 0, .events = POLLIN};
    int n = poll(&pfd, 1, wait_ms > 0 ? (int)wait_ms : 0);
    if (n > 0) {
      if (lw_read_line(line, sizeof line) < 0 || strcmp(line, "exit") == 0) return 0;
      if (strcmp(line, "count") == 0) {
        char out[64];
        int len = snprintf(out, sizeof out, "spawned %lld skipped %lld\n", spawned, skipped);
        lw_write_all(1, out, (size_t)len);
      }
      continue;
    }
    /* A machine that cannot keep up drops the backlog instead of spawning
     * flat out forever (stdin must still be read). */
    if (now_ns() - next > 1000000000LL) {
      skipped += (now_ns() - next) / period;
      next = now_ns();
    }
    for (int burst = 0; burst < 64 && now_ns() >= next; burst++) {
      pid_t pid = fork();
      if (pid < 0) lw_die("fork");
      if (pid == 0) {
        char *const args[] = {argv[2], NULL};
        execv(argv[2], args);
        _exit(127);
      }
      ++spawned;
      next += period;
    }
  }
}
