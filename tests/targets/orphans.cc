// SPDX-License-Identifier: Apache-2.0
// Probed allocator calls left without returning: longjmp out of an
// allocator's hook, nesting deeper than the kernel's uretprobe limit (64),
// C++ exceptions thrown far below a catch, and threads that exit with such
// a call behind them. Known bytes before and after every abnormal exit, so
// the accounting after them can be checked exactly (integration test
// LeakwatchUnwinding, decision orphaned-calls).
//
// The allocator is this executable's own `mi_malloc` (a name private to
// mimalloc, so leakwatch probes it wherever it is defined,
// decision allocator-per-process): it takes its block from libc's malloc (a
// nested probed call) and then calls a hook, as allocators with debug or
// profiling hooks do. The hook recurses into mi_malloc to a chosen depth, then
// either longjmps to the caller's setjmp or returns. See target_protocol.h for
// the protocol.
//
//   orphans                  the traced run (truth as usual)
//   orphans --throw-in-hook  see throw_in_hook()
#include <pthread.h>
#include <setjmp.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "target_protocol.h"

namespace {

enum {
  JUMPS = 20,           // longjmps out of a shallow nest, per pattern
  SHALLOW = 8,          // nested mi_malloc calls in flight at the longjmp
  DEEP = 100,           // past the kernel's uretprobe limit (64)
  DEEP_NORMAL = 3,      // deep nests that return normally
  THROWS = 10,          // bad_alloc thrown THROW_DEPTH frames below the catch
  THROW_DEPTH = 100,
  BLIND_CALLS = 10,     // allocations on a thread after a deep longjmp
  EXIT_THREADS = 2,     // threads that exit right after a longjmp
  MMAPS = 4,            // anonymous mmaps right after a longjmp
  BEFORE_BYTES = 1000,  // per block, 10 blocks
  JUMP_SIZE = 5000,     // asked by the calls that never return
  SITE_BYTES = 48,      // the normal call at the same call site
  DEEPER_BYTES = 64,
  DEEP_NORMAL_BYTES = 777,
  AFTER_THROW_BYTES = 333,
  AFTER_BYTES = 4096,   // per block, 5 blocks
};
constexpr std::size_t kMmapBytes = 64 * 1024;

thread_local jmp_buf *t_jump;  // where the innermost call jumps; null: return
thread_local int t_depth, t_target_depth;
thread_local void *t_inner[DEEP + 8];  // blocks of the calls in the nest
thread_local int t_inner_n;

volatile std::size_t huge_size = SIZE_MAX / 2;
void *volatile sink;
void *kept_site[JUMPS];
void *kept_deeper[JUMPS];
void *kept_before[10];
void *kept_deep[DEEP_NORMAL];
void *kept_after_throw[THROWS];
void *kept_after[5];
void *kept_mmap[MMAPS];

void recurse_hook();
// Called through a pointer, as an allocator calls a user's hook.
void (*volatile g_hook)() = recurse_hook;

void free_inner(int from) {
  for (int i = from; i < t_inner_n; i++) free(t_inner[i]);
  t_inner_n = 0;
}

}  // namespace

extern "C" __attribute__((noinline)) void *mi_malloc(std::size_t n) {
  void *p = malloc(n);
  if (p != nullptr && t_depth < t_target_depth) {
    t_inner[t_inner_n++] = p;
    g_hook();
  }
  return p;
}

namespace {

bool g_throw_in_hook;  // --throw-in-hook: throw instead of longjmp

void recurse_hook() {
  if (++t_depth == t_target_depth) {
    if (g_throw_in_hook) throw std::bad_alloc();
    if (t_jump != nullptr) longjmp(*t_jump, 1);
    return;
  }
  if (mi_malloc(16) == nullptr) lw_die("mi_malloc");
}

}  // namespace

extern "C" {

// One call site for the calls that longjmp and for the ones that return:
// after a longjmp the next call here has the same sp and return address as
// the abandoned one.
static void arm(int depth) {
  t_depth = 0;
  t_inner_n = 0;
  t_target_depth = depth;
}

LW_SITE void *jump_site(std::size_t size, int depth) {
  arm(depth);
  void *p = mi_malloc(size);
  t_target_depth = 0;
  return p;
}

LW_SITE void *deep_normal(std::size_t size) {
  arm(DEEP);
  void *p = mi_malloc(size);
  t_target_depth = 0;
  return p;
}

LW_SITE void *jmp_before(void) { return mi_malloc(BEFORE_BYTES); }

// Deeper on the stack than jump_site's call: a call made here after a
// longjmp is below the abandoned call's frame.
LW_SITE void *deeper_b(void) { return mi_malloc(DEEPER_BYTES); }
LW_SITE void *deeper_a(void) {
  volatile char pad[512];
  pad[0] = 1;
  void *p = deeper_b();
  pad[1] = pad[0];
  return p;
}

LW_SITE void *mmap_b(void) {
  void *p = mmap(nullptr, kMmapBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) lw_die("mmap");
  return p;
}
LW_SITE void *mmap_a(void) {
  volatile char pad[512];
  pad[0] = 1;
  void *p = mmap_b();
  pad[1] = pad[0];
  return p;
}

LW_SITE void throw_deep(int depth) {
  std::unique_ptr<char[]> guard(new char[32]);  // freed by the unwinding
  if (depth == 0) {
    sink = ::operator new(huge_size);  // throws std::bad_alloc
    return;
  }
  throw_deep(depth - 1);
  sink = guard.get();
}

LW_SITE void *after_throw_leak(void) { return new char[AFTER_THROW_BYTES]; }

LW_SITE void *jmp_after(void) { return mi_malloc(AFTER_BYTES); }

// Allocations leakwatch cannot see: made on a thread that longjmped out of
// DEEP nested calls (see blind_thread). Freed, so they hold no live bytes.
LW_SITE void *blind_site(void) { return mi_malloc(100); }

}  // extern "C"

namespace {

// Longjmps out of `depth` nested mi_malloc calls made at jump_site.
void jump_out(int depth) {
  jmp_buf jb;
  t_jump = &jb;
  if (setjmp(jb) == 0) {
    jump_site(JUMP_SIZE, depth);
    lw_die("jump_site returned");
  }
  t_jump = nullptr;
  free_inner(0);  // the abandoned calls' blocks (never seen by leakwatch)
}

// A call at jump_site that longjmps back here, then the same call
// instruction from the same frame: same sp, same return address.
void *jump_then_same_site() {
  jmp_buf jb;
  volatile int jumped = 0;
  t_jump = &jb;
  if (setjmp(jb) != 0) {
    jumped = 1;
    t_jump = nullptr;
    free_inner(0);
  }
  return jump_site(jumped ? SITE_BYTES : JUMP_SIZE, jumped ? 0 : SHALLOW);
}

long thread_tids[EXIT_THREADS + 1];

// Exits with the abandoned call's context still stored.
void *exit_thread(void *arg) {
  thread_tids[(intptr_t)arg] = syscall(SYS_gettid);
  jump_out(SHALLOW);
  return nullptr;
}

// The kernel keeps the return instances of the 64 calls it probed and,
// at its nesting limit, never drops them: no return probe fires on this
// thread again. Its later allocations are counted as ret_probe_omitted.
void *blind_thread(void *arg) {
  thread_tids[(intptr_t)arg] = syscall(SYS_gettid);
  jump_out(DEEP);
  for (int i = 0; i < BLIND_CALLS; i++) {
    void *p = blind_site();
    if (p == nullptr) lw_die("mi_malloc");
    free(p);
  }
  return nullptr;
}

void run_thread(void *(*fn)(void *), intptr_t index) {
  pthread_t t;
  if (pthread_create(&t, nullptr, fn, (void *)index) != 0) lw_die("pthread_create");
  if (pthread_join(t, nullptr) != 0) lw_die("pthread_join");
}

}  // namespace

// --throw-in-hook: the hook throws through the return-probed mi_malloc
// frames instead (the known limit of decision operator-new-entry-only: under
// leakwatch the unwinder meets the uretprobe trampoline and the program
// terminates). Prints "caught" and exits 0 when the exception arrives.
int throw_in_hook() {
  if (lw_ready_wait_go() < 0) return 0;
  g_throw_in_hook = true;
  try {
    jump_site(JUMP_SIZE, SHALLOW);
  } catch (const std::bad_alloc &) {
    lw_write_all(1, "caught\n", 7);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--throw-in-hook") == 0) return throw_in_hook();
  if (lw_ready_wait_go() < 0) return 0;

  for (auto &p : kept_before)
    if ((p = jmp_before()) == nullptr) lw_die("mi_malloc");

  // The same call site again after each longjmp.
  for (auto &p : kept_site)
    if ((p = jump_then_same_site()) == nullptr) lw_die("mi_malloc");
  // A deeper call (and, the first times, an anonymous mmap) after each.
  for (int i = 0; i < JUMPS; i++) {
    jump_out(SHALLOW);
    if (i < MMAPS) kept_mmap[i] = mmap_a();
    if ((kept_deeper[i] = deeper_a()) == nullptr) lw_die("mi_malloc");
  }
  // Nested past the kernel's limit, returning normally: counted once.
  for (auto &p : kept_deep) {
    if ((p = deep_normal(DEEP_NORMAL_BYTES)) == nullptr) lw_die("mi_malloc");
    free_inner(1);
  }
  int caught = 0;
  for (int i = 0; i < THROWS; i++) {
    try {
      throw_deep(THROW_DEPTH);
    } catch (const std::bad_alloc &) {
      caught++;
    }
  }
  for (auto &p : kept_after_throw) p = after_throw_leak();
  for (intptr_t i = 0; i < EXIT_THREADS; i++) run_thread(exit_thread, i);
  run_thread(blind_thread, EXIT_THREADS);
  for (auto &p : kept_after)
    if ((p = jmp_after()) == nullptr) lw_die("mi_malloc");

  lw_truth_site("jmp_before", 10ull * BEFORE_BYTES);
  lw_truth_site("jump_site", (unsigned long long)JUMPS * SITE_BYTES);
  lw_truth_site("deeper_b", (unsigned long long)JUMPS * DEEPER_BYTES);
  lw_truth_mmap_site("mmap_b", (unsigned long long)MMAPS * kMmapBytes);
  lw_truth_site("deep_normal", (unsigned long long)DEEP_NORMAL * DEEP_NORMAL_BYTES);
  lw_truth_site("throw_deep", 0);
  lw_truth_site("after_throw_leak", (unsigned long long)THROWS * AFTER_THROW_BYTES);
  lw_truth_site("blind_site", 0);
  lw_truth_site("jmp_after", 5ull * AFTER_BYTES);
  lw_truth_fact("caught", caught);
  // One abandoned call per longjmp on the main thread (found at its next
  // allocator call), one per exiting thread (found at its exit), one on
  // the blind thread (found at its next call).
  lw_truth_fact("orphans", 2 * JUMPS + EXIT_THREADS + 1);
  lw_truth_fact("blind_calls", BLIND_CALLS);
  for (int i = 0; i <= EXIT_THREADS; i++) {
    char key[32];
    snprintf(key, sizeof key, "tid%d", i);
    lw_truth_fact(key, thread_tids[i]);
  }
  lw_done();
  lw_wait_exit();
  return 0;
}
