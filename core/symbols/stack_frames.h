// SPDX-License-Identifier: Apache-2.0
// Names and encodings shared by the stored stacks (bpf/leakwatch_abi.h,
// struct lw_stack) and what readers see of them.
// Thread-safety: pure functions.
#pragma once

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

}  // namespace lw
