// SPDX-License-Identifier: Apache-2.0
// core/accounting/glibc_heap.h: verdicts on a real glibc heap (synthetic
// images for what a real heap does not show are in
// test_glibc_heap_images.cc).
//
// The real heap is a child's: a fresh copy of this binary (exec'd, so its
// heap holds only what startup and the child's own calls made, not what
// earlier tests left in ours), which, before main(), mallocs and frees a
// known set of blocks -- in the main arena, mmapped, and in threads' arenas
// (one of which grows a second heap) -- writes their addresses to a pipe
// and waits to be killed. The test reads the child's [heap] bounds from
// /proc/PID/maps and its memory with process_vm_readv.
#include "core/accounting/glibc_heap.h"

#include <gtest/gtest.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace lw {
namespace {

constexpr char kChildEnv[] = "LW_GLIBC_HEAP_CHILD_FD";
constexpr size_t k64k = 64 << 10;
constexpr size_t kMmapSize = 1 << 20;  // above the mmap threshold the child sets

// The child's blocks, by what was done to them. Pair: both freed, B merged
// into A. Reused: freed, then a malloc of the same size. Top: the last two
// blocks, freed into the top chunk.
enum Slot : size_t {
  kKept64k,
  kKept2000,
  kSmall100,
  kSmall1000,
  kSmallFreed1000,
  kFreed64k,
  kFreed3000,
  kPairA,
  kPairB,
  kReusedOld,
  kReusedNew,
  kMmapKept,
  kMmapFreed,
  kThreadBlock,
  kTopA,
  kTopB,
  kSlots
};

// Each of kThreads threads' blocks, made in its own arena (the threads
// overlap, so none takes over another's). Top: the last block, freed into
// the arena's top chunk. Guards as in the main arena.
constexpr size_t kThreads = 4;
enum ThreadSlot : size_t {
  kTKept64k,
  kTKept2000,
  kTSmall100,
  kTFreed64k,
  kTGuard1,
  kTFreed3000,
  kTGuard2,
  kTTop,
  kTSlots
};

// One more thread's arena, grown past its first 64 MiB heap into a second:
// its first block (in the first heap), its last and the one before it,
// freed (both in the second heap).
constexpr size_t kGrowBlock = 256 << 10;  // below the child's mmap threshold
constexpr size_t kGrowBlocks = 320;       // 80 MiB: more than a 64 MiB heap holds
enum GrownSlot : size_t { kGrownFirst, kGrownFreed, kGrownLast, kGrownSlots };

struct ChildAddrs {
  uint64_t main[kSlots];
  uint64_t threads[kThreads][kTSlots];
  uint64_t grown[kGrownSlots];
};

uint64_t addr_of(void* p) { return reinterpret_cast<uint64_t>(p); }

// Keeps the compiler from dropping a malloc whose block is never used.
void* escape(void* p) {
  asm volatile("" : : "r"(p) : "memory");
  return p;
}

// Called by every thread once its arena holds its blocks: returns when all
// have, so each thread keeps its arena (an exited thread's arena is handed
// to the next new thread) until all have made theirs.
void all_attached(std::atomic<size_t>& arrived) {
  arrived.fetch_add(1);
  while (arrived.load() < kThreads + 1) std::this_thread::yield();
}

void thread_blocks(uint64_t* t, std::atomic<size_t>& arrived) {
  for (size_t s = 0; s < kTSlots; ++s) {
    const size_t size = s == kTKept64k || s == kTFreed64k ? k64k
                        : s == kTSmall100                 ? 100
                        : s == kTFreed3000 || s == kTTop  ? 3000
                                                          : 2000;
    t[s] = addr_of(escape(malloc(size)));
  }
  for (ThreadSlot s : {kTFreed64k, kTFreed3000, kTTop}) free(reinterpret_cast<void*>(t[s]));
  all_attached(arrived);
}

void grow_blocks(uint64_t* g, std::atomic<size_t>& arrived) {
  void* blocks[kGrowBlocks];
  for (void*& b : blocks) b = escape(malloc(kGrowBlock));
  g[kGrownFirst] = addr_of(blocks[0]);
  g[kGrownFreed] = addr_of(blocks[kGrowBlocks - 2]);
  g[kGrownLast] = addr_of(blocks[kGrowBlocks - 1]);
  free(blocks[kGrowBlocks - 2]);
  all_attached(arrived);
}

// The child's work. Guards (kept, never reported) sit between the blocks to
// be freed so a free does not merge them with their neighbours.
[[noreturn]] void child_main(int fd) {
  // Pinned: glibc raises its threshold by itself when an mmapped chunk is freed.
  mallopt(M_MMAP_THRESHOLD, 512 << 10);
  ChildAddrs all{};
  uint64_t* a = all.main;
  std::vector<void*> guards;
  auto guard = [&] {
    guards.push_back(malloc(2000));
  };
  a[kKept64k] = addr_of(malloc(k64k));
  a[kKept2000] = addr_of(malloc(2000));
  a[kSmall100] = addr_of(malloc(100));
  a[kSmall1000] = addr_of(malloc(1000));
  a[kSmallFreed1000] = addr_of(malloc(1000));
  guard();
  a[kFreed64k] = addr_of(malloc(k64k));
  guard();
  a[kFreed3000] = addr_of(malloc(3000));
  guard();
  a[kPairA] = addr_of(malloc(3000));
  a[kPairB] = addr_of(malloc(3000));
  guard();
  a[kReusedOld] = addr_of(malloc(5000));
  guard();
  free(reinterpret_cast<void*>(a[kReusedOld]));
  a[kReusedNew] = addr_of(malloc(5000));
  a[kMmapKept] = addr_of(malloc(kMmapSize));
  a[kMmapFreed] = addr_of(malloc(kMmapSize));
  std::thread([&] { a[kThreadBlock] = addr_of(malloc(2000)); }).join();
  {
    // Before kTopA: the threads' own small blocks in the main arena come
    // from its top chunk too.
    std::atomic<size_t> arrived{0};
    std::thread threads[kThreads + 1];
    for (size_t t = 0; t < kThreads; ++t)
      threads[t] = std::thread(thread_blocks, all.threads[t], std::ref(arrived));
    threads[kThreads] = std::thread(grow_blocks, all.grown, std::ref(arrived));
    for (std::thread& t : threads) t.join();
  }
  a[kTopA] = addr_of(malloc(3000));
  a[kTopB] = addr_of(malloc(3000));
  for (Slot s : {kSmallFreed1000, kFreed64k, kFreed3000, kPairA, kPairB, kMmapFreed, kTopB, kTopA}) {
    free(reinterpret_cast<void*>(a[s]));
  }
  const char* p = reinterpret_cast<const char*>(&all);
  for (size_t done = 0; done < sizeof all;) {
    const ssize_t n = write(fd, p + done, sizeof all - done);
    if (n <= 0) _exit(1);
    done += static_cast<size_t>(n);
  }
  for (;;) pause();
}

// In the exec'd copy, the child's work runs before gtest's main().
[[gnu::constructor]] void glibc_heap_child_entry() {
  if (const char* fd = std::getenv(kChildEnv); fd != nullptr) child_main(std::atoi(fd));
}

HeapReader vm_reader(pid_t pid) {
  return [pid](uint64_t addr, void* out, size_t len) -> int {
    iovec local{out, len};
    iovec remote{reinterpret_cast<void*>(addr), len};
    const ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0) return errno;
    return static_cast<size_t>(n) == len ? 0 : EFAULT;
  };
}

// The child above: started, its addresses read and its [heap] found by the
// constructor (`error` says what failed); killed and reaped on destruction.
class HeapChild {
 public:
  HeapChild() {
    int fds[2];
    if (pipe(fds) != 0) {
      error = "pipe failed";
      return;
    }
    std::vector<std::string> env = {std::string(kChildEnv) + "=" + std::to_string(fds[1])};
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    std::vector<char*> envp;
    for (std::string& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    char self[] = "/proc/self/exe";
    char* argv[] = {self, nullptr};
    pid = fork();
    if (pid == 0) {
      close(fds[0]);
      execve(self, argv, envp.data());
      _exit(127);
    }
    close(fds[1]);
    if (pid < 0) error = "fork failed";
    if (pid > 0) read_addresses(fds[0]);
    close(fds[0]);
    if (error.empty()) find_heap();
  }
  ~HeapChild() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  HeapChild(const HeapChild&) = delete;
  HeapChild& operator=(const HeapChild&) = delete;

  uint64_t at(Slot s) const { return addrs.main[s]; }
  uint64_t thread_at(size_t t, ThreadSlot s) const { return addrs.threads[t][s]; }
  uint64_t grown_at(GrownSlot s) const { return addrs.grown[s]; }
  HeapReader reader() const { return vm_reader(pid); }
  bool in_heap(uint64_t addr) const { return addr >= heap_start && addr < heap_end; }
  // The size field of the chunk header before user pointer `addr`.
  uint64_t size_field(uint64_t addr) const { return word(addr - 8); }
  // The 8 bytes at `addr` (0 when unreadable).
  uint64_t word(uint64_t addr) const {
    uint64_t w = 0;
    return reader()(addr, &w, sizeof w) == 0 ? w : 0;
  }
  std::vector<Liveness> check(const std::vector<HeapCandidate>& cands, GlibcWalkStats* stats = nullptr,
                              const GlibcHeapLimits& limits = {}) const {
    return check_glibc_chunks(reader(), heap_start, heap_end, cands, limits, stats);
  }

  pid_t pid = -1;
  ChildAddrs addrs{};
  uint64_t heap_start = 0, heap_end = 0;
  std::string error;

 private:
  void read_addresses(int fd) {
    char* p = reinterpret_cast<char*>(&addrs);
    for (size_t done = 0; done < sizeof addrs;) {
      pollfd pfd{fd, POLLIN, 0};
      if (poll(&pfd, 1, 10000) != 1) {
        error = "no addresses from the child within 10 s";
        return;
      }
      const ssize_t n = read(fd, p + done, sizeof addrs - done);
      if (n <= 0) {
        error = "the child closed its pipe early";
        return;
      }
      done += static_cast<size_t>(n);
    }
  }
  void find_heap() {
    std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
    for (std::string line; std::getline(maps, line);) {
      if (line.size() < 6 || line.compare(line.size() - 6, 6, "[heap]") != 0) continue;
      if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64, &heap_start, &heap_end) == 2) return;
    }
    error = "no [heap] in the child's maps";
  }
};

// A heap walk of the child needs glibc's malloc in it: not under a sanitizer.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LW_SKIP_WITHOUT_GLIBC_MALLOC() GTEST_SKIP() << "the sanitizer's malloc replaces glibc's"
#else
#define LW_SKIP_WITHOUT_GLIBC_MALLOC() (void)0
#endif

#define LW_START_CHILD(child)     \
  LW_SKIP_WITHOUT_GLIBC_MALLOC(); \
  HeapChild child;                \
  ASSERT_EQ(child.error, "");     \
  ASSERT_LT(child.heap_start, child.heap_end)

constexpr Liveness kLive = Liveness::kLive, kFreed = Liveness::kFreed, kUndecided = Liveness::kUndecided;

TEST(GlibcHeap, KeptBigBlocksReadLive) {
  LW_START_CHILD(child);
  ASSERT_TRUE(child.in_heap(child.at(kKept64k)));
  ASSERT_TRUE(child.in_heap(child.at(kKept2000)));
  GlibcWalkStats st;
  const auto v = child.check({{child.at(kKept64k), k64k}, {child.at(kKept2000), 2000}}, &st);
  EXPECT_EQ(v, (std::vector<Liveness>{kLive, kLive}));
  EXPECT_TRUE(st.complete) << st.stopped;
  EXPECT_EQ(st.stopped, "");
  EXPECT_EQ(st.live, 2u);
  EXPECT_GT(st.chunks, 10u);  // startup's chunks and the child's
  EXPECT_GT(st.bytes_read, 0u);
}

TEST(GlibcHeap, FreedBigBlocksReadFreed) {
  LW_START_CHILD(child);
  // kFreed64k and kFreed3000 still start a (free) chunk: the in-use bit
  // decides; kPairB lies inside kPairA's merged chunk: stepped over.
  const auto v = child.check({{child.at(kFreed64k), k64k},
                              {child.at(kFreed3000), 3000},
                              {child.at(kPairA), 3000},
                              {child.at(kPairB), 3000},
                              {child.at(kKept64k), k64k}});
  EXPECT_EQ(v, (std::vector<Liveness>{kFreed, kFreed, kFreed, kFreed, kLive}));
}

TEST(GlibcHeap, BlocksMergedIntoTopReadFreed) {
  LW_START_CHILD(child);
  // Precondition: kTopA's chunk is the top chunk (it ends where [heap] does).
  const uint64_t top = child.at(kTopA) - 16;
  ASSERT_EQ(top + (child.size_field(child.at(kTopA)) & ~uint64_t{7}), child.heap_end);
  ASSERT_GT(child.at(kTopB), child.at(kTopA));
  GlibcWalkStats st;
  const auto v = child.check({{child.at(kTopA), 3000}, {child.at(kTopB), 3000}}, &st);
  EXPECT_EQ(v, (std::vector<Liveness>{kFreed, kFreed}));
  EXPECT_TRUE(st.complete) << st.stopped;
}

TEST(GlibcHeap, SmallBlocksAreUndecided) {
  LW_START_CHILD(child);
  const std::vector<HeapCandidate> small = {
      {child.at(kSmall100), 100}, {child.at(kSmall1000), 1000}, {child.at(kSmallFreed1000), 1000}};
  EXPECT_EQ(child.check(small), (std::vector<Liveness>{kUndecided, kUndecided, kUndecided}));
  // Why: with no small-chunk rule the freed 1000-byte block, in tcache with
  // its neighbour's in-use bit still set, would read live.
  GlibcHeapLimits no_small_rule;
  no_small_rule.small_chunk_max = 0;
  EXPECT_EQ(child.check(small, nullptr, no_small_rule), (std::vector<Liveness>{kLive, kLive, kLive}));
}

TEST(GlibcHeap, WrongRequestedSizeReadsFreed) {
  LW_START_CHILD(child);
  const uint64_t p = child.at(kKept64k);
  const auto v = child.check({{p, k64k / 2}, {p, k64k + 64}, {p, k64k}, {child.at(kKept2000), 2048}});
  EXPECT_EQ(v, (std::vector<Liveness>{kFreed, kFreed, kLive, kFreed}));
}

TEST(GlibcHeap, MmappedBlocks) {
  LW_START_CHILD(child);
  ASSERT_FALSE(child.in_heap(child.at(kMmapKept)));
  ASSERT_FALSE(child.in_heap(child.at(kMmapFreed)));
  ASSERT_NE(child.size_field(child.at(kMmapKept)) & 2, 0u);  // IS_MMAPPED
  const uint64_t p = child.at(kMmapKept);
  const auto v = child.check({{p, kMmapSize},
                              {child.at(kMmapFreed), kMmapSize},
                              {p, 2 * kMmapSize},           // larger than its chunk
                              {p, kMmapSize - 3 * 4096}});  // its chunk has pages to spare
  EXPECT_EQ(v, (std::vector<Liveness>{kLive, kFreed, kFreed, kFreed}));
}

constexpr uint64_t kHeapMax = 64 << 20;  // a thread heap's size and alignment
uint64_t heap_of(uint64_t addr) { return (addr - 16) & ~(kHeapMax - 1); }

TEST(GlibcHeap, ThreadArenaBlockReadsLive) {
  LW_START_CHILD(child);
  const uint64_t p = child.at(kThreadBlock);
  ASSERT_FALSE(child.in_heap(p));
  ASSERT_NE(child.size_field(p) & 4, 0u);  // NON_MAIN_ARENA
  GlibcWalkStats st;
  EXPECT_EQ(child.check({{p, 2000}, {p, 2048}}, &st), (std::vector<Liveness>{kLive, kFreed}));
  EXPECT_TRUE(st.complete) << st.stopped;
  EXPECT_GT(st.chunks, 2u);
}

// The blocks of kThreads threads, each in its own arena, in one call.
TEST(GlibcHeap, ThreadArenaBlocks) {
  LW_START_CHILD(child);
  std::vector<HeapCandidate> cands;
  std::vector<Liveness> want;
  std::set<uint64_t> heaps;
  for (size_t t = 0; t < kThreads; ++t) {
    SCOPED_TRACE(t);
    auto at = [&](ThreadSlot s) {
      return child.thread_at(t, s);
    };
    ASSERT_FALSE(child.in_heap(at(kTKept64k)));
    ASSERT_NE(child.size_field(at(kTKept64k)) & 4, 0u);  // NON_MAIN_ARENA
    // glibc clears NON_MAIN_ARENA on a free chunk in a bin: a walk cannot
    // ask it of every chunk.
    EXPECT_EQ(child.size_field(at(kTFreed64k)) & 4, 0u);
    // kTTop's chunk is its arena's top: it ends where its heap (heap_info.size) does.
    const uint64_t h = heap_of(at(kTTop));
    ASSERT_EQ(at(kTTop) - 16 + (child.size_field(at(kTTop)) & ~uint64_t{7}), h + child.word(h + 16));
    heaps.insert(h);
    const std::pair<HeapCandidate, Liveness> blocks[] = {
        {{at(kTKept64k), k64k}, kLive},      {{at(kTKept2000), 2000}, kLive},
        {{at(kTSmall100), 100}, kUndecided}, {{at(kTFreed64k), k64k}, kFreed},
        {{at(kTFreed3000), 3000}, kFreed},   {{at(kTTop), 3000}, kFreed},
        {{at(kTKept64k), k64k / 2}, kFreed}, {{at(kTKept2000), 2048}, kFreed},  // the wrong size
        {{at(kTGuard1) + 64, 100}, kFreed}};  // inside a block: stepped over
    for (const auto& [cand, verdict] : blocks) {
      cands.push_back(cand);
      want.push_back(verdict);
    }
  }
  ASSERT_EQ(heaps.size(), kThreads) << "the threads did not get an arena each";
  GlibcWalkStats st;
  EXPECT_EQ(child.check(cands, &st), want);
  EXPECT_TRUE(st.complete) << st.stopped;
  EXPECT_EQ(st.live + st.freed + st.undecided, cands.size());
  EXPECT_EQ(st.undecided, kThreads);
  // With no small-chunk rule the 100-byte blocks would read live: the rule
  // applies in thread heaps too.
  GlibcHeapLimits no_small_rule;
  no_small_rule.small_chunk_max = 0;
  const auto v = child.check(cands, nullptr, no_small_rule);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], want[i] == kUndecided ? kLive : want[i]) << i;
}

// An arena that outgrew its first 64 MiB heap: a block in each heap.
TEST(GlibcHeap, GrownThreadArenaSecondHeap) {
  LW_START_CHILD(child);
  const uint64_t first = child.grown_at(kGrownFirst), last = child.grown_at(kGrownLast),
                 freed = child.grown_at(kGrownFreed);
  const uint64_t h1 = heap_of(first), h2 = heap_of(last);
  ASSERT_NE(h1, h2) << "the arena did not grow a second heap";
  ASSERT_EQ(heap_of(freed), h2);
  ASSERT_EQ(child.word(h2 + 8), h1);  // heap_info.prev
  // The older heap ends in glibc's fencepost pair, its last header size 0 | PREV_INUSE.
  ASSERT_EQ(child.word(h1 + child.word(h1 + 16) - 8), 1u);
  GlibcWalkStats st;
  const auto v = child.check({{first, kGrowBlock},
                              {last, kGrowBlock},
                              {freed, kGrowBlock},
                              {first, kGrowBlock / 2},
                              {last, 2 * kGrowBlock}},
                             &st);
  EXPECT_EQ(v, (std::vector<Liveness>{kLive, kLive, kFreed, kFreed, kFreed}));
  EXPECT_TRUE(st.complete) << st.stopped;
  // Both heaps were walked, in windows: a window a chunk, not the chunks' bodies.
  EXPECT_GT(st.chunks, kGrowBlocks);
  EXPECT_LT(st.bytes_read, kGrowBlocks * kGrowBlock / 2);
}

// glibc.malloc.hugetlb's huge pages make heaps of another size: not walked.
TEST(GlibcHeap, HugePagesLeaveThreadHeapsUndecided) {
  LW_START_CHILD(child);
  GlibcHeapLimits huge;
  huge.mmap_rounding = 2 << 20;
  GlibcWalkStats st;
  const auto v = child.check({{child.thread_at(0, kTKept64k), k64k}, {child.at(kKept64k), k64k}}, &st, huge);
  EXPECT_EQ(v, (std::vector<Liveness>{kUndecided, kLive}));
  EXPECT_NE(st.stopped.find("huge pages"), std::string::npos) << st.stopped;
}

// The residual the caller documents: a freed block whose address was handed
// out again at a size within the same bounds reads live.
TEST(GlibcHeap, AddressReusedAtTheSameSizeReadsLive) {
  LW_START_CHILD(child);
  ASSERT_EQ(child.at(kReusedNew), child.at(kReusedOld)) << "glibc did not hand the address out again";
  EXPECT_EQ(child.check({{child.at(kReusedOld), 5000}}), (std::vector<Liveness>{kLive}));
}

// Every block in one call, in slot order: the verdicts and the counts.
TEST(GlibcHeap, AllBlocksInOneCall) {
  LW_START_CHILD(child);
  struct Expect {
    Slot slot;
    uint64_t size;
    Liveness verdict;
  };
  const Expect expect[] = {{kKept64k, k64k, kLive},
                           {kKept2000, 2000, kLive},
                           {kSmall100, 100, kUndecided},
                           {kSmall1000, 1000, kUndecided},
                           {kSmallFreed1000, 1000, kUndecided},
                           {kFreed64k, k64k, kFreed},
                           {kFreed3000, 3000, kFreed},
                           {kPairA, 3000, kFreed},
                           {kPairB, 3000, kFreed},
                           {kReusedOld, 5000, kLive},
                           {kReusedNew, 5000, kLive},
                           {kMmapKept, kMmapSize, kLive},
                           {kMmapFreed, kMmapSize, kFreed},
                           {kThreadBlock, 2000, kLive},
                           {kTopA, 3000, kFreed},
                           {kTopB, 3000, kFreed}};
  ASSERT_EQ(std::size(expect), size_t{kSlots});
  std::vector<HeapCandidate> all;
  std::vector<Liveness> want;
  uint64_t live = 0, freed = 0;
  for (const Expect& e : expect) {
    all.push_back({child.at(e.slot), e.size});
    want.push_back(e.verdict);
    live += e.verdict == kLive;
    freed += e.verdict == kFreed;
  }
  // And the threads' kept and freed blocks, and the grown arena's.
  for (size_t t = 0; t < kThreads; ++t) {
    all.push_back({child.thread_at(t, kTKept2000), 2000});
    all.push_back({child.thread_at(t, kTFreed3000), 3000});
    want.insert(want.end(), {kLive, kFreed});
    ++live;
    ++freed;
  }
  all.push_back({child.grown_at(kGrownLast), kGrowBlock});
  want.push_back(kLive);
  ++live;
  GlibcWalkStats st;
  EXPECT_EQ(child.check(all, &st), want);
  EXPECT_TRUE(st.complete) << st.stopped;
  EXPECT_EQ(st.live, live);
  EXPECT_EQ(st.freed, freed);
  EXPECT_EQ(st.undecided, all.size() - live - freed);
}

}  // namespace
}  // namespace lw
