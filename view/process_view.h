// SPDX-License-Identifier: Apache-2.0
// What a reader sees of one traced process: plain, immutable data filled
// once per publish (or per `top` interval) by the engine, read by the
// exporter, the API, pprof and the CLI's printers. Nothing here refers to
// the engine: a view outlives the process, the probes and the BPF session
// that produced it (docs/architecture.md, "Layers").
// Thread-safety: plain data; share it const.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/accounting/counters.h"
#include "core/accounting/cuda_devices.h"
#include "core/accounting/heap_tracker.h"
#include "core/analysis/leak_analysis.h"
#include "core/formats/pprof.h"
#include "core/analysis/gpu_explained.h"
#include "core/analysis/rss_breakdown.h"
#include "core/policy/process_cost.h"
#include "core/symbols/perf_map.h"
#include "core/symbols/symbol_counters.h"
#include "core/symbols/symbolizer.h"
#include "leakwatch_abi.h"

namespace lw {

struct SiteSnapshot {
  uint64_t stack_id = 0;
  uint32_t kind = 0;
  uint64_t live_bytes = 0;      // memory, not address space (decision reserved-address-space)
  // Kind mmap: of the site's reservations (mappings partly PROT_NONE), the
  // bytes PROT_NONE or never touched: address space, not in live_bytes.
  uint64_t reserved_bytes = 0;
  uint64_t live_allocations = 0;
  uint64_t allocated_bytes = 0;
  uint64_t allocations = 0;
  uint64_t freed_bytes = 0;
  uint64_t frees = 0;
  std::vector<Frame> frames;
  // Why the stack ends before the outermost frame ("no_cfi", "depth",
  // "table_pending", "memory_budget", ...; core/symbols/stack_frames.h), "" when
  // it is complete: a stack is never silently short.
  std::string truncated;
  // Some frames show module+offset only because the symbol thread has not
  // resolved them yet: a later snapshot may name them.
  bool symbols_pending = false;
  // Some frames show module+offset for good, and why ("file_gone",
  // "file_replaced", "file_unreadable", "no_symbols"; docs/api.md); ""
  // when none does.
  std::string symbols_missing;
  // Leak analysis (zero/unknown until the analyzer has enough samples).
  AgeBuckets ages;
  double leak_rate_bytes_per_second = 0;
  Trend trend = Trend::kUnknown;
  bool suspected_leak = false;
  // The leak was called on less than min_span_s of heap data, the rise
  // before an escalation making up the rest (LeakVerdict::primed).
  bool primed = false;
  // While trend is unknown: about how many seconds until the analysis can
  // give a verdict at the current sampling rate (seconds_until_verdict());
  // 0 once it has one, -1 without an analysis.
  double verdict_in_s = -1;
};

// Totals of one kind of memory over every site of a process.
struct KindTotals {
  uint64_t live_bytes = 0;
  uint64_t live_allocations = 0;
  uint64_t allocated_bytes = 0;
  uint64_t allocations = 0;
  uint64_t freed_bytes = 0;
  uint64_t frees = 0;
  // Kind mmap: address space, not live (SiteSnapshot::reserved_bytes). Last:
  // tests fill the fields above in order.
  uint64_t reserved_bytes = 0;
};

// What was decided for one probed function; exposed through the API so
// "why does nothing show" has an answer.
struct ProbeReport {
  std::string symbols;     // "aligned_alloc,memalign" when they share an address
  uint64_t file_offset = 0;
  bool retprobe = false;
  std::string placement;   // "entry", "after NULL check", ...
  bool attached = false;
  std::string error;       // why not, when !attached
  // Attached, but lifted for now: a busy process's allocating side between
  // two bursts, or its free side after a window (decision busy-processes).
  bool parked = false;
};

// What a process preloads (LD_PRELOAD, /etc/ld.so.preload), without the
// entries' text: an environment value may hold anything (a secret written
// by mistake, a path meant to stay private), and /proc/PID/environ is
// readable only to the process's owner, while the API is served to whoever
// reaches the port. Only objects actually mapped are named, by file name
// and build-id, which say which allocator the preload brings.
struct PreloadInfo {
  struct Object {
    std::string file;      // last path component of the mapped object
    std::string build_id;  // lowercase hex, "" when it has none
  };
  uint32_t entries = 0;         // entries read (LD_PRELOAD, then /etc/ld.so.preload)
  std::vector<Object> objects;  // entries found among the process's mappings
};

// The allocator decision for one process, for the API, `top` and the
// leakwatch_process_allocator_info metric: "why is nothing showing".
struct AllocatorInfo {
  std::string support = "pending";  // full | partial | unsupported | pending
  std::string reason;               // why not full
  std::string family;               // jemalloc | tcmalloc | mimalloc | glibc | unknown
  std::string object;               // the object whose malloc wins ("" when none)
  std::string build_id;             // of that object
  bool static_exe = false;
  bool go = false;
  PreloadInfo preload;
  std::vector<std::string> functions;  // every function probed (attached), all objects
  std::vector<std::string> objects;    // every object holding probes
  // How anonymous mmap/munmap/mremap/brk are seen
  // (decision libc-syscall-wrappers): "wrappers" (probes on the process's libc
  // wrappers), "tracepoints" (no probeable wrapper: only the host-wide raw
  // syscall tracepoints can, and the daemon attaches them while such a process
  // is in mode full), "pending" (libc not mapped yet), "off" (mmap accounting
  // not asked for).
  std::string mmap_tracing = "pending";
  std::string mmap_tracing_reason;     // why not "wrappers"
};

// The unwind tables (engine/unwind_tables.h, decision cfi-unwinding).
struct UnwindStats {
  uint64_t objects = 0;          // registered (inode, device) pairs
  uint64_t objects_pending = 0;
  uint64_t objects_ready = 0;
  uint64_t objects_no_cfi = 0;   // no call-frame information in the file
  uint64_t objects_budget = 0;   // refused by max_table_bytes
  uint64_t tables = 0;           // loaded (one per build-id)
  uint64_t table_bytes = 0;      // rows and pages loaded
  uint64_t max_table_bytes = 0;
  uint64_t builds = 0;           // tables compiled from an object's CFI
  uint64_t build_failures = 0;   // CFI refused (hostile or broken), or a load failed
  double build_seconds = 0;      // spent compiling, in total
  uint64_t disk_cache_hits = 0;
  uint64_t memory_cache_hits = 0;  // an object with a build-id already loaded
  uint64_t queue_depth = 0;        // objects waiting for the worker
  // Cache files that were sound but written for another file with the
  // same build-id (identity differs): not used, a miss (decision file-identity).
  uint64_t disk_cache_mismatches = 0;
};

// A process's lifecycle events and the budget on the work they cause
// (decision lifecycle-budget): each executable mapping or link-map change
// (dlopen, dlclose) asks for a rescan of its objects; rescans past
// limits.max_rescans_per_second wait, coalesced, and are counted here.
struct LifecycleStats {
  uint64_t events = 0;            // executable mappings and link-map changes seen
  uint64_t rescans = 0;           // rescans done
  uint64_t rescans_deferred = 0;  // times a due rescan waited for the budget
  double deferred_since = 0;      // unix seconds a rescan has been waiting since; 0: none waits
};

// The engine's own figures (not per process).
struct TracerStats {
  uint64_t decode_errors = 0;       // ring-buffer records that did not decode
  uint64_t events_unknown_pid = 0;  // events for a pid we no longer track
  // Exits reported at the fork of a new process on a still-registered pid
  // (the old process's own exit went unseen: it exited while being attached).
  uint64_t stale_exits = 0;
  uint64_t resyncs = 0;
  // The host-wide raw syscall tracepoints are attached
  // (decision libc-syscall-wrappers).
  bool raw_syscall_tracepoints = false;
  // What this kernel offers the probes (issue 33: the cost of tracing
  // depends on it; bench/README.md, "Cost per kernel feature").
  bool uprobe_multi = false;
  bool uprobe_session = false;
  bool uretprobe_syscall = false;
  bool uprobe_hits_serialize = false;  // before 6.14: the budget counts threads
  uint64_t rescans = 0;
  uint64_t rescans_deferred = 0;   // all processes: rescans that waited for the lifecycle budget
  uint64_t probe_changes = 0;      // attaches that changed a process's probes or allocator
  uint64_t lifecycle_events = 0;   // all processes
  uint64_t attach_errors = 0;
  uint64_t ringbuf_errors = 0;
  uint64_t symbolization_errors = 0;  // modules that failed to open or parse
  SymbolCounters symbols;  // the symbol thread and debuginfod (core/symbols/symbol_service.h)
  // ELF files refused, indexed by ElfReject (process-wide: attach and symbolizer).
  std::vector<uint64_t> elf_rejections;
  // The memory budget (decision daemon-memory-bound).
  uint64_t live_records = 0;         // per-address records held, all processes
  uint64_t live_record_cap = 0;      // 0: no cap
  uint64_t memory_budget_sheds = 0;  // processes whose heap records were shed
  // Automatic sampling (decision auto-sampling): switches of a process's heap
  // to sampling (or to a larger mean), and the records those thinned.
  uint64_t auto_sampling_switches = 0;
  uint64_t auto_sampling_thinned = 0;
  // The stack map's collection (decision stack-map-gc).
  uint64_t stacks_collected = 0;  // stored stacks deleted, unreferenced past the grace period
  uint64_t stacks_restored = 0;   // deleted ones stored again: a record named one after all
  uint64_t stack_map_entries = 0; // stacks stored at the last pass (after its deletes)
  // Reserved address space (decision reserved-address-space): reads of
  // /proc/PID/maps or smaps for the mmap records' splits, and those that failed.
  uint64_t mapping_reads = 0;
  uint64_t mapping_read_errors = 0;
  UnwindStats unwind;
  // Fair shares (decision fair-shares): processes marked over their share
  // of the live map (or shed by the memory budget for their other kinds),
  // and of the stack map.
  uint64_t fair_share_marks = 0;
  uint64_t fair_share_stack_marks = 0;
  // Sites whose stacks were cut at a pending unwind table, folded into the
  // whole stack they start (issue 35, item 5; core/accounting/cut_sites.h).
  uint64_t cut_sites_folded = 0;
  // What the daemon holds for the traced processes (decision process-cost):
  // processes shed, indexed by ShedReason; resolved stacks pruned (their
  // sites hold nothing live any more); the costs beside the records, all
  // processes, at the last cost pass; /proc/PID/maps entries and paths
  // past a read's bounds (core/proc/proc_maps.h), at the last reads.
  std::array<uint64_t, static_cast<size_t>(ShedReason::kCount)> processes_shed{};
  uint64_t stacks_pruned = 0;
  uint64_t process_cost_bytes = 0;
  uint64_t maps_entries_dropped = 0;
  uint64_t maps_paths_dropped = 0;
};

// A process's CPython, when it runs one (engine/python_process.h;
// decision python-frames).
struct PythonInfo {
  bool present = false;   // a CPython interpreter is mapped
  std::string version;    // "3.11.2" as the binary declares it; "<3.11" when older
  std::string support;    // tested | untested | unsupported
  std::string reason;     // why frames are not read (unsupported, or not yet); "" when they are
  std::string object;     // the executable or libpython holding it
  bool frames = false;    // its Python frames are read at each allocation
  // The daemon's memory held for its code objects and their lines
  // (PythonCodeCache::bytes(), bounded), and the location-table bytes read
  // from it so far (issue 32).
  uint64_t code_cache_bytes = 0;
  uint64_t line_table_bytes_read = 0;
};

// A process's runtime perf map (JIT frames' names; decision jit-perf-maps),
// once one of its stacks had a JIT frame: what was read and kept, and what
// its bounds skipped (core/symbols/perf_map.h).
struct JitInfo {
  bool present = false;
  std::string perf_map;    // the path as the process sees it; "" before its pid namespace is known
  uint64_t entries = 0;
  uint64_t memory_bytes = 0;  // the entries' charge against PerfMapLimits::max_memory_bytes
  PerfMapStats stats;
};

// Heap walks (decision busy-processes, "Windows and walks"): what settling
// a process's heap records from glibc's heap, between bursts, did.
struct HeapWalkView {
  uint64_t walks = 0;
  uint64_t marked = 0;            // records marked at the last window's end
  uint64_t kept = 0;              // records the last walk found live
  uint64_t freed = 0;             // records retired as freed, all walks
  uint64_t undecided = 0;         // records dropped as undecided, all walks and marks
  uint64_t undecided_bytes = 0;   // the bytes those counted for (estimated)
  uint64_t last_bytes_read = 0;   // of the target's memory, by the last walk
  double last_seconds = 0;        // how long the last walk took
  bool last_complete = false;     // the last walk reached the top chunk
  std::string last_stopped;       // why it did not ("" when it did)
};

// The tensor tier of one process (decision tensor-tier): which framework
// allocators are probed, or why none is.
struct TensorTierInfo {
  // "on": probes attached; "off": turned off for this target (config
  // `tensors: false`) or by the kill switch; "suspended": its own governor
  // budget (governor.max_tensor_hits_per_second) detached them for a while;
  // "none": no framework library mapped; "unsupported": a framework library
  // is mapped but none of its allocators could be probed (see reason).
  std::string state = "none";
  // Why not "on", and each library's refusals ("unsupported: libc10.so:
  // c10::alloc_cpu(unsigned long, int): unknown signature", "libc10.so:
  // .dynsym lacks c10::free_cpu"); "" when there is nothing to say.
  std::string reason;
  // What is probed: "pytorch_cpu" (c10::alloc_cpu/free_cpu),
  // "pytorch_cuda_usdt" (pytorch:malloc/free), "pytorch_cuda_hook"
  // (c10::reportMemoryUsageToProfiler), "tensorflow_bfc".
  std::vector<std::string> sources;
  // The GPU allocator path the process uses, from its environment and
  // libraries: "pytorch_caching", "pytorch_cuda_malloc_async"
  // (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync), "pytorch_uncached"
  // (PYTORCH_NO_CUDA_MEMORY_CACHING=1), "tensorflow_bfc",
  // "tensorflow_cuda_malloc_async" (TF_GPU_ALLOCATOR=cuda_malloc_async);
  // "" when no GPU framework library is mapped.
  std::string gpu_allocator;
  // Tensor-tier probe hits per second at the last governor check.
  double hits_per_second = 0;
};

// A point-in-time view of one traced process: its sites merged by stable
// stack id and symbolized.

// Allocations of the process that were not recorded
// (decision unrecorded-per-kind), apart from sampling (estimates)
// and suspension (nothing observed): the kernel's per-target counters.
struct UnrecordedCounts {
  uint64_t map_full = 0;        // live map insert failed: not tracked at all
  uint64_t map_full_bytes = 0;  // their bytes
  uint64_t stack_map_full = 0;  // recorded, stack unknown
  // Fair shares (decision fair-shares): the process or its user held more
  // than its share of the live map (not tracked at all) or of the stack map
  // (recorded, stack unknown).
  uint64_t over_share = 0;
  uint64_t over_share_bytes = 0;
  uint64_t stack_over_share = 0;
  bool any() const { return lost() > 0 || stack_map_full > 0 || stack_over_share > 0; }
  // Allocations not tracked at all, whatever the reason.
  uint64_t lost() const { return map_full + over_share; }
};

// The process's totals (the fields inherited) and each kind's (enum
// lw_kind): add() keeps the two in step.
struct Unrecorded : UnrecordedCounts {
  std::array<UnrecordedCounts, LW_KIND_MAX> kinds{};

  void add(uint32_t kind, const UnrecordedCounts& c) {
    if (kind >= LW_KIND_MAX) return;
    kinds[kind].map_full += c.map_full;
    kinds[kind].map_full_bytes += c.map_full_bytes;
    kinds[kind].stack_map_full += c.stack_map_full;
    kinds[kind].over_share += c.over_share;
    kinds[kind].over_share_bytes += c.over_share_bytes;
    kinds[kind].stack_over_share += c.stack_over_share;
    map_full += c.map_full;
    map_full_bytes += c.map_full_bytes;
    stack_map_full += c.stack_map_full;
    over_share += c.over_share;
    over_share_bytes += c.over_share_bytes;
    stack_over_share += c.stack_over_share;
  }
  // A process-level verdict of `kind` was made on incomplete data: some of
  // its allocations are not tracked, so its live bytes and growth are a
  // lower bound.
  bool kind_incomplete(uint32_t kind) const { return kind < LW_KIND_MAX && kinds[kind].lost() > 0; }
  // A site's verdict of `kind`: also when its kind lost stacks, whose
  // allocations count under an unknown stack instead of their own site.
  bool site_incomplete(uint32_t kind) const { return kind < LW_KIND_MAX && kinds[kind].any(); }
};

// recorded / (recorded + not recorded) allocations, in [0, 1]; 1 when
// nothing was seen at all. Only `map_full` and `over_share` lose an
// allocation (a stack_map_full or stack_over_share one is recorded, under an
// unknown stack).
inline double unrecorded_coverage(uint64_t recorded, const UnrecordedCounts& u) {
  const double total = static_cast<double>(recorded) + static_cast<double>(u.lost());
  if (total <= 0) return 1.0;
  return static_cast<double>(recorded) / total;
}

struct ProcessSnapshot {
  pid_t pid = 0;
  std::string comm;
  double timestamp = 0;        // unix seconds
  bool final = false;          // the process has exited; last snapshot
  uint64_t live_bytes = 0;
  uint64_t reserved_bytes = 0;  // reserved address space, not live (KindTotals::reserved_bytes)
  uint64_t live_allocations = 0;
  std::array<KindTotals, LW_KIND_MAX> kinds{};  // every site, not only the top
  std::array<LeakVerdict, LW_KIND_MAX> kind_verdicts{};  // process-level, per kind
  std::array<AgeBuckets, LW_KIND_MAX> kind_ages{};
  std::vector<SiteSnapshot> sites;  // live_bytes descending, top `max_sites`
  size_t sites_total = 0;           // sites holding memory before truncation
  Counters kernel_counters{};
  HeapCounters heap_counters;
  TracerStats tracer_stats;
  int64_t kernel_live_bytes = -1;   // -1 when not read
  // Byte sampling: > 0 means every heap figure is an estimate from
  // allocations sampled at this mean (core/accounting/sampling.h).
  uint64_t sample_mean_bytes = 0;
  // The mean was chosen by automatic sampling (decision auto-sampling), not
  // configured: why ("live_map_share", "live_map_full", "memory_budget")
  // and since when (unix seconds).
  bool sampling_automatic = false;
  std::string sampling_reason;
  double sampling_since = 0;
  // Bursts (decision busy-processes): heap records made in bursts weigh
  // 1/fraction; `time_sampled` while any heap record may (the bursts may
  // have ended since), `burst_fraction` the current share (1 when exact).
  bool time_sampled = false;
  double burst_fraction = 1;
  HeapWalkView heap_walk;  // walks == 0: the heap was never walked
  // How a heap figure and its verdict were made: "exact", "sampled" (byte
  // sampling) or "bursts" (and "sampled+bursts"); "+walk" when records
  // were settled by heap walks.
  std::string heap_basis() const {
    std::string b = sample_mean_bytes && time_sampled ? "sampled+bursts"
                    : time_sampled                    ? "bursts"
                    : sample_mean_bytes               ? "sampled"
                                                      : "exact";
    if (heap_walk.walks > 0 && time_sampled) b += "+walk";
    return b;
  }
  // > 0 (unix seconds): the heap probes were detached then (step-down from
  // `full`, governor, kill switch), so the heap figures are frozen as of
  // that time and stale; the next attach re-baselines them.
  double heap_stale_since = 0;
  LifecycleStats lifecycle;         // link-map changes and the rescan budget
  std::vector<CudaDeviceTotal> cuda_devices;  // live CUDA bytes per (device, kind)
  AllocatorInfo allocator;          // which allocator is probed, and how well
  // The process's executable file mappings (pprof's mapping table).
  std::vector<PprofMapping> mappings;
  // `top`'s filters (--older, --min-size, --max-size): when active, every
  // live figure above (the process's, kinds', sites', sites_total) counts
  // only the live records that pass; cumulative figures, kernel_live_bytes
  // and the analysis do not.
  LiveFilter live_filter;
  // The leak analysis's window (0: no analysis), so a reader can tell a
  // demo setting (top --analysis-window) from the default.
  double analysis_window_s = 0;
  // The span of samples a site needs before its first verdict.
  double analysis_min_span_s = 0;
  PythonInfo python;                // present = false for a process without CPython
  // "RSS explained" (docs/analysis.md): anonymous RSS broken down; valid =
  // false where it was not read (rate-bounded smaps reads,
  // decision rss-explained).
  RssBreakdown rss;
  // Not recorded (decision unrecorded-per-kind), and the coverage of the
  // recorded allocations.
  Unrecorded unrecorded;
  double coverage = 1.0;
  // The tensor tier (decision tensor-tier) and GPU memory explained, one
  // entry per device with tensors, a pool or CUDA memory.
  TensorTierInfo tensor;
  std::vector<GpuExplained> gpu_explained;
  JitInfo jit;  // present = false until a stack had a JIT frame
  // Fair shares (decision fair-shares): marked over its share of the live
  // map or of the stack map, and whose share it passed ("process", "user",
  // "memory_budget"); "" when not marked.
  std::string over_share;
  std::string stack_over_share;
  // What the daemon holds for the process at the last cost pass, its cap
  // (limits.max_process_memory_bytes, 0: none), and, once it was shed, why
  // and since when (unix seconds) (decision process-cost).
  ProcessCost cost;
  uint64_t cost_cap = 0;
  std::string shed_reason;
  double shed_since = 0;
  uint64_t stacks_resolved = 0;  // resolved stacks held
  uint64_t stacks_pruned = 0;
  uint64_t maps_entries = 0;     // /proc/PID/maps entries held
  uint64_t maps_entries_dropped = 0;
  uint64_t maps_paths_dropped = 0;
};

// What the snapshot's accounting gives the RSS breakdown (heap and mmap
// live bytes; glibc's chunk overhead applies when its family is glibc).
TrackedBytes rss_tracked_bytes(const ProcessSnapshot& snap);

const char* kind_name(uint32_t kind);

}  // namespace lw
