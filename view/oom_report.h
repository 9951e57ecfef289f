// SPDX-License-Identifier: Apache-2.0
// An OOM kill report (docs/api.md "/api/v1/oom_kills",
// decision oom-kill-reports): the victim's identity, why it was killed, its
// RSS, live bytes per kind, top sites and memory history, frozen at the kill.
// Thread-safety: plain data and pure functions.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/policy/oom_retention.h"
#include "view/daemon_view.h"
#include "view/process_view.h"

namespace lw {

// One point of a process's memory history.
struct MemorySample {
  double timestamp = 0;     // unix seconds
  uint64_t rss_bytes = 0;   // /proc/PID/statm resident
  std::array<uint64_t, LW_KIND_MAX> live_bytes{};  // the daemon's live bytes per kind
};

// Why a process was killed (the `reason` label and field).
// kOomSender: a SIGKILL from a known user-space OOM killer (is_oom_sender);
// kSigkill: any other SIGKILL from user space, not for memory.
// kGpuOom: a CUDA allocation failed out of memory; the process was not
// killed and lives on.
enum class KillReason { kGlobalOom, kMemcgOom, kOomSender, kSigkill, kGpuOom };
// "global" | "memory_cgroup" | "oom_sender" | "sigkill" | "gpu_oom"
const char* kill_reason_name(KillReason r);
// Every reason but kSigkill: the `reason`s of leakwatch_oom_kills_total.
inline constexpr KillReason kMemoryKillReasons[] = {KillReason::kGlobalOom, KillReason::kMemcgOom,
                                                    KillReason::kOomSender, KillReason::kGpuOom};
inline bool for_memory(KillReason r) { return r != KillReason::kSigkill; }

// A GPU OOM (reason gpu_oom): the failing CUDA call.
struct GpuOomInfo {
  int device = -1;             // -1: unknown
  uint32_t kind = 0;           // enum lw_kind asked for
  uint64_t requested_bytes = 0;  // 0: unknown (pitched and 3D calls)
  uint32_t error_code = 0;     // cudaError_t / CUresult
  uint32_t func = 0;           // enum lw_func
  bool driver = false;         // driver API, else runtime
  uint64_t suppressed = 0;     // later OOMs on this (process, device) within the rate-limit window
  bool recovered = false;      // a later allocation on the device succeeded
  double recovered_timestamp = 0;
};
// The function family of a CUDA allocation probe ("cudaMalloc", "cuMemAlloc", ...).
const char* cuda_alloc_function_name(uint32_t func);

struct OomReport {
  double timestamp = 0;             // unix seconds of the kill (the kernel event)
  KillReason reason = KillReason::kGlobalOom;
  ProcessInfo process;
  uint64_t limit_bytes = 0;         // memory cgroup limit hit; global: the tightest above (0: none)
  uint64_t memcg_usage_bytes = 0;
  uint64_t rss_bytes = 0;           // at the kill
  pid_t sender_pid = 0;             // oom_sender, sigkill
  std::string sender_comm;          // oom_sender, sigkill
  bool light = false;               // heap probes were not attached: mmap/brk sites and statm only
  ProcessSnapshot snapshot;         // sites: the same schema as /api/v1/processes/PID/sites
  std::vector<MemorySample> history;  // oldest first
  double report_latency_s = 0;      // from the kill event to the report built
  std::string id;                   // oom-<unix ms>-<pid>[-gpu<device>] (oom_report_file_name's stem)
  std::string file;                 // where it was written ("" when not)
  std::string file_error;           // why it could not be written ("" when it was, or no report_dir)
  GpuOomInfo gpu;                   // reason gpu_oom only
};

// `truncated` is null in it: cap_report_size sets it.
nlohmann::json to_json(const OomReport& r);

// Retention's group of a report (core/policy/oom_retention.h).
OomReportTier oom_report_tier(KillReason r);

// Cuts a report's JSON (to_json's) to at most `max_bytes` when dumped (issue
// 32): the lowest-ranked sites go first, then, one site left, its outermost
// frames, then the oldest history; `truncated` says how many of each.
// Returns whether anything was cut.
bool cap_report_size(nlohmann::json& doc, size_t max_bytes);

}  // namespace lw
