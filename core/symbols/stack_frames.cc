// SPDX-License-Identifier: Apache-2.0
#include "core/symbols/stack_frames.h"

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
  }
  return "unknown";
}

std::vector<Frame> heap_regrown_frames() {
  Frame f;
  f.function = kHeapRegrownFunction;
  f.module = "[heap]";
  f.unwound = "none";
  return {f};
}

}  // namespace lw
