// SPDX-License-Identifier: Apache-2.0
/* One file mapped many times (issue 32, decision process-cost): a hostile
 * tenant's /proc/PID/maps of N lines that all name one long path.
 *
 *   many_maps PATH N   maps the first page of PATH N times, readable and
 *                      executable (each mapping its own line: the same file
 *                      offset, so none merges with its neighbour), prints
 *                      "mapped N" and waits until stdin closes
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  long n = strtol(argv[2], NULL, 10);
  int fd = open(argv[1], O_RDONLY);
  if (fd < 0 || n <= 0) {
    perror("open");
    return 1;
  }
  long made = 0;
  for (long i = 0; i < n; i++) {
    if (mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED) break;
    made++;
  }
  printf("mapped %ld\n", made);
  fflush(stdout);
  char buf[64];
  while (read(0, buf, sizeof buf) > 0) {
  }
  return 0;
}
