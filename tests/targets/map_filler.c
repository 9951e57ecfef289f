// SPDX-License-Identifier: Apache-2.0
/* Fills the live map with mmap records (issue 32, decision fair-shares):
 * after "go", N (argv[1], default 100,000) anonymous read-write mappings
 * of one page each, one mmap call each, never touched and never unmapped,
 * then "done". See target_protocol.h for the protocol. Adjacent mappings
 * merge into one kernel VMA, so vm.max_map_count does not stop it; each
 * call is still a record of its own for a tracer of mmap calls.
 */
#define _GNU_SOURCE
#include <sys/mman.h>

#include "target_protocol.h"

LW_SITE static void fill_page(void) {
  void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) lw_die("mmap");
}

int main(int argc, char **argv) {
  unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 100000ul;
  if (n == 0 || n > 10000000ul) {
    errno = EINVAL;
    lw_die("N must be 1..10000000");
  }
  if (lw_ready_wait_go() != 0) return 0;
  for (unsigned long i = 0; i < n; i++) fill_page();
  lw_truth_fact("mappings", (long long)n);
  lw_done();
  lw_wait_exit();
  return 0;
}
