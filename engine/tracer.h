/* SPDX-License-Identifier: Apache-2.0 */
// The tracing engine shared by `leakwatch top` and the daemon: one BPF
// session, the processes attached to it, their heap trackers, and the stack
// resolver. Consumes the ring buffer, applies events, resyncs a process from
// the kernel's live map after a counted loss, and follows exec and dlopen.
//
// Contract: poll() consumes events and then does the deferred work (exec
// re-attach, dlopen rescan, resync, stack resolution). Everything runs on
// the calling thread. Thread-safety: not thread-safe.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <tuple>
#include <utility>
#include <vector>

#include "core/platform/clock.h"
#include "core/platform/token_bucket.h"
#include "core/symbols/elf_file.h"
#include "core/accounting/cuda_devices.h"

#include "core/accounting/heap_tracker.h"
#include "core/accounting/stack_gc.h"
#include "core/proc/proc_maps.h"
#include "core/proc/procfs.h"
#include "core/symbols/symbol_service.h"
#include "core/symbols/symbolizer.h"
#include "engine/bpf_session.h"
#include "engine/process_attacher.h"
#include "engine/python_process.h"
#include "engine/unwind_tables.h"
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
};

struct ResolvedStack {
  // stable_stack_id() of the physical frames, taken before symbolization:
  // it never changes when symbols or inline frames arrive.
  uint64_t stack_id = 0;
  std::vector<Frame> frames;  // leaf first; inline chains expanded
  // Some frames still show module+offset and may resolve later; the
  // service's generation when `frames` were made.
  bool symbols_pending = false;
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
  // Place the probes that only lend a hint to the unwinder (libstdc++'s
  // plain operator new) even when stacks come from call-frame information
  // (decision cfi-unwinding; benchmarks compare both).
  bool hint_probes = false;
  // The lifecycle budget (decision lifecycle-budget): link-map rescans per
  // second, with a burst of twice that; more wait, coalesced, until one is due.
  uint32_t max_rescans_per_second = 5;
};

// A process the daemon may want to look at: it exec'd, or a target forked it.
struct Discovery {
  pid_t pid = 0;
  pid_t parent = 0;  // the forking target, 0 for an exec
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
  std::string sender_comm;
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
  uint64_t lost_seen = 0;
  bool accounting = true;  // overhead: false while the kill switch holds it
  // Unix seconds when the heap probes were detached (step-down, governor,
  // kill switch); 0 while they are attached or never were. The heap figures
  // are then frozen and stale (ProcessSnapshot::heap_stale_since).
  double heap_stale_since = 0;
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
};

class Tracer {
 public:
  static Result<std::unique_ptr<Tracer>> create(const BpfOptions& options,
                                                const UnwindTableOptions& unwind = {});
  ~Tracer();  // detaches every process's probes at once

  // Attaches to a running process. Errors: ESRCH (no such process), EPERM,
  // ENOENT (nothing to probe).
  Status attach(pid_t pid, const AttachOptions& options = {});
  void detach(pid_t pid);
  // detach() for many processes that have exited: their links are closed
  // together, so the kernel's grace period per uprobe unregistration is
  // waited out once for all of them (process churn: decision pid-reuse),
  // and on the LinkCloser's thread, so the caller does not wait at all
  // (decision gone-processes-dropped). Only for exited processes: a live one
  // keeps its breakpoints until the closer gets to them.
  void detach_many(const std::vector<pid_t>& pids);
  // Links of exited processes queued or being closed.
  size_t links_closing() const { return closer_ ? closer_->pending() : 0; }

  // ---- overhead ----
  // Attaches (true) or detaches (false) `pid`'s heap probes, leaving its
  // mmap tracing as it is. Attaching re-baselines the heap: the process's
  // heap records are deleted from the kernel map and the tracker, so only
  // allocations from now on count (frees were not seen while detached).
  // Detaching freezes the heap figures and stamps heap_stale_since.
  Status set_heap_tracing(pid_t pid, bool on);
  // Detaches the heap probes of every pid given (set_heap_tracing(pid,
  // false) for many) and, for `all_probe_pids` (the kill switch), every other
  // probe too (CUDA, mmap wrappers, ld.so), closing all links at once.
  void detach_heap_many(const std::vector<pid_t>& pids, const std::vector<pid_t>& all_probe_pids = {});
  // Stops (false) or resumes (true) all of `pid`'s accounting, heap and
  // mmap, by its kernel target flags (the kill switch; the probes
  // themselves are detached with set_heap_tracing).
  Status set_accounting(pid_t pid, bool on);
  // The memory budget (decision daemon-memory-bound): at most `cap` live
  // records across all processes (0: no cap). Checked on every insert: past
  // it, the process with the most heap records is shed at once (heap
  // accounting off in the kernel, its heap records dropped, its per-site
  // figures frozen) and reported by take_budget_sheds(); the caller then
  // detaches its heap probes (set_heap_tracing(pid, false)).
  void set_live_record_cap(uint64_t cap);
  // Automatic sampling's thresholds (decision auto-sampling), from the live
  // map's capacity and the record cap: a process is switched when its heap
  // records pass `share`, and the process with the most when all records pass
  // `total`; it then keeps about `records` heap records.
  struct AutoSampling {
    uint64_t share = 0;
    uint64_t total = 0;
    uint64_t records = 0;
  };
  const AutoSampling& auto_sampling() const { return auto_sampling_; }
  std::vector<pid_t> take_budget_sheds() { return std::exchange(budget_sheds_, {}); }
  // Allocator probe hits of `pid` counted by the kernel side so far.
  std::optional<uint64_t> probe_hits(pid_t pid) const;
  // The host-wide raw syscall tracepoints (decision libc-syscall-wrappers) are
  // attached only while a process in mode full has no probeable mmap wrapper
  // (Go, stripped static, an interposed mmap) and `allowed` (false while the
  // kill switch holds). Re-evaluated after every poll and attach.
  void set_raw_syscalls_allowed(bool allowed);
  bool raw_syscalls_attached() const { return session_->syscall_tracing(); }
  // ---- end overhead ----

  // Waits up to timeout_ms for events, applies them, then does the deferred
  // work. Returns the number of events consumed.
  Result<int> poll(int timeout_ms);
  // Waits (at most `timeout`) until the unwind tables queued so far are
  // built, consuming the ring buffer meanwhile: the events of a process
  // that already runs are applied, not dropped, while its tables load
  // (a wait of seconds for a PyTorch process). Returns false on timeout
  // or when `stop` is set; an error only from the ring buffer.
  Result<bool> wait_for_tables(std::chrono::milliseconds timeout, const std::atomic<bool>& stop);

  TracedProcess* process(pid_t pid);
  const std::map<pid_t, std::unique_ptr<TracedProcess>>& processes() const { return procs_; }

  // The symbolized stack for a kernel stack hash of `proc` (cached). Never
  // reads debug information itself: frames the symbol thread has not
  // resolved yet show module+offset (symbols_pending), and a later call
  // shows what arrived meanwhile.
  const ResolvedStack& resolve_stack(TracedProcess& proc, uint64_t stack_hash);

  // ---- symbols (core/symbols/symbol_service.h) ----
  // Replaces the symbol service (its caches too) when `options` differ from
  // the running one's search, debuginfod and bounds.
  void configure_symbols(const SymbolsConfig& config);
  // Waits up to `timeout` for queued symbolization (and debuginfod fetches)
  // to finish: only for a last snapshot (top's at exit, `snapshot`), never
  // in the event loop.
  bool wait_for_symbols(std::chrono::milliseconds timeout) { return symbols_->wait_idle(timeout); }
  SymbolCounters symbol_counters() const { return symbols_->counters(); }
  // ---- end symbols ----

  // Sum of the kernel live map's records for `pid`, for consistency checks.
  // Reading the map costs about 0.3 us an entry (4 million: over a second
  // of the consumer's time, in which the ring buffer overflows): a read is
  // skipped (EAGAIN) until ten times the last read's CPU time has passed,
  // so that these reads take at most a tenth of the consumer's time.
  Result<uint64_t> kernel_live_bytes(pid_t pid);
  // The kernel's per-target counts of allocations not recorded
  // (decision unrecorded-per-kind); zeros for a pid that is not a target.
  Unrecorded unrecorded(pid_t pid) const;

  // Every raw record is also handed to `tap` before decoding (recording).
  void set_record_tap(std::function<void(const void*, size_t)> tap) { tap_ = std::move(tap); }

  Counters counters() const { return session_->read_counters(); }
  TracerStats stats() const {
    TracerStats s = stats_;
    s.symbols = symbols_->counters();
    s.symbolization_errors = s.symbols.symbolizer.module_errors;
    s.elf_rejections = elf_rejection_counts();
    s.raw_syscall_tracepoints = session_->syscall_tracing();
    if (unwind_) s.unwind = unwind_->stats();
    return s;
  }

  // OOM kills and user-space SIGKILLs of traced processes since the last
  // call; the processes are still attached (their exit is reaped later).
  std::vector<KillNotice> take_kills() { return std::exchange(kills_, {}); }

  // Execs and forks seen since the last call (daemon discovery).
  std::vector<Discovery> take_discoveries() { return std::exchange(discoveries_, {}); }
  BpfSession& session() { return *session_; }
  // The unwind tables (null when stacks come from frame pointers only).
  UnwindTables* unwind_tables() { return unwind_.get(); }

 private:
  // After a live-map read begun at t0 (monotonic) with the thread's CPU
  // clock at cpu0: the next read waits ten times its cost. The cost is CPU
  // time (the batch syscalls' walk of the buckets, ~3 ms for 4M of them),
  // not wall time: a read preempted for 100 ms on a busy host cost nothing
  // more, and must not leave the next snapshot without kernel_live_bytes.
  void allow_kernel_read_after(uint64_t t0, uint64_t cpu0) {
    kernel_read_allowed_ns_ = t0 + 10 * (thread_cpu_ns() - cpu0);
  }
  explicit Tracer(std::unique_ptr<BpfSession> session);
  // Reads `proc`'s mappings again and registers its objects' unwind tables.
  void refresh_maps(TracedProcess& proc);
  // Replaces the CPython evaluation frames of `rs` (is_eval[i] for
  // rs.frames[i]) with the stored Python frames (core/symbols/python_frames.h).
  void splice_python_frames(TracedProcess& proc, const StoredStack& stored,
                            const std::vector<bool>& is_eval, std::vector<Frame>& physical,
                            ResolvedStack& rs);
  void on_record(const void* data, size_t len);
  void after_poll();
  void resync(TracedProcess& proc);
  void rescan_within_budget(TracedProcess& proc);
  void count_code_changes(TracedProcess& proc);
  void reattach_after_exec(TracedProcess& proc);
  Status attach_objects(TracedProcess& proc, bool heap);
  void sync_syscall_sites(TracedProcess& proc);
  void update_raw_syscalls();
  bool raw_syscalls_allowed_ = true;
  void recount_records();
  void shed_largest();
  void update_auto_sampling();
  // Switches `p`'s heap to sampling at a larger mean, thinning its records
  // (decision auto-sampling). False when it cannot (not allowed, nothing to
  // thin).
  bool sample_automatically(TracedProcess& p, const char* reason);
  void sample_largest();
  const char* share_reason() const;
  // Both of automatic sampling's rules over every process (after a resync).
  void check_auto_sampling();
  void delete_thinned(TracedProcess& p);
  // ---- stack GC (engine/tracer_stack_gc.cc; decision stack-map-gc) ----
  void start_stack_gc(uint32_t grace_ms);  // 0: off
  // A pass when one is due: deletes the stored stacks no tracked record
  // referenced for the grace period, bounded per pass.
  void collect_stacks();
  // The stored stack of a hash, or of one the last pass deleted (stored
  // again then: a record names it).
  StoredStack read_stack(uint64_t stack_hash);
  static constexpr size_t kMaxStacksCollectedPerPass = 1024;
  // Keys walked a pass: the default map whole; a bigger one a slice a pass,
  // so no pass holds the event thread for long (21 ms per 16,384 keys).
  static constexpr size_t kStackKeysPerPass = 16384;
  std::unique_ptr<StackCollector> stack_gc_;  // null: off
  uint64_t stack_gc_period_ns_ = 0;
  uint64_t stack_gc_due_ns_ = 0;
  std::optional<uint64_t> stack_walk_after_;  // where the walk goes on; none: from the first
  uint64_t stack_walk_count_ = 0;             // stacks met by the walk so far, less those deleted
  // What the last pass deleted, kept until the next: an event queued in
  // the ring buffer before the delete may still name one.
  std::unordered_map<uint64_t, lw_stack> collected_;
  // ---- end stack GC ----
  const std::string& build_id_of(const MapEntry& m, const std::string& open_path);
  static constexpr size_t kMaxBuildIdCache = 4096;

  std::unique_ptr<BpfSession> session_;
  // After session_: destroyed (queue closed) before the session.
  std::unique_ptr<LinkCloser> closer_ = std::make_unique<LinkCloser>();
  bool python_frames_ = true;  // BpfOptions::python_frames: look for CPython in each process
  std::unique_ptr<UnwindTables> unwind_;  // after session_: stops before it goes
  std::map<pid_t, std::unique_ptr<TracedProcess>> procs_;
  void render_symbols(ResolvedStack& rs);
  std::unique_ptr<SymbolService> symbols_;
  SymbolsConfig symbols_config_;
  TracerStats stats_;
  uint64_t drops_seen_ = 0;
  std::vector<Discovery> discoveries_;
  static constexpr size_t kMaxPendingKills = 4096;
  std::vector<KillNotice> kills_;  // bounded (kMaxPendingKills): `top` never takes them
  // (dev major, dev minor, inode) -> build-id ("" when the file has none).
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, std::string> build_ids_;
  std::function<void(const void*, size_t)> tap_;
  std::vector<pid_t> budget_sheds_;
  // Above the cap with nothing left to shed: look again only once this many
  // more records were added (not one scan per event).
  uint64_t shed_blocked_at_ = 0;
  AutoSampling auto_sampling_;
  uint64_t kernel_read_allowed_ns_ = 0;  // kernel_live_bytes()'s next read
  uint64_t sample_blocked_at_ = 0;  // as shed_blocked_at_, for sample_largest()
};


}  // namespace lw
