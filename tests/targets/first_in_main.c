// SPDX-License-Identifier: Apache-2.0
/* For `leakwatch top -c`: the very first statement of main allocates, and
 * the block stays live, so it is counted only if the probes were attached
 * before main ran. Not a line-protocol target: leakwatch starts it (its
 * stdout goes to leakwatch's stderr); it reads its stdin (leakwatch's) and
 * exits 0 at "exit" or EOF, after which leakwatch prints the final
 * snapshot. */
#include <stdlib.h>
#include <unistd.h>

static void *volatile kept;

int main(void) {
  kept = malloc(4242); /* the first statement: must be counted */
  if (kept == NULL) return 1;
  static const char hello[] = "first_in_main: started\n";
  if (write(1, hello, sizeof hello - 1) < 0) return 1;
  char buf[64];
  ssize_t n;
  while ((n = read(0, buf, sizeof buf)) > 0) {
    if (n >= 4 && buf[0] == 'e' && buf[1] == 'x' && buf[2] == 'i' && buf[3] == 't') break;
  }
  return 0;
}
