// SPDX-License-Identifier: Apache-2.0
/* After "go", dlopen()s libdltarget.so (C, malloc) and libdltarget_cpp.so
 * (C++, operator new; it brings libstdc++, which this C program does not
 * link) from its own directory and calls their leaking functions. The
 * leaks must be attributed to the library functions that allocated, in the
 * libraries' modules. See target_protocol.h.
 *
 * dlopen itself allocates (link maps, scopes, TLS) from ld.so; those bytes
 * are not ground truth here, so there is no total_live.
 *
 * `dlopener --loop SECONDS`: first, after "go", a dlopen/dlclose loop of
 * libdltarget.so for SECONDS, between the lines "looping" and
 * "looped <iterations>" (the lifecycle budget's test: the tracer must not
 * follow every link-map change); then the two loads above.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>

#include "target_protocol.h"

/* How long to wait between loading a library and calling into it. Nothing
 * tells a target when the tracer has attached its probes to a newly mapped
 * library, so this is the grace it gets; generous, not a tuned minimum. */
static const struct timespec attach_grace = {.tv_sec = 1, .tv_nsec = 0};

static char dir[4096];

/* Loads lib<name>.so from this program's directory and calls <name>_leak. */
static unsigned long long load_and_leak(const char *name) {
  char path[4096 + 64], symbol[64];
  snprintf(path, sizeof path, "%s/lib%s.so", dir, name);
  snprintf(symbol, sizeof symbol, "%s_leak", name);
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    char line[4096 + 128];
    int n = snprintf(line, sizeof line, "dlopen %s: %s\n", path, dlerror());
    lw_write_all(2, line, (size_t)n);
    exit(1);
  }
  unsigned long long (*leak)(void) = (unsigned long long (*)(void))dlsym(handle, symbol);
  if (leak == NULL) lw_die(symbol);
  while (nanosleep(&attach_grace, NULL) != 0 && errno == EINTR) {
  }
  unsigned long long leaked = leak();
  if (leaked == 0) lw_die("library leak failed");
  /* The handle stays open: unloading would unmap the code the leaks'
   * stacks point into. */
  return leaked;
}

/* dlopen+dlclose of lib<name>.so until `seconds` have passed; returns the
 * number of pairs. */
static unsigned long long open_close_loop(const char *name, double seconds) {
  char path[4096 + 64];
  snprintf(path, sizeof path, "%s/lib%s.so", dir, name);
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  unsigned long long pairs = 0;
  do {
    for (int i = 0; i < 64; i++, pairs++) {
      void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (handle == NULL) lw_die("dlopen in the loop");
      if (dlclose(handle) != 0) lw_die("dlclose in the loop");
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while ((double)(now.tv_sec - start.tv_sec) + (double)(now.tv_nsec - start.tv_nsec) / 1e9 <
           seconds);
  return pairs;
}

int main(int argc, char **argv) {
  double loop_seconds = 0;
  if (argc == 3 && strcmp(argv[1], "--loop") == 0) {
    loop_seconds = atof(argv[2]);
    if (!(loop_seconds > 0 && loop_seconds <= 600)) lw_die("--loop SECONDS: 0 < SECONDS <= 600");
  } else if (argc != 1) {
    lw_die("usage: dlopener [--loop SECONDS]");
  }
  ssize_t len = readlink("/proc/self/exe", dir, sizeof dir - 1);
  if (len < 0) lw_die("readlink /proc/self/exe");
  dir[len] = '\0';
  *strrchr(dir, '/') = '\0'; /* the program's directory; the link is absolute */
  if (lw_ready_wait_go() != 0) return 0;

  if (loop_seconds > 0) {
    char line[64];
    lw_write_all(1, "looping\n", 8);
    int n = snprintf(line, sizeof line, "looped %llu\n", open_close_loop("dltarget", loop_seconds));
    lw_write_all(1, line, (size_t)n);
  }

  lw_truth_site("dltarget_leak_site", load_and_leak("dltarget"));
  lw_truth_site("dltarget_cpp_leak_site", load_and_leak("dltarget_cpp"));
  lw_done();
  lw_wait_exit();
  return 0;
}
