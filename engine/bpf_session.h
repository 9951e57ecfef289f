/* SPDX-License-Identifier: Apache-2.0 */
// Owns the loaded BPF object (skeleton), its maps and the ring buffer.
// RAII: destroying the session detaches every program and closes every fd,
// so no probe outlives the daemon's process (the kernel also drops them when
// the fds close on a crash).
// Thread-safety: not thread-safe. One thread polls; map reads from other
// threads go through the (thread-safe) bpf syscalls but share no state here.
#pragma once

#include <sys/types.h>

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "core/accounting/counters.h"
#include "core/accounting/heap_tracker.h"
#include "core/platform/result.h"
#include "leakwatch_abi.h"

struct leakwatch_bpf;
struct ring_buffer;
struct bpf_link;
struct bpf_program;

namespace lw {

struct BpfOptions {
  uint32_t ringbuf_bytes = 8u << 20;  // power of two, >= 4096
  uint32_t live_max_entries = 262144;
  // The live map preallocated (every entry's memory at creation) instead of
  // BPF_F_NO_PREALLOC (memory per entry in use; decision live-map-sizing). The
  // benchmark compares both with LW_BENCH_LIVE_PREALLOC=1|0 in leakwatch's
  // environment, which the command line's benchmark switches put here
  // (cli/bench_switches.h).
  bool live_prealloc = false;
  uint32_t stack_max_entries = 16384;
  uint32_t max_targets = 4096;
  bool collect_stacks = true;
  bool trace_syscalls = true;  // mmap/munmap/mremap/brk tracepoints
  // The tensor allocators probed as uprobe sessions where the kernel has them
  // (6.13+; decision tensor-tier): LW_BENCH_NO_UPROBE_SESSIONS turns it off.
  bool uprobe_sessions = true;
  // Allocation/free events wake the consumer only past 1/8 of the ring
  // (the consumer must poll with a timeout; every caller polls <= 100 ms).
  bool batch_wakeups = true;
  bool report_all_execs = false;  // daemon: discover new processes at exec
  // Stacks from each object's call-frame information (decision cfi-unwinding),
  // with frame pointers as the fallback; false: the kernel's frame-pointer
  // walk.
  bool unwind_cfi = true;
  bool frame_cache = true;               // the unwinder's per-CPU frame cache (benchmarks turn it off)
  bool walk_reuse = true;                // reuse of earlier walks (decision walk-reuse; benchmarks turn it off)
  uint32_t stack_window = 4096;          // bytes per user-read window (decision user-read-window; 0 = off, benchmarks)
  uint32_t max_unwind_tables = 4096;    // objects with a table loaded at once
  uint32_t max_unwind_objects = 16384;  // objects registered (inode, device)
  // Read CPython frames at each allocation of a process registered with
  // set_python_process() (bpf/lw_python.bpf.h).
  bool python_frames = true;
  // Take a code object's first line read on this CPU in the last 10 ms
  // again (decision code-object-memo; false: read it at every frame,
  // benchmarks).
  bool python_code_memo = true;
  // Walk the native frames above CPython's evaluation loop too; false: the
  // walk stops at its first frame when the Python frames were read whole
  // (decision python-frames, "Where the native walk stops").
  bool python_native_above = false;
  // OOM kills and user-space SIGKILLs of targets (tp_btf/mark_victim,
  // signal_generate; decision oom-kill-reports), where the kernel has them.
  bool oom_events = true;
  // The stack map's collection (decision stack-map-gc): a stored
  // stack no tracked record referenced for this long is deleted; 0: never.
  // A pass runs every quarter of it (100 ms..10 s).
  uint32_t stack_gc_grace_ms = 60000;
  // Fair shares (decision fair-shares): the most of the live map and of the
  // stack map one process, or one user other than root, may hold, in
  // percent; 100: no shares (`top`, one user's command).
  uint32_t fair_share_percent = 100;
};

// One uprobe to place: where, and which allocator function it stands for
// (enum lw_func, passed to the program as the attach cookie).
struct UprobeSpec {
  uint64_t file_offset = 0;
  uint32_t func = 0;       // enum lw_func: bits 0..7 of the attach cookie
  int64_t cookie_arg = 0;  // bits 16..63 (signed): LW_FUNC_SYS_BRK's distance to __curbrk
  bool shared = false;     // bit 8: LW_COOKIE_SHARED, a link with no pid filter (decision shared-wrapper-links)
  uint64_t cookie() const {
    return func | (shared ? LW_COOKIE_SHARED : 0) | (static_cast<uint64_t>(cookie_arg) << 16);
  }
};

// One frame of a stored stack (bpf/leakwatch_abi.h, struct lw_frame).
struct StoredFrame {
  uint64_t ino = 0;   // 0: not file-backed; `addr` is then the absolute address
  uint32_t dev = 0;   // the kernel's s_dev (MKDEV(major, minor) = major << 20 | minor)
  uint64_t addr = 0;  // file offset in the object, or the absolute address when ino is 0
  uint8_t how = 0;    // enum lw_unwound
};

struct StoredStack {
  uint32_t flags = 0;              // enum lw_stack_end | LW_STACK_*
  std::vector<StoredFrame> frames; // leaf first
  uint32_t py_flags = 0;           // enum lw_py_end
  std::vector<lw_py_frame> py;     // Python frames, innermost first
};

// Move-only owner of one attached probe.
class Link {
 public:
  Link() = default;
  explicit Link(bpf_link* link) : link_(link) {}
  // A link fd made without libbpf (uprobe_multi: libbpf 1.1 predates it).
  static Link from_fd(int fd) {
    Link l;
    l.fd_ = fd;
    return l;
  }
  Link(Link&& o) noexcept : link_(o.link_), fd_(o.fd_) {
    o.link_ = nullptr;
    o.fd_ = -1;
  }
  Link& operator=(Link&& o) noexcept;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;
  ~Link();

 private:
  bpf_link* link_ = nullptr;
  int fd_ = -1;
};

// Destroys links on several threads at once. Closing a uprobe link waits
// for an RCU grace period in the kernel (measured 25-110 ms each here), so
// closing a process's ~13 links one by one took over a second; in parallel
// the waits overlap.
void destroy_links(std::vector<Link> links);

// Closes links on a thread of its own, so the caller does not wait out the
// kernel's grace periods: for the links of processes that have exited
// (their breakpoints are in address spaces that are gone; nothing can hit
// them), whose teardown used to hold the daemon's event loop for 25-110 ms
// a batch under process churn (decision gone-processes-dropped). Batches are
// closed in order, each with destroy_links(); the destructor closes what is
// still queued. pending() is what is queued or being closed. Thread-safety:
// close_async(), pending() and drain() from any thread.
class LinkCloser {
 public:
  LinkCloser();
  ~LinkCloser();
  LinkCloser(const LinkCloser&) = delete;
  LinkCloser& operator=(const LinkCloser&) = delete;
  void close_async(std::vector<Link> links);
  size_t pending() const;
  // Blocks until nothing is queued or being closed (shutdown, tests).
  void drain();

 private:
  void run();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<std::vector<Link>> queue_;
  size_t pending_ = 0;  // links queued or being closed
  bool stop_ = false;
  std::thread thread_;
};

class BpfSession {
 public:
  // Opens, sizes and loads the BPF object and attaches the process-lifecycle
  // (and, if enabled, syscall) tracepoints. Errors say what the kernel lacks.
  static Result<std::unique_ptr<BpfSession>> create(const BpfOptions& options);
  ~BpfSession();

  // Attaches the entry program (or, with `retprobe`, the return program) to
  // `pid` at every offset of `specs` in the file `path` (a /proc/self/fd/N
  // path of an fd the caller holds, so no symlink in the target's root can
  // redirect the kernel's lookup). With uprobe_multi (kernel >= 6.6) that is
  // one link; otherwise one link per offset.
  // Attaches the tensor tier's program for the USDT provider:name
  // ("pytorch", "malloc" or "free") in the file at `path`, for `pid` only.
  // libbpf reads the probe's note (its sites and argument locations) and
  // raises the probe's semaphore through the uprobe's ref_ctr_offset while
  // the link lives (decision tensor-tier).
  Result<Link> attach_usdt(pid_t pid, const std::string& path, const char* provider, const char* name);
  // A framework pool's own totals, per device, as its allocator last
  // reported them (the gpu_pools map; decision tensor-tier).
  struct PoolTotals {
    int device = -1;
    uint64_t allocated = 0;
    uint64_t reserved = 0;
  };
  std::vector<PoolTotals> read_gpu_pools(pid_t tgid) const;
  // `tensor`: the return probes go to the tensor tier's return program
  // (lw_tensor_return) instead of the allocator's.
  Result<std::vector<Link>> attach_uprobes(pid_t pid, const std::string& path,
                                           const std::vector<UprobeSpec>& specs, bool retprobe,
                                           bool tensor = false);
  bool uprobe_multi() const { return uprobe_multi_; }
  // The tensor allocators' probes as uprobe sessions (lw_tensor_session: entry
  // and return in one link; the entry skips the return of a call that records
  // nothing, such as alloc_cpu(0)). ENOTSUP where uprobe_session() is false:
  // the caller then attaches an entry and a return probe.
  Result<std::vector<Link>> attach_tensor_sessions(pid_t pid, const std::string& path,
                                                   const std::vector<UprobeSpec>& specs);
  bool uprobe_session() const { return uprobe_session_; }

  // The probes of one object (dev, inode) in one role (the system-call
  // wrappers, or ld.so's link-map hook: `loader`) shared by every traced
  // process that maps it (decision shared-wrapper-links): one link with no pid
  // filter, the target filter in BPF, so a hit costs the same whatever the
  // number of traced processes. Processes below the threshold each get their
  // own pid-filtered link instead (no trap in untraced processes);
  // per_pid_links() counts those, for the attacher's choice.
  // acquire_shared_uprobes() attaches the link at the first user (specs and
  // path as attach_uprobes(), the specs marked shared);
  // release_shared_uprobes() hands the link back, to be closed, when its last
  // user leaves.
  struct SharedKey {
    uint64_t dev = 0;
    uint64_t inode = 0;
    bool loader = false;
    bool operator<(const SharedKey& o) const {
      return std::tie(dev, inode, loader) < std::tie(o.dev, o.inode, o.loader);
    }
  };
  Status acquire_shared_uprobes(const SharedKey& key, const std::string& path, std::vector<UprobeSpec> specs);
  std::vector<Link> release_shared_uprobes(const SharedKey& key);
  size_t& per_pid_links(const SharedKey& key) { return shared_[key].per_pid; }
  size_t shared_users(const SharedKey& key) const {
    auto it = shared_.find(key);
    return it == shared_.end() ? 0 : it->second.users;
  }
  // The OOM tracepoints are attached (decision oom-kill-reports).
  bool oom_events() const { return oom_events_; }

  // Per-target state in the kernel.
  // `sample_mean`: byte-sampling mean (bpf/lw_sampling.h), 0 = record all.
  Status set_target(pid_t tgid, uint32_t flags, uint64_t start_ns, uint64_t sample_mean = 0);
  // Fair shares (decision fair-shares): lw_target.record_limit and
  // stack_limit, the rest of the target kept. False when it is not
  // registered.
  bool set_share_limits(pid_t tgid, uint64_t record_limit, uint64_t stack_limit);
  Status remove_target(pid_t tgid);
  std::optional<lw_target> get_target(pid_t tgid) const;
  // Seeds lw_target.brk_last, the break before the next brk call, where the
  // brk wrapper's probe runs after glibc stored the new break
  // (decision brk-emulated-probe). Left alone if the probe has set it already.
  // True if written.
  bool seed_brk(pid_t tgid, uint64_t brk);
  // Takes the target's pending rescan request (bpf map rescan_req): call it
  // just before reading the process's maps, so that any later change of its
  // code mappings reports a new LW_EV_MAP_EXEC (decision lifecycle-budget).
  void take_rescan_request(pid_t tgid);

  // Reads every live record of `tgid` from the kernel map.
  // Records of kinds in `skip_kinds` (bit 1 << kind) are left out: a kind
  // the memory budget shed is not read back into memory.
  Result<std::vector<KernelRecord>> read_live(pid_t tgid, uint32_t skip_kinds = 0) const;
  // Deletes every live record of `tgid` (exit, exec, re-attach), or only
  // those of one kind (enum lw_kind) when `kind` >= 0 (re-baselining).
  Status purge_live(pid_t tgid, int kind = -1);
  // Deletes every live record of each of `tgids` in one walk of the map
  // (an exited batch: one walk, not one a process).
  Status purge_live_many(const std::vector<pid_t>& tgids);
  // Deletes the records of `tgid` of `kind` at `records`' addresses that
  // are still those allocations (the same alloc_ns; automatic sampling's
  // thinning, decision auto-sampling): each is looked up first, and the
  // matching ones go in batches of 1,024, so an address freed and handed out
  // again meanwhile keeps its new record (bar the microseconds between the
  // lookup and its batch). One already gone is not an error. Returns how many
  // were deleted.
  uint64_t delete_live(pid_t tgid, uint32_t kind, const std::vector<ThinnedRecord>& records);
  uint32_t live_capacity() const { return live_capacity_; }

  // Attaches (true) or detaches (false) the host-wide raw syscall
  // tracepoints; off after open(). The Tracer decides
  // (decision libc-syscall-wrappers).
  Status set_syscall_tracing(bool on);
  bool syscall_tracing() const;
  // The user stack stored under `stack_hash` (leaf first), or empty.
  StoredStack read_stack(uint64_t stack_hash) const;
  static StoredStack decode_stack(const lw_stack& s);

  // ---- stack GC (core/accounting/stack_gc.h; decision stack-map-gc) ----
  // The stack map's hashes in its walk order: at most `most`, from the one
  // after `after` (null: from the first). `end`: the walk reached the map's
  // end. BPF may add more meanwhile.
  Result<std::vector<uint64_t>> stack_hashes(const uint64_t* after, size_t most, bool& end) const;
  // The stored stack as it is; false when `stack_hash` is not stored.
  bool read_raw_stack(uint64_t stack_hash, lw_stack& out) const;
  // Deletes the stacks of `hashes` (batched); returns how many went.
  size_t delete_stacks(const std::vector<uint64_t>& hashes);
  // Stores `s` under `stack_hash` again (a deleted stack that a record
  // turned out to name); false when it was stored already (BPF met the
  // stack again) or could not be (the map is full).
  bool restore_stack(uint64_t stack_hash, const lw_stack& s);

  // ---- Python frames (bpf/lw_python.bpf.h) ----
  Status set_python_process(pid_t tgid, const lw_py_proc& info);
  Status remove_python_process(pid_t tgid);

  // ---- unwind tables (decision cfi-unwinding) ----
  // These may be called from the unwind-table thread as well as the owner's:
  // they only make bpf syscalls on map fds fixed at load.
  // Registers an object (its state, and its table when ready).
  Status set_unwind_object(const lw_obj_key& key, const lw_unwind_obj& obj);
  Status remove_unwind_object(const lw_obj_key& key);
  // Loads a table's rows and page index into slot `table` of the outer maps
  // (one inner array map each, sized exactly; the kernel charges them to
  // our memory cgroup). Replaces what the slot held.
  Status load_unwind_table(uint32_t table, const std::vector<lw_unwind_row>& rows,
                           const std::vector<uint32_t>& pages);
  Status remove_unwind_table(uint32_t table);
  uint32_t max_unwind_tables() const { return max_unwind_tables_; }

  // Sum over CPUs of the per-CPU counters.
  Counters read_counters() const;

  // Ring buffer: `handler` gets each record's bytes. poll() returns the
  // number of records consumed or an Error.
  using RecordHandler = std::function<void(const void* data, size_t len)>;
  void set_record_handler(RecordHandler handler) { handler_ = std::move(handler); }
  // Each call consumes at most kRecordsPerCall records: under a producer
  // as fast as the consumer (a burst of millions of allocations) libbpf's
  // loop would otherwise never return, and nothing after the poll (the
  // resync after a loss, automatic sampling, snapshots) would run until the
  // burst ended (decision auto-sampling). Records left are read by the next
  // call.
  Result<int> poll(int timeout_ms);
  // Consumes what is already in the buffer without waiting (at most
  // kRecordsPerCall records).
  Result<int> drain();
  static constexpr int kRecordsPerCall = 1 << 18;

  BpfSession(const BpfSession&) = delete;
  BpfSession& operator=(const BpfSession&) = delete;

 private:
  BpfSession() = default;
  static int on_record(void* ctx, void* data, size_t len);
  Result<Link> attach_multi(bpf_program* prog, uint32_t attach_type, pid_t pid,
                            const std::string& path, const std::vector<UprobeSpec>& specs,
                            bool retprobe);

  leakwatch_bpf* skel_ = nullptr;
  ring_buffer* ringbuf_ = nullptr;
  RecordHandler handler_;
  int consumed_ = 0;  // records handled in this poll()/drain() call
  bool uprobe_multi_ = false;
  bool uprobe_session_ = false;
  bool oom_events_ = false;
  uint32_t max_unwind_tables_ = 0;
  uint32_t live_capacity_ = 0;
  struct SharedUprobes {
    std::vector<Link> links;  // empty while no process uses the shared link
    size_t users = 0;         // processes on the shared link
    size_t per_pid = 0;       // processes with their own pid-filtered link
  };
  std::map<SharedKey, SharedUprobes> shared_;
  // Pids made targets since their last full purge: only they can have
  // records in the live map (the BPF side records targets only), so the
  // purge at an attach of any other pid walks nothing. The walk costs
  // O(records of every process): 2.2 ms of the 3 ms attach of a light
  // process at 100 traced (decision shared-wrapper-links).
  std::unordered_set<uint32_t> may_have_records_;
};

}  // namespace lw
