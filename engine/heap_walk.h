/* SPDX-License-Identifier: Apache-2.0 */
// Windows and walks (decision busy-processes, "Windows and walks"): a
// process whose free side alone is over the governor's budget has no heap
// probe on between a burst's window and the next burst. Its heap records
// are then settled by reading glibc's heap in its memory
// (core/accounting/glibc_heap.h):
//
// - mark(), at a window's end, while the free side is still on (so every
//   record is live now): each heap record gets a mark, the bytes glibc
//   would write if the block were freed (the chunk's first 16 bytes, where
//   a free puts its bin links, and the next chunk's prev_size, where it
//   puts the chunk's size). A record nothing can follow is dropped and
//   counted as undecided: a chunk small enough for tcache or a fastbin
//   (whose in-use bit glibc keeps set when freed), a mark a free would not
//   change (prev_size already
//   holding the size), a read that fails, or past kMaxMarks.
// - settle(), once the free side is attached again (a free from then on
//   is seen) and before the allocating side: the chunk chains of the main
//   arena and of the thread heaps holding records are walked (mmapped
//   chunks read one by one), and a record is kept
//   only if its chunk is still there, of its size, in use, and its mark
//   unchanged; freed ones are retired as frees, the rest as undecided.
//   The daemon also walks while parked (every kParkedWalkSeconds), so a
//   block freed in the gap leaves its site within that time, not at the
//   next burst.
//
// Thread-safety: not thread-safe (the Tracer's thread).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <unordered_map>

#include "core/accounting/glibc_heap.h"
#include "engine/bpf_session.h"
#include "view/process_view.h"

namespace lw {

struct TracedProcess;

// At most this many records marked a window (the rest are undecided).
inline constexpr size_t kMaxHeapMarks = 1u << 16;

struct HeapMark {
  uint64_t alloc_ns = 0;
  uint64_t head[2] = {0, 0};
  uint64_t foot = 0;  // the next chunk's prev_size (not for mmapped chunks)
  bool mmapped = false;
  uint8_t unreached = 0;  // walks in a row that stopped before its chunk
};

// A record the main arena's walks stopped before (a busy process moves
// its top chunk, and the chunks near it, while it is walked) stays for at
// most this many walks in a row, then is dropped as undecided.
inline constexpr uint8_t kMaxUnreachedWalks = 3;

// One process's marks and what its walks did (the snapshot's HeapWalkView).
struct HeapWalkState {
  std::unordered_map<uint64_t, HeapMark> marks;  // by address
  uint64_t small_chunk_max = 0;                  // 0 until the environment was read
  uint64_t mmap_rounding = 4096;
  HeapWalkView view;
};

// Whether pid's heap probes are glibc's malloc (libc.so.6 and no other
// allocator role): its heap can be walked.
bool heap_walkable(const TracedProcess& p);

// Marks p's heap records (see above); the undecided ones are retired and
// deleted from the kernel's live map.
void mark_heap_records(TracedProcess& p, BpfSession& session);

// Walks p's heap and retires the records whose blocks were freed (or can
// no longer be told live); at most `max_read_bytes` of the target are read.
void settle_heap_records(TracedProcess& p, BpfSession& session, uint64_t max_read_bytes);

}  // namespace lw
