// SPDX-License-Identifier: Apache-2.0
// Whether recorded blocks are still allocated in another process's glibc
// heap: the walks of the main arena and the thread arenas' heaps, and the
// mmapped chunks' headers. The layout
// assumed and the rules are in glibc_heap.h. Pure; thread-safe (no shared
// state).
#include "core/accounting/glibc_heap.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>

namespace lw {

namespace {

constexpr uint64_t kHeaderBytes = 16;  // {prev_size, size} before the user pointer
constexpr uint64_t kAlignment = 16;    // MALLOC_ALIGNMENT
constexpr uint64_t kMinChunk = 32;     // MINSIZE
constexpr uint64_t kPage = 4096;
constexpr uint64_t kPrevInuse = 0x1, kIsMmapped = 0x2, kNonMainArena = 0x4, kFlagBits = 0x7;
// A block's chunk is request2size(size) plus at most this: a split keeps a
// remainder below MINSIZE, memalign trims a tail only above MINSIZE.
constexpr uint64_t kChunkSlack = kMinChunk;
// An mmapped chunk is the request plus its header rounded up to the
// rounding: less than a rounding and this much over the block.
constexpr uint64_t kMmapHeaderSlack = 64;
// A thread heap: HEAP_MAX_SIZE (2 * DEFAULT_MMAP_THRESHOLD_MAX on 64-bit)
// bytes reserved at a multiple of itself, starting with a heap_info.
constexpr uint64_t kHeapMax = 64ull << 20;
constexpr uint64_t kHeapInfoRead = 48;  // the largest heap_info (2.35+); an older one is 32
// sizeof(malloc_state) on x86-64: 2,200 since glibc 2.27 (have_fastchunks),
// 2,192 before (attached_threads, 2.23), 2,184 before that.
constexpr uint64_t kMallocStateSizes[] = {2184, 2192, 2200};

uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

// The thread heap a chunk at `chunk` would be in.
uint64_t heap_base(uint64_t chunk) { return chunk & ~(kHeapMax - 1); }

std::string limit_reached(const GlibcWalkStats& stats, const GlibcHeapLimits& limits, const std::string& what,
                          uint64_t at) {
  return "limit: " + std::to_string(stats.bytes_read) + " bytes read (max_read_bytes " +
         std::to_string(limits.max_read_bytes) + "), " + what + " at " + hex(at);
}

// Reads `len` bytes at `at`, counted against max_read_bytes: 0, the
// reader's errno, or -1 when the limit stops it. `why` says why not.
int read_counted(const HeapReader& read, uint64_t at, void* out, uint64_t len, const GlibcHeapLimits& limits,
                 GlibcWalkStats& stats, const char* what, std::string& why) {
  if (stats.bytes_read >= limits.max_read_bytes || limits.max_read_bytes - stats.bytes_read < len) {
    why = limit_reached(stats, limits, what, at);
    return -1;
  }
  stats.bytes_read += len;
  const int err = read(at, out, len);
  if (err != 0) why = "read of " + std::string(what) + " at " + hex(at) + " failed: " + std::strerror(err);
  return err;
}

struct Header {
  uint64_t at = 0;  // the chunk's address
  uint64_t prev_size = 0;
  uint64_t size_field = 0;  // with its flag bits
  uint64_t size() const { return size_field & ~kFlagBits; }
};

// A run of chunks to walk: the main arena (its [heap]) or one thread heap.
struct Chain {
  uint64_t first = 0;   // the first chunk
  uint64_t end = 0;     // where the last one ends
  bool thread = false;  // a thread heap's rules (else the main arena's)
  // The main arena's end as it moves (GlibcHeapLimits::heap_end_now).
  const std::function<uint64_t()>* end_now = nullptr;
};

// One heap (the main arena or a thread heap), read through one window at a
// time that moves along the chain: at most one window is held, and every
// byte read counts against max_read_bytes.
class WindowReader {
 public:
  WindowReader(const HeapReader& read, uint64_t heap_end, const GlibcHeapLimits& limits,
               GlibcWalkStats& stats, std::string& why)
      : read_(read), heap_end_(heap_end), limits_(limits), stats_(stats), why_(why) {
    window_ = std::max<uint64_t>(limits.window_bytes, kHeaderBytes);
  }

  // The heap's end moved (the main arena's break); `end_now` asks where
  // it is when a window cannot be read to the end known.
  void set_end(uint64_t heap_end) { heap_end_ = heap_end; }
  void follow_end(const std::function<uint64_t()>* end_now) { end_now_ = end_now; }

  // The header of the chunk at `at` (at + 16 <= heap_end). False, with
  // `why` set, when it cannot be read.
  bool header(uint64_t at, Header* out) {
    if (buf_.empty() || at < buf_at_ || at - buf_at_ + kHeaderBytes > buf_.size()) {
      if (!refill(at)) return false;
    }
    const uint8_t* p = buf_.data() + (at - buf_at_);
    *out = Header{at, load_u64(p), load_u64(p + 8)};
    return true;
  }

 private:
  // Reads a new window starting at `at`, as long as the heap and the read
  // budget allow; at least one header.
  bool refill(uint64_t at) {
    const uint64_t budget = stats_.bytes_read < limits_.max_read_bytes
                                ? limits_.max_read_bytes - stats_.bytes_read
                                : 0;
    const uint64_t len = std::min({window_, heap_end_ - at, budget});
    buf_.clear();
    if (len < kHeaderBytes) {
      why_ = limit_reached(stats_, limits_, "the walk", at);
      return false;
    }
    std::vector<uint8_t> buf(len);
    if (const int err = read_counted(read_, at, buf.data(), len, limits_, stats_, "a window", why_); err != 0) {
      // The main arena's break came down while the walk ran: read up to
      // where it is now.
      if (err != EFAULT || end_now_ == nullptr || !*end_now_) return false;
      const uint64_t now = (*end_now_)();
      if (now >= heap_end_ || now < at + kHeaderBytes) return false;
      heap_end_ = now;
      return refill(at);
    }
    buf_ = std::move(buf);
    buf_at_ = at;
    return true;
  }

  const HeapReader& read_;
  uint64_t heap_end_;
  const std::function<uint64_t()>* end_now_ = nullptr;
  const GlibcHeapLimits& limits_;
  GlibcWalkStats& stats_;
  std::string& why_;
  uint64_t window_ = 0;
  std::vector<uint8_t> buf_;
  uint64_t buf_at_ = 0;
};

// Why the chunk `h` cannot be one of `chain`, "" when it can. `prev_size`
// is the size of the chunk before it, 0 for the first chunk. A thread heap
// that is not its arena's newest ends in glibc's fencepost pair instead of
// the top chunk: a 16-byte chunk (or, when the old top had under 64 bytes,
// that top of 16 or 32 bytes), NON_MAIN_ARENA clear, then a last header
// of size 0 | PREV_INUSE in the heap's last 16 bytes.
std::string bad_header(const Header& h, const Chain& chain, uint64_t prev_size) {
  const uint64_t s = h.size(), left = chain.end - h.at;
  const bool fence_end = chain.thread && left == kHeaderBytes;
  std::string why;
  if (fence_end) {
    if (h.size_field != kPrevInuse) why = "the last 16 bytes are not a fencepost (size 0 | PREV_INUSE)";
  } else if (s < kMinChunk && !(chain.thread && s == kHeaderBytes && left == 2 * kHeaderBytes)) {
    why = "size " + hex(s) + " below MINSIZE";
  } else if (s % kAlignment != 0) {
    why = "size " + hex(s) + " not a multiple of 16";
  } else if (!chain.thread && (h.size_field & kNonMainArena)) {
    why = "NON_MAIN_ARENA set in the main arena";
  } else if (h.size_field & kIsMmapped) {
    why = "IS_MMAPPED set in an arena";
  } else if (s > left) {
    why = "size " + hex(s) + " runs past the heap's end " + hex(chain.end);
  } else if (left - s != 0 && left - s < kMinChunk && !(chain.thread && left - s == kHeaderBytes)) {
    why = "ends " + std::to_string(left - s) + " bytes short of the heap's end, no room for a chunk";
  } else if (left - s == kHeaderBytes && (s > kMinChunk || (h.size_field & kNonMainArena))) {
    why = "before the last 16 bytes and not a fencepost or an old top (16 or 32 bytes, NON_MAIN_ARENA clear)";
  } else if (chain.thread && s == left && !(h.size_field & kPrevInuse)) {
    why = "the top chunk without PREV_INUSE";
  } else if (!(h.size_field & kPrevInuse) && prev_size == 0) {
    why = "the first chunk without PREV_INUSE";
  } else if (!(h.size_field & kPrevInuse) && h.prev_size != prev_size) {
    why = "prev_size " + hex(h.prev_size) + " is not the size of the free chunk before, " + hex(prev_size);
  }
  return why.empty() ? why : "chunk at " + hex(h.at) + ": " + why;
}

// The verdict for a candidate whose chunk lies in chunk `c` (which is never
// a block -- the top chunk or a fencepost -- or not, and in use or not).
Liveness decide(const Header& c, bool never_block, bool in_use, const HeapCandidate& cand,
                uint64_t small_chunk_max) {
  if (cand.addr - kHeaderBytes != c.at) return Liveness::kFreed;  // inside another chunk
  if (never_block) return Liveness::kFreed;
  const uint64_t want = glibc_request2size(cand.size);
  if (c.size() < want || c.size() - want > kChunkSlack) return Liveness::kFreed;  // another block's boundary
  if (c.size() <= small_chunk_max) return Liveness::kUndecided;  // tcache or a fastbin keep PREV_INUSE set
  return in_use ? Liveness::kLive : Liveness::kFreed;
}

// Walks `chain` from its first chunk to its end and decides the candidates
// order[begin..] (indices into `cands`, sorted by address, their chunks at
// or after chain.first) into verdicts[begin..]; one past the chain's end
// (a thread heap's unused tail) is kFreed. True when the walk reached the
// end; false (`why` says why) when it stopped, the verdicts then not to be
// trusted.
// The main arena's end asked again (Chain::end_now): true when it moved,
// `chain` and `window` then following it.
bool move_end(Chain& chain, WindowReader& window) {
  if (chain.end_now == nullptr || !*chain.end_now) return false;
  const uint64_t end = (*chain.end_now)();
  if (end == 0 || end == chain.end || end < chain.first + kMinChunk) return false;
  chain.end = end;
  window.set_end(end);
  return true;
}

// bad_header(), asking for the main arena's end again when `h` does not end
// within the end known (the break moved while the walk ran).
std::string checked_header(const Header& h, Chain& chain, WindowReader& window, uint64_t prev_size) {
  std::string why = bad_header(h, chain, prev_size);
  if (why.empty()) return why;
  const uint64_t end = h.at + h.size(), left = chain.end - h.at;
  const bool past_or_short = end > chain.end || (end < chain.end && chain.end - end < kMinChunk);
  if (h.size() >= kMinChunk && left >= kHeaderBytes && past_or_short && move_end(chain, window))
    why = bad_header(h, chain, prev_size);
  return why;
}

bool walk_chain(WindowReader& window, Chain chain, const std::vector<HeapCandidate>& cands,
                const std::vector<size_t>& order, size_t begin, uint64_t small_chunk_max,
                std::vector<Liveness>& verdicts, GlibcWalkStats& stats, std::string& why,
                uint64_t* reached = nullptr) {
  size_t next = begin;
  if (reached) *reached = chain.first;
  Header c;
  if (!window.header(chain.first, &c)) return false;
  if (why = checked_header(c, chain, window, 0); !why.empty()) return false;
  for (;;) {
    ++stats.chunks;
    // A fencepost's size is 0; its header still takes 16 bytes.
    const uint64_t end = c.at + std::max(c.size(), kHeaderBytes);
    bool last = end == chain.end;  // the top chunk, or the fencepost at a thread heap's end
    Header n;
    if (!last && !window.header(end, &n)) {
      // The break came down to this chunk's end while the walk ran: it is
      // the top chunk now.
      if (!move_end(chain, window) || chain.end != end) return false;
      why.clear();
      last = true;
    }
    if (!last) {
      if (why = checked_header(n, chain, window, c.size()); !why.empty()) return false;
    }
    const bool in_use = !last && (n.size_field & kPrevInuse);
    // In a thread heap the chunks before the last 16 bytes are fenceposts
    // (or an old top glibc gave up): never a block.
    const bool fence = chain.thread && (last || end + kHeaderBytes == chain.end);
    // glibc sets NON_MAIN_ARENA on every chunk it hands out from a thread
    // arena (tcache and fastbins keep it); it clears it on free chunks in
    // bins, on the top chunk and on fenceposts.
    if (chain.thread && in_use && !fence && !(c.size_field & kNonMainArena)) {
      why = "chunk at " + hex(c.at) + ": in use without NON_MAIN_ARENA in a thread heap";
      return false;
    }
    for (; next < order.size() && cands[order[next]].addr - kHeaderBytes < end; ++next) {
      verdicts[next] = decide(c, last || fence, in_use, cands[order[next]], small_chunk_max);
    }
    if (reached) *reached = end;
    if (last) {
      for (; next < order.size(); ++next) verdicts[next] = Liveness::kFreed;  // past the heap's end
      return true;
    }
    c = n;
  }
}

// Walks the main arena from its first chunk to the top chunk and decides
// the candidates `order` (indices into `cands`, their chunks inside the
// heap). True when the walk reached the top chunk; false (stats.stopped
// says why) when it stopped, the verdicts written then not to be trusted.
bool walk_main_arena(const HeapReader& read, uint64_t heap_start, uint64_t heap_end,
                     const std::vector<HeapCandidate>& cands, std::vector<size_t> order,
                     const GlibcHeapLimits& limits, std::vector<Liveness>& out, GlibcWalkStats& stats) {
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cands[a].addr < cands[b].addr; });
  const uint64_t first = align_up(heap_start, kAlignment);
  size_t begin = 0;
  // A chunk before the first one: not the main arena's (left undecided).
  while (begin < order.size() && cands[order[begin]].addr - kHeaderBytes < first) ++begin;
  if (first >= heap_end || heap_end - first < kMinChunk) {
    stats.stopped = "[heap] " + hex(heap_start) + "-" + hex(heap_end) + " too small for a chunk";
    return false;
  }
  WindowReader window(read, heap_end, limits, stats, stats.stopped);
  window.follow_end(&limits.heap_end_now);
  std::vector<Liveness> verdicts(order.size(), Liveness::kUndecided);
  // glibc keeps the break page aligned: the top chunk ends where [heap] does.
  uint64_t reached = first;
  const bool complete = walk_chain(window, Chain{first, heap_end, false, &limits.heap_end_now}, cands, order,
                                   begin, limits.small_chunk_max, verdicts, stats, stats.stopped, &reached);
  // Stopped: what lies before the chunk it stopped at was decided (see the
  // header); the rest stays kUndecided.
  stats.main_reached = complete ? UINT64_MAX : reached;
  for (size_t i = 0; i < order.size(); ++i)
    if (complete || cands[order[i]].addr - kHeaderBytes < reached) out[order[i]] = verdicts[i];
  return complete;
}

// The start of a thread heap.
struct HeapInfo {
  uint64_t ar_ptr = 0, prev = 0, size = 0, mprotect_size = 0, pagesize = 0;
};

// Where the first chunk of thread heap `h` may start, from its heap_info:
// after the heap_info, and in an arena's first heap (ar_ptr inside it)
// after the malloc_state too, for each size malloc_state has had. "" or
// why `info` is not a glibc heap_info.
std::string heap_starts(uint64_t h, const HeapInfo& info, std::vector<uint64_t>* starts) {
  // ar_ptr is the arena's malloc_state, just after its first heap's
  // heap_info: its offset in its own 64 MiB is sizeof(heap_info).
  const uint64_t info_size = info.ar_ptr & (kHeapMax - 1);
  const bool first_heap = info.ar_ptr - info_size == h;
  std::string why;
  if (info.size == 0 || info.size > kHeapMax || info.size % kPage != 0) {
    why = "size " + hex(info.size) + " is not whole pages up to 64 MiB";
  } else if (info.mprotect_size < info.size || info.mprotect_size > kHeapMax) {
    why = "mprotect_size " + hex(info.mprotect_size) + " is not from size to 64 MiB";
  } else if (info_size != 32 && info_size != 48) {
    why = "ar_ptr " + hex(info.ar_ptr) + " is not just after a heap_info";
  } else if (first_heap ? info.prev != 0 : info.prev == 0 || info.prev % kHeapMax != 0 || info.prev == h) {
    why = "prev " + hex(info.prev) + (first_heap ? " set in an arena's first heap" : " is not another heap");
  } else if (info_size == 48 && info.pagesize != kPage) {
    why = "pagesize " + std::to_string(info.pagesize) + " (huge pages: heaps of another size)";
  }
  if (!why.empty()) return "heap_info at " + hex(h) + ": " + why;
  starts->clear();
  if (!first_heap) starts->push_back(info_size);
  for (uint64_t state :
       first_heap ? std::span<const uint64_t>(kMallocStateSizes) : std::span<const uint64_t>()) {
    // The first chunk is aligned so that its user pointer is.
    const uint64_t at = align_up(info_size + state, kAlignment);
    if (std::find(starts->begin(), starts->end(), at) == starts->end()) starts->push_back(at);
  }
  std::erase_if(*starts, [&](uint64_t at) { return at + kMinChunk > info.size; });
  if (starts->empty())
    return "heap_info at " + hex(h) + ": size " + hex(info.size) + " leaves no room for a chunk";
  return "";
}

// Walks thread heap `h` and decides the candidates `order` (sorted by
// address, their chunks in the 64 MiB from h). The chain is tried from each
// possible start; the verdicts stand only when exactly one validates to the
// heap's end. False (`why` set, `out` untouched) otherwise.
bool walk_thread_heap(const HeapReader& read, uint64_t h, const std::vector<HeapCandidate>& cands,
                      const std::vector<size_t>& order, const GlibcHeapLimits& limits,
                      std::vector<Liveness>& out, GlibcWalkStats& stats, std::string& why) {
  uint8_t raw[kHeapInfoRead];
  if (read_counted(read, h, raw, sizeof raw, limits, stats, "a heap_info", why) != 0) return false;
  const HeapInfo info{load_u64(raw), load_u64(raw + 8), load_u64(raw + 16), load_u64(raw + 24),
                      load_u64(raw + 32)};
  std::vector<uint64_t> starts;
  if (why = heap_starts(h, info, &starts); !why.empty()) return false;
  std::string step_why, best_why;
  // The heap grows (and shrinks) with its top chunk while a busy thread
  // runs: its heap_info's size asked again, as the main arena's break.
  const std::function<uint64_t()> end_now = [&read, h]() -> uint64_t {
    uint64_t size = 0;
    if (read(h + 16, &size, sizeof size) != 0 || size == 0 || size > kHeapMax || size % kPage != 0) return 0;
    return h + size;
  };
  WindowReader window(read, h + info.size, limits, stats, step_why);
  window.follow_end(&end_now);
  std::vector<Liveness> verdicts(order.size()), found;
  size_t valid = 0;
  uint64_t best_chunks = 0, valid_at = 0;
  for (uint64_t start : starts) {
    // A chunk before the first one (in the heap_info or malloc_state): undecided.
    size_t begin = 0;
    while (begin < order.size() && cands[order[begin]].addr - kHeaderBytes < h + start) ++begin;
    std::fill(verdicts.begin(), verdicts.end(), Liveness::kUndecided);
    const uint64_t chunks_before = stats.chunks;
    window.set_end(h + info.size);
    if (walk_chain(window, Chain{h + start, h + info.size, true, &end_now}, cands, order, begin, limits.small_chunk_max,
                   verdicts, stats, step_why)) {
      ++valid;
      valid_at = h + start;
      found = verdicts;
    } else if (best_why.empty() || stats.chunks - chunks_before > best_chunks) {
      best_why = "from " + hex(h + start) + ", " + step_why;  // the try that got furthest says why
      best_chunks = stats.chunks - chunks_before;
    }
  }
  if (valid == 1) {
    for (size_t i = 0; i < order.size(); ++i) out[order[i]] = found[i];
    return true;
  }
  why = "thread heap at " + hex(h) + ": " +
        (valid == 0 ? "no chain of chunks validates to its end " + hex(h + info.size) + " (" + best_why + ")"
                    : "chains from " + std::to_string(valid) + " starts validate (the last " + hex(valid_at) +
                          "): ambiguous");
  return false;
}

// Decides the candidates `order` (outside [heap], not mmapped chunks) by
// walking the thread heap each lies in: grouped by heap, each heap walked
// once, at most limits.max_thread_heaps of them. `stop` gets the first
// reason a heap's candidates were left undecided.
void check_thread_heaps(const HeapReader& read, uint64_t heap_start, uint64_t heap_end,
                        const std::vector<HeapCandidate>& cands, std::vector<size_t> order,
                        const GlibcHeapLimits& limits, std::vector<Liveness>& out, GlibcWalkStats& stats,
                        std::string& stop) {
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cands[a].addr < cands[b].addr; });
  auto heap_of = [&](size_t i) {
    return heap_base(cands[i].addr - kHeaderBytes);
  };
  uint64_t heaps = 0;
  for (size_t i = 0; i < order.size();) {
    const uint64_t h = heap_of(order[i]);
    size_t j = i;
    while (j < order.size() && heap_of(order[j]) == h) ++j;
    const std::vector<size_t> group(order.begin() + static_cast<ptrdiff_t>(i),
                                    order.begin() + static_cast<ptrdiff_t>(j));
    i = j;
    std::string why;
    if (limits.mmap_rounding != kPage) {
      // glibc.malloc.hugetlb's huge pages make heaps 4 huge pages, a size not known here.
      why = "thread heaps not walked: mmap_rounding " + std::to_string(limits.mmap_rounding) +
            " (huge pages)";
    } else if (h == 0 || (h < heap_end && (heap_start <= h || heap_start - h < kHeapMax))) {
      why = "the 64 MiB at " + hex(h) + " cannot be a thread heap (page 0 or [heap])";
    } else if (++heaps > limits.max_thread_heaps) {
      why = "limit: more than " + std::to_string(limits.max_thread_heaps) + " thread heaps, one at " + hex(h);
    } else if (walk_thread_heap(read, h, cands, group, limits, out, stats, why)) {
      continue;
    }
    if (stop.empty()) stop = why;  // the group stays undecided
  }
}

// The verdict from an mmapped chunk's header (IS_MMAPPED set, NON_MAIN_ARENA
// clear) at cand.addr - 16.
Liveness mmapped_verdict(const HeapCandidate& cand, uint64_t prev_size, uint64_t size_field,
                         uint64_t rounding) {
  const uint64_t chunk = cand.addr - kHeaderBytes;
  const uint64_t s = size_field & ~kFlagBits;
  if (s < kHeaderBytes || s - kHeaderBytes < cand.size) return Liveness::kFreed;  // too small for it
  uint64_t slack = sat_add(rounding, kMmapHeaderSlack);
  // A plain mmapped block sits 16 bytes into a page; any other was
  // memaligned, with up to its alignment (at most the address's) to spare.
  if (cand.addr % kPage != kHeaderBytes) slack = sat_add(slack, cand.addr & (~cand.addr + 1));
  if (s - kHeaderBytes - cand.size >= slack) return Liveness::kFreed;  // made for a larger block
  if (prev_size > chunk || (chunk - prev_size) % kPage != 0) return Liveness::kFreed;
  if ((prev_size + s) % kPage != 0) return Liveness::kFreed;  // the mapping is whole pages
  return Liveness::kLive;
}

// A candidate outside [heap]: the header at addr - 16 says, or nullopt
// when it is not an mmapped chunk's (a thread heap's chunk, or its block
// freed: the thread heap's walk decides).
std::optional<Liveness> check_outside(const HeapReader& read, const HeapCandidate& cand,
                                      const GlibcHeapLimits& limits, GlibcWalkStats& stats) {
  uint8_t h[kHeaderBytes];
  std::string why;
  const int err = read_counted(read, cand.addr - kHeaderBytes, h, sizeof h, limits, stats, "a header", why);
  if (err == EFAULT) return Liveness::kFreed;  // unmapped: a live block's header is mapped
  if (err != 0) {
    if (stats.stopped.empty()) stats.stopped = why;
    return Liveness::kUndecided;
  }
  const uint64_t size_field = load_u64(h + 8);
  if ((size_field & (kIsMmapped | kNonMainArena)) != kIsMmapped) return std::nullopt;
  return mmapped_verdict(cand, load_u64(h), size_field, limits.mmap_rounding);
}

// A candidate glibc could have made: 16-byte aligned, a size it accepts.
bool well_formed(const HeapCandidate& c) {
  return c.addr >= kHeaderBytes && c.addr % kAlignment == 0 && glibc_request2size(c.size) != 0;
}

// Parses a tunable's number as glibc's _dl_strtoul reads it: decimal, 0x
// hex, 0 octal. False for anything else (signs and blanks included).
bool parse_tunable_number(std::string_view s, uint64_t* out) {
  int base = 10;
  if (s.size() > 1 && s[0] == '0') {
    const bool x = s[1] == 'x' || s[1] == 'X';
    base = x ? 16 : 8;
    s.remove_prefix(x ? 2 : 1);
  }
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, base);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Calls fn(name, value) for each name=value of GLIBC_TUNABLES; false when an
// entry is not name=value. Empty entries (a stray ':') are skipped.
template <typename Fn>
bool for_each_tunable(std::string_view tunables, Fn&& fn) {
  while (!tunables.empty()) {
    const size_t colon = tunables.find(':');
    const std::string_view entry = tunables.substr(0, colon);
    tunables = colon == std::string_view::npos ? std::string_view() : tunables.substr(colon + 1);
    if (entry.empty()) continue;
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) return false;
    if (!fn(entry.substr(0, eq), entry.substr(eq + 1))) return false;
  }
  return true;
}

}  // namespace

const char* liveness_name(Liveness v) {
  switch (v) {
    case Liveness::kLive: return "live";
    case Liveness::kFreed: return "freed";
    case Liveness::kUndecided: return "undecided";
  }
  return "?";
}

uint64_t glibc_request2size(uint64_t n) {
  if (n > static_cast<uint64_t>(PTRDIFF_MAX)) return 0;
  return std::max<uint64_t>(kMinChunk, (n + 8 + kAlignment - 1) & ~(kAlignment - 1));
}

std::vector<Liveness> check_glibc_chunks(const HeapReader& read, uint64_t heap_start, uint64_t heap_end,
                                         const std::vector<HeapCandidate>& candidates,
                                         const GlibcHeapLimits& limits, GlibcWalkStats* stats) {
  GlibcWalkStats local;
  GlibcWalkStats& st = stats != nullptr ? *stats : local;
  st = GlibcWalkStats{};
  std::vector<Liveness> out(candidates.size(), Liveness::kUndecided);
  std::vector<size_t> in_heap, in_threads;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const HeapCandidate& c = candidates[i];
    if (!well_formed(c)) continue;
    if (c.addr >= heap_start && c.addr < heap_end) {
      in_heap.push_back(i);
    } else if (c.addr - kHeaderBytes < heap_start || c.addr - kHeaderBytes >= heap_end) {
      // Not an mmapped chunk's header: its thread heap decides.
      const std::optional<Liveness> v = check_outside(read, c, limits, st);
      if (!v) in_threads.push_back(i);
      out[i] = v.value_or(Liveness::kUndecided);
    }  // else its header is in [heap] and the block past it: no chunk of glibc's
  }
  // The reason reported: the main arena's, else a thread heap's, else a header's.
  std::string outside_stop = std::move(st.stopped), main_stop, thread_stop;
  st.stopped.clear();
  // A stopped walk leaves the candidates it did not reach kUndecided.
  if (!in_heap.empty()) (void)walk_main_arena(read, heap_start, heap_end, candidates, in_heap, limits, out, st);
  main_stop = std::move(st.stopped);
  st.stopped.clear();
  check_thread_heaps(read, heap_start, heap_end, candidates, std::move(in_threads), limits, out, st,
                     thread_stop);
  st.stopped = !main_stop.empty()     ? std::move(main_stop)
               : !thread_stop.empty() ? std::move(thread_stop)
                                      : std::move(outside_stop);
  for (Liveness v : out) {
    if (v == Liveness::kLive) ++st.live;
    if (v == Liveness::kFreed) ++st.freed;
    if (v == Liveness::kUndecided) ++st.undecided;
  }
  st.complete = st.stopped.empty();
  return out;
}

uint64_t glibc_small_chunk_max(std::string_view tunables) {
  uint64_t max = kGlibcDefaultSmallChunkMax;
  const bool ok = for_each_tunable(tunables, [&](std::string_view name, std::string_view value) {
    if (name != "glibc.malloc.tcache_max" && name != "glibc.malloc.mxfast") return true;
    uint64_t n = 0;
    if (!parse_tunable_number(value, &n) || glibc_request2size(n) == 0) return false;
    max = std::max(max, glibc_request2size(n));
    return true;
  });
  return ok ? max : UINT64_MAX;
}

uint64_t glibc_mmap_rounding(std::string_view tunables) {
  uint64_t rounding = kPage;
  const bool ok = for_each_tunable(tunables, [&](std::string_view name, std::string_view value) {
    if (name != "glibc.malloc.hugetlb") return true;
    uint64_t n = 0;
    if (!parse_tunable_number(value, &n)) return false;
    if (n == 2) {
      rounding = 1ull << 30;  // the system's default huge page: at most 1 GiB on x86-64
    } else if (n >= kPage && (n & (n - 1)) == 0) {
      rounding = n;
    } else {
      rounding = kPage;  // 0 and 1 (THP by madvise) keep pages; glibc ignores other sizes
    }
    return true;
  });
  return ok ? rounding : UINT64_MAX;
}

}  // namespace lw
