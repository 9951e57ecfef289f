// SPDX-License-Identifier: Apache-2.0
// Leaks through call chains built the way users build code: -O2 without
// frame pointers (tests/targets/native/CMakeLists.txt), so only the
// objects' .eh_frame describes the stack. Each site records glibc's own
// backtrace() (libgcc's unwinder, which reads .eh_frame) right where it
// allocates, as "module+0xFILEOFFSET", under "backtraces" in the ground
// truth; tests/integration/native_stacks_test.cc compares leakwatch's
// frames with it. See target_protocol.h.
//
//   native_stacks [GROUP...]   GROUP: new_array nothrow_new string containers qsort
//                              signal async_signal dl mmap nocfi
//                              (default: all of them)
//
// Sites (the function named in "sites"; each is reached through at least
// three chain functions below main):
//   new_array_site      new char[] (operator new[] -> operator new -> malloc)
//   nothrow_new_site    new (std::nothrow) char[]: libstdc++'s nothrow new[]
//                       calls new[] (a call, so its frame is on the stack)
//   aligned_nothrow_new_site  the same with std::align_val_t(64)
//   string_site         std::string::assign: the storage is allocated inside
//                       libstdc++ (_M_replace_aux -> _M_mutate -> _M_create ->
//                       operator new), so the leaf is libstdc++'s _M_create
//   vector_growth_site  std::vector growth (operator new called from the
//                       vector code instantiated in this program)
//   map_growth_site     std::unordered_map growth (nodes and buckets)
//   qsort_compare_site  malloc inside a qsort comparison callback: the stack
//                       goes through libc's sort code back into this program
//   signal_site         malloc in a signal handler raised with raise(): the
//                       stack goes through the kernel's signal frame
//                       (__restore_rt) into libc's raise
//   async_signal_site   malloc in the handler of a CPU-time timer signal
//                       that interrupts a spinning -O2 loop anywhere
//   native_dl_site      malloc in libnative_dl.so, dlopen()ed (before
//                       "ready", so its table exists when leakwatch attaches)
//   mmap_site           mmap through glibc's wrapper (kind mmap)
//   nocfi_call_malloc   malloc from native_nocfi.S, which has no CFI; its
//                       caller's backtrace is recorded as "nocfi_chain_2"
//                       (glibc's unwinder cannot pass the region either)
//
// Compiled as C++17: for C++20 libstdc++ 12 drops its extern templates of
// std::string, and the string code would be instantiated here instead of
// running inside libstdc++ (as it does for most code built today).
//
// Every byte allocated after "go" is accounted for, so total_live is exact.
#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/time.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "../target_protocol.h"

// Chain functions and sites: kept out of line, under their own names.
#define LW_FN extern "C" __attribute__((noinline, noclone))

// Keeps a call from being a tail call (its frame would leave the stack):
// something must still run in this frame after it returns.
#define LW_NO_TAIL_CALL() __asm__ volatile("" ::: "memory")

extern "C" void *nocfi_call_malloc(size_t size);

namespace {

void *volatile keep[64];
unsigned keep_count;
unsigned long long total_live;

void keep_ptr(void *p) {
  if (p == nullptr || p == MAP_FAILED) lw_die("allocation failed");
  if (keep_count == sizeof keep / sizeof keep[0]) {
    errno = ENOBUFS;
    lw_die("keep[] full");
  }
  keep[keep_count++] = p;
}

void site_bytes(const char *site, unsigned long long bytes) {
  lw_truth_site(site, bytes);
  total_live += bytes;
}

// ---- glibc's backtrace() as the oracle ------------------------------------

struct ObjectLookup {
  uintptr_t addr;
  const char *name;  // dlpi_name: "" for the main program
  unsigned long long file_offset;
  bool found;
};

int find_object(struct dl_phdr_info *info, size_t, void *data) {
  auto *l = static_cast<ObjectLookup *>(data);
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) &ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    if (l->addr < start || l->addr >= start + ph.p_memsz) continue;
    // The file offset as /proc/PID/maps gives it: the segment's file
    // offset plus the distance into the segment.
    l->file_offset = l->addr - start + ph.p_offset;
    l->name = info->dlpi_name;
    l->found = true;
    return 1;
  }
  return 0;
}

const char *file_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

char program_dir[4096];
char program_name[4096];

}  // namespace

// Records, under `site`, the return addresses glibc's backtrace() finds
// from this function's caller outward: the first is the return address of
// the call to this function, inside the site. Allocation-free once
// backtrace() has run once (its first call dlopens libgcc_s).
LW_FN void record_backtrace(const char *site) {
  void *pcs[64];
  int n = backtrace(pcs, 64);
  lw_truth_backtrace_begin(site);
  for (int i = 1; i < n; i++) {
    ObjectLookup l{reinterpret_cast<uintptr_t>(pcs[i]), "", 0, false};
    dl_iterate_phdr(find_object, &l);
    const char *module = !l.found ? "[unknown]" : l.name[0] ? file_name(l.name) : program_name;
    lw_truth_backtrace_frame(module, l.found ? l.file_offset : l.addr);
  }
  lw_truth_backtrace_end();
  LW_NO_TAIL_CALL();
}

// ---- (a) new[] at the end of a chain ----------------------------------------

LW_FN unsigned long long new_array_site(unsigned long n) {
  char *p = new char[n];
  keep_ptr(p);
  record_backtrace("new_array_site");
  return n;
}
LW_FN unsigned long long new_array_chain_2(unsigned long n) {
  unsigned long long r = new_array_site(n) + new_array_site(n + 100);
  LW_NO_TAIL_CALL();
  return r;
}
LW_FN unsigned long long new_array_chain_1(unsigned long n) {
  unsigned long long r = new_array_chain_2(n);
  LW_NO_TAIL_CALL();
  return r;
}
LW_FN void run_new_array() {
  site_bytes("new_array_site", new_array_chain_1(1234));
  LW_NO_TAIL_CALL();
}

// ---- (a') nothrow new[]: libstdc++'s nothrow new[] calls new[] (a real
// call, not a jump), which jumps to new, which calls malloc ----------------

LW_FN unsigned long long nothrow_new_site(unsigned long n) {
  char *p = new (std::nothrow) char[n];
  keep_ptr(p);
  record_backtrace("nothrow_new_site");
  return n;
}
// The aligned nothrow new[] calls the aligned new[] too; both stay probed
// when stacks come from tables (they supply the size asked of new).
LW_FN unsigned long long aligned_nothrow_new_site(unsigned long n) {
  char *p = new (std::align_val_t(64), std::nothrow) char[n];
  keep_ptr(p);
  record_backtrace("aligned_nothrow_new_site");
  return n;
}
LW_FN unsigned long long nothrow_new_chain_2(unsigned long n) {
  unsigned long long r = nothrow_new_site(n);
  site_bytes("aligned_nothrow_new_site", aligned_nothrow_new_site(2048));
  LW_NO_TAIL_CALL();
  return r;
}
LW_FN unsigned long long nothrow_new_chain_1(unsigned long n) {
  unsigned long long r = nothrow_new_chain_2(n);
  LW_NO_TAIL_CALL();
  return r;
}
LW_FN void run_nothrow_new() {
  site_bytes("nothrow_new_site", nothrow_new_chain_1(2345));
  LW_NO_TAIL_CALL();
}

// ---- (b) std::string storage allocated inside libstdc++ --------------------

namespace {
std::string kept_strings[2];
}

LW_FN unsigned long long string_site(unsigned i, unsigned long length) {
  // Longer than the 15 bytes kept inline: assign() asks libstdc++'s
  // _M_create for length + 1 bytes (a capacity of exactly `length`, since it
  // is more than twice the inline capacity).
  kept_strings[i].assign(length, 'x');
  record_backtrace("string_site");
  return kept_strings[i].capacity() + 1;
}
LW_FN unsigned long long string_chain_2(unsigned long length) {
  unsigned long long r = string_site(0, length) + string_site(1, length * 2);
  LW_NO_TAIL_CALL();
  return r;
}
LW_FN unsigned long long string_chain_1(unsigned long length) {
  unsigned long long r = string_chain_2(length);
  LW_NO_TAIL_CALL();
  return r;
}
LW_FN void run_string() {
  site_bytes("string_site", string_chain_1(300));
  LW_NO_TAIL_CALL();
}

// ---- (c) unordered_map and vector growth ------------------------------------

namespace {

// std::allocator with a byte count: the container code, instantiated in
// this program, still calls ::operator new / ::operator delete itself.
unsigned long long map_bytes;
template <class T>
struct CountingAllocator {
  using value_type = T;
  CountingAllocator() = default;
  template <class U>
  CountingAllocator(const CountingAllocator<U> &) {}
  template <class U>
  struct rebind {
    using other = CountingAllocator<U>;
  };
  T *allocate(size_t n) {
    map_bytes += n * sizeof(T);
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T *p, size_t n) {
    map_bytes -= n * sizeof(T);
    std::allocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const CountingAllocator<U> &) const {
    return true;
  }
  template <class U>
  bool operator!=(const CountingAllocator<U> &) const {
    return false;
  }
};

std::vector<long> grown_vector;
std::unordered_map<long, long, std::hash<long>, std::equal_to<long>,
                   CountingAllocator<std::pair<const long, long>>>
    grown_map;

}  // namespace

LW_FN unsigned long long vector_growth_site(long n) {
  for (long i = 0; i < n; i++) grown_vector.push_back(i);
  record_backtrace("vector_growth_site");
  // Every buffer but the last was freed as the vector grew.
  return grown_vector.capacity() * sizeof(long);
}
LW_FN unsigned long long map_growth_site(long n) {
  for (long i = 0; i < n; i++) grown_map.emplace(i, i * 7);
  record_backtrace("map_growth_site");
  return map_bytes;
}
LW_FN unsigned long long containers_chain_2(long n) {
  site_bytes("vector_growth_site", vector_growth_site(n));
  site_bytes("map_growth_site", map_growth_site(n));
  LW_NO_TAIL_CALL();
  return 0;
}
LW_FN void containers_chain_1(long n) {
  containers_chain_2(n);
  LW_NO_TAIL_CALL();
}
LW_FN void run_containers() {
  containers_chain_1(300);
  LW_NO_TAIL_CALL();
}

// ---- (d) malloc in a qsort callback, through libc ---------------------------

namespace {
int compare_calls;
}

LW_FN int qsort_compare_site(const void *a, const void *b) {
  if (compare_calls++ == 0) {
    keep_ptr(malloc(777));
    record_backtrace("qsort_compare_site");
  }
  int x = *static_cast<const int *>(a), y = *static_cast<const int *>(b);
  return (x > y) - (x < y);
}
LW_FN void qsort_chain_2(int *values, size_t n) {
  // 16 ints: glibc sorts them in a buffer on its own stack, no malloc.
  qsort(values, n, sizeof values[0], qsort_compare_site);
  LW_NO_TAIL_CALL();
}
LW_FN void qsort_chain_1(int *values, size_t n) {
  qsort_chain_2(values, n);
  LW_NO_TAIL_CALL();
}
LW_FN void run_qsort() {
  int values[16];
  for (int i = 0; i < 16; i++) values[i] = (i * 7919) % 16;
  qsort_chain_1(values, 16);
  site_bytes("qsort_compare_site", 777);
  LW_NO_TAIL_CALL();
}

// ---- (e) malloc in a signal handler -----------------------------------------

LW_FN void signal_site() {
  keep_ptr(malloc(555));
  record_backtrace("signal_site");
  LW_NO_TAIL_CALL();
}
LW_FN void signal_handler_chain(int) {
  signal_site();
  LW_NO_TAIL_CALL();
}
LW_FN void on_sigusr1(int signo) {
  signal_handler_chain(signo);
  LW_NO_TAIL_CALL();
}
LW_FN void signal_chain_2() {
  // raise() blocks signals around tgkill and delivers this one as it
  // unblocks them, inside libc.
  if (raise(SIGUSR1) != 0) lw_die("raise");
  LW_NO_TAIL_CALL();
}
LW_FN void signal_chain_1() {
  signal_chain_2();
  LW_NO_TAIL_CALL();
}
LW_FN void run_signal() {
  signal_chain_1();
  site_bytes("signal_site", 555);
  LW_NO_TAIL_CALL();
}

// ---- (e') malloc in a handler of a timer signal, wherever it lands ----------
// The interrupted pc is any instruction of the spinning code (a prologue,
// an epilogue, the loop), not a return address: the frame above the
// signal frame is looked up at the pc itself, by both unwinders.

namespace {
volatile sig_atomic_t timer_fired;
volatile unsigned long spin_sink;
}

LW_FN void async_signal_site() {
  keep_ptr(malloc(333));
  record_backtrace("async_signal_site");
  LW_NO_TAIL_CALL();
}
LW_FN void on_sigprof(int) {
  if (!timer_fired) async_signal_site();
  timer_fired = 1;
  LW_NO_TAIL_CALL();
}
LW_FN unsigned long spin_step(unsigned long x) {
  spin_sink = spin_sink + x;
  LW_NO_TAIL_CALL();
  return x * 2654435761u;
}
LW_FN void spin_chain_2() {
  // One shot of 2 ms on the process's CPU clock: it fires in this loop.
  struct itimerval shot = {{0, 0}, {0, 2000}};
  if (setitimer(ITIMER_PROF, &shot, nullptr) != 0) lw_die("setitimer");
  for (unsigned long i = 0; !timer_fired; i++) spin_step(i);
  LW_NO_TAIL_CALL();
}
LW_FN void spin_chain_1() {
  spin_chain_2();
  LW_NO_TAIL_CALL();
}
LW_FN void run_async_signal() {
  spin_chain_1();
  site_bytes("async_signal_site", 333);
  LW_NO_TAIL_CALL();
}

// ---- (f) a dlopen()ed library, also -O2 without frame pointers -------------

namespace {
using DlLeak = unsigned long long (*)(void (*record)(const char *));
DlLeak native_dl_leak;
}

LW_FN unsigned long long dl_chain_2() {
  unsigned long long r = native_dl_leak(record_backtrace);
  LW_NO_TAIL_CALL();
  return r;
}
LW_FN unsigned long long dl_chain_1() {
  unsigned long long r = dl_chain_2();
  LW_NO_TAIL_CALL();
  return r;
}
LW_FN void run_dl() {
  unsigned long long leaked = dl_chain_1();
  if (leaked == 0) lw_die("library leak failed");
  site_bytes("native_dl_site", leaked);
  LW_NO_TAIL_CALL();
}

// ---- (g) mmap through glibc's wrapper ---------------------------------------

LW_FN unsigned long long mmap_site(unsigned long pages) {
  void *p = mmap(nullptr, pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  keep_ptr(p);
  record_backtrace("mmap_site");
  return pages * 4096;
}
LW_FN unsigned long long mmap_chain_2() {
  unsigned long long r = mmap_site(3) + mmap_site(5);
  LW_NO_TAIL_CALL();
  return r;
}
LW_FN unsigned long long mmap_chain_1() {
  unsigned long long r = mmap_chain_2();
  LW_NO_TAIL_CALL();
  return r;
}
LW_FN void run_mmap() {
  unsigned long long bytes = mmap_chain_1();
  lw_truth_mmap_site("mmap_site", bytes);
  total_live += bytes;
  LW_NO_TAIL_CALL();
}

// ---- a region without CFI ----------------------------------------------------

LW_FN void nocfi_chain_2() {
  // glibc's backtrace() cannot pass nocfi_call_malloc either: the frames
  // above it are taken here, in its caller (recorded as "nocfi_chain_2").
  record_backtrace("nocfi_chain_2");
  keep_ptr(nocfi_call_malloc(999));
  LW_NO_TAIL_CALL();
}
LW_FN void nocfi_chain_1() {
  nocfi_chain_2();
  LW_NO_TAIL_CALL();
}
LW_FN void run_nocfi() {
  nocfi_chain_1();
  site_bytes("nocfi_call_malloc", 999);
  LW_NO_TAIL_CALL();
}

// -------------------------------------------------------------------------------

namespace {

struct Group {
  const char *name;
  void (*run)();
};
const Group groups[] = {{"new_array", run_new_array}, {"nothrow_new", run_nothrow_new}, {"string", run_string}, {"containers", run_containers},
                        {"qsort", run_qsort},         {"signal", run_signal}, {"async_signal", run_async_signal},
                        {"dl", run_dl},
                        {"mmap", run_mmap},           {"nocfi", run_nocfi}};

void setup() {
  ssize_t len = readlink("/proc/self/exe", program_dir, sizeof program_dir - 1);
  if (len < 0) lw_die("readlink /proc/self/exe");
  program_dir[len] = '\0';
  snprintf(program_name, sizeof program_name, "%s", file_name(program_dir));
  *strrchr(program_dir, '/') = '\0';

  // backtrace() dlopens libgcc_s on its first call: before "ready".
  void *pcs[4];
  if (backtrace(pcs, 4) <= 0) lw_die("backtrace");

  struct sigaction sa = {};
  sa.sa_handler = on_sigusr1;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGUSR1, &sa, nullptr) != 0) lw_die("sigaction");
  sa.sa_handler = on_sigprof;
  if (sigaction(SIGPROF, &sa, nullptr) != 0) lw_die("sigaction");

  char path[4096 + 32];
  snprintf(path, sizeof path, "%s/libnative_dl.so", program_dir);
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    char line[4096 + 128];
    int n = snprintf(line, sizeof line, "dlopen %s: %s\n", path, dlerror());
    lw_write_all(2, line, static_cast<size_t>(n));
    exit(1);
  }
  native_dl_leak = reinterpret_cast<DlLeak>(dlsym(handle, "native_dl_leak"));
  if (native_dl_leak == nullptr) lw_die("dlsym native_dl_leak");
}

}  // namespace

int main(int argc, char **argv) {
  setup();
  if (lw_ready_wait_go() != 0) return 0;
  for (const Group &g : groups) {
    bool selected = argc == 1;
    for (int i = 1; i < argc; i++) selected = selected || strcmp(argv[i], g.name) == 0;
    if (selected) g.run();
  }
  lw_truth_total(total_live);
  lw_done();
  lw_wait_exit();
  return 0;
}
