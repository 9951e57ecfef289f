// SPDX-License-Identifier: Apache-2.0
// The narrow interface between the daemon's parts (service/) and the tracing
// engine: exactly the operations the service uses. The daemon runs on the
// engine through EngineTracer (service/engine_tracer.h, the only service
// file that includes engine/); the unit tests run the same parts on a fake
// (tests/unit/fake_tracer.h), without BPF, root or libbpf.
//
// The vocabulary is the service's own (TraceOptions, ProcessEvent): the
// adapter translates to and from the engine's types.
// Thread-safety: not thread-safe. Implementations are owned and called by
// the consumer thread only (the one that runs Daemon::run).
#pragma once

#include "core/config/config.h"

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/analysis/analyzer.h"
#include "core/accounting/counters.h"
#include "core/accounting/heap_tracker.h"
#include "core/accounting/process_notices.h"
#include "core/platform/result.h"
#include "view/process_view.h"

namespace lw {

// How to trace one process (the engine's AttachOptions; CUDA's optional
// probes are always asked for).
struct TraceOptions {
  bool heap = false;          // malloc family and operator new: mode full
  bool mmap = true;           // anonymous mmap/munmap/mremap/brk
  bool follow_forks = false;  // report forked children as process events
  bool tensors = true;        // the tensor tier (decision tensor-tier), in every mode
  uint64_t sample_mean_bytes = 0;  // byte sampling of the heap; 0 = every allocation
  bool auto_sampling = true;       // automatic sampling (decision auto-sampling)
  uint32_t max_rescans_per_second = 5;  // limits.max_rescans_per_second
  // Whose process it is (ProcessIdentity::real_uid): its user's fair share
  // (decision fair-shares); nullopt when unknown (counted as its own).
  std::optional<uint32_t> uid;
  uint64_t max_process_memory_bytes = 0;  // limits.max_process_memory_bytes (decision process-cost)
};

// An exec anywhere, or a fork of a target that follows forks; an OOM kill
// or a user-space SIGKILL of an attached process, reported by the kernel
// before the process exits. The engine's own types (one definition, so the
// adapter passes them on as they are).
using ProcessEvent = Discovery;
using ProcessKill = KillNotice;

class TracerControl {
 public:
  virtual ~TracerControl() = default;

  // ---- processes ----
  // Errors: ESRCH (no such process), EPERM/EACCES, ENOENT (nothing to probe), ...
  virtual Status attach(pid_t pid, const TraceOptions& options) = 0;
  virtual void detach(pid_t pid) = 0;
  // Detaches many at once (one parallel link teardown).
  virtual void detach_many(const std::vector<pid_t>& pids) = 0;
  // The start time (/proc/PID/stat field 22) the engine recorded for an
  // attached pid; nullopt when the pid is not attached.
  virtual std::optional<uint64_t> start_ticks(pid_t pid) const = 0;
  // Attached processes whose exit was seen (still attached until detached).
  virtual std::vector<pid_t> exited() const = 0;
  // Execs and forks seen since the last call.
  virtual std::vector<ProcessEvent> take_process_events() = 0;
  // OOM kills and user-space SIGKILLs since the last call; the processes
  // are still attached, so snapshot() still shows their sites.
  virtual std::vector<ProcessKill> take_kills() { return {}; }

  // ---- overhead controls (decisions light-mode-escalation,
  // governor-kill-switch and daemon-memory-bound) ---- Attaches (true,
  // re-baselining the heap) or detaches (false, freezing the heap figures)
  // `pid`'s heap probes; mmap tracing stays.
  virtual Status set_heap_tracing(pid_t pid, bool on) = 0;
  // Bursts (decision busy-processes; Tracer::set_bursts, set_drain): the
  // heap traced in bursts covering `fraction` of the time (1: exact again),
  // and between two bursts only the free side of the heap probes attached.
  virtual Status set_bursts(pid_t, double) { return ok_status(); }
  virtual Status set_drain(pid_t, bool) { return ok_status(); }
  // The burst recording now ends (Tracer::close_burst): the seconds the
  // allocating probes really recorded, its records weighed by them.
  virtual std::optional<double> close_burst(pid_t, double) { return std::nullopt; }
  // Whether uprobe hits serialize across a process's threads on this
  // kernel (before 6.14): the governor's budget then counts its threads.
  virtual bool uprobe_hits_serialize() const { return false; }
  // Windows (Tracer::set_parked, heap_walkable): between a window's end
  // and the next burst no heap probe at all, the heap walked before the
  // burst; only where the heap can be walked.
  virtual Status set_parked(pid_t, bool) { return ok_status(); }
  virtual bool heap_walkable(pid_t) { return false; }
  // While parked: walks the heap now, retiring the records whose blocks
  // were freed (Tracer::walk_parked_heap).
  virtual void walk_parked_heap(pid_t) {}
  virtual void set_heap_walk_max_bytes(uint64_t) {}
  // set_heap_tracing(pid, false) for `heap_pids` and, for `all_probe_pids`
  // (the kill switch), every other probe too, in one teardown.
  virtual void detach_heap_many(const std::vector<pid_t>& heap_pids,
                                const std::vector<pid_t>& all_probe_pids) = 0;
  // All of `pid`'s accounting off (false) or on (true), by its kernel flags.
  virtual Status set_accounting(pid_t pid, bool on) = 0;
  // At most `cap` live records across all processes (0: no cap); processes
  // shed at the cap are reported by take_budget_sheds().
  virtual void set_live_record_cap(uint64_t cap) = 0;
  virtual std::vector<pid_t> take_budget_sheds() = 0;
  // The kernel's cumulative allocator probe hits of `pid`.
  virtual std::optional<uint64_t> probe_hits(pid_t pid) const = 0;
  // The tensor tier (decision tensor-tier): its cumulative probe hits, its
  // probes detached (false, figures frozen) or attached again (true) by its
  // own governor, and the rate the governor saw (shown in the API).
  virtual std::optional<uint64_t> tensor_hits(pid_t) const { return std::nullopt; }
  virtual Status set_tensor_tracing(pid_t, bool) { return ok_status(); }
  virtual void note_tensor_rate(pid_t, double) {}
  // The live bytes of `pid` that its tensor tier and CUDA pinned memory
  // explain (tensor_cpu + cuda_host), counting records that have lived a
  // few seconds: growth an `auto` process's escalation does not count
  // (decision tensor-tier).
  virtual uint64_t explained_bytes(pid_t) const { return 0; }
  // The host-wide raw syscall tracepoints may be attached (false while the
  // kill switch holds).
  virtual void set_raw_syscalls_allowed(bool allowed) = 0;

  // ---- symbols ----
  // Where debug files are found and which debuginfod servers are asked; a
  // new symbol thread only when it changed (start and reload).
  virtual void configure_symbols(const SymbolsConfig& config) = 0;
  // Waits up to `timeout` for the symbol thread's queue to empty (an OOM
  // report's frames, decision oom-kill-reports); whether it did. Never in the
  // event path otherwise.
  virtual bool wait_for_symbols(std::chrono::milliseconds) { return true; }

  // ---- consuming ----
  // Waits up to timeout_ms for events, applies them, does the deferred work.
  virtual Result<int> poll(int timeout_ms) = 0;

  // ---- reading ----
  virtual Counters counters() const = 0;
  virtual TracerStats stats() const = 0;
  // The heap tracker of an attached pid (the leak analysis samples it);
  // nullptr when not attached.
  virtual const HeapTracker* heap(pid_t pid) const = 0;
  // Appends (object path, probe) for every probe decided for `pid`.
  virtual void append_probe_reports(pid_t pid,
                                    std::vector<std::pair<std::string, ProbeReport>>* out) const = 0;
  // The view of an attached pid: the top `max_sites` sites (and, with an
  // analyzer, the fastest-growing) symbolized, with the engine-wide figures
  // given (counters(), stats(): read once per publish, not per process);
  // nullopt when the pid is not attached.
  virtual std::optional<ProcessSnapshot> snapshot(pid_t pid, size_t max_sites,
                                                  const ProcessAnalyzer* analyzer,
                                                  const Counters& counters,
                                                  const TracerStats& stats) = 0;
};

}  // namespace lw
