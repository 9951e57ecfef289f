// SPDX-License-Identifier: Apache-2.0
// Whether recorded blocks of another process are still allocated, read from
// that process's glibc heap (docs/decisions/0065-busy-processes.md, "Next,
// for a process whose frees are too many"): the daemon settles the blocks
// its free probe did not see by walking the target's main arena and its
// thread arenas' heaps and reading the headers of its mmapped chunks. Pure: the target's memory comes through
// a HeapReader (process_vm_readv in the daemon, a byte image in tests).
// Thread-safety: free functions, no shared state; a call uses only its
// arguments (and calls `read` from the calling thread).
//
// What it assumes of the target: glibc's ptmalloc as in glibc 2.36 on x86-64
// (Debian 12) and the releases around it whose chunk layout is the same:
//   - SIZE_SZ 8, MALLOC_ALIGNMENT 16, MINSIZE 32; a chunk is 16 bytes of
//     header {prev_size, size} then the user block, so user pointer p has its
//     chunk at p - 16; chunk sizes are multiples of 16, at least 32.
//   - size's low bits: PREV_INUSE 0x1 (the chunk before is in use),
//     IS_MMAPPED 0x2, NON_MAIN_ARENA 0x4.
//   - request2size(n) = max(32, (n + 8 + 15) & ~15); a block of n bytes has
//     a chunk of request2size(n) to request2size(n) + 32 bytes (a split
//     leaves a remainder of under MINSIZE with the chunk; memalign trims its
//     tail only above MINSIZE).
//   - the main arena is one run of chunks from the start of "[heap]" (the
//     first chunk there, its PREV_INUSE set) to the top chunk, which ends at
//     the program break; glibc keeps the break page aligned (it aligns the
//     end of its first sbrk and grows and trims by whole pages), so the top
//     chunk ends exactly at the end of the "[heap]" mapping. A free chunk in
//     a bin has the next chunk's PREV_INUSE clear and its size repeated in
//     the next chunk's prev_size; a chunk in tcache or a fastbin keeps the
//     bit set, which is why small chunks cannot be decided (see
//     glibc_small_chunk_max()).
//   - an mmapped chunk (IS_MMAPPED, a block above the mmap threshold) starts
//     prev_size bytes after the start of its mapping (page aligned), and is
//     the request rounded up to a page (memalign: plus the alignment).
//   - a thread arena (any arena but the main one) lives in heaps of
//     HEAP_MAX_SIZE, 64 MiB, each reserved at a multiple of 64 MiB, so a
//     chunk at c is in the heap at h = c & ~(64 MiB - 1). A heap starts with
//     heap_info {ar_ptr, prev, size, mprotect_size, pagesize (2.35+), pad}:
//     48 bytes since 2.35, 32 before; `size` (whole pages, at most 64 MiB,
//     at most mprotect_size) is how much of it the arena uses. ar_ptr is the
//     arena's malloc_state, just after its first heap's heap_info (so its
//     offset in its own 64 MiB is sizeof(heap_info)); that first heap has
//     prev 0 and its first chunk after the malloc_state (2,200 bytes since
//     2.27, 2,192 or 2,184 before), aligned to 16; a later heap (the arena
//     grown) has prev set to the heap before and its first chunk right after
//     its heap_info. The chunks run to h + size: in the arena's newest heap
//     the last is the top chunk (PREV_INUSE set); an older heap ends in
//     glibc's fenceposts: its old top, freed (or, under 64 bytes, kept as a
//     16- or 32-byte fence), a 16-byte fencepost, and the last 16 bytes a
//     header of size 0 | PREV_INUSE, the fences NON_MAIN_ARENA clear.
//     glibc sets NON_MAIN_ARENA on each chunk it hands out (tcache and
//     fastbins keep it) and clears it on free chunks in bins and the top.
//     With glibc.malloc.hugetlb's huge pages heaps are 4 huge pages: not
//     walked (limits.mmap_rounding other than a page says so).
// A heap that breaks these (another allocator in the process, sbrk called by
// someone else, a corrupted heap) fails the header checks and makes the
// blocks undecided; a mapping that starts with bytes that happen to form a
// valid chain to the end of [heap] (or a heap_info and a chain to its
// size) would not, and is not guarded against.
//
// Verdicts (soundness before coverage: a block that was freed never reads
// kLive, except in the residual cases below):
//   main arena (candidate inside [heap_start, heap_end)): the chain of
//   chunks is walked from the first chunk to the top chunk, every header
//   checked (size >= 32, a multiple of 16, ending within the heap,
//   NON_MAIN_ARENA and IS_MMAPPED clear, the first chunk's PREV_INUSE set, a
//   clear PREV_INUSE matched by prev_size). The walk decides a candidate
//   whose chunk (addr - 16) it
//     - lands on, not the top chunk: a size outside request2size(size) ..
//       + 32 is kFreed (another block owns that boundary now); a size up to
//       small_chunk_max is kUndecided (tcache and fastbins keep the in-use
//       bit set); else kLive if the next chunk's PREV_INUSE is set, kFreed
//       if it is clear;
//     - lands on, the top chunk (never in use): kFreed;
//     - steps over (the chunk lies inside another, the top chunk included):
//       kFreed.
//   A header that fails a check, a read that fails or the read limit stops
//   the walk, `stopped` saying why and where: the candidates before the
//   chunk it stopped at keep their verdicts (decided on headers that were
//   checked, as in a walk that completes: a running process's heap changes
//   most near its top chunk, where a busy process's walks stop), the rest
//   are kUndecided, `main_reached` telling the two apart.
//   outside [heap]: the 16-byte header at addr - 16 is read. Not mapped
//   (EFAULT): kFreed (a live block's header is mapped); another read error:
//   kUndecided. IS_MMAPPED alone: kLive if the chunk holds the block with
//   less than mmap_rounding (a page) and 64 bytes to spare (memalign: plus
//   the address's alignment), addr - 16 - prev_size is page aligned and
//   prev_size + size is whole pages (the mapping), else kFreed.
//   Any other header (NON_MAIN_ARENA set, or clear: a freed block's chunk
//   in a bin or the top has it clear): the thread heap h = (addr - 16) &
//   ~(64 MiB - 1) is walked, once for all its candidates. Its heap_info
//   (48 bytes read) must pass the checks above (size, mprotect_size, ar_ptr,
//   prev, pagesize 4,096 in a 48-byte heap_info); then the chain is tried
//   from each possible first chunk (one in a later heap; in a first heap
//   one per malloc_state size: two offsets) to h + size, each header
//   checked as in the main arena except: NON_MAIN_ARENA set on each chunk
//   in use (the next chunk's PREV_INUSE set), the fences excepted; the last
//   chunk the top (PREV_INUSE set) or the fenceposts as above. The verdicts
//   stand only when exactly one start validates (two would each decide
//   blocks the other does not have); they are the main arena's, a top
//   chunk or a fence counting as the top chunk, a chunk before the first
//   chunk kUndecided and one past h + size (the heap's unused tail) kFreed.
//   A heap_info that fails, no start or two that validate, a read that
//   fails or the read limit: that heap's candidates kUndecided, `stopped`
//   saying why. Also kUndecided without a walk: h at page 0 or its 64 MiB
//   overlapping [heap] (no glibc heap can), mmap_rounding not a page (huge
//   pages), a heap past limits.max_thread_heaps (by address).
//   Always kUndecided: an address not 16-byte aligned or below 16, a size
//   glibc refuses (above PTRDIFF_MAX), a chunk before its heap's first
//   chunk.
//
// Residuals, which the caller must document:
//   - address reuse: a block freed whose exact address was handed out again
//     for a block of a size within the same bounds reads kLive (the bytes
//     are live, under another allocation). Within a walk the same happens
//     for a block allocated at that address while the walk runs.
//   - a running target: the reads are not atomic. A chain torn by the
//     target's own malloc/free between two reads mostly fails the header
//     checks (undecided), but could in principle land on stale headers
//     inside a free chunk; exact results need the target stopped.
//   - an mmapped block unmapped and its address mapped again by other data
//     whose bytes at addr - 16 happen to form a matching mmapped header; the
//     same for a thread arena's block freed whose bytes at addr - 16 (in
//     another chunk's data) now happen to form one (the header is read
//     before the heap is walked).
//   - a thread heap's chain read from a wrong start that happens to validate
//     while the right one does not (a torn read, a corrupted heap): with no
//     second chain to show the ambiguity, its verdicts are taken.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace lw {

// Reads `len` bytes of the target at `addr` into `out`. Returns 0 when all
// bytes were read, EFAULT when the range is not (wholly) mapped, another
// errno otherwise (ESRCH: the target is gone).
using HeapReader = std::function<int(uint64_t addr, void* out, size_t len)>;

enum class Liveness : uint8_t { kLive, kFreed, kUndecided };
const char* liveness_name(Liveness v);

// A recorded block: its user pointer and the size it was requested with.
struct HeapCandidate {
  uint64_t addr = 0;
  uint64_t size = 0;
};

// glibc 2.36's defaults: tcache takes requests up to 1,032 bytes, chunks up
// to request2size(1032) = 1,040; fastbins stop lower (176 at most).
inline constexpr uint64_t kGlibcDefaultSmallChunkMax = 1040;

struct GlibcHeapLimits {
  // Read at most this much of the target per call (windows and headers).
  uint64_t max_read_bytes = 256ull << 20;
  // Chunks up to this size may sit in tcache or a fastbin: undecided
  // (glibc_small_chunk_max() of the target's GLIBC_TUNABLES).
  uint64_t small_chunk_max = kGlibcDefaultSmallChunkMax;
  // The walk reads the heap in windows of this many bytes moving along the
  // chain; a chunk larger than a window is stepped over, not read. At
  // least 16 is used.
  uint64_t window_bytes = 64ull << 10;
  // mmapped chunks are whole multiples of this (glibc_mmap_rounding() of
  // the target's GLIBC_TUNABLES): the slack an mmapped chunk may have over
  // its block is this plus 64 bytes (memalign: plus the alignment).
  uint64_t mmap_rounding = 4096;
  // Walk at most this many thread heaps per call; the candidates in others
  // are undecided.
  uint64_t max_thread_heaps = 1024;
  // The end of the target's "[heap]" mapping now (0: not known), asked when
  // the main arena's walk reaches a chunk that does not end within the end
  // it knew, or cannot read past one that ends before it: a running
  // process moves the break, and the top chunk with it, while it is
  // walked (a PyTorch serving loop does, many times in a 150 ms walk).
  // Empty: the end passed in is final.
  std::function<uint64_t()> heap_end_now;
};

struct GlibcWalkStats {
  uint64_t bytes_read = 0;  // of the target, windows and headers
  // Chunks walked (headers checked), the top chunks and fenceposts included:
  // the main arena's and the thread heaps', a thread heap's tries from each
  // possible first chunk counted.
  uint64_t chunks = 0;
  uint64_t live = 0, freed = 0, undecided = 0;  // the verdicts returned
  // True when nothing stopped the call: each walk a candidate needed
  // validated to its heap's end, and every header read was made.
  bool complete = false;
  // The main arena's walk decided the candidates whose chunks lie below
  // this address: when it stopped, those at or past it are kUndecided for
  // not being reached (a walk later may reach them).
  uint64_t main_reached = 0;
  // Why not, with the address: "" when complete. One reason: the main
  // arena's walk's, else the first thread heap's (by address), else a
  // header read's.
  std::string stopped;
};

// glibc's request2size(): the chunk size malloc(n) is made from. 0 when
// glibc refuses n (above PTRDIFF_MAX).
uint64_t glibc_request2size(uint64_t n);

// One verdict per candidate, in input order (see the file comment).
// [heap_start, heap_end) is the target's "[heap]" mapping (glibc's main
// arena); empty (0, 0) when it has none. `stats` may be null.
std::vector<Liveness> check_glibc_chunks(const HeapReader& read, uint64_t heap_start, uint64_t heap_end,
                                         const std::vector<HeapCandidate>& candidates,
                                         const GlibcHeapLimits& limits, GlibcWalkStats* stats);

// The largest chunk size that may sit in tcache or a fastbin, from the value
// of the target's GLIBC_TUNABLES ("name=value:name=value"; empty: the
// defaults, 1,040). glibc.malloc.tcache_max=N and glibc.malloc.mxfast=N
// raise it to request2size(N) (never lower it: a smaller tcache still leaves
// the default a safe bound; glibc 2.36 ignores a tcache_max above 1,032,
// later releases do not). A value of either that does not parse as a
// number (decimal, 0x hex), or an entry that is not name=value, makes it
// UINT64_MAX: every main-arena chunk undecided.
uint64_t glibc_small_chunk_max(std::string_view tunables);

// What glibc rounds an mmapped chunk up to, from the same GLIBC_TUNABLES:
// the page (4,096) unless glibc.malloc.hugetlb asks for huge pages for its
// mmapped chunks: 2 (the system's default huge page size, not known here:
// 1 GiB, the largest x86-64 has) or a size (that size when it is a power of
// two of at least 4,096; glibc falls back to pages for any other). A value
// that does not parse: UINT64_MAX (any slack).
uint64_t glibc_mmap_rounding(std::string_view tunables);

}  // namespace lw
