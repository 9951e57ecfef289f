// SPDX-License-Identifier: Apache-2.0
/* Reserved address space (decision reserved-address-space), built -O2
 * without frame pointers. See target_protocol.h for the protocol.
 *
 *   arena     8 threads, all alive at once, each malloc and free 2,000
 *             bytes: glibc gives each its own arena, a 64 MiB PROT_NONE
 *             reservation of which a few pages are committed. Nothing is
 *             held. The threads park (thread stacks stay as they are).
 *   commit N  reserve_space() maps 64 MiB PROT_NONE (MAP_NORESERVE, as glibc
 *             does), commit_space() commits its first N MiB with mprotect
 *             and touches them: N MiB live, 64 - N reserved. On "unmap" it
 *             unmaps [N/2 MiB, 64 MiB) (a munmap inside the region, partly
 *             committed), then the rest, and says "unmapped".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/mman.h>

#include "../target_protocol.h"

#define MIB (1ul << 20)
#define RESERVE (64 * MIB)

static pthread_barrier_t all_in, all_done;

static void *arena_thread(void *arg) {
  (void)arg;
  pthread_barrier_wait(&all_in);
  void *volatile p = malloc(2000);
  if (p == NULL) lw_die("malloc");
  memset(p, 1, 2000);
  free(p);
  pthread_barrier_wait(&all_done);
  lw_park_forever();
}

static int run_arena(void) {
  pthread_barrier_init(&all_in, NULL, 8);
  pthread_barrier_init(&all_done, NULL, 9);
  for (int i = 0; i < 8; i++) {
    pthread_t t;
    if (pthread_create(&t, NULL, arena_thread, NULL) != 0) lw_die("pthread_create");
  }
  pthread_barrier_wait(&all_done);
  lw_truth_total(0);
  lw_truth_fact("threads", 8);
  lw_done();
  lw_wait_exit();
  return 0;
}

LW_SITE static char *reserve_space(void) {
  char *p = mmap(NULL, RESERVE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) lw_die("mmap");
  return p;
}

LW_SITE static void commit_space(char *p, unsigned long bytes) {
  if (mprotect(p, bytes, PROT_READ | PROT_WRITE) != 0) lw_die("mprotect");
  memset(p, 1, bytes);
}

static int run_commit(unsigned long mib) {
  if (mib == 0 || mib > 64) {
    errno = EINVAL;
    lw_die("N must be 1..64");
  }
  char *p = reserve_space();
  commit_space(p, mib * MIB);
  lw_truth_mmap_site("reserve_space", mib * MIB);
  lw_truth_fact("reserved", (long long)(RESERVE - mib * MIB));
  lw_done();
  char line[64];
  while (lw_read_line(line, sizeof line) == 0) {
    if (strcmp(line, "exit") == 0) return 0;
    if (strcmp(line, "unmap") != 0) continue;
    const unsigned long half = mib * MIB / 2;
    if (munmap(p + half, RESERVE - half) != 0) lw_die("munmap tail");
    if (munmap(p, half) != 0) lw_die("munmap head");
    lw_write_all(1, "unmapped\n", 9);
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "arena";
  if (lw_ready_wait_go() != 0) return 0;
  if (strcmp(mode, "arena") == 0) return run_arena();
  if (strcmp(mode, "commit") == 0) return run_commit(argc > 2 ? strtoul(argv[2], NULL, 10) : 8);
  errno = EINVAL;
  lw_die("mode: arena | commit N");
}
