// SPDX-License-Identifier: Apache-2.0
// core/accounting/glibc_heap.h on synthetic heap images: what a real heap
// does not show (corrupt headers, the read limit, the break moving during a
// walk, thread heaps' layouts and fenceposts, each mmapped-header rule) and
// the GLIBC_TUNABLES parsers. The real heap's verdicts are in
// test_glibc_heap.cc.
#include "core/accounting/glibc_heap.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace lw {
namespace {

constexpr Liveness kLive = Liveness::kLive, kFreed = Liveness::kFreed, kUndecided = Liveness::kUndecided;
constexpr uint64_t kHeapMax = 64 << 20;  // a thread heap's size and alignment

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

// A running process moves the break while its heap is walked: the top
// chunk then ends past (or short of) the [heap] end read before the walk.
// With heap_end_now the walk asks for the end again there and completes;
// without it, it stops and decides nothing.
TEST(GlibcHeap, TheBreakMovingDuringTheWalkIsFollowed) {
  const uint64_t big = glibc_request2size(3000);
  std::vector<uint64_t> at;
  const Image img = arena({{big, true}, {big, false}, {big, true}}, 3 * big + 2 * kPage, &at);
  const std::vector<HeapCandidate> cands = {{at[0] + 16, 3000}, {at[1] + 16, 3000}, {at[2] + 16, 3000}};
  const std::vector<Liveness> want = {kLive, kFreed, kLive};
  const uint64_t stale_end = img.end() - kPage;  // read before the break grew by a page
  GlibcWalkStats st;
  // Without it the walk stops at the top chunk: the last block, whose
  // in-use bit is the top's, is not reached.
  EXPECT_EQ(check_glibc_chunks(img.reader(), img.base, stale_end, cands, {}, &st),
            (std::vector<Liveness>{kLive, kFreed, kUndecided}));
  EXPECT_FALSE(st.complete);
  EXPECT_EQ(st.main_reached, at[2]);
  EXPECT_NE(st.stopped.find("past the heap's end"), std::string::npos) << st.stopped;
  GlibcHeapLimits limits;
  int asked = 0;
  limits.heap_end_now = [&] {
    ++asked;
    return img.end();
  };
  st = {};
  EXPECT_EQ(check_glibc_chunks(img.reader(), img.base, stale_end, cands, limits, &st), want);
  EXPECT_TRUE(st.complete) << st.stopped;
  EXPECT_EQ(asked, 1);
  // The break came down: the end read before the walk lies a page past the
  // top chunk's end, and that page is no longer mapped.
  Image shrunk = img;
  const uint64_t top = at.back();
  shrunk.put(top + 8, (shrunk.end() - kPage - top) | 1);
  shrunk.bytes.resize(shrunk.bytes.size() - kPage);
  limits.heap_end_now = [&] { return shrunk.end(); };
  st = {};
  EXPECT_EQ(check_glibc_chunks(shrunk.reader(), shrunk.base, img.end(), cands, limits, &st), want);
  EXPECT_TRUE(st.complete) << st.stopped;
  // An end that answers nonsense (before the chain) changes nothing: stopped.
  limits.heap_end_now = [&] { return uint64_t{kBase + 16}; };
  st = {};
  EXPECT_EQ(check_glibc_chunks(img.reader(), img.base, stale_end, cands, limits, &st),
            (std::vector<Liveness>{kLive, kFreed, kUndecided}));
  EXPECT_FALSE(st.complete);
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

// A header that fails its checks stops the walk there: the candidates in
// the chunks before the one whose next header it is keep their verdicts
// (decided on checked headers, as in a whole walk), the rest are undecided
// and main_reached says where the walk got to.
TEST(GlibcHeap, CorruptHeadersLeaveEveryCandidateFromThereUndecided) {
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
  const size_t cand_chunk[] = {0, 2, 3};
  const std::vector<HeapCandidate> cands = {{at[0] + 16, 3000}, {at[2] + 16, 3000}, {at[3] + 16, 3000}};
  // The control: the image as built reads.
  const std::vector<Liveness> whole = {kLive, kFreed, kLive};
  ASSERT_EQ(check_image(good, cands), whole);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Image img = good;
    img.put(at[c.chunk] + (c.size_field ? 8 : 0), c.value);
    GlibcWalkStats st;
    std::vector<Liveness> want(cands.size(), kUndecided);
    size_t undecided = 0;
    for (size_t i = 0; i < cands.size(); ++i) {
      if (cand_chunk[i] + 1 < c.chunk) want[i] = whole[i];
      undecided += want[i] == kUndecided;
    }
    EXPECT_EQ(check_image(img, cands, &st), want);
    EXPECT_FALSE(st.complete);
    EXPECT_EQ(st.main_reached, c.chunk >= 1 ? at[c.chunk - 1] : at[0]);
    char where[32];
    std::snprintf(where, sizeof where, "0x%" PRIx64, at[c.chunk]);
    EXPECT_NE(st.stopped.find(where), std::string::npos) << st.stopped;
    EXPECT_EQ(st.undecided, undecided);
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

// ---- synthetic thread heaps ----

constexpr uint64_t kThreadHeap = 0x7f0008000000;  // 64 MiB aligned

// Target memory of several images; reads outside them fail with EFAULT.
struct Memory {
  std::vector<Image> images;
  HeapReader reader() const {
    return [this](uint64_t addr, void* out, size_t len) -> int {
      for (const Image& img : images) {
        if (addr >= img.base && addr - img.base <= img.bytes.size() &&
            len <= img.bytes.size() - (addr - img.base)) {
          return img.reader()(addr, out, len);
        }
      }
      return EFAULT;
    };
  }
  std::vector<Liveness> check(const std::vector<HeapCandidate>& cands, GlibcWalkStats* st = nullptr,
                              const GlibcHeapLimits& limits = {}) const {
    return check_glibc_chunks(reader(), 0, 0, cands, limits, st);  // no [heap]
  }
};

struct ThreadHeapSpec {
  uint64_t h = kThreadHeap;
  uint64_t info_size = 48;      // sizeof(heap_info): 48 since glibc 2.35, 32 before
  uint64_t state_size = 2200;   // sizeof(malloc_state) in an arena's first heap; 0: a later heap
  uint64_t size = 4 * kPage;    // heap_info.size
  uint64_t mapped = 5 * kPage;  // bytes of the image: past size, the heap's unused tail
  bool fenceposts = false;      // ends as an older heap (else in the top chunk)
};

// A thread heap as glibc lays it out: heap_info (ar_ptr at the malloc_state
// after it in a first heap, else at another heap's), the malloc_state of a
// first heap, `chunks` (NON_MAIN_ARENA set on those in use), then the top
// chunk or glibc's end of an older heap: the old top, freed (64 bytes or
// more) or kept as a fence (32 or 16 bytes), a 16-byte fencepost after a
// freed one, and the last header, size 0 | PREV_INUSE. `at` gets every
// chunk's address, the tail's included.
Image thread_heap(const ThreadHeapSpec& spec, const std::vector<ChunkSpec>& chunks,
                  std::vector<uint64_t>* at) {
  Image img;
  img.base = spec.h;
  img.bytes.assign(spec.mapped, 0);
  const bool first = spec.state_size != 0;
  const uint64_t h = spec.h, other = spec.h - kHeapMax;
  img.put(h, (first ? h : other) + spec.info_size);  // ar_ptr
  img.put(h + 8, first ? 0 : other);                 // prev
  img.put(h + 16, spec.size);
  img.put(h + 24, spec.size);                        // mprotect_size
  if (spec.info_size == 48) img.put(h + 32, kPage);  // pagesize
  uint64_t c = (h + spec.info_size + spec.state_size + 15) & ~uint64_t{15};
  bool prev_in_use = true;
  uint64_t prev_size = 0;
  auto chunk = [&](uint64_t size, bool in_use, uint64_t flags) {
    if (!prev_in_use) img.put(c, prev_size);
    img.put(c + 8, size | flags | (prev_in_use ? 1 : 0));
    at->push_back(c);
    prev_in_use = in_use;
    prev_size = size;
    c += size;
  };
  for (const ChunkSpec& s : chunks) chunk(s.size, s.in_use, s.in_use ? 4 : 0);
  const uint64_t end = h + spec.size, rest = end - c;
  if (!spec.fenceposts) {
    chunk(rest, false, 0);  // the top chunk
  } else {
    if (rest >= 64) {
      chunk(rest - 32, false, 0);  // the old top, freed
      chunk(16, true, 0);          // the fencepost
    } else {
      chunk(rest - 16, true, 0);  // an old top too small to free: a fence
    }
    chunk(0, true, 0);  // the last header
  }
  return img;
}

TEST(GlibcHeap, SyntheticThreadHeapVerdicts) {
  const uint64_t big = glibc_request2size(3000), small = glibc_request2size(100);
  // Each heap_info and malloc_state size, and a later heap (no malloc_state).
  const std::pair<uint64_t, uint64_t> layouts[] = {{48, 2200}, {48, 2192}, {48, 2184}, {32, 2200},
                                                   {32, 2192}, {32, 2184}, {48, 0},    {32, 0}};
  for (const auto& [info, state] : layouts) {
    SCOPED_TRACE(std::to_string(info) + "/" + std::to_string(state));
    ThreadHeapSpec spec;
    spec.info_size = info;
    spec.state_size = state;
    std::vector<uint64_t> at;
    Memory mem;
    mem.images.push_back(
        thread_heap(spec, {{big, true}, {big, false}, {big, true}, {small, true}, {big, true}}, &at));
    const uint64_t a = at[0] + 16, b = at[1] + 16, c = at[2] + 16, d = at[3] + 16, e = at[4] + 16,
                   top = at[5] + 16, h = spec.h;
    GlibcWalkStats st;
    const auto v = mem.check({{e, 3000},                // live, the last before the top chunk
                              {b + 64, 100},            // inside the free chunk b: stepped over
                              {a, 3000},                // live
                              {top, 16},                // the top chunk
                              {b, 3000},                // free
                              {c, 1000},                // the wrong size
                              {d, 100},                 // small: undecided
                              {top + 16, 8},            // inside the top chunk
                              {h + 32, 100},            // a chunk in the heap_info: undecided
                              {h + spec.size + 32, 8},  // past the heap's end
                              {a, 3000 - 8}},           // a again, a size with the same chunk
                             &st);
    EXPECT_EQ(v, (std::vector<Liveness>{kLive, kFreed, kLive, kFreed, kFreed, kFreed, kUndecided, kFreed,
                                        kUndecided, kFreed, kLive}));
    EXPECT_TRUE(st.complete) << st.stopped;
    EXPECT_EQ(st.chunks, at.size());
    EXPECT_EQ(st.live, 3u);
    EXPECT_EQ(st.undecided, 2u);
  }
}

// A busy thread grows its heap while it is walked: the heap_info read
// first says a page less than the top chunk now reaches. The walk asks the
// heap_info again there and completes; a heap_info that still says the old
// size stops it (every candidate of the heap undecided).
TEST(GlibcHeap, AThreadHeapGrowingDuringTheWalkIsFollowed) {
  const uint64_t big = glibc_request2size(3000);
  ThreadHeapSpec spec;
  spec.size = 5 * kPage;
  std::vector<uint64_t> at;
  const Image grown = thread_heap(spec, {{big, true}, {big, false}, {big, true}}, &at);
  const std::vector<HeapCandidate> cands = {{at[0] + 16, 3000}, {at[1] + 16, 3000}, {at[2] + 16, 3000}};
  // The first read of the heap_info (at h) sees the old size; later ones,
  // of its size field alone (h + 16), the new one.
  for (const bool updated : {true, false}) {
    SCOPED_TRACE(updated ? "heap_info updated" : "heap_info stale");
    const HeapReader reader = [&](uint64_t addr, void* out, size_t len) -> int {
      if (const int err = grown.reader()(addr, out, len); err != 0) return err;
      if (addr == spec.h && len >= 24) {
        const uint64_t old_size = spec.size - kPage;
        std::memcpy(static_cast<uint8_t*>(out) + 16, &old_size, sizeof old_size);
      }
      if (addr == spec.h + 16 && !updated) {
        const uint64_t old_size = spec.size - kPage;
        std::memcpy(out, &old_size, sizeof old_size);
      }
      return 0;
    };
    GlibcWalkStats st;
    const auto v = check_glibc_chunks(reader, 0, 0, cands, {}, &st);
    if (updated) {
      EXPECT_EQ(v, (std::vector<Liveness>{kLive, kFreed, kLive}));
      EXPECT_TRUE(st.complete) << st.stopped;
    } else {
      EXPECT_EQ(v, std::vector<Liveness>(3, kUndecided));
      EXPECT_FALSE(st.complete);
    }
  }
}

// An older heap of an arena ends in fenceposts, never blocks: whatever the
// old top was (freed, kept as a 32- or 16-byte fence).
TEST(GlibcHeap, SyntheticOlderThreadHeapEndsInFenceposts) {
  const uint64_t big = glibc_request2size(3000);
  for (uint64_t rest : {kPage, uint64_t{64}, uint64_t{48}, uint64_t{32}}) {
    SCOPED_TRACE(rest);
    ThreadHeapSpec spec;
    spec.state_size = 0;
    spec.fenceposts = true;
    const uint64_t fill = spec.size - spec.info_size - rest - big;
    std::vector<uint64_t> at;
    Memory mem;
    mem.images.push_back(thread_heap(spec, {{big, true}, {fill, true}}, &at));
    ASSERT_EQ(at.size(), rest >= 64 ? 5u : 4u);
    // Every chunk of the tail, at a size its chunk would have: with no
    // small-chunk rule a 32-byte fence "in use" would read live.
    std::vector<HeapCandidate> cands = {{at[0] + 16, 3000}, {at[1] + 16, fill - 16}};
    std::vector<Liveness> want = {kLive, kLive};
    for (size_t i = 2; i < at.size(); ++i) {
      const uint64_t size = mem.images[0].get(at[i] + 8) & ~uint64_t{7};
      cands.push_back({at[i] + 16, size > 16 ? size - 16 : 0});
      want.push_back(kFreed);
    }
    GlibcHeapLimits no_small_rule;
    no_small_rule.small_chunk_max = 0;
    GlibcWalkStats st;
    EXPECT_EQ(mem.check(cands, &st, no_small_rule), want);
    EXPECT_TRUE(st.complete) << st.stopped;
    EXPECT_EQ(st.chunks, at.size());
  }
}

std::string hex_of(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

// Two heaps, one corrupted at a time: its candidates are undecided, with
// `stopped` naming it; the other heap's still read.
TEST(GlibcHeap, SyntheticCorruptThreadHeapsAreUndecided) {
  const uint64_t big = glibc_request2size(3000);
  ThreadHeapSpec first, older;
  older.h = kThreadHeap + 2 * kHeapMax;
  older.state_size = 0;
  older.fenceposts = true;
  std::vector<uint64_t> at1, at2;
  Memory good;
  good.images.push_back(thread_heap(first, {{big, true}, {big, false}, {big, true}}, &at1));
  good.images.push_back(thread_heap(older, {{big, true}, {big, true}}, &at2));
  const uint64_t h1 = first.h, h2 = older.h, end1 = h1 + first.size, end2 = h2 + older.size;
  const std::vector<HeapCandidate> cands = {{at1[0] + 16, 3000},
                                            {at1[1] + 16, 3000},
                                            {at1[2] + 16, 3000},
                                            {at2[0] + 16, 3000},
                                            {at2[1] + 16, 3000}};
  const std::vector<Liveness> control = {kLive, kFreed, kLive, kLive, kLive};
  ASSERT_EQ(good.check(cands), control);
  struct Put {
    uint64_t addr, value;
  };
  struct Case {
    const char* what;
    std::vector<Put> puts;
  };
  const uint64_t top1 = at1.back();
  const Case cases[] = {
      {"size above 64 MiB", {{h1 + 16, kHeapMax + kPage}, {h1 + 24, kHeapMax + kPage}}},
      {"size not whole pages", {{h1 + 16, first.size - 16}}},
      {"size 0", {{h1 + 16, 0}}},
      {"size short of the chain's end", {{h1 + 16, first.size - kPage}}},
      {"size past the chain's end", {{h1 + 16, first.size + kPage}, {h1 + 24, first.size + kPage}}},
      {"mprotect_size below size", {{h1 + 24, first.size - kPage}}},
      {"ar_ptr not after a heap_info", {{h1, h1 + 64}}},
      {"prev set in a first heap", {{h1 + 8, h2}}},
      {"prev unset in a later heap", {{h2 + 8, 0}}},
      {"pagesize of huge pages", {{h1 + 32, 2 << 20}}},
      {"in use without NON_MAIN_ARENA", {{at1[0] + 8, big | 1}}},
      {"IS_MMAPPED", {{at1[2] + 8, big | 7}}},
      {"a size that leaves the chain in a block", {{at1[2] + 8, (big - 16) | 5}}},
      {"the top chunk without PREV_INUSE", {{top1 + 8, (end1 - top1)}, {top1, big}}},
      {"the last header not 0 | PREV_INUSE", {{end2 - 8, 0x11}}},
      {"a fencepost with NON_MAIN_ARENA", {{end2 - 24, 16 | 4}}},
      {"the old top over the fencepost", {{at2[2] + 8, (end2 - 16 - at2[2]) | 1}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Memory mem = good;
    bool second = false;
    for (const Put& p : c.puts) {
      second = p.addr >= h2;
      mem.images[second ? 1 : 0].put(p.addr, p.value);
    }
    std::vector<Liveness> want = control;
    for (size_t i = second ? 3 : 0; i < (second ? cands.size() : 3); ++i) want[i] = kUndecided;
    GlibcWalkStats st;
    EXPECT_EQ(mem.check(cands, &st), want);
    EXPECT_FALSE(st.complete);
    EXPECT_NE(st.stopped.find(hex_of(second ? h2 : h1)), std::string::npos) << st.stopped;
  }
}

// Two chains that both validate to the heap's end leave the heap
// undecided: a fake 2,240-byte start (glibc before 2.27 with a 2.35+
// heap_info) whose chunk spans the real first one. Picking either would
// read a block the other does not have as live.
TEST(GlibcHeap, SyntheticAmbiguousThreadHeapIsUndecided) {
  const uint64_t big = glibc_request2size(3000);
  ThreadHeapSpec spec;  // the first chunk at 2,256
  std::vector<uint64_t> at;
  Memory mem;
  mem.images.push_back(thread_heap(spec, {{big, true}, {big, true}}, &at));
  ASSERT_EQ(at[0], spec.h + 2256);
  const std::vector<HeapCandidate> cands = {{at[0] + 16, 3000}, {at[0], 3000 + 16}};
  ASSERT_EQ(mem.check(cands),
            (std::vector<Liveness>{kLive, kUndecided}));  // the second: before the first chunk
  mem.images[0].put(at[0] - 8, (big + 16) | 5);  // a chunk at 2,240, in use, ending at the real second chunk
  GlibcWalkStats st;
  EXPECT_EQ(mem.check(cands, &st), (std::vector<Liveness>{kUndecided, kUndecided}));
  EXPECT_NE(st.stopped.find("ambiguous"), std::string::npos) << st.stopped;
}

TEST(GlibcHeap, SyntheticThreadHeapLimits) {
  const uint64_t big = glibc_request2size(3000);
  ThreadHeapSpec one, two;
  two.h = kThreadHeap + kHeapMax;
  std::vector<uint64_t> at1, at2;
  Memory mem;
  mem.images.push_back(thread_heap(one, {{big, true}}, &at1));
  mem.images.push_back(thread_heap(two, {{big, true}}, &at2));
  const std::vector<HeapCandidate> cands = {{at2[0] + 16, 3000}, {at1[0] + 16, 3000}};
  // The read limit: nothing; the headers; the headers and a heap_info; a
  // heap's window short of its end.
  const uint64_t short_of_top = 32 + 48 + (at1[1] + 16 - (one.h + 2240)) - 1;
  for (uint64_t max : {uint64_t{0}, uint64_t{32}, uint64_t{32 + 48}, short_of_top}) {
    SCOPED_TRACE(max);
    GlibcHeapLimits limits;
    limits.max_read_bytes = max;
    GlibcWalkStats st;
    const auto v = mem.check(cands, &st, limits);
    EXPECT_EQ(v[1], kUndecided);  // the first heap walked
    EXPECT_NE(st.stopped.find("limit"), std::string::npos) << st.stopped;
    EXPECT_LE(st.bytes_read, max);
  }
  GlibcHeapLimits enough;
  enough.max_read_bytes = 32 + 2 * (48 + 4 * kPage - 2240);
  EXPECT_EQ(mem.check(cands, nullptr, enough), (std::vector<Liveness>{kLive, kLive}));
  // At most max_thread_heaps heaps a call: the first by address is walked.
  GlibcHeapLimits one_heap;
  one_heap.max_thread_heaps = 1;
  GlibcWalkStats st;
  EXPECT_EQ(mem.check(cands, &st, one_heap), (std::vector<Liveness>{kUndecided, kLive}));
  EXPECT_NE(st.stopped.find("thread heaps"), std::string::npos) << st.stopped;
  EXPECT_NE(st.stopped.find(hex_of(two.h)), std::string::npos) << st.stopped;
  // Huge pages (glibc.malloc.hugetlb): heaps of a size not known.
  GlibcHeapLimits huge;
  huge.mmap_rounding = 2 << 20;
  EXPECT_EQ(mem.check(cands, nullptr, huge), (std::vector<Liveness>{kUndecided, kUndecided}));
}

// A block whose 64 MiB holds no heap_info, or overlaps [heap]: undecided.
TEST(GlibcHeap, SyntheticNotAThreadHeap) {
  Memory mem;
  Image img;
  img.base = kThreadHeap + kPage;  // the 64 MiB's start is not mapped
  img.bytes.assign(kPage, 0);
  img.put(img.base + 8, 48 | 5);
  mem.images.push_back(img);
  GlibcWalkStats st;
  EXPECT_EQ(mem.check({{img.base + 16, 20}}, &st), (std::vector<Liveness>{kUndecided}));
  EXPECT_NE(st.stopped.find("heap_info"), std::string::npos) << st.stopped;
  EXPECT_NE(st.stopped.find("failed"), std::string::npos) << st.stopped;
  // [heap] in the same 64 MiB: glibc's heaps never are.
  const uint64_t hs = kThreadHeap + 16 * kPage;
  EXPECT_EQ(check_glibc_chunks(mem.reader(), hs, hs + kPage, {{img.base + 16, 20}}, GlibcHeapLimits{}, &st),
            (std::vector<Liveness>{kUndecided}));
  EXPECT_NE(st.stopped.find("cannot be a thread heap"), std::string::npos) << st.stopped;
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
