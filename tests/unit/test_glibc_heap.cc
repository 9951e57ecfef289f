// SPDX-License-Identifier: Apache-2.0
// core/accounting/glibc_heap.h: verdicts on a real glibc heap, and on
// synthetic heap images for what a real heap does not show (corrupt
// headers, the read limit, each mmapped-header rule).
//
// The real heap is a child's: a fresh copy of this binary (exec'd, so its
// heap holds only what startup and the child's own calls made, not what
// earlier tests left in ours), which, before main(), mallocs and frees a
// known set of blocks, writes their addresses to a pipe and waits to be
// killed. The test reads the child's [heap] bounds from /proc/PID/maps and
// its memory with process_vm_readv.
#include "core/accounting/glibc_heap.h"

#include <gtest/gtest.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
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

uint64_t addr_of(void* p) { return reinterpret_cast<uint64_t>(p); }

// The child's work. Guards (kept, never reported) sit between the blocks to
// be freed so a free does not merge them with their neighbours.
[[noreturn]] void child_main(int fd) {
  // Pinned: glibc raises its threshold by itself when an mmapped chunk is freed.
  mallopt(M_MMAP_THRESHOLD, 512 << 10);
  uint64_t a[kSlots] = {};
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
  a[kTopA] = addr_of(malloc(3000));
  a[kTopB] = addr_of(malloc(3000));
  for (Slot s : {kSmallFreed1000, kFreed64k, kFreed3000, kPairA, kPairB, kMmapFreed, kTopB, kTopA}) {
    free(reinterpret_cast<void*>(a[s]));
  }
  const char* p = reinterpret_cast<const char*>(a);
  for (size_t done = 0; done < sizeof a;) {
    const ssize_t n = write(fd, p + done, sizeof a - done);
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

  uint64_t at(Slot s) const { return addrs[s]; }
  HeapReader reader() const { return vm_reader(pid); }
  bool in_heap(uint64_t addr) const { return addr >= heap_start && addr < heap_end; }
  // The size field of the chunk header before user pointer `addr`.
  uint64_t size_field(uint64_t addr) const {
    uint64_t h[2] = {};
    return reader()(addr - 16, h, sizeof h) == 0 ? h[1] : 0;
  }
  std::vector<Liveness> check(const std::vector<HeapCandidate>& cands, GlibcWalkStats* stats = nullptr,
                              const GlibcHeapLimits& limits = {}) const {
    return check_glibc_chunks(reader(), heap_start, heap_end, cands, limits, stats);
  }

  pid_t pid = -1;
  uint64_t addrs[kSlots] = {};
  uint64_t heap_start = 0, heap_end = 0;
  std::string error;

 private:
  void read_addresses(int fd) {
    char* p = reinterpret_cast<char*>(addrs);
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

TEST(GlibcHeap, ThreadArenaBlockIsUndecided) {
  LW_START_CHILD(child);
  const uint64_t p = child.at(kThreadBlock);
  ASSERT_FALSE(child.in_heap(p));
  ASSERT_NE(child.size_field(p) & 4, 0u);  // NON_MAIN_ARENA
  EXPECT_EQ(child.check({{p, 2000}}), (std::vector<Liveness>{kUndecided}));
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
                           {kThreadBlock, 2000, kUndecided},
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
  GlibcWalkStats st;
  EXPECT_EQ(child.check(all, &st), want);
  EXPECT_TRUE(st.complete) << st.stopped;
  EXPECT_EQ(st.live, live);
  EXPECT_EQ(st.freed, freed);
  EXPECT_EQ(st.undecided, all.size() - live - freed);
}

// ---- synthetic images ----

constexpr uint64_t kBase = 0x555555550000;  // page aligned
constexpr uint64_t kPage = 4096;

// A byte image of target memory at `base`; reads outside it fail with EFAULT.
struct Image {
  uint64_t base = kBase;
  std::vector<uint8_t> bytes;
  uint64_t end() const { return base + bytes.size(); }
  void put(uint64_t addr, uint64_t v) { std::memcpy(&bytes.at(addr - base), &v, sizeof v); }
  uint64_t get(uint64_t addr) const {
    uint64_t v;
    std::memcpy(&v, &bytes.at(addr - base), sizeof v);
    return v;
  }
  HeapReader reader() const {
    return [this](uint64_t addr, void* out, size_t len) -> int {
      if (addr < base || addr - base > bytes.size() || len > bytes.size() - (addr - base)) return EFAULT;
      std::memcpy(out, bytes.data() + (addr - base), len);
      return 0;
    };
  }
};

struct ChunkSpec {
  uint64_t size;
  bool in_use;
};

// A main arena: `chunks` from kBase, then a top chunk to kBase + total,
// with glibc's bits (PREV_INUSE of the chunk before, prev_size after a free
// chunk). `at` gets each chunk's address, the top chunk's last.
Image arena(const std::vector<ChunkSpec>& chunks, uint64_t total, std::vector<uint64_t>* at) {
  Image img;
  img.bytes.assign(total, 0);
  uint64_t c = kBase;
  bool prev_in_use = true;
  uint64_t prev_size = 0;
  auto header = [&](uint64_t size) {
    if (!prev_in_use) img.put(c, prev_size);
    img.put(c + 8, size | (prev_in_use ? 1 : 0));
    at->push_back(c);
  };
  for (const ChunkSpec& s : chunks) {
    header(s.size);
    prev_in_use = s.in_use;
    prev_size = s.size;
    c += s.size;
  }
  header(kBase + total - c);
  return img;
}

std::vector<Liveness> check_image(const Image& img, const std::vector<HeapCandidate>& cands,
                                  GlibcWalkStats* st = nullptr, const GlibcHeapLimits& limits = {}) {
  return check_glibc_chunks(img.reader(), img.base, img.end(), cands, limits, st);
}

TEST(GlibcHeap, RequestToSize) {
  EXPECT_EQ(glibc_request2size(0), 32u);
  EXPECT_EQ(glibc_request2size(24), 32u);
  EXPECT_EQ(glibc_request2size(25), 48u);
  EXPECT_EQ(glibc_request2size(1032), 1040u);
  EXPECT_EQ(glibc_request2size(uint64_t{PTRDIFF_MAX} + 1), 0u);
}

TEST(GlibcHeap, SyntheticArenaVerdicts) {
  const uint64_t big = glibc_request2size(3000), small = glibc_request2size(100);
  std::vector<uint64_t> at;
  // The last chunk before a top chunk of 48 bytes ends inside the last page:
  // it is not the top chunk (that one ends where the heap does).
  const uint64_t used = 4 * big + small;
  const Image img = arena({{big, true}, {big, false}, {big, true}, {small, true}, {big, true}}, used + 48,
                          &at);
  const uint64_t a = at[0] + 16, b = at[1] + 16, c = at[2] + 16, d = at[3] + 16, e = at[4] + 16,
                 top = at[5] + 16;
  GlibcWalkStats st;
  const auto v = check_image(img,
                             {{e, 3000},       // live, the last before the top chunk
                              {b + 64, 100},   // inside the free chunk b: stepped over
                              {a, 3000},       // live
                              {top, 16},       // the top chunk
                              {b, 3000},       // free
                              {c, 1000},       // the wrong size
                              {d, 100},        // small: undecided
                              {a + 8, 100},    // not 16-byte aligned: undecided
                              {top + 16, 8},   // inside the top chunk
                              {a, 3000 - 8}},  // a again, a size with the same chunk
                             &st);
  EXPECT_EQ(v, (std::vector<Liveness>{kLive, kFreed, kLive, kFreed, kFreed, kFreed, kUndecided, kUndecided,
                                      kFreed, kLive}));
  EXPECT_TRUE(st.complete) << st.stopped;
  EXPECT_EQ(st.chunks, at.size());
  EXPECT_EQ(st.live, 3u);
  EXPECT_EQ(st.freed, 5u);
  EXPECT_EQ(st.undecided, 2u);
  EXPECT_EQ(st.live + st.freed + st.undecided, v.size());
  EXPECT_EQ(st.bytes_read, img.bytes.size());  // one window holds it all
}

TEST(GlibcHeap, ChunksLargerThanTheWindowAreNotRead) {
  const uint64_t huge = 1 << 20, big = glibc_request2size(3000);
  std::vector<uint64_t> at;
  const Image img = arena({{huge, true}, {big, true}, {huge, false}, {big, true}}, 2 * huge + 2 * big + kPage,
                          &at);
  const std::vector<HeapCandidate> cands = {
      {at[0] + 16, huge - 16}, {at[1] + 16, 3000}, {at[2] + 16, huge - 16}, {at[3] + 16, 3000}};
  const std::vector<Liveness> want = {kLive, kLive, kFreed, kLive};
  for (uint64_t window : {uint64_t{64} << 10, uint64_t{16}, uint64_t{40}, uint64_t{4096}}) {
    SCOPED_TRACE(window);
    GlibcHeapLimits limits;
    limits.window_bytes = window;
    GlibcWalkStats st;
    EXPECT_EQ(check_image(img, cands, &st, limits), want);
    EXPECT_TRUE(st.complete) << st.stopped;
    EXPECT_EQ(st.chunks, at.size());
    EXPECT_LT(st.bytes_read, img.bytes.size() / 4);  // the two 1 MiB chunks' bodies unread
  }
}

TEST(GlibcHeap, CorruptHeadersMakeEveryCandidateUndecided) {
  const uint64_t big = glibc_request2size(3000);
  struct Case {
    const char* what;
    size_t chunk;     // whose header is changed
    bool size_field;  // the size field (else prev_size)
    uint64_t value;
  };
  const Case cases[] = {
      {"size 0", 2, true, 0x1},
      {"misaligned size", 2, true, (big + 8) | 1},
      {"runs past the end", 2, true, (uint64_t{1} << 40) | 1},
      {"NON_MAIN_ARENA", 2, true, big | 0x5},
      {"IS_MMAPPED", 2, true, big | 0x3},
      {"first chunk without PREV_INUSE", 0, true, big},
      {"prev_size of the chunk after a free one", 3, false, big + 16},
      {"ends short of the heap's end", 4, true, (2 * kPage - 16) | 1},
  };
  std::vector<uint64_t> at;
  const Image good = arena({{big, true}, {big, true}, {big, false}, {big, true}}, 4 * big + 2 * kPage, &at);
  const std::vector<HeapCandidate> cands = {{at[0] + 16, 3000}, {at[2] + 16, 3000}, {at[3] + 16, 3000}};
  // The control: the image as built reads.
  ASSERT_EQ(check_image(good, cands), (std::vector<Liveness>{kLive, kFreed, kLive}));
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Image img = good;
    img.put(at[c.chunk] + (c.size_field ? 8 : 0), c.value);
    GlibcWalkStats st;
    EXPECT_EQ(check_image(img, cands, &st), (std::vector<Liveness>(cands.size(), kUndecided)));
    EXPECT_FALSE(st.complete);
    char where[32];
    std::snprintf(where, sizeof where, "0x%" PRIx64, at[c.chunk]);
    EXPECT_NE(st.stopped.find(where), std::string::npos) << st.stopped;
    EXPECT_EQ(st.undecided, cands.size());
  }
}

TEST(GlibcHeap, ReadLimitLeavesUndecided) {
  const uint64_t big = glibc_request2size(3000);
  std::vector<uint64_t> at;
  const Image img = arena({{big, true}, {big, true}}, 2 * big + kPage, &at);
  const std::vector<HeapCandidate> cands = {{at[0] + 16, 3000}, {at[1] + 16, 3000}, {img.end() + kPage, 100}};
  // Nothing; one header and the outside block's; the first chunk but not the
  // second's header.
  for (uint64_t max : {uint64_t{0}, uint64_t{100}, 16 + big + 8}) {
    SCOPED_TRACE(max);
    GlibcHeapLimits limits;
    limits.max_read_bytes = max;
    GlibcWalkStats st;
    const auto v = check_image(img, cands, &st, limits);
    EXPECT_EQ(v[0], kUndecided);
    EXPECT_EQ(v[1], kUndecided);
    EXPECT_NE(st.stopped.find("limit"), std::string::npos) << st.stopped;
    EXPECT_FALSE(st.complete);
    EXPECT_LE(st.bytes_read, max);
    EXPECT_EQ(st.live + st.freed + st.undecided, cands.size());
  }
  // The limit of the heap's size is enough.
  GlibcHeapLimits enough;
  enough.max_read_bytes = img.bytes.size() + 16;
  EXPECT_EQ(check_image(img, cands, nullptr, enough), (std::vector<Liveness>{kLive, kLive, kFreed}));
}

TEST(GlibcHeap, ReadErrorsLeaveUndecided) {
  const uint64_t big = glibc_request2size(3000);
  std::vector<uint64_t> at;
  const Image img = arena({{big, true}}, big + kPage, &at);
  const HeapReader failing = [](uint64_t, void*, size_t) {
    return EIO;
  };
  GlibcWalkStats st;
  const auto v = check_glibc_chunks(failing, img.base, img.end(), {{at[0] + 16, 3000}, {0x7f0000010010, 100}},
                                    GlibcHeapLimits{}, &st);
  EXPECT_EQ(v, (std::vector<Liveness>{kUndecided, kUndecided}));
  EXPECT_NE(st.stopped.find("failed"), std::string::npos) << st.stopped;
  EXPECT_FALSE(st.complete);
}

// An mmapped chunk's header at `chunk` in an image of `pages` pages at kMmap.
constexpr uint64_t kMmap = 0x7f0000000000;
Image mmapped(uint64_t pages, uint64_t chunk, uint64_t prev_size, uint64_t size_field) {
  Image img;
  img.base = kMmap;
  img.bytes.assign(pages * kPage, 0);
  img.put(chunk, prev_size);
  img.put(chunk + 8, size_field);
  return img;
}

Liveness check_one(const Image& img, HeapCandidate c, const GlibcHeapLimits& limits = {}) {
  return check_glibc_chunks(img.reader(), kBase, kBase + kPage, {c}, limits, nullptr).at(0);
}

TEST(GlibcHeap, MmappedHeaderRules) {
  const uint64_t two = 2 * kPage, three = 3 * kPage, p = kMmap + 16;
  EXPECT_EQ(check_one(mmapped(2, kMmap, 0, two | 2), {p, two - 100}), kLive);
  EXPECT_EQ(check_one(mmapped(2, kMmap, 0, two | 2), {p, two - 8}), kFreed);           // does not fit
  EXPECT_EQ(check_one(mmapped(2, kMmap, 0, two | 2), {p, 100}), kFreed);               // a page to spare
  EXPECT_EQ(check_one(mmapped(2, kMmap, 0, (two + 16) | 2), {p, two - 100}), kFreed);  // not whole pages
  EXPECT_EQ(check_one(mmapped(3, kMmap + kPage, 16, two | 2), {p + kPage, two - 100}),
            kFreed);  // mapping start
  // memalign(4096, 100) from a three-page mapping: the chunk starts 4,080
  // bytes in, with a page and more to spare.
  const uint64_t lead = kPage - 16;
  EXPECT_EQ(check_one(mmapped(3, kMmap + lead, lead, (three - lead) | 2), {kMmap + kPage, 100}), kLive);
  // Huge pages (glibc.malloc.hugetlb): the slack of the rounding.
  GlibcHeapLimits huge;
  huge.mmap_rounding = 2 << 20;
  EXPECT_EQ(check_one(mmapped(2, kMmap, 0, two | 2), {p, 100}, huge), kLive);
  // Not an mmapped chunk: a thread arena's, neither, both bits.
  EXPECT_EQ(check_one(mmapped(2, kMmap, 0, two | 5), {p, two - 100}), kUndecided);
  EXPECT_EQ(check_one(mmapped(2, kMmap, 0, two | 1), {p, two - 100}), kUndecided);
  EXPECT_EQ(check_one(mmapped(2, kMmap, 0, two | 6), {p, two - 100}), kUndecided);
  // Unmapped: freed.
  EXPECT_EQ(check_one(mmapped(2, kMmap, 0, two | 2), {kMmap + 4 * kPage + 16, 100}), kFreed);
}

TEST(GlibcHeap, SmallChunkMaxFromTunables) {
  EXPECT_EQ(glibc_small_chunk_max(""), kGlibcDefaultSmallChunkMax);
  EXPECT_EQ(glibc_small_chunk_max("glibc.malloc.tcache_max=4096"), glibc_request2size(4096));
  EXPECT_EQ(glibc_small_chunk_max("glibc.malloc.tcache_max=0x1000"), glibc_request2size(4096));
  EXPECT_EQ(glibc_small_chunk_max("glibc.malloc.tcache_max=010000"), glibc_request2size(4096));  // octal
  EXPECT_EQ(glibc_small_chunk_max("glibc.malloc.check=3:glibc.malloc.tcache_max=2000:"),
            glibc_request2size(2000));
  EXPECT_EQ(glibc_small_chunk_max("glibc.malloc.tcache_max=100"), kGlibcDefaultSmallChunkMax);  // never lower
  EXPECT_EQ(glibc_small_chunk_max("glibc.malloc.mxfast=160"), kGlibcDefaultSmallChunkMax);
  EXPECT_EQ(glibc_small_chunk_max("glibc.malloc.mxfast=5000"), glibc_request2size(5000));
  EXPECT_EQ(glibc_small_chunk_max("glibc.pthread.rseq=0:glibc.malloc.arena_max=2"),
            kGlibcDefaultSmallChunkMax);
  for (const char* garbage :
       {"glibc.malloc.tcache_max=abc", "glibc.malloc.tcache_max=", "glibc.malloc.mxfast=12k",
        "glibc.malloc.tcache_max=-1", "glibc.malloc.tcache_max=99999999999999999999999", "junk",
        "glibc.malloc.tcache_max=2000:junk", "=4096"}) {
    EXPECT_EQ(glibc_small_chunk_max(garbage), UINT64_MAX) << garbage;
  }
}

TEST(GlibcHeap, MmapRoundingFromTunables) {
  EXPECT_EQ(glibc_mmap_rounding(""), kPage);
  EXPECT_EQ(glibc_mmap_rounding("glibc.malloc.hugetlb=1"), kPage);
  EXPECT_EQ(glibc_mmap_rounding("glibc.malloc.hugetlb=2"), uint64_t{1} << 30);
  EXPECT_EQ(glibc_mmap_rounding("glibc.malloc.hugetlb=2097152"), uint64_t{2} << 20);
  EXPECT_EQ(glibc_mmap_rounding("glibc.malloc.hugetlb=3000"), kPage);
  EXPECT_EQ(glibc_mmap_rounding("glibc.malloc.hugetlb=two"), UINT64_MAX);
}

}  // namespace
}  // namespace lw
