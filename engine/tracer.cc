// SPDX-License-Identifier: Apache-2.0
#include "engine/tracer.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>

#include "core/accounting/event.h"
#include "core/analysis/reserved_space.h"
#include "core/platform/clock.h"
#include "core/platform/log.h"

namespace lw {

Result<std::unique_ptr<Tracer>> Tracer::create(const BpfOptions& options,
                                               const UnwindTableOptions& unwind) {
  auto session = BpfSession::create(options);
  if (!session) return session.error();
  return std::unique_ptr<Tracer>(new Tracer(std::move(*session), options, unwind));
}

void Tracer::refresh_maps(TracedProcess& proc) {
  if (proc.shed != ShedReason::kNone) return;  // its maps were dropped (decision process-cost)
  if (auto maps = read_proc_maps(proc.pid)) {
    stats_.maps_entries_dropped += maps->entries_dropped;
    stats_.maps_paths_dropped += maps->paths_dropped;
    proc.maps = std::move(*maps);
  }
  resolver_.note_build_ids(proc);  // while map_files still names each object
  if (unwind_) unwind_->add_process(proc.pid, proc.maps);
  if (proc.python) proc.python->refresh(*session_, proc.maps);
}

// Reserved address space (decision reserved-address-space): which bytes of
// the mmap records are memory is read from /proc/PID/maps after the poll
// that added (or cut, or moved) a record, so that no snapshot shows a fresh
// PROT_NONE reservation as live, and every 10 s for every record (a mapping
// made PROT_NONE later). A process holding reservations has its
// reservations' touched pages read from /proc/PID/smaps, which walks its page
// tables: at most every 2 s (mprotect commits and touches without an event).
void Tracer::refresh_reserved(TracedProcess& proc) {
  // New mmap records are checked against /proc/PID/maps at most every
  // kCheckNs: PyTorch's loop maps and unmaps tensors hundreds of times a
  // second, and a maps read per poll cost it (light 1.114x CPU per
  // iteration against 1.052x before the reads). A record waits that long to
  // be told reserved; until then its whole size counts, as before.
  constexpr uint64_t kRssNs = 2'000'000'000, kSweepNs = 10'000'000'000, kCheckNs = 1'000'000'000;
  if (proc.shed != ShedReason::kNone) return;  // records dropped (decision process-cost)
  const uint64_t now = monotonic_ns();
  proc.untracked_reserved.add_retired(proc.heap.take_retired_reservations());
  const bool sweep = proc.heap.record_count(LW_KIND_MMAP) > 0 && now - proc.splits_swept_ns >= kSweepNs;
  bool rss_due = proc.heap.split_count() > 0 && now - proc.splits_read_ns >= kRssNs;
  if ((proc.heap.has_unchecked_mmap() && now - proc.maps_checked_ns >= kCheckNs) || sweep) {
    proc.maps_checked_ns = now;
    Result<ParsedMaps> maps = read_proc_maps(proc.pid);
    ++stats_.mapping_reads;
    if (!maps) {  // gone, or not readable: the records wait for the next read
      ++stats_.mapping_read_errors;
      return;
    }
    if (sweep) proc.splits_swept_ns = now;
    const bool had_reservations = proc.heap.split_count() > 0;
    const std::vector<SmapsMapping> mappings = mappings_of(*maps);
    refresh_splits(proc.heap, mappings, false, sweep, &proc.untracked_reserved);
    proc.untracked_reserved.note(untracked_prot_none(proc.heap, mappings, now));
    // A first reservation: its touched pages at once, not in 2 s.
    if (!had_reservations && proc.heap.split_count() > 0 && now - proc.splits_read_ns >= kRssNs) rss_due = true;
  }
  if (!rss_due) return;
  std::optional<ParsedSmaps> smaps = read_smaps(proc.pid);
  ++stats_.mapping_reads;
  if (!smaps) {
    ++stats_.mapping_read_errors;
    return;
  }
  proc.splits_read_ns = now;
  refresh_splits(proc.heap, smaps->mappings, true, false, &proc.untracked_reserved);
  proc.untracked_reserved.note(untracked_prot_none(proc.heap, smaps->mappings, now));
}

// The reservations the process holds before its mmap records begin: read
// before the probes count its mappings (attach, exec), so that every record
// is newer than the read (decision reserved-address-space).
void Tracer::note_reservations_before_tracking(TracedProcess& proc) {
  proc.untracked_reserved.clear();
  (void)proc.heap.take_retired_reservations();  // the old image's
  const uint64_t now = monotonic_ns();
  Result<ParsedMaps> maps = read_proc_maps(proc.pid);
  ++stats_.mapping_reads;
  if (!maps) {
    ++stats_.mapping_read_errors;
    return;
  }
  proc.untracked_reserved.note(untracked_prot_none(proc.heap, mappings_of(*maps), now));
}

Tracer::Tracer(std::unique_ptr<BpfSession> session, const BpfOptions& options,
               const UnwindTableOptions& unwind)
    : session_(std::move(session)),
      python_frames_(options.python_frames && options.collect_stacks),
      unwind_(options.unwind_cfi && options.collect_stacks ? std::make_unique<UnwindTables>(*session_, unwind)
                                                            : nullptr),
      budget_(*session_, procs_, stats_),
      cost_pass_(*session_, procs_, stats_, budget_),
      router_(procs_, budget_, stats_),
      stack_gc_(*session_, stats_, options.collect_stacks ? options.stack_gc_grace_ms : 0),
      resolver_(stack_gc_, unwind_.get()) {
  session_->set_record_handler([this](const void* data, size_t len) { on_record(data, len); });
  budget_.set_fair_share(options.fair_share_percent, options.stack_max_entries);
}

// ---- overhead ----
Status Tracer::set_heap_tracing(pid_t pid, bool on) {
  TracedProcess* p = process(pid);
  if (!p) return Error{ESRCH, "pid " + std::to_string(pid) + " is not traced"};
  if (p->options.heap == on) return ok_status();
  if (!on) {
    detach_heap_many({pid});
    return ok_status();
  }
  // Re-baseline: records of the last window may have been freed unseen.
  if (Status st = session_->purge_live(pid, LW_KIND_HEAP); !st) return st;
  p->heap.clear_kind(LW_KIND_HEAP);
  p->heap_shed = false;
  budget_.recount_records();
  p->options.heap = true;
  if (Status st = session_->set_target(pid, current_flags(*p), 0, heap_mean(*p)); !st)
    return st;
  Status st = attach_objects(*p, true);
  if (!st) {
    p->options.heap = false;
    (void)session_->set_target(pid, current_flags(*p), 0, heap_mean(*p));
    return st;
  }
  p->heap_stale_since = 0;
  return ok_status();
}

Status Tracer::set_bursts(pid_t pid, double fraction) {
  TracedProcess* p = process(pid);
  if (!p) return Error{ESRCH, "pid " + std::to_string(pid) + " is not traced"};
  if (!p->options.heap) return Error{EINVAL, "pid " + std::to_string(pid) + ": heap probes are off"};
  const bool on = fraction > 0 && fraction < 1;
  if (!on && p->drain)
    if (Status st = set_drain(pid, false); !st) return st;
  p->bursts = on;
  p->burst_from_ns = 0;  // a burst is measured from its own start (set_drain)
  // From now (the kernel's clock): an allocation recorded later was made
  // inside a burst.
  p->heap.set_time_fraction(on ? fraction : 1, monotonic_ns());
  return session_->set_target(pid, current_flags(*p), 0, heap_mean(*p));
}

Status Tracer::set_drain(pid_t pid, bool drain) {
  TracedProcess* p = process(pid);
  if (!p) return Error{ESRCH, "pid " + std::to_string(pid) + " is not traced"};
  if (!p->options.heap || !p->attacher || p->drain == drain) return ok_status();
  if (drain) {
    // The flag first: an allocating entry that still fires records nothing.
    p->drain = true;
    if (Status st = session_->set_target(pid, current_flags(*p), 0, heap_mean(*p)); !st) return st;
    destroy_links(p->attacher->park_alloc_side());
    return ok_status();
  }
  // Parked: the free side first, and the walk (set_parked).
  if (p->parked)
    if (Status parked = set_parked(pid, false); !parked) return parked;
  // The probes first: the flag goes once they fire.
  Status st = p->attacher->unpark_alloc_side();
  p->drain = false;
  p->burst_from_ns = p->bursts ? monotonic_ns() : 0;
  if (Status t = session_->set_target(pid, current_flags(*p), 0, heap_mean(*p)); !t) return t;
  return st;
}

std::optional<double> Tracer::close_burst(pid_t pid, double scheduled_s) {
  TracedProcess* p = process(pid);
  if (!p || !p->bursts || p->drain || p->burst_from_ns == 0) return std::nullopt;
  const uint64_t from = std::exchange(p->burst_from_ns, 0), to = monotonic_ns();
  if (to <= from) return std::nullopt;
  const double recorded_s = static_cast<double>(to - from) / 1e9;
  if (scheduled_s > 0)
    p->heap.set_burst_span(from, to, p->heap.time_fraction() * recorded_s / scheduled_s);
  return recorded_s;
}

Status Tracer::set_parked(pid_t pid, bool parked) {
  TracedProcess* p = process(pid);
  if (!p) return Error{ESRCH, "pid " + std::to_string(pid) + " is not traced"};
  if (!p->options.heap || !p->attacher || p->parked == parked) return ok_status();
  if (parked) {
    if (!p->drain) return Error{EINVAL, "pid " + std::to_string(pid) + ": parking needs the drain"};
    // Marked while the free side is on: every record is live now.
    mark_heap_records(*p, *session_);
    p->parked = true;
    destroy_links(p->attacher->park_free_side());
    return ok_status();
  }
  // The free side first: a free from now on is seen, the walk settles
  // what was freed before.
  Status st = p->attacher->unpark_free_side();
  p->parked = false;
  // A process gone keeps its records as they were: its memory cannot be read.
  if (!p->exited) settle_heap_records(*p, *session_, heap_walk_max_bytes_);
  return st;
}

void Tracer::walk_parked_heap(pid_t pid) {
  TracedProcess* p = process(pid);
  if (p != nullptr && p->parked && !p->exited) settle_heap_records(*p, *session_, heap_walk_max_bytes_);
}

bool Tracer::heap_walkable(pid_t pid) {
  TracedProcess* p = process(pid);
  return p != nullptr && lw::heap_walkable(*p);
}

void Tracer::detach_heap_many(const std::vector<pid_t>& pids, const std::vector<pid_t>& all_probe_pids) {
  std::vector<Link> links;
  const double now = unix_seconds_now();
  for (pid_t pid : pids) {
    TracedProcess* p = process(pid);
    if (!p || !p->options.heap) continue;
    // Flags first: the probes may still fire while their links close.
    p->options.heap = false;
    p->bursts = p->drain = p->parked = false;  // the bursts end with the probes
    p->burst_from_ns = 0;
    p->walk.marks.clear();
    p->heap.set_time_fraction(1, monotonic_ns());
    (void)session_->set_target(pid, current_flags(*p), 0, heap_mean(*p));
    // The heap probes only: CUDA's stay (governor, step-down).
    for (Link& l : p->attacher->take_links(true, false)) links.push_back(std::move(l));
    if (p->heap_stale_since == 0) p->heap_stale_since = now;  // a budget shed stamped it first
  }
  // The kill switch: every other probe too, CUDA's, the mmap wrappers' and
  // ld.so's (accounting is already off).
  for (pid_t pid : all_probe_pids) {
    TracedProcess* p = process(pid);
    if (!p) continue;
    p->attacher->set_cuda(false);
    p->attacher->set_tensors(false);
    for (Link& l : p->attacher->take_links()) links.push_back(std::move(l));
    sync_syscall_sites(*p);
  }
  // All at once: each uprobe link close waits out a grace period, and in
  // parallel those waits overlap (the kill switch's 1 s bound).
  destroy_links(std::move(links));
}

Status Tracer::set_accounting(pid_t pid, bool on) {
  TracedProcess* p = process(pid);
  if (!p) return Error{ESRCH, "pid " + std::to_string(pid) + " is not traced"};
  p->accounting = on;
  if (Status st = session_->set_target(pid, current_flags(*p), 0, heap_mean(*p)); !st)
    return st;
  // Back on: the CUDA probes the kill switch took are placed again.
  if (on && p->options.cuda) {
    p->attacher->set_cuda(true);
  }
  if (on && p->options.tensors && !p->tensor_suspended) p->attacher->set_tensors(true);
  // Back on: the wrapper probes the kill switch took are placed again too.
  if (on) {
    Status st = attach_objects(*p, p->options.heap);
    update_raw_syscalls();
    return st;
  }
  return ok_status();
}

std::optional<uint64_t> Tracer::probe_hits(pid_t pid) const {
  auto t = session_->get_target(pid);
  if (!t) return std::nullopt;
  return t->hits;
}

std::optional<uint64_t> Tracer::tensor_hits(pid_t pid) const {
  auto t = session_->get_target(pid);
  if (!t) return std::nullopt;
  return t->tensor_hits;
}

void Tracer::note_tensor_rate(pid_t pid, double rate) {
  if (TracedProcess* p = process(pid)) p->tensor_hits_per_second = rate;
}

Status Tracer::set_tensor_tracing(pid_t pid, bool on) {
  TracedProcess* p = process(pid);
  if (!p) return Error{ESRCH, "pid " + std::to_string(pid) + " is not traced"};
  if (!p->options.tensors || p->tensor_suspended == !on) return ok_status();
  p->tensor_suspended = !on;
  // Flags first: the probes may still fire while their links close.
  if (Status st = session_->set_target(pid, current_flags(*p), 0, heap_mean(*p)); !st) return st;
  p->attacher->set_tensors(on);
  if (!on) {
    destroy_links(p->attacher->take_links(false, false, true));
    return ok_status();
  }
  // Frees were not seen while detached: the tier starts again from now.
  if (Status st = session_->purge_live(pid, LW_KIND_TENSOR_CPU); !st) return st;
  if (Status st = session_->purge_live(pid, LW_KIND_TENSOR_GPU); !st) return st;
  p->heap.clear_kind(LW_KIND_TENSOR_CPU);
  p->heap.clear_kind(LW_KIND_TENSOR_GPU);
  p->cuda_devices.clear_kind(LW_KIND_TENSOR_GPU);
  budget_.recount_records();
  return attach_objects(*p, p->options.heap);
}
// ---- end overhead ----

Tracer::~Tracer() {
  std::vector<Link> links;
  for (auto& [pid, proc] : procs_)
    for (Link& l : proc->attacher->take_links()) links.push_back(std::move(l));
  destroy_links(std::move(links));
}

Status Tracer::attach(pid_t pid, const AttachOptions& options) {
  if (pid <= 0) return Error{ESRCH, "invalid pid " + std::to_string(pid)};
  // Only whether it exists: EPERM from kill() means it does but belongs to
  // another user, which is what a non-root daemon with CAP_SYS_PTRACE (the
  // systemd unit's) traces; reading its /proc files decides the permission.
  if (kill(pid, 0) != 0 && errno == ESRCH) return Error{ESRCH, "no such process: " + std::to_string(pid)};
  if (procs_.count(pid)) return ok_status();
  auto proc = std::make_unique<TracedProcess>();
  proc->pid = pid;
  proc->start_ticks = process_start_ticks(pid);
  proc->comm = process_comm(pid);
  char exe[4096];
  ssize_t n = readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), exe, sizeof(exe) - 1);
  if (n > 0) proc->exe.assign(exe, static_cast<size_t>(n));
  proc->attacher = std::make_unique<ProcessAttacher>(*session_, pid);
  proc->attacher->set_cuda(options.cuda);
  proc->attacher->set_tensors(options.tensors);
  proc->attacher->set_hint_probes(!unwind_ || options.hint_probes);
  proc->options = options;
  // The lifecycle budget: a burst of twice the rate (a process's start-up
  // loads its libraries in a few rescans), then one every 1/rate s.
  if (options.max_rescans_per_second > 0)
    proc->rescan_budget = TokenBucket(1000000000ull / options.max_rescans_per_second,
                                      2ull * options.max_rescans_per_second, monotonic_ns());
  if (python_frames_) proc->python = std::make_unique<PythonProcess>(pid);

  // Records left by an earlier process with this pid must not be inherited.
  const uint64_t purge_start = monotonic_ns();
  if (Status st = session_->purge_live(pid); !st) return st;
  const uint64_t purged = monotonic_ns();
  proc->heap.set_sample_mean(options.sample_mean_bytes);
  note_reservations_before_tracking(*proc);
  if (Status st = session_->set_target(pid, target_flags(options), 0, options.sample_mean_bytes); !st)
    return st;
  if (auto t = session_->get_target(pid)) {
    proc->lost_seen = t->lost;
    proc->maps_gen_seen = t->maps_gen;
    proc->records_added_seen = t->records_added;
  }
  budget_.on_attach(*proc);  // its stack-map allowance (decision fair-shares)
  // Before the first read of its maps (attach_objects); an event in the
  // ring already is served once the process is registered below.
  session_->take_rescan_request(pid);
  // Without heap probes (mode light) the allocator is still identified, for
  // the API and metrics, and the optional CUDA probes are placed.
  proc->attacher->set_syscalls(options.mmap);
  const uint64_t objects_start = monotonic_ns();
  Status st = options.heap ? attach_objects(*proc, true)
                           : (void(attach_objects(*proc, false)), ok_status());
  const uint64_t objects_done = monotonic_ns();
  if (!st) {
    (void)session_->remove_target(pid);  // best effort: the attach error is what matters
    // Whatever was attached goes, and the shared links' users with it
    // (decision shared-wrapper-links): a process that exited part way through
    // its attach kept its share, and the shared libc and ld.so links were never
    // closed (2 bpf_link fds left after LeakwatchChurn's 77 such attaches).
    closer_->close_async(proc->attacher->take_links());  // off the event loop (decision gone-processes-dropped)
    if (kill(pid, 0) != 0 && errno == ESRCH)
      return Error{ESRCH, "no such process: " + std::to_string(pid)};
    return st;
  }
  refresh_maps(*proc);
  LW_LOG_DEBUG("attach stages pid %d: purge %.3f ms, objects %.3f ms, maps refresh %.3f ms", pid,
               (purged - purge_start) / 1e6, (objects_done - objects_start) / 1e6,
               (monotonic_ns() - objects_done) / 1e6);
  procs_[pid] = std::move(proc);
  return ok_status();
}

void Tracer::detach(pid_t pid) {
  auto it = procs_.find(pid);
  if (it == procs_.end()) return;
  it->second->attacher->detach_all();
  // Best effort: a leftover entry is purged again on the next attach of
  // this pid, and the target entry only filters events.
  (void)session_->remove_target(pid);
  (void)session_->purge_live(pid);
  if (unwind_) unwind_->remove_process(pid);
  procs_.erase(it);
  budget_.recount_records();
}

void Tracer::detach_many(const std::vector<pid_t>& pids) {
  std::vector<Link> links;
  for (pid_t pid : pids) {
    auto it = procs_.find(pid);
    if (it == procs_.end()) continue;
    for (Link& l : it->second->attacher->take_links()) links.push_back(std::move(l));
    (void)session_->remove_target(pid);
    if (unwind_) unwind_->remove_process(pid);
    procs_.erase(it);
  }
  (void)session_->purge_live_many(pids);
  closer_->close_async(std::move(links));
}

TracedProcess* Tracer::process(pid_t pid) {
  auto it = procs_.find(pid);
  return it == procs_.end() ? nullptr : it->second.get();
}

void Tracer::on_record(const void* data, size_t len) {
  if (tap_) tap_(data, len);
  std::optional<DecodedEvent> e = decode_event(data, len);
  if (!e) {
    ++stats_.decode_errors;
    return;
  }
  router_.route(*e);
}

Result<int> Tracer::poll(int timeout_ms) {
  Result<int> n = session_->poll(timeout_ms);
  if (!n) return n;
  after_poll();
  return n;
}

Result<bool> Tracer::wait_for_tables(std::chrono::milliseconds timeout,
                                      const std::atomic<bool>& stop) {
  if (!unwind_) return true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!stop.load()) {
    if (unwind_->wait_idle(std::chrono::milliseconds(0))) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    Result<int> n = poll(50);
    if (!n) return n.error();
  }
  return false;
}

void Tracer::after_poll() {
  // A drop anywhere shows in the global counter; only then look per target.
  Counters c = session_->read_counters();
  const bool new_drops = c[LW_CNT_EVENTS_DROPPED_RINGBUF] != drops_seen_;
  // The targets are looked at again one poll after a loss: a drop counted
  // on another CPU while these counters were read may show in a target's
  // count only afterwards.
  const bool drops = new_drops || drops_recheck_;
  drops_recheck_ = new_drops;
  if (new_drops) {
    // Consume what is already buffered first, so the map read below is not
    // older than the events still queued before it.
    if (!session_->drain()) ++stats_.ringbuf_errors;
    drops_seen_ = c[LW_CNT_EVENTS_DROPPED_RINGBUF];
  }
  bool resynced = false;
  for (auto& [pid, proc] : procs_) {
    if (proc->exited) continue;
    if (proc->exec_pending) {
      reattach_after_exec(*proc);
      continue;
    }
    // Records thinned on arrival (automatic sampling), in one batch a poll.
    if (proc->heap.thinned_pending()) budget_.delete_thinned(*proc);
    // A CPython found before its interpreter made its thread-state key.
    if (proc->python && proc->python->wants_retry()) proc->python->retry(*session_);
    if (proc->rescan_pending) rescan_within_budget(*proc);
    if (drops) {
      auto t = session_->get_target(pid);
      if (t && t->lost != proc->lost_seen) {
        proc->lost_seen = t->lost;
        proc->resync_pending = true;
        // A lost event may have been its rescan request: the BPF side asks
        // no more until the request is taken (decision lifecycle-budget).
        proc->rescan_pending = true;
      }
    }
    // At once when the loss is over; while events are still being lost, a
    // map of millions of records (seconds to read, in which the burst
    // overflows the ring again) is read back at most a tenth of the time,
    // as kernel_live_bytes() is.
    if (proc->resync_pending && (!new_drops || monotonic_ns() >= kernel_read_allowed_ns_)) {
      proc->resync_pending = false;
      resync(*proc);
      resynced = true;
    }
    // A new site's stack with a frame outside the maps last read: read them
    // now, so that a snapshot (resolve_stack) only reads (decision named-parts).
    if (resolver_.maps_miss_frames(*proc)) refresh_maps(*proc);
    fold_cut_sites(*proc);
    refresh_reserved(*proc);
  }  // Resyncs and execs replaced whole record sets.
  budget_.recount_records();
  // A resync (events lost) may have brought records the event path never
  // counted: automatic sampling looks again (decision auto-sampling).
  if (resynced) budget_.check_auto_sampling();
  // Fair shares (decision fair-shares): marks lifted, stack-map users counted.
  if (const uint64_t now = monotonic_ns(); now >= shares_due_ns_) {
    shares_due_ns_ = now + 1000000000ull;
    budget_.check_shares();
  }
  update_raw_syscalls();
  stack_gc_.run(procs_);
  cost_pass_.run();
}

// Sites whose stacks were cut at a pending unwind table go into the whole
// stack they start, once one is recorded (core/accounting/cut_sites.h;
// issue 35, item 5): one site for one call path, whatever the tables'
// timing. Each new site's stored stack is read once.
void Tracer::fold_cut_sites(TracedProcess& proc) {
  auto peek = [this](uint64_t hash) {
    const StoredStack stored = stack_gc_.peek_stack(hash);
    WalkedStack walked{stored.flags & LW_STACK_END_MASK, {}};
    walked.frames.reserve(stored.frames.size());
    for (const StoredFrame& f : stored.frames) walked.frames.push_back({f.ino, f.dev, f.addr, f.how});
    std::vector<std::pair<uint64_t, int32_t>> py;
    py.reserve(stored.py.size());
    for (const lw_py_frame& f : stored.py) py.emplace_back(f.code, f.lasti);
    walked.python = python_frames_identity(py);
    return walked;
  };
  const std::vector<SiteFold> folds = find_cut_site_folds(proc.cut_sites, proc.heap.sites(), peek);
  if (folds.empty()) return;
  const uint64_t before = proc.heap.counters().sites_folded;
  proc.heap.fold_sites(folds);
  stats_.cut_sites_folded += proc.heap.counters().sites_folded - before;
}

// A dlopen/dlclose loop (or an mmap storm of executable mappings) asks for
// a rescan at every poll; each costs /proc/PID/maps, the new objects' ELF
// headers and the unwinder's registration. Past the process's budget the
// rescan waits, still pending (later changes fold into it), and is done
// once a token is back: probes on a new library come at most 1/rate s late
// (decision lifecycle-budget).
void Tracer::rescan_within_budget(TracedProcess& proc) {
  count_code_changes(proc);
  const uint64_t now = monotonic_ns();
  if (!proc.rescan_budget.take(now)) {
    if (proc.lifecycle.deferred_since == 0) {
      proc.lifecycle.deferred_since = unix_seconds_now();
      ++proc.lifecycle.rescans_deferred;
      ++stats_.rescans_deferred;
    }
    return;
  }
  proc.rescan_pending = false;
  proc.lifecycle.deferred_since = 0;
  ++proc.lifecycle.rescans;
  ++stats_.rescans;
  // Before the maps are read: a change from here on asks again.
  session_->take_rescan_request(proc.pid);
  if ((proc.options.heap || proc.options.mmap || proc.options.cuda || proc.options.tensors) &&
      proc.accounting &&
      !attach_objects(proc, proc.options.heap))
    ++stats_.attach_errors;
  refresh_maps(proc);
}

// Changes of the process's code mappings (exec, executable mmap, dlopen,
// dlclose) since the last count, from the kernel's generation counter: the
// ring carries one event per rescan request, not one per change.
void Tracer::count_code_changes(TracedProcess& proc) {
  auto t = session_->get_target(proc.pid);
  if (!t) return;
  const uint64_t changes = t->maps_gen - proc.maps_gen_seen;
  proc.maps_gen_seen = t->maps_gen;
  proc.lifecycle.events += changes;
  stats_.lifecycle_events += changes;
}

void Tracer::resync(TracedProcess& proc) {
  uint32_t skip = 0;
  for (uint32_t k = 0; k < LW_KIND_MAX; ++k)
    if (proc.heap.frozen(k)) skip |= 1u << k;
  const uint64_t t0 = monotonic_ns();
  const uint64_t cpu0 = thread_cpu_ns();
  // What the kernel inserted by now is in the map read next: nothing of it
  // is in flight any more (decision fair-shares).
  if (auto t = session_->get_target(proc.pid)) proc.records_added_seen = t->records_added;
  Result<std::vector<KernelRecord>> records = session_->read_live(proc.pid, skip);
  if (!records) {  // retried on the next loss
    LW_LOG_WARN("resync of pid %d failed: %s", proc.pid, records.error().message.c_str());
    return;
  }
  allow_kernel_read_after(t0, cpu0);
  LW_LOG_DEBUG("resync of pid %d: %zu records read from the live map in %.0f ms", proc.pid, records->size(),
               static_cast<double>(monotonic_ns() - t0) / 1e6);
  proc.heap.resync(*records);
  budget_.delete_thinned(proc);  // allocated before an automatic-sampling switch, thinned on arrival
  proc.cuda_devices.resync(*records);
  ++stats_.resyncs;
}

void Tracer::reattach_after_exec(TracedProcess& proc) {
  proc.exec_pending = false;
  ++proc.execs;
  // The probes stay: uprobes are per (inode, offset) and filtered by the
  // task's current mm, so a probe on a library the new image maps too (the
  // usual case: the same libc) keeps working, and one on a library it does
  // not map never fires. Only objects new to this pid are attached below.
  // (Detaching and re-attaching the same probes at exec lost the new
  // image's first return probe; see test FollowsPidThroughExec.)
  if (!session_->purge_live(proc.pid)) ++stats_.attach_errors;
  proc.heap.clear();
  proc.walk.marks.clear();        // a new heap (windows: decision busy-processes)
  proc.walk.small_chunk_max = 0;  // and maybe a new environment
  proc.resync_pending = false;  // nothing of the old image is left to read back
  // A new image, a new heap: exact again (or the configured mean) until it
  // outgrows its share in turn.
  proc.auto_sample_mean = 0;
  proc.auto_sample_reason = "";
  proc.auto_sample_since = 0;
  proc.heap.set_sample_mean(proc.options.sample_mean_bytes);
  // ...and within its fair shares again (decision fair-shares).
  proc.over_share = "";
  proc.stack_over_share = "";
  proc.stacks_freed = 0;
  proc.stack_limit = 0;
  proc.record_limit = 0;
  if (auto t = session_->get_target(proc.pid)) proc.records_added_seen = t->records_added;
  proc.cuda_devices.clear();
  proc.stacks.clear();
  proc.stacks_bytes = 0;
  proc.sites_checked = 0;
  proc.cut_sites = {};
  if (proc.python) proc.python->reset(*session_);
  proc.perf_map.reset();  // the new image's runtime writes its own (decision jit-perf-maps)
  proc.perf_map_read_ns = 0;
  proc.comm = process_comm(proc.pid);
  count_code_changes(proc);
  session_->take_rescan_request(proc.pid);
  refresh_maps(proc);
  note_reservations_before_tracking(proc);
  // The exec cleared the kernel flags, and the new image's wrappers are
  // decided again below: until then the raw tracepoints (if attached) must
  // not skip this process.
  proc.syscall_sites = false;
  if (!session_->set_target(proc.pid, current_flags(proc), 0, heap_mean(proc)))
    return;
  if ((proc.options.heap || proc.options.mmap || proc.options.cuda || proc.options.tensors) &&
      proc.accounting &&
      !attach_objects(proc, proc.options.heap))
    ++stats_.attach_errors;
}

Status Tracer::attach_objects(TracedProcess& proc, bool heap) {
  const size_t objects = proc.attacher->objects().size();
  const size_t functions = proc.attacher->allocator().functions.size();
  const std::string support = proc.attacher->allocator().support;
  const SyscallTracing syscalls = proc.attacher->syscall_tracing();
  Status st = proc.attacher->attach_new_objects(heap);
  sync_syscall_sites(proc);
  if (proc.attacher->objects().size() != objects || proc.attacher->allocator().functions.size() != functions ||
      proc.attacher->allocator().support != support || proc.attacher->syscall_tracing() != syscalls)
    ++stats_.probe_changes;
  return st;
}

void Tracer::sync_syscall_sites(TracedProcess& proc) {
  const bool sites = proc.attacher->syscall_tracing() == SyscallTracing::kWrappers;
  const bool shared = sites && proc.attacher->shared_syscall_link();
  if (sites == proc.syscall_sites && shared == proc.shared_sites) return;
  proc.syscall_sites = sites;
  proc.shared_sites = shared;
  (void)session_->set_target(proc.pid, current_flags(proc), 0, heap_mean(proc));
}

void Tracer::set_raw_syscalls_allowed(bool allowed) {
  raw_syscalls_allowed_ = allowed;
  update_raw_syscalls();
}

void Tracer::update_raw_syscalls() {
  bool needed = false;
  if (raw_syscalls_allowed_)
    for (const auto& [pid, p] : procs_)
      if (!p->exited && p->accounting && p->options.mmap && p->options.heap &&
          p->attacher->syscall_tracing() == SyscallTracing::kTracepoints) {
        needed = true;
        break;
      }
  if (needed == session_->syscall_tracing()) return;
  if (Status st = session_->set_syscall_tracing(needed); !st) ++stats_.attach_errors;
}

Unrecorded Tracer::unrecorded(pid_t pid) const {
  Unrecorded u;
  if (auto t = session_->get_target(pid))
    for (uint32_t k = 0; k < LW_KIND_MAX; ++k)
      u.add(k, {t->unrec[k].map_full, t->unrec[k].map_full_bytes, t->unrec[k].stack_full,
                t->unrec[k].over_share, t->unrec[k].over_share_bytes, t->unrec[k].stack_over_share});
  return u;
}

Result<uint64_t> Tracer::kernel_live_bytes(pid_t pid) {
  const uint64_t t0 = monotonic_ns();
  if (t0 < kernel_read_allowed_ns_) return Error{EAGAIN, "kernel live map read skipped: reads bounded"};
  const uint64_t cpu0 = thread_cpu_ns();
  auto records = session_->read_live(pid);
  allow_kernel_read_after(t0, cpu0);
  if (!records) return records.error();
  uint64_t total = 0;
  for (const KernelRecord& r : *records) total += r.size;
  return total;
}

}  // namespace lw
