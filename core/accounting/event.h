/* SPDX-License-Identifier: Apache-2.0 */
// Decoding of ring-buffer records (struct lw_event from the shared ABI).
// Pure and bounds-checked: the decoder is fuzzed, and a short or malformed
// record is rejected, never read past.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "leakwatch_abi.h"

namespace lw {

enum class EventType : uint16_t {
  kAlloc = LW_EV_ALLOC,
  kFree = LW_EV_FREE,
  kExit = LW_EV_EXIT,
  kExec = LW_EV_EXEC,
  kMapExec = LW_EV_MAP_EXEC,
  kFork = LW_EV_FORK,
  kOomKill = LW_EV_OOM_KILL,
  kSigkill = LW_EV_SIGKILL,
  kGpuOom = LW_EV_GPU_OOM,
};

struct Event {
  EventType type;
  uint16_t flags;
  uint32_t tgid;
  uint32_t tid;
  uint32_t kind;
  uint64_t ts_ns;
  uint64_t addr;
  uint64_t size;
  uint64_t alloc_ns;
  uint64_t stack_hash;
};

// Returns the event, or nullopt if `len` is not a whole record or a field is
// out of range (unknown type or kind).
std::optional<Event> decode_event(const void* data, size_t len);

}  // namespace lw
