/* SPDX-License-Identifier: Apache-2.0 */
// Decoding of ring-buffer records (struct lw_event from the shared ABI).
// Pure and bounds-checked: the decoder is fuzzed, and a short or malformed
// record is rejected, never read past.
//
// The 56-byte record is overloaded: what `addr`, `size`, `alloc_ns` and
// `stack_hash` hold depends on the type (bpf/leakwatch_abi.h, enum
// lw_event_type). decode_event() reads each type's fields once, here, into
// a typed value; nothing downstream reads a raw field by another name.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <cstring>
#include <string>
#include <type_traits>
#include <variant>

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

// A live record made (kAlloc) or retired (kFree): what HeapTracker and
// CudaDeviceLedger apply. `type` is kAlloc or kFree.
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

// The process (thread group) exited.
struct ExitEvent {
  uint32_t tgid = 0;
  uint64_t ts_ns = 0;
  bool stale = false;  // LW_EVF_STALE_EXIT: found gone at a fork on its pid
};

// The process exec'd; `untracked`: it is not a target (discovery).
struct ExecEvent {
  uint32_t tgid = 0;
  uint64_t ts_ns = 0;
  bool untracked = false;
};

// An executable file mapping appeared (one per rescan request).
struct MapExecEvent {
  uint32_t tgid = 0;
  uint64_t ts_ns = 0;
};

// A target forked `child`.
struct ForkEvent {
  uint32_t tgid = 0;
  uint64_t ts_ns = 0;
  uint32_t child = 0;
};

// The kernel's OOM killer chose the process (it has not exited yet).
struct OomKillEvent {
  uint32_t tgid = 0;
  uint64_t ts_ns = 0;
  bool memcg = false;              // a memory cgroup's limit was hit (else global)
  uint64_t limit_bytes = 0;        // that limit; global: the tightest above the victim (0: none)
  uint64_t rss_bytes = 0;          // the victim's RSS
  uint64_t memcg_usage_bytes = 0;  // its memory cgroup's usage
};

// A SIGKILL sent from user space to the process.
struct SigkillEvent {
  uint32_t tgid = 0;
  uint64_t ts_ns = 0;
  uint32_t sender_pid = 0;   // the sender's tgid
  // The sender's comm as the kernel wrote it: 16 bytes, NUL-padded, not
  // necessarily NUL-terminated. Bytes, not a std::string, so that every
  // DecodedEvent is trivially copyable: decoding is on the consumer's hot
  // path, and a variant with a string member halved its rate.
  std::array<char, 16> sender_comm_bytes{};
  uint64_t rss_bytes = 0;    // the victim's RSS

  std::string sender_comm() const {
    return std::string(sender_comm_bytes.data(), strnlen(sender_comm_bytes.data(), sender_comm_bytes.size()));
  }
};

// A CUDA allocation failed out of memory; the process lives on.
struct GpuOomEvent {
  uint32_t tgid = 0;
  uint64_t ts_ns = 0;
  int device = -1;          // current on the thread; -1: unknown
  uint32_t kind = 0;        // enum lw_kind asked for
  uint64_t requested = 0;   // bytes (0: unknown)
  uint32_t error = 0;       // cudaError_t / CUresult
  uint32_t func = 0;        // enum lw_func of the failing call
  bool driver = false;      // driver API (else runtime)
};

using DecodedEvent = std::variant<Event, ExitEvent, ExecEvent, MapExecEvent, ForkEvent, OomKillEvent,
                                  SigkillEvent, GpuOomEvent>;
static_assert(std::is_trivially_copyable_v<DecodedEvent>, "decoding is on the hot path: no owning members");

// The thread group an event is about.
uint32_t event_tgid(const DecodedEvent& e);

// A valid record of a type other than kAlloc/kFree, decoded.
DecodedEvent decode_notice(const lw_event& raw);

// Returns the event, or nullopt if `len` is not a whole record or a field is
// out of range (unknown type or kind). Inline: allocations and frees are
// nearly every event, and the consumer decodes millions a second.
inline std::optional<DecodedEvent> decode_event(const void* data, size_t len) {
  if (data == nullptr || len != sizeof(lw_event)) return std::nullopt;
  lw_event raw;
  std::memcpy(&raw, data, sizeof(raw));  // the ring buffer only guarantees 8-byte alignment
  if (raw.type < LW_EV_ALLOC || raw.type > LW_EV_GPU_OOM) return std::nullopt;
  if (raw.kind >= LW_KIND_MAX) return std::nullopt;
  if (raw.type != LW_EV_ALLOC && raw.type != LW_EV_FREE) return decode_notice(raw);
  return DecodedEvent(std::in_place_type<Event>,
                      Event{static_cast<EventType>(raw.type), raw.flags, raw.tgid, raw.tid, raw.kind,
                            raw.ts_ns, raw.addr, raw.size, raw.alloc_ns, raw.stack_hash});
}

}  // namespace lw
