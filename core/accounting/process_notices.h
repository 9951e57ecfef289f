/* SPDX-License-Identifier: Apache-2.0 */
// What the engine reports about traced processes besides their records:
// execs and forks to discover (Discovery), and kills (KillNotice). One type
// each, shared by the engine (engine/event_router.h) and the daemon's parts
// (service/tracer_control.h): no mirror type to copy field by field.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace lw {

// A process the daemon may want to look at: it exec'd, or a target forked it.
struct Discovery {
  pid_t pid = 0;
  pid_t parent = 0;         // the forking target, 0 for an exec
  bool was_target = false;  // an exec of a process already traced
  uint64_t event_ns = 0;    // the exec/fork event's bpf_ktime_get_ns (CLOCK_MONOTONIC)
};

// An OOM kill or a user-space SIGKILL of a traced process, as the kernel
// reported it before the process exited (decision oom-kill-reports).
struct KillNotice {
  pid_t pid = 0;
  bool sigkill = false;       // a SIGKILL from user space; else the OOM killer
  bool memcg = false;         // OOM killer: a memory cgroup's limit was hit (else global)
  uint64_t limit_bytes = 0;   // that limit; global: the tightest limit above the victim (0: none)
  uint64_t memcg_usage_bytes = 0;
  uint64_t rss_bytes = 0;     // at the kill (0: unknown)
  pid_t sender_pid = 0;       // sigkill: the sender's tgid
  std::string sender_comm;    // sigkill
  uint64_t event_ns = 0;      // CLOCK_MONOTONIC of the event
  // GPU OOM (LW_EV_GPU_OOM; the process lives on): a CUDA allocation failed
  // out of memory, or (gpu_recovered) a later one on that device succeeded.
  bool gpu_oom = false;
  bool gpu_recovered = false;
  int gpu_device = -1;          // -1: unknown
  uint32_t gpu_kind = 0;        // enum lw_kind asked for
  uint64_t gpu_requested = 0;   // bytes (0: unknown)
  uint32_t gpu_error = 0;       // cudaError_t / CUresult
  uint32_t gpu_func = 0;        // enum lw_func of the failing call
  bool gpu_driver = false;      // driver API (else runtime)
};

// Whether a user-space SIGKILL's sender is a known OOM killer, by its comm:
// such a kill is for memory (reason oom_sender, alert
// LeakwatchProcessOOMKilled); any other SIGKILL (an operator's kill -9,
// timeout -s KILL, a runtime's grace-period kill) is not (reason sigkill,
// leakwatch_sigkills_total). A process may name itself anything, so this
// is a label, not a proof (docs/metrics.md).
inline bool is_oom_sender(std::string_view sender_comm) {
  constexpr std::string_view kOomSenders[] = {"systemd-oomd", "earlyoom", "oomd", "nohang", "kubelet"};
  for (std::string_view known : kOomSenders)
    if (sender_comm == known) return true;
  return false;
}

}  // namespace lw
