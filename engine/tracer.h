/* SPDX-License-Identifier: Apache-2.0 */
// The tracing engine shared by `leakwatch top` and the daemon: one BPF
// session and the processes attached to it (engine/traced_process.h).
// Consumes the ring buffer, resyncs a process from the kernel's live map
// after a counted loss, and follows exec and dlopen. Its parts: the event
// router (engine/event_router.h: each decoded event applied), the record
// budget (engine/record_budget.h: automatic sampling, the memory budget),
// the stack map's collection (engine/stack_gc_pass.h) and the stack
// resolver (engine/stack_resolver.h: frames and symbols).
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

#include "core/accounting/process_notices.h"
#include "core/platform/clock.h"
#include "core/proc/procfs.h"
#include "core/symbols/elf_file.h"
#include "core/symbols/symbol_service.h"
#include "engine/bpf_session.h"
#include "engine/event_router.h"
#include "engine/process_attacher.h"
#include "engine/process_cost_pass.h"
#include "engine/record_budget.h"
#include "engine/stack_gc_pass.h"
#include "engine/stack_resolver.h"
#include "engine/traced_process.h"
#include "engine/unwind_tables.h"
#include "engine/uprobe_links.h"
#include "view/process_view.h"

namespace lw {

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
  // Bursts (decision busy-processes). set_bursts(pid, fraction) with a
  // fraction in (0, 1): the process's heap is traced in bursts that cover
  // that share of the time, and its heap records allocated from now on
  // weigh 1/fraction; its records so far are kept. 1: back to exact
  // tracing (the allocating probes attached, records kept). Needs the heap
  // probes on; detaching them ends the bursts.
  Status set_bursts(pid_t pid, double fraction);
  // Between two bursts (true): the allocating probes are detached and only
  // the free side stays, so recorded blocks are still retired when freed;
  // false: attached again.
  Status set_drain(pid_t pid, bool drain);
  // The burst recording now ends (called before set_drain(true), or before
  // bursts end after a calm one): its records weigh what the allocating
  // probes really recorded, measured from set_drain(false) to now, against
  // the `scheduled_s` the burst was due to last (the walk and the attach
  // before it, and the daemon's tick, move both ends; decision
  // busy-processes, "Measured bursts"). The seconds recorded, or nullopt
  // when no burst was recording.
  std::optional<double> close_burst(pid_t pid, double scheduled_s);
  // Kernels before 6.14 (kernel_serializes_uprobe_hits), read once.
  bool uprobe_hits_serialize() const { return uprobe_hits_serialize_; }
  // Windows (decision busy-processes, "Windows and walks"; needs the drain):
  // parked (true), the heap records are marked and the free side goes too;
  // false, the free side comes back and the heap is walked
  // (engine/heap_walk.h), retiring the records whose blocks were freed
  // meanwhile, before the caller attaches the allocating side.
  Status set_parked(pid_t pid, bool parked);
  // While parked: walks pid's heap now (no free probe: a record whose block
  // was freed since the window leaves now, not at the next burst).
  void walk_parked_heap(pid_t pid);
  // Whether pid's heap can be walked (glibc's malloc).
  bool heap_walkable(pid_t pid);
  // At most this much of a process's memory read by one walk.
  void set_heap_walk_max_bytes(uint64_t bytes) { heap_walk_max_bytes_ = bytes; }
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
  // Through the cost pass: the record budget gets the cap less what the
  // processes' other costs take (decision process-cost).
  void set_live_record_cap(uint64_t cap) { cost_pass_.set_live_record_cap(cap); }
  // Automatic sampling's thresholds (decision auto-sampling), from the live
  // map's capacity and the record cap: a process is switched when its heap
  // records pass `share`, and the process with the most when all records pass
  // `total`; it then keeps about `records` heap records.
  using AutoSampling = RecordBudget::AutoSampling;
  const AutoSampling& auto_sampling() const { return budget_.auto_sampling(); }
  std::vector<pid_t> take_budget_sheds() { return budget_.take_sheds(); }
  // Allocator probe hits of `pid` counted by the kernel side so far.
  std::optional<uint64_t> probe_hits(pid_t pid) const;
  // The tensor tier's (decision tensor-tier): its hits so far, budgeted
  // apart from the heap's, and its probes detached (false: the records stay,
  // frozen) or attached again (true) by its own governor. `rate` is shown
  // in TensorTierInfo::hits_per_second.
  std::optional<uint64_t> tensor_hits(pid_t pid) const;
  Status set_tensor_tracing(pid_t pid, bool on);
  void note_tensor_rate(pid_t pid, double rate);
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
  const ProcessTable& processes() const { return procs_; }

  // The symbolized stack for a kernel stack hash of `proc` (cached). Never
  // reads debug information itself: frames the symbol thread has not
  // resolved yet show module+offset (symbols_pending), and a later call
  // shows what arrived meanwhile.
  // A read: the stack map and the maps as the last poll left them (it
  // never reads /proc; engine/stack_resolver.h).
  const ResolvedStack& resolve_stack(TracedProcess& proc, uint64_t stack_hash) {
    return resolver_.resolve(proc, stack_hash);
  }

  // ---- symbols (core/symbols/symbol_service.h) ----
  // Replaces the symbol service (its caches too) when `options` differ from
  // the running one's search, debuginfod and bounds.
  void configure_symbols(const SymbolsConfig& config) { resolver_.configure_symbols(config); }
  // Waits up to `timeout` for queued symbolization (and debuginfod fetches)
  // to finish: only for a last snapshot (top's at exit, `snapshot`), never
  // in the event loop.
  bool wait_for_symbols(std::chrono::milliseconds timeout) { return resolver_.wait_for_symbols(timeout); }
  SymbolCounters symbol_counters() const { return resolver_.symbol_counters(); }
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
    s.symbols = resolver_.symbol_counters();
    s.symbolization_errors = s.symbols.symbolizer.module_errors;
    s.elf_rejections = elf_rejection_counts();
    s.raw_syscall_tracepoints = session_->syscall_tracing();
    s.uprobe_multi = session_->uprobe_multi();
    s.uprobe_session = session_->uprobe_session();
    s.uretprobe_syscall = uretprobe_syscall_;
    s.uprobe_hits_serialize = uprobe_hits_serialize_;
    if (unwind_) s.unwind = unwind_->stats();
    return s;
  }

  // OOM kills and user-space SIGKILLs of traced processes since the last
  // call; the processes are still attached (their exit is reaped later).
  std::vector<KillNotice> take_kills() { return router_.take_kills(); }

  // Execs and forks seen since the last call (daemon discovery).
  std::vector<Discovery> take_discoveries() { return router_.take_discoveries(); }
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
  Tracer(std::unique_ptr<BpfSession> session, const BpfOptions& options, const UnwindTableOptions& unwind);
  // Reads `proc`'s mappings again and registers its objects' unwind tables.
  void refresh_maps(TracedProcess& proc);
  void refresh_reserved(TracedProcess& proc);
  void note_reservations_before_tracking(TracedProcess& proc);
  void on_record(const void* data, size_t len);
  void after_poll();
  void resync(TracedProcess& proc);
  void rescan_within_budget(TracedProcess& proc);
  void fold_cut_sites(TracedProcess& proc);
  void count_code_changes(TracedProcess& proc);
  void reattach_after_exec(TracedProcess& proc);
  Status attach_objects(TracedProcess& proc, bool heap);
  void sync_syscall_sites(TracedProcess& proc);
  void update_raw_syscalls();
  bool raw_syscalls_allowed_ = true;
  uint64_t heap_walk_max_bytes_ = 256ull << 20;  // set_heap_walk_max_bytes()
  std::unique_ptr<BpfSession> session_;
  // After session_: destroyed (queue closed) before the session.
  std::unique_ptr<LinkCloser> closer_ = std::make_unique<LinkCloser>();
  bool python_frames_ = true;  // BpfOptions::python_frames: look for CPython in each process
  bool uretprobe_syscall_ = kernel_has_uretprobe_syscall();  // read once (TracerStats)
  bool uprobe_hits_serialize_ = kernel_serializes_uprobe_hits();
  std::unique_ptr<UnwindTables> unwind_;  // after session_: stops before it goes
  ProcessTable procs_;
  TracerStats stats_;
  // The parts, on the members above.
  RecordBudget budget_;
  ProcessCostPass cost_pass_;
  EventRouter router_;
  StackGcPass stack_gc_;
  StackResolver resolver_;  // after the rest: its symbol thread stops first
  uint64_t drops_seen_ = 0;
  bool drops_recheck_ = false;  // look at the targets' losses again next poll
  std::function<void(const void*, size_t)> tap_;
  uint64_t kernel_read_allowed_ns_ = 0;  // kernel_live_bytes()'s next read
  uint64_t shares_due_ns_ = 0;           // the next fair-share look (decision fair-shares)
};


}  // namespace lw
