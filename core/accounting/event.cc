// SPDX-License-Identifier: Apache-2.0
#include "core/accounting/event.h"

#include <cstring>

namespace lw {

namespace {

int device_of(uint16_t flags) { return static_cast<int>((flags & LW_EVF_DEVICE_MASK) >> LW_EVF_DEVICE_SHIFT) - 1; }

// LW_EV_SIGKILL: alloc_ns and stack_hash hold the sender's comm, 16 bytes,
// NUL-padded (not necessarily NUL-terminated).
std::array<char, 16> sender_comm_bytes(const lw_event& raw) {
  std::array<char, 16> comm;
  std::memcpy(comm.data(), &raw.alloc_ns, 8);
  std::memcpy(comm.data() + 8, &raw.stack_hash, 8);
  return comm;
}

}  // namespace

DecodedEvent decode_notice(const lw_event& raw) {
  switch (static_cast<EventType>(raw.type)) {
    case EventType::kAlloc:
    case EventType::kFree:
      break;
    case EventType::kExit:
      return ExitEvent{raw.tgid, raw.ts_ns, (raw.flags & LW_EVF_STALE_EXIT) != 0};
    case EventType::kExec:
      return ExecEvent{raw.tgid, raw.ts_ns, (raw.flags & LW_EVF_UNTRACKED) != 0};
    case EventType::kMapExec:
      return MapExecEvent{raw.tgid, raw.ts_ns};
    case EventType::kFork:
      return ForkEvent{raw.tgid, raw.ts_ns, static_cast<uint32_t>(raw.addr)};
    case EventType::kOomKill:
      return OomKillEvent{.tgid = raw.tgid,
                          .ts_ns = raw.ts_ns,
                          .memcg = (raw.flags & LW_EVF_OOM_MEMCG) != 0,
                          .limit_bytes = raw.addr,
                          .rss_bytes = raw.size,
                          .memcg_usage_bytes = raw.alloc_ns};
    case EventType::kSigkill:
      return SigkillEvent{.tgid = raw.tgid,
                          .ts_ns = raw.ts_ns,
                          .sender_pid = static_cast<uint32_t>(raw.addr),
                          .sender_comm_bytes = sender_comm_bytes(raw),
                          .rss_bytes = raw.size};
    case EventType::kGpuOom:
      return GpuOomEvent{.tgid = raw.tgid,
                         .ts_ns = raw.ts_ns,
                         .device = device_of(raw.flags),
                         .kind = raw.kind,
                         .requested = raw.size,
                         .error = static_cast<uint32_t>(raw.addr),
                         .func = static_cast<uint32_t>(raw.alloc_ns),
                         .driver = (raw.flags & LW_EVF_GPU_DRIVER) != 0};
  }
  return Event{static_cast<EventType>(raw.type), raw.flags, raw.tgid, raw.tid, raw.kind, raw.ts_ns,
               raw.addr, raw.size, raw.alloc_ns, raw.stack_hash};
}

uint32_t event_tgid(const DecodedEvent& e) {
  return std::visit([](const auto& ev) { return ev.tgid; }, e);
}

}  // namespace lw
