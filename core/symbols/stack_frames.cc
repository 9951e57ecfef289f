// SPDX-License-Identifier: Apache-2.0
#include "core/symbols/stack_frames.h"

#include <string>
#include <string_view>

#include "leakwatch_abi.h"

namespace lw {

const char* unwound_name(uint8_t how) {
  switch (how) {
    case LW_UNWOUND_LEAF: return "leaf";
    case LW_UNWOUND_CFI: return "cfi";
    case LW_UNWOUND_FP: return "fp";
    case LW_UNWOUND_HINT: return "hint";
  }
  return "unknown";
}

const char* stack_end_name(uint32_t end) {
  switch (end) {
    case LW_END_COMPLETE: return "";
    case LW_END_NO_CFI: return "no_cfi";
    case LW_END_DEPTH: return "depth";
    case LW_END_TABLE_PENDING: return "table_pending";
    case LW_END_MEMORY_BUDGET: return "memory_budget";
    case LW_END_UNMAPPED: return "unmapped";
    case LW_END_READ_FAILED: return "read_failed";
    case LW_END_VMA_BUSY: return "vma_busy";
    case LW_END_FRAME_POINTERS: return "frame_pointers";
    // Stopped at CPython's evaluation loop by design, the Python frames read
    // whole standing for the native ones above: not cut short (decision
    // python-frames, "Where the native walk stops").
    case LW_END_PYTHON: return "";
  }
  return "unknown";
}

namespace {

// glibc's malloc family and its internals, without GCC's clone suffixes
// (.part.0, .constprop.0, .isra.0) or a symbol version.
bool glibc_allocator_function(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "malloc", "__libc_malloc", "__malloc", "calloc", "__libc_calloc", "realloc", "__libc_realloc",
      "reallocarray", "__libc_reallocarray", "free", "__libc_free", "cfree", "memalign",
      "__libc_memalign", "_mid_memalign", "posix_memalign", "__posix_memalign", "aligned_alloc",
      "valloc", "__libc_valloc", "pvalloc", "__libc_pvalloc", "_int_malloc", "_int_realloc",
      "_int_memalign", "_int_free", "sysmalloc", "malloc_consolidate", "__default_morecore",
      "__glibc_morecore", "tcache_init", "arena_get2", "_int_new_arena", "new_heap", "alloc_new_heap",
      "grow_heap", "sbrk", "__sbrk", "brk", "__brk", "mmap", "mmap64", "__mmap", "__mmap64",
      "mremap", "__mremap"};
  name = name.substr(0, name.find_first_of(".@"));  // also a version (@GLIBC_2.2.5)
  for (std::string_view n : kNames)
    if (name == n) return true;
  return false;
}

bool in_libc(const Frame& f) {
  const size_t slash = f.module.rfind('/');
  const std::string_view base = std::string_view(f.module).substr(slash == std::string::npos ? 0 : slash + 1);
  return base.rfind("libc.so", 0) == 0 || base.rfind("libc-", 0) == 0;
}

}  // namespace

size_t allocator_leaf_frames(const std::vector<Frame>& frames) {
  // By physical frame: the frames inlined into one (DWARF's, whatever their
  // names: glibc inlines its helpers) go with it.
  size_t n = 0;
  for (;;) {
    size_t end = n;
    while (end < frames.size() && frames[end].inlined) ++end;
    if (end + 1 >= frames.size()) return n;  // at least one frame stays
    const Frame& f = frames[end];
    if (f.language != "native" || !in_libc(f) || (!f.function.empty() && !glibc_allocator_function(f.function)))
      return n;
    n = end + 1;
  }
}

std::vector<Frame> heap_regrown_frames() {
  Frame f;
  f.function = kHeapRegrownFunction;
  f.module = "[heap]";
  f.unwound = "none";
  return {f};
}

size_t frame_memory_bytes(const Frame& f) {
  return sizeof(Frame) + string_heap_bytes(f.function) + string_heap_bytes(f.file) + string_heap_bytes(f.module) +
         string_heap_bytes(f.build_id) + string_heap_bytes(f.unwound) + string_heap_bytes(f.language);
}

}  // namespace lw
