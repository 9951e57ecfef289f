// SPDX-License-Identifier: Apache-2.0
// Names and encodings shared by the stored stacks (bpf/leakwatch_abi.h,
// struct lw_stack) and what readers see of them.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/symbols/symbolizer.h"

namespace lw {

// The kernel's encoding of a device number (MKDEV: major << 20 | minor), as
// a super block's s_dev holds it; /proc/PID/maps prints major and minor.
constexpr uint32_t kernel_dev(uint32_t major, uint32_t minor) { return (major << 20) | minor; }

// How a frame was found (enum lw_unwound): "leaf", "cfi", "fp", "hint";
// "unknown" for other values.
const char* unwound_name(uint8_t how);

// Why a stack ends (enum lw_stack_end): "" when complete; "no_cfi", "depth",
// "table_pending", "memory_budget", "unmapped", "read_failed", "vma_busy",
// "frame_pointers"; "unknown" for other values.
const char* stack_end_name(uint32_t end);

// The one frame of the site that holds heap re-grown below its highest
// break, recorded without a stack walk (LW_STACK_HEAP_REGROWN,
// decision brk-emulated-probe); such a stack ends "not_walked".
inline constexpr const char* kHeapRegrownFunction =
    "[heap re-grown below its high-water mark: stack not walked]";
std::vector<Frame> heap_regrown_frames();

// The heap bytes of a string beyond its own struct: its buffer when it is
// not held inline (libstdc++ keeps up to 15 characters inside).
inline size_t string_heap_bytes(const std::string& s) { return s.capacity() > 15 ? s.capacity() + 1 : 0; }
// What a frame holds in the daemon's heap: the struct and its strings'
// buffers (decision process-cost).
size_t frame_memory_bytes(const Frame& f);

// How many leading frames of a kind-mmap record's stack are glibc's
// allocator at work for its caller: what the light tier's brk and mmap
// probes see under a malloc (__default_morecore, sysmalloc, _int_malloc,
// arena and tcache set-up, malloc and its siblings; issue 35, item 7). The
// heap tier's stacks start at the allocator's caller already; these are
// dropped the same way, so the site is the function that asked for memory.
// Frames in libc count by name where libc is symbolized (a libc function
// that is not the allocator, such as pthread_create's allocate_stack,
// stays), and all of them where it is not (Debian's libc without
// libc6-dbg: its callers are named instead of libc.so.6+0x...). Frames
// inlined into a frame go with it. At least one frame stays.
size_t allocator_leaf_frames(const std::vector<Frame>& frames);

}  // namespace lw
