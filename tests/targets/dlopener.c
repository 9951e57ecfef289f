// SPDX-License-Identifier: Apache-2.0
/* After "go", dlopen()s libdltarget.so (C, malloc) and libdltarget_cpp.so
 * (C++, operator new; it brings libstdc++, which this C program does not
 * link) from its own directory and calls their leaking functions. The
 * leaks must be attributed to the library functions that allocated, in the
 * libraries' modules. See target_protocol.h.
 *
 * dlopen itself allocates (link maps, scopes, TLS) from ld.so; those bytes
 * are not ground truth here, so there is no total_live.
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

int main(void) {
  ssize_t len = readlink("/proc/self/exe", dir, sizeof dir - 1);
  if (len < 0) lw_die("readlink /proc/self/exe");
  dir[len] = '\0';
  *strrchr(dir, '/') = '\0'; /* the program's directory; the link is absolute */
  if (lw_ready_wait_go() != 0) return 0;

  lw_truth_site("dltarget_leak_site", load_and_leak("dltarget"));
  lw_truth_site("dltarget_cpp_leak_site", load_and_leak("dltarget_cpp"));
  lw_done();
  lw_wait_exit();
  return 0;
}
