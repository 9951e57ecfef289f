// SPDX-License-Identifier: Apache-2.0
/* Process churn with pid reuse (tests/integration/churn_test.cc).
 *
 * Without arguments (what `spawner` execs, ~100 times a second): a
 * short-lived child that waits until leakwatch's probes are in it (the int3
 * a uprobe writes at malloc's entry shows in its own copy of the page, up to
 * LW_CHURN_WAIT_MS, default 1000), leaks churn_leak_bytes(pid, start) bytes
 * from churn_leak, holds them LW_CHURN_HOLD_MS (default 20) and exits. The
 * size depends on the pid and the start time, so state of an earlier
 * process on the same pid cannot pass for this one's. It appends one line to
 * $LW_CHURN_LOG (O_APPEND, one write):
 *   "<pid> <start_time ticks> <attached 0|1> <exec->attach us> <leaked bytes>"
 *
 * With "probe": a long-lived clean process of the same selector, speaking
 * target_protocol.h: after "go" it holds exactly kProbeBytes from
 * probe_hold (churn_leak: 0) until "exit".
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <time.h>

#include "target_protocol.h"

/* The same function as in churn_test.cc. */
static unsigned long long churn_leak_bytes(long pid, unsigned long long start_ticks) {
  return 16ull * (256ull + ((unsigned long long)pid * 31ull + start_ticks) % 4096ull);
}

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* /proc/self/stat field 22 (starttime), without stdio or malloc. */
static unsigned long long own_start_ticks(void) {
  static char buf[1024];
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) lw_die("open /proc/self/stat");
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) lw_die("read /proc/self/stat");
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  if (!p) lw_die("parse /proc/self/stat");
  p++; /* the space before field 3 */
  for (int field = 3; field < 22; field++) {
    p = strchr(p + 1, ' ');
    if (!p) lw_die("parse /proc/self/stat");
  }
  return strtoull(p + 1, NULL, 10);
}

static long env_ms(const char *name, long fallback) {
  const char *v = getenv(name);
  return v && *v ? atol(v) : fallback;
}

LW_SITE static void *churn_leak(size_t bytes) { return malloc(bytes); }

static void *volatile kept[4];

LW_SITE static void probe_hold(void) {
  kept[0] = malloc(10007);
  kept[1] = malloc(20011);
  kept[2] = malloc(30013);
}
static const unsigned long long kProbeBytes = 10007 + 20011 + 30013;

static int probe(void) {
  /* The main arena is set up (brk) by the first malloc: before "ready", so
   * the bytes after "go" are exactly probe_hold's. */
  free(malloc(1));
  if (lw_ready_wait_go() < 0) return 0;
  probe_hold();
  lw_truth_site("probe_hold", kProbeBytes);
  lw_truth_site("churn_leak", 0);
  lw_truth_total(kProbeBytes);
  lw_done();
  lw_wait_exit();
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "probe") == 0) return probe();
  const long long t0 = now_ns();
  const long wait_ms = env_ms("LW_CHURN_WAIT_MS", 1000);
  const long hold_ms = env_ms("LW_CHURN_HOLD_MS", 20);
  /* malloc resolves to libc's through the GOT: its first byte is the one a
   * uprobe on malloc's entry replaces with int3 in this process's copy. */
  const volatile uint8_t *entry = (const volatile uint8_t *)(uintptr_t)&malloc;
  int attached = 0;
  while (now_ns() - t0 < wait_ms * 1000000LL) {
    if (*entry == 0xCC) {
      attached = 1;
      break;
    }
    struct timespec ts = {0, 250000};
    nanosleep(&ts, NULL);
  }
  const long long latency_us = (now_ns() - t0) / 1000;
  /* The return probe is placed next to the entry one: give it a moment. */
  if (attached) sleep_ms(2);
  const long pid = (long)getpid();
  const unsigned long long start = own_start_ticks();
  const unsigned long long bytes = churn_leak_bytes(pid, start);
  kept[0] = churn_leak(bytes);
  if (hold_ms > 0) sleep_ms(hold_ms);
  const char *log = getenv("LW_CHURN_LOG");
  if (log) {
    int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) lw_die("open LW_CHURN_LOG");
    char line[128];
    int n = snprintf(line, sizeof line, "%ld %llu %d %lld %llu\n", pid, start, attached, latency_us, bytes);
    lw_write_all(fd, line, (size_t)n);
    close(fd);
  }
  return 0;
}
