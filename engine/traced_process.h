/* SPDX-License-Identifier: Apache-2.0 */
// One process attached to the tracer (engine/tracer.h), and its resolved
// stacks: plain data that the tracer's parts (event_router, record_budget,
// stack_resolver, stack_gc_pass) and take_snapshot() read and update.
// Thread-safety: owned by the tracer's thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/accounting/cuda_devices.h"
#include "core/accounting/cut_sites.h"
#include "core/accounting/heap_tracker.h"
#include "core/analysis/reserved_space.h"
#include "core/platform/token_bucket.h"
#include "core/policy/process_cost.h"
#include "core/proc/proc_maps.h"
#include "core/symbols/perf_map.h"
#include "engine/heap_walk.h"
#include "core/symbols/symbolizer.h"
#include "engine/process_attacher.h"
#include "engine/python_process.h"
#include "view/process_view.h"

namespace lw {

// One physical frame of a captured stack as the symbol service takes it:
// an object and a file offset (core/symbols/symbol_service.h).
struct StackAddress {
  bool mapped = false;  // in a file mapping; else the frame is final as it is
  ModuleRef module;
  uint64_t offset = 0;
  Frame unmapped;       // the frame shown when !mapped
  std::string unwound;  // how the unwinder found it (Frame::unwound)
  // In anonymous executable memory (JIT code): named from the process's
  // perf map when it has the address (unmapped.offset; decision jit-perf-maps).
  bool jit = false;
};

struct ResolvedStack {
  // stable_stack_id() of the physical frames, taken before symbolization:
  // it never changes when symbols or inline frames arrive.
  uint64_t stack_id = 0;
  std::vector<Frame> frames;  // leaf first; inline chains expanded
  // Some frames still show module+offset and may resolve later; the
  // service's generation when `frames` were made.
  bool symbols_pending = false;
  // Some frames have no name, for good, and why (SymbolService::Lookup::
  // missing: "file_gone", "file_replaced", ...); "" when none.
  std::string symbols_missing;
  uint64_t symbols_generation = 0;
  std::vector<StackAddress> addresses;  // kept only while symbols are pending
  // Python frames (decision python-frames), innermost first, each
  // one's entry flag, and which addresses are CPython evaluation frames:
  // render_symbols() splices them in; kept while symbols are pending.
  std::vector<Frame> python;
  std::vector<bool> python_entry;
  std::vector<bool> is_eval;
  // Why the stack ends before the outermost frame (stack_end_name():
  // "no_cfi", "depth", "table_pending", ...); "" when it is complete.
  std::string end;
  // A JIT frame the process's perf map did not name yet (decision
  // jit-perf-maps): `addresses` are kept and the frames rendered again when
  // the map changes (its generation then is jit_generation), while the
  // process lives.
  bool jit_pending = false;
  uint64_t jit_generation = 0;
};

// How to trace one process.
struct AttachOptions {
  bool heap = true;          // malloc family and operator new (uprobes): mode `full`
  bool mmap = true;          // anonymous mmap/munmap/mremap/brk (tracepoints)
  bool follow_forks = false; // report forked children (Tracer::take_discoveries)
  // Byte sampling of the heap (bpf/lw_sampling.h): mean bytes between
  // samples, 0 = record every allocation. Heap figures are then estimates.
  uint64_t sample_mean_bytes = 0;
  // Automatic sampling (docs/config.md, "Automatic sampling";
  // decision auto-sampling): when the process's heap records outgrow its share
  // of the live map or of the daemon's record cap, its heap is switched to
  // sampling (the records it holds thinned, not dropped) instead of losing
  // allocations. false: exact until the map fills (losses counted).
  bool auto_sampling = true;
  bool cuda = true;          // CUDA runtime/driver probes, optional, in every mode (decision cuda-memory)
  // The tensor tier: framework allocators (PyTorch, TensorFlow), optional,
  // in every mode (decision tensor-tier); a target's `tensors: false` turns it off.
  bool tensors = true;
  // Place the probes that only lend a hint to the unwinder (libstdc++'s
  // plain operator new) even when stacks come from call-frame information
  // (decision cfi-unwinding; benchmarks compare both).
  bool hint_probes = false;
  // The lifecycle budget (decision lifecycle-budget): link-map rescans per
  // second, with a burst of twice that; more wait, coalesced, until one is due.
  uint32_t max_rescans_per_second = 5;
  // Whose process it is, for its user's fair share (decision fair-shares);
  // nullopt: unknown, only its own share applies.
  std::optional<uint32_t> uid;
  // The hard cap on what the daemon holds for the process beside its live
  // records (limits.max_process_memory_bytes; decision process-cost); 0: none.
  uint64_t max_process_memory_bytes = 0;
};

struct TracedProcess {
  pid_t pid = 0;
  uint64_t start_ticks = 0;   // /proc/PID/stat starttime: pid + this = identity
  std::string comm;
  std::string exe;
  bool exited = false;
  uint64_t execs = 0;
  HeapTracker heap;
  CudaDeviceLedger cuda_devices;  // CUDA records by device (decision cuda-memory)
  // Devices with a GPU OOM not yet followed by a successful allocation there
  // (a KillNotice with gpu_recovered when one comes).
  std::set<int> gpu_oom_devices;
  // The device of CUDA events that carry none (sole_cuda_device_of()); -2
  // until the first such event of this exec.
  int sole_cuda_device = -2;
  std::unique_ptr<ProcessAttacher> attacher;
  AttachOptions options;
  ParsedMaps maps;            // last read; kept after exit for symbolization
  // The build-id of each executable object in `maps` ("" when it has none),
  // by (dev major, dev minor, inode), read while the process lives: once it
  // exited, its map_files are gone, and only a file on disk with this
  // build-id may name its frames (StackResolver::note_build_ids).
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, std::string> build_ids;
  std::unordered_map<uint64_t, ResolvedStack> stacks;  // by kernel stack hash
  // Deferred work, set by events, done after the poll.
  bool exec_pending = false;
  bool rescan_pending = false;
  // Events of this process were lost: its records are read back from the
  // kernel map when reads are allowed again (Tracer::kernel_live_bytes).
  bool resync_pending = false;
  // The lifecycle budget: a token bucket of rescans (options.max_rescans_per_second).
  LifecycleStats lifecycle;
  TokenBucket rescan_budget;
  uint64_t maps_gen_seen = 0;  // lw_target.maps_gen last counted into lifecycle.events
  // Reserved address space (decision reserved-address-space): when the
  // mappings were last read for the mmap records' splits, and last read for
  // every mmap record (CLOCK_MONOTONIC ns).
  uint64_t splits_read_ns = 0;
  uint64_t splits_swept_ns = 0;
  uint64_t maps_checked_ns = 0;  // the last /proc/PID/maps read for new mmap records
  // The PROT_NONE address space no mmap record holds, at the last two
  // reads (reserved before the attach or before the probes followed the
  // exec): records made inside it are commits.
  UntrackedReservations untracked_reserved;
  uint64_t lost_seen = 0;
  bool accounting = true;  // overhead: false while the kill switch holds it
  // The tensor tier's probes were detached by its own governor budget
  // (decision tensor-tier); its records stay, frozen, until it resumes.
  bool tensor_suspended = false;
  double tensor_hits_per_second = 0;  // at the last governor check (TensorTierInfo)
  // Unix seconds when the heap probes were detached (step-down, governor,
  // kill switch); 0 while they are attached or never were. The heap figures
  // are then frozen and stale (ProcessSnapshot::heap_stale_since).
  double heap_stale_since = 0;
  // Bursts (decision busy-processes): the governor keeps the heap probes on
  // in bursts (`bursts`), and between two of them (`drain`) only their free
  // side is attached. Both end when the heap probes are detached.
  bool bursts = false;
  bool drain = false;
  // When the allocating probes last began recording (set_drain(false); the
  // kernel's clock), 0 when no burst is recording: Tracer::close_burst
  // measures the burst from it.
  uint64_t burst_from_ns = 0;
  // Windows (decision busy-processes, "Windows and walks"): the free side
  // is parked too, the records marked (engine/heap_walk.h).
  bool parked = false;
  HeapWalkState walk;
  // The memory budget shed this process's heap records
  // (decision daemon-memory-bound): its kernel flags leave heap accounting off
  // at once, before the daemon detaches the heap probes; cleared when heap
  // tracing resumes.
  bool heap_shed = false;
  // Automatic sampling (decision auto-sampling): the mean the heap was switched
  // to (0: not switched; it then samples at options.sample_mean_bytes), why,
  // and since when (unix seconds). Reset at exec: a new image starts exact.
  uint64_t auto_sample_mean = 0;
  const char* auto_sample_reason = "";
  double auto_sample_since = 0;
  // The kernel flags carry LW_TARGET_SYSCALL_SITES: the libc wrapper probes
  // see this process's mmap-family calls (decision libc-syscall-wrappers).
  bool syscall_sites = false;
  bool shared_sites = false;  // ...through the shared link (decision shared-wrapper-links)
  // Its CPython, if it runs one (Python frames; docs/architecture.md).
  std::unique_ptr<PythonProcess> python;
  // Sites of `heap` (an index into heap.sites()) whose stacks the poll path
  // has checked against `maps` (StackResolver::maps_miss_frames).
  size_t sites_checked = 0;
  // Its sites cut at a pending unwind table, waiting for their whole stack
  // (core/accounting/cut_sites.h; issue 35, item 5).
  CutSites cut_sites;
  // Its runtime's perf map (/tmp/perf-NSPID.map in its root), opened at the
  // first JIT frame of its stacks, and when it was last read
  // (CLOCK_MONOTONIC ns; decision jit-perf-maps).
  std::unique_ptr<PerfMapFile> perf_map;
  uint64_t perf_map_read_ns = 0;
  // Fair shares (decision fair-shares): marked over its share of the live
  // map or of the stack map, and whose share it passed ("process", "user",
  // "memory_budget"; "" when not marked). The kernel flags carry
  // LW_TARGET_OVER_SHARE while over the live map's; the stack map's is
  // lw_target.stack_limit, set every second.
  const char* over_share = "";
  const char* stack_over_share = "";
  // Its stacks the stack map's collection deleted (decision stack-map-gc):
  // with lw_target.stacks_added, the stacks it holds in the map.
  uint64_t stacks_freed = 0;
  uint64_t stacks_held = 0;  // lw_target.stacks_added - stacks_freed at the last look
  // lw_target.record_limit and stack_limit as last written (written only
  // when they change), and the records the kernel inserted for it that the
  // daemon has applied (ALLOC events but replacements; set again at a
  // resync): lw_target.records_added less this is in flight.
  uint64_t stack_limit = 0;
  uint64_t record_limit = 0;
  uint64_t records_added_seen = 0;
  // What the daemon holds for it (decision process-cost): the resolved
  // stacks' bytes, kept as they are added, rendered again and erased
  // (resolved_stack_bytes()); the whole cost as the last cost pass measured
  // it; the stacks pruned (their sites hold nothing live any more) and where
  // the pruning goes on.
  uint64_t stacks_bytes = 0;
  ProcessCost cost;
  uint64_t stacks_pruned = 0;
  size_t stacks_prune_cursor = 0;
  // Shed for what it cost (ProcessCostPass): its accounting is off for
  // good, its records, sites and caches dropped; since when (unix seconds).
  ShedReason shed = ShedReason::kNone;
  double shed_since = 0;
};

// The heap bytes one resolved stack holds: frames, addresses, Python
// frames, strings, and its node in TracedProcess::stacks.
uint64_t resolved_stack_bytes(const ResolvedStack& rs);

// The processes attached, by pid.
using ProcessTable = std::map<pid_t, std::unique_ptr<TracedProcess>>;

// The kernel target flags (LW_TARGET_*) that `o` asks for.
inline uint32_t target_flags(const AttachOptions& o) {
  uint32_t flags = 0;
  if (o.heap) flags |= LW_TARGET_HEAP;
  if (o.mmap) flags |= LW_TARGET_MMAP;
  if (o.follow_forks) flags |= LW_TARGET_FOLLOW_FORKS;
  if (o.cuda) flags |= LW_TARGET_CUDA;
  if (o.tensors) flags |= LW_TARGET_TENSOR;
  return flags;
}

// What the kernel side may account for `p` now: nothing but fork reports
// while the kill switch holds it or once it was shed (decision process-cost).
inline uint32_t current_flags(const TracedProcess& p) {
  uint32_t flags = target_flags(p.options);
  if (p.heap_shed) flags &= ~static_cast<uint32_t>(LW_TARGET_HEAP);
  if (p.tensor_suspended) flags &= ~static_cast<uint32_t>(LW_TARGET_TENSOR);
  if (p.syscall_sites) flags |= LW_TARGET_SYSCALL_SITES;
  if (p.syscall_sites && p.shared_sites) flags |= LW_TARGET_SHARED_SITES;
  if (*p.over_share) flags |= LW_TARGET_OVER_SHARE;
  if (p.bursts && p.options.heap) flags |= LW_TARGET_BURSTS;
  if (p.drain && p.options.heap) flags |= LW_TARGET_DRAIN;
  return p.accounting && p.shed == ShedReason::kNone ? flags : flags & LW_TARGET_FOLLOW_FORKS;
}

// The heap's sampling mean in the kernel: automatic sampling's when it
// switched the process (decision auto-sampling), else the configured one.
inline uint64_t heap_mean(const TracedProcess& p) {
  return p.auto_sample_mean > p.options.sample_mean_bytes ? p.auto_sample_mean : p.options.sample_mean_bytes;
}

inline double unix_seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace lw
