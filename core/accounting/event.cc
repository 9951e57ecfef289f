// SPDX-License-Identifier: Apache-2.0
#include "core/accounting/event.h"

#include <cstring>

namespace lw {

std::optional<Event> decode_event(const void* data, size_t len) {
  if (data == nullptr || len != sizeof(lw_event)) return std::nullopt;
  lw_event raw;
  std::memcpy(&raw, data, sizeof(raw));  // the ring buffer only guarantees 8-byte alignment
  if (raw.type < LW_EV_ALLOC || raw.type > LW_EV_GPU_OOM) return std::nullopt;
  if (raw.kind >= LW_KIND_MAX) return std::nullopt;
  return Event{static_cast<EventType>(raw.type),
               raw.flags,
               raw.tgid,
               raw.tid,
               raw.kind,
               raw.ts_ns,
               raw.addr,
               raw.size,
               raw.alloc_ns,
               raw.stack_hash};
}

}  // namespace lw
