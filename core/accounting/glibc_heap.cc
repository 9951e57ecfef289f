// SPDX-License-Identifier: Apache-2.0
// Whether recorded blocks are still allocated in another process's glibc
// heap: the main arena's walk and the mmapped chunks' headers. The layout
// assumed and the rules are in glibc_heap.h. Pure; thread-safe (no shared
// state).
#include "core/accounting/glibc_heap.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstring>

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

struct Header {
  uint64_t at = 0;  // the chunk's address
  uint64_t prev_size = 0;
  uint64_t size_field = 0;  // with its flag bits
  uint64_t size() const { return size_field & ~kFlagBits; }
};

// The main arena, read through one window at a time that moves forward along
// the chain: at most one window is held, and every byte read counts against
// max_read_bytes.
class WindowReader {
 public:
  WindowReader(const HeapReader& read, uint64_t heap_end, const GlibcHeapLimits& limits,
               GlibcWalkStats& stats)
      : read_(read), heap_end_(heap_end), max_read_(limits.max_read_bytes), stats_(stats) {
    window_ = std::max<uint64_t>(limits.window_bytes, kHeaderBytes);
  }

  // The header of the chunk at `at` (at + 16 <= heap_end). False, with
  // stats.stopped set, when it cannot be read.
  bool header(uint64_t at, Header* out) {
    if (at < buf_at_ || at - buf_at_ + kHeaderBytes > buf_.size()) {
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
    const uint64_t budget = stats_.bytes_read < max_read_ ? max_read_ - stats_.bytes_read : 0;
    const uint64_t len = std::min({window_, heap_end_ - at, budget});
    if (len < kHeaderBytes) {
      stats_.stopped = "limit: " + std::to_string(stats_.bytes_read) + " bytes read (max_read_bytes " +
                       std::to_string(max_read_) + "), the walk at " + hex(at);
      return false;
    }
    buf_.resize(len);
    stats_.bytes_read += len;
    if (const int err = read_(at, buf_.data(), len); err != 0) {
      buf_.clear();
      stats_.stopped = "read of " + std::to_string(len) + " bytes at " + hex(at) +
                       " failed: " + std::strerror(err);
      return false;
    }
    buf_at_ = at;
    return true;
  }

  const HeapReader& read_;
  const uint64_t heap_end_;
  const uint64_t max_read_;
  GlibcWalkStats& stats_;
  uint64_t window_ = 0;
  std::vector<uint8_t> buf_;
  uint64_t buf_at_ = 0;
};

// Why `h` cannot be a main-arena chunk, "" when it can. `prev_size` is the
// size of the chunk before it, 0 for the first chunk.
std::string bad_header(const Header& h, uint64_t heap_end, uint64_t prev_size) {
  const uint64_t s = h.size();
  std::string why;
  if (s < kMinChunk) {
    why = "size " + hex(s) + " below MINSIZE";
  } else if (s % kAlignment != 0) {
    why = "size " + hex(s) + " not a multiple of 16";
  } else if (h.size_field & kNonMainArena) {
    why = "NON_MAIN_ARENA set in the main arena";
  } else if (h.size_field & kIsMmapped) {
    why = "IS_MMAPPED set in the main arena";
  } else if (s > heap_end - h.at) {
    why = "size " + hex(s) + " runs past the heap's end " + hex(heap_end);
  } else if (heap_end - h.at - s != 0 && heap_end - h.at - s < kMinChunk) {
    why = "ends " + std::to_string(heap_end - h.at - s) +
          " bytes short of the heap's end, no room for a chunk";
  } else if (!(h.size_field & kPrevInuse) && prev_size == 0) {
    why = "the first chunk without PREV_INUSE";
  } else if (!(h.size_field & kPrevInuse) && h.prev_size != prev_size) {
    why = "prev_size " + hex(h.prev_size) + " is not the size of the free chunk before, " + hex(prev_size);
  }
  return why.empty() ? why : "chunk at " + hex(h.at) + ": " + why;
}

// The verdict for a candidate whose chunk lies in chunk `c` (which is the
// top chunk or not, and in use or not).
Liveness decide(const Header& c, bool top, bool in_use, const HeapCandidate& cand, uint64_t small_chunk_max) {
  if (cand.addr - kHeaderBytes != c.at) return Liveness::kFreed;  // inside another chunk
  if (top) return Liveness::kFreed;                               // the top chunk is never in use
  const uint64_t want = glibc_request2size(cand.size);
  if (c.size() < want || c.size() - want > kChunkSlack) return Liveness::kFreed;  // another block's boundary
  if (c.size() <= small_chunk_max) return Liveness::kUndecided;  // tcache or a fastbin keep PREV_INUSE set
  return in_use ? Liveness::kLive : Liveness::kFreed;
}

// Walks the main arena from its first chunk to the top chunk and decides
// the candidates `order` (indices into `cands`, their chunks inside the
// heap). True when the walk reached the top chunk; false (stats.stopped
// says why) when it stopped, the verdicts written then not to be trusted.
bool walk_main_arena(const HeapReader& read, uint64_t heap_start, uint64_t heap_end,
                     const std::vector<HeapCandidate>& cands, std::vector<size_t> order,
                     const GlibcHeapLimits& limits, std::vector<Liveness>& out, GlibcWalkStats& stats) {
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cands[a].addr < cands[b].addr; });
  const uint64_t first = (heap_start + kAlignment - 1) & ~(kAlignment - 1);
  size_t next = 0;
  // A chunk before the first one: not the main arena's (left undecided).
  while (next < order.size() && cands[order[next]].addr - kHeaderBytes < first) ++next;
  if (first >= heap_end || heap_end - first < kMinChunk) {
    stats.stopped = "[heap] " + hex(heap_start) + "-" + hex(heap_end) + " too small for a chunk";
    return false;
  }
  WindowReader window(read, heap_end, limits, stats);
  Header c;
  if (!window.header(first, &c)) return false;
  if (stats.stopped = bad_header(c, heap_end, 0); !stats.stopped.empty()) return false;
  for (;;) {
    ++stats.chunks;
    const uint64_t end = c.at + c.size();
    // glibc keeps the break page aligned: the top chunk ends where [heap] does.
    const bool top = end == heap_end;
    Header n;
    if (!top) {
      if (!window.header(end, &n)) return false;
      if (stats.stopped = bad_header(n, heap_end, c.size()); !stats.stopped.empty()) return false;
    }
    const bool in_use = !top && (n.size_field & kPrevInuse);
    for (; next < order.size() && cands[order[next]].addr - kHeaderBytes < end; ++next) {
      out[order[next]] = decide(c, top, in_use, cands[order[next]], limits.small_chunk_max);
    }
    if (top) return true;
    c = n;
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

// A candidate outside [heap]: the header at addr - 16 says.
Liveness check_outside(const HeapReader& read, const HeapCandidate& cand, const GlibcHeapLimits& limits,
                       GlibcWalkStats& stats) {
  if (stats.bytes_read >= limits.max_read_bytes || limits.max_read_bytes - stats.bytes_read < kHeaderBytes) {
    if (stats.stopped.empty()) {
      stats.stopped = "limit: " + std::to_string(stats.bytes_read) + " bytes read (max_read_bytes " +
                      std::to_string(limits.max_read_bytes) + "), a header at " +
                      hex(cand.addr - kHeaderBytes);
    }
    return Liveness::kUndecided;
  }
  uint8_t h[kHeaderBytes];
  stats.bytes_read += kHeaderBytes;
  const int err = read(cand.addr - kHeaderBytes, h, sizeof h);
  if (err == EFAULT) return Liveness::kFreed;  // unmapped: a live block's header is mapped
  if (err != 0) {
    if (stats.stopped.empty()) {
      stats.stopped = "read of the header at " + hex(cand.addr - kHeaderBytes) +
                      " failed: " + std::strerror(err);
    }
    return Liveness::kUndecided;
  }
  const uint64_t size_field = load_u64(h + 8);
  if ((size_field & (kIsMmapped | kNonMainArena)) != kIsMmapped) return Liveness::kUndecided;
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
  std::vector<size_t> in_heap;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const HeapCandidate& c = candidates[i];
    if (!well_formed(c)) continue;
    if (c.addr >= heap_start && c.addr < heap_end) {
      in_heap.push_back(i);
    } else if (c.addr - kHeaderBytes < heap_start || c.addr - kHeaderBytes >= heap_end) {
      out[i] = check_outside(read, c, limits, st);
    }  // else its header is in [heap] and the block past it: no chunk of glibc's
  }
  if (!in_heap.empty()) {
    std::string outside_stop = std::move(st.stopped);
    st.stopped.clear();
    if (!walk_main_arena(read, heap_start, heap_end, candidates, in_heap, limits, out, st)) {
      for (size_t i : in_heap) out[i] = Liveness::kUndecided;
    }
    if (st.stopped.empty()) st.stopped = std::move(outside_stop);
  }
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
