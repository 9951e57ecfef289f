/* SPDX-License-Identifier: Apache-2.0 */
/* The line protocol every target program speaks with the integration tests.
 *
 *   target -> "ready <pid>"   setup is finished; nothing it allocated so far
 *                             matters, because leakwatch attaches only now
 *   test   -> "go"            do the work that is being traced
 *   target -> "done <json>"   ground truth, e.g.
 *                             {"sites":{"leak_malloc":3000,"free_churn":0},
 *                              "mmap_sites":["leak_mmap"],"total_live":3000,
 *                              "facts":{...}}
 *   test   -> "exit" or EOF   the target exits 0
 *
 * "sites" maps the leaf function that called the allocator to the bytes it
 * holds live once the work is done (0 for sites that free all they take).
 * "mmap_sites" lists the sites whose bytes must be reported as kind "mmap"
 * (the others are kind "heap"). "kinds", where present, names the kind of
 * other sites ({"leak_cuda_malloc":"cuda_device"}). "total_live" is present only where the
 * target knows every byte allocated after "ready": then the snapshot's
 * live_bytes must equal it. "backtraces", where present, lists what the
 * target's own unwinder (glibc's backtrace()) found at sites:
 * [{"site":"f","frames":["module+0xFILEOFFSET",...]},...], return addresses
 * innermost first, module as a file name.
 *
 * Everything here uses read(2)/write(2) and fixed static buffers, never
 * stdio streams or malloc: the protocol itself must not allocate while
 * leakwatch is attached, or it would perturb the very numbers it reports.
 * Single-threaded use only (the main thread speaks the protocol).
 */
#ifndef LW_TARGET_PROTOCOL_H
#define LW_TARGET_PROTOCOL_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every call site whose bytes the tests check is its own function, and it
 * must stay one: no inlining, no constprop/isra clones with other names. */
#define LW_SITE __attribute__((noinline, noclone))

#define LW_TRUTH_BYTES 8192

struct lw_truth {
  char sites[LW_TRUTH_BYTES];
  char mmap_sites[LW_TRUTH_BYTES];
  char kinds[LW_TRUTH_BYTES];
  char facts[LW_TRUTH_BYTES];
  char backtraces[LW_TRUTH_BYTES];
  int backtrace_frames; /* frames in the backtrace being appended */
  int have_total;
  unsigned long long total_live;
};

static struct lw_truth lw_truth_state;

static inline void lw_die(const char *what) {
  char line[256];
  int n = snprintf(line, sizeof line, "target error: %s: %s\n", what, strerror(errno));
  if (n > 0 && write(2, line, (size_t)n) < 0) {
    /* Nothing left to report to. */
  }
  _exit(1);
}

static inline void lw_write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      lw_die("write");
    }
    buf += n;
    len -= (size_t)n;
  }
}

/* Appends printf-style text to one of the fixed truth buffers. Overflow is
 * a bug in the target, so it aborts rather than emitting truncated JSON. */
static inline void lw_append(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void lw_append(char *buf, const char *fmt, ...) {
  size_t used = strlen(buf);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + used, LW_TRUTH_BYTES - used, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= LW_TRUTH_BYTES - used) {
    errno = ENOBUFS;
    lw_die("ground truth too long");
  }
}

/* Reads one line from stdin, without the newline. Returns 0, or -1 on EOF. */
static inline int lw_read_line(char *line, size_t cap) {
  size_t len = 0;
  for (;;) {
    char c;
    ssize_t n = read(0, &c, 1);
    if (n < 0) {
      if (errno == EINTR) continue;
      lw_die("read stdin");
    }
    if (n == 0) return -1;
    if (c == '\n') break;
    if (len + 1 < cap) line[len++] = c;
  }
  line[len] = '\0';
  return 0;
}

/* Announces "ready <pid>" and blocks until the test says "go". Returns 0 on
 * "go", -1 if stdin closed first (the caller then just exits). */
static inline int lw_ready_wait_go(void) {
  char line[64];
  int n = snprintf(line, sizeof line, "ready %d\n", (int)getpid());
  lw_write_all(1, line, (size_t)n);
  for (;;) {
    if (lw_read_line(line, sizeof line) < 0) return -1;
    if (strcmp(line, "go") == 0) return 0;
  }
}

static inline void lw_truth_site(const char *function, unsigned long long live_bytes) {
  lw_append(lw_truth_state.sites, "%s\"%s\":%llu", lw_truth_state.sites[0] ? "," : "", function,
            live_bytes);
}

static inline void lw_truth_mmap_site(const char *function, unsigned long long live_bytes) {
  lw_truth_site(function, live_bytes);
  lw_append(lw_truth_state.mmap_sites, "%s\"%s\"", lw_truth_state.mmap_sites[0] ? "," : "",
            function);
}

/* A site whose bytes are of `kind` ("cuda_device", ...). */
static inline void lw_truth_kind_site(const char *function, const char *kind, unsigned long long live_bytes) {
  lw_truth_site(function, live_bytes);
  lw_append(lw_truth_state.kinds, "%s\"%s\":\"%s\"", lw_truth_state.kinds[0] ? "," : "", function, kind);
}

static inline void lw_truth_fact(const char *key, long long value) {
  lw_append(lw_truth_state.facts, "%s\"%s\":%lld", lw_truth_state.facts[0] ? "," : "", key, value);
}

static inline void lw_truth_total(unsigned long long total_live) {
  lw_truth_state.have_total = 1;
  lw_truth_state.total_live = total_live;
}

/* One backtrace of `site`: lw_truth_backtrace_begin, then its frames
 * innermost first, then lw_truth_backtrace_end. A site may have several
 * (one per distinct path to it). */
static inline void lw_truth_backtrace_begin(const char *site) {
  struct lw_truth *t = &lw_truth_state;
  lw_append(t->backtraces, "%s{\"site\":\"%s\",\"frames\":[", t->backtraces[0] ? "," : "", site);
  t->backtrace_frames = 0;
}

static inline void lw_truth_backtrace_frame(const char *module, unsigned long long file_offset) {
  struct lw_truth *t = &lw_truth_state;
  lw_append(t->backtraces, "%s\"%s+0x%llx\"", t->backtrace_frames++ ? "," : "", module, file_offset);
}

static inline void lw_truth_backtrace_end(void) { lw_append(lw_truth_state.backtraces, "]}"); }

/* Prints "done <json>" from what the lw_truth_* calls recorded. */
static inline void lw_done(void) {
  static char line[5 * LW_TRUTH_BYTES];
  char total[64] = "";
  if (lw_truth_state.have_total) {
    snprintf(total, sizeof total, ",\"total_live\":%llu", lw_truth_state.total_live);
  }
  static char kinds[LW_TRUTH_BYTES + 16];
  kinds[0] = '\0';
  if (lw_truth_state.kinds[0]) snprintf(kinds, sizeof kinds, ",\"kinds\":{%s}", lw_truth_state.kinds);
  static char backtraces[LW_TRUTH_BYTES + 32];
  backtraces[0] = '\0';
  if (lw_truth_state.backtraces[0]) {
    snprintf(backtraces, sizeof backtraces, ",\"backtraces\":[%s]", lw_truth_state.backtraces);
  }
  int n = snprintf(line, sizeof line, "done {\"sites\":{%s},\"mmap_sites\":[%s],\"facts\":{%s}%s%s%s}\n",
                   lw_truth_state.sites, lw_truth_state.mmap_sites, lw_truth_state.facts, total, kinds,
                   backtraces);
  if (n < 0 || (size_t)n >= sizeof line) {
    errno = ENOBUFS;
    lw_die("done line too long");
  }
  lw_write_all(1, line, (size_t)n);
}

/* Blocks until "exit" or EOF on stdin. */
static inline void lw_wait_exit(void) {
  char line[64];
  while (lw_read_line(line, sizeof line) == 0) {
    if (strcmp(line, "exit") == 0) return;
  }
}

/* Parks the calling thread until the process exits. Worker threads park
 * instead of exiting: a thread exit would recycle or unmap its stack and
 * TLS while leakwatch watches, which is not what the targets test. */
static inline __attribute__((noreturn)) void lw_park_forever(void) {
  for (;;) pause();
}

#endif /* LW_TARGET_PROTOCOL_H */
