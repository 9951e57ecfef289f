// SPDX-License-Identifier: Apache-2.0
#include "engine/bpf_session.h"

#include "core/platform/fd.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstddef>
#include <random>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "core/platform/capabilities.h"
#include "core/platform/log.h"
#include "engine/bpf_load_errors.h"
#include "engine/uprobe_links.h"
#include "leakwatch_bpf.skel.h"

namespace lw {

Link& Link::operator=(Link&& o) noexcept {
  if (this != &o) {
    if (link_) bpf_link__destroy(link_);
    if (fd_ >= 0) close(fd_);
    link_ = o.link_;
    fd_ = o.fd_;
    o.link_ = nullptr;
    o.fd_ = -1;
  }
  return *this;
}

Link::~Link() {
  if (link_) bpf_link__destroy(link_);
  if (fd_ >= 0) close(fd_);
}

void destroy_links(std::vector<Link> links) {
  constexpr size_t kMaxThreads = 32;
  if (links.size() <= 1) return;  // the vector's destructor closes it
  size_t threads = std::min(links.size(), kMaxThreads);
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&links, t, threads] {
      for (size_t i = t; i < links.size(); i += threads) links[i] = Link();
    });
  }
  for (std::thread& w : workers) w.join();
}

LinkCloser::LinkCloser() : thread_([this] { run(); }) {}

LinkCloser::~LinkCloser() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LinkCloser::close_async(std::vector<Link> links) {
  if (links.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ += links.size();
    queue_.push_back(std::move(links));
  }
  cv_.notify_one();
}

size_t LinkCloser::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

void LinkCloser::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return pending_ == 0; });
}

void LinkCloser::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and everything closed
    // Everything queued so far in one go: the waits overlap.
    std::vector<Link> batch;
    while (!queue_.empty()) {
      for (Link& l : queue_.front()) batch.push_back(std::move(l));
      queue_.pop_front();
    }
    lock.unlock();
    const size_t n = batch.size();
    destroy_links(std::move(batch));
    lock.lock();
    pending_ -= n;
    if (pending_ == 0) idle_cv_.notify_all();
  }
}

Result<std::unique_ptr<BpfSession>> BpfSession::create(const BpfOptions& options) {
  libbpf_set_print(libbpf_log);
  // Check what the kernel lacks before libbpf's own, less specific errors.
  if (access("/sys/kernel/btf/vmlinux", R_OK) != 0 ||
      access("/sys/bus/event_source/devices/uprobe/type", R_OK) != 0)
    return load_error(ENOTSUP);
  if (options.ringbuf_bytes < 4096 || (options.ringbuf_bytes & (options.ringbuf_bytes - 1)))
    return Error{EINVAL, "ring buffer size must be a power of two >= 4096"};

  std::unique_ptr<BpfSession> s(new BpfSession());
  s->skel_ = leakwatch_bpf__open();
  if (!s->skel_) return load_error(errno);
  leakwatch_bpf* sk = s->skel_;
  sk->rodata->collect_stacks = options.collect_stacks;
  sk->rodata->report_all_execs = options.report_all_execs;
  sk->rodata->wakeup_bytes = options.batch_wakeups ? options.ringbuf_bytes / 8 : 0;
  sk->rodata->unwind_cfi = options.unwind_cfi ? 1 : 0;
  sk->rodata->python_frames = options.python_frames ? 1 : 0;
  sk->rodata->python_code_memo = options.python_code_memo ? 1 : 0;
  sk->rodata->python_native_above = options.python_native_above ? 1 : 0;
  bpf_map__set_max_entries(sk->maps.py_procs, std::max<uint32_t>(options.max_targets, 1));
  sk->rodata->frame_cache_on = options.frame_cache ? 1 : 0;
  sk->rodata->walk_memo_on = options.walk_reuse ? 1 : 0;
  sk->rodata->stack_window_size = options.stack_window;
  bpf_map__set_max_entries(sk->maps.unwind_rows, std::max<uint32_t>(options.max_unwind_tables, 1));
  bpf_map__set_max_entries(sk->maps.unwind_pages, std::max<uint32_t>(options.max_unwind_tables, 1));
  bpf_map__set_max_entries(sk->maps.unwind_objs, std::max<uint32_t>(options.max_unwind_objects, 1));
  s->max_unwind_tables_ = std::max<uint32_t>(options.max_unwind_tables, 1);
  bpf_map__set_max_entries(sk->maps.events, options.ringbuf_bytes);
  bpf_map__set_max_entries(sk->maps.live, options.live_max_entries);
  s->live_capacity_ = options.live_max_entries;
  bpf_map__set_map_flags(sk->maps.live, (bpf_map__map_flags(sk->maps.live) & ~BPF_F_NO_PREALLOC) |
                                            (options.live_prealloc ? 0 : BPF_F_NO_PREALLOC));
  bpf_map__set_max_entries(sk->maps.stacks, options.stack_max_entries);
  bpf_map__set_max_entries(sk->maps.targets, options.max_targets);
  bpf_map__set_max_entries(sk->maps.rescan_req, std::max<uint32_t>(options.max_targets, 1));
  s->uprobe_multi_ = kernel_has_uprobe_multi();
  if (s->uprobe_multi_) {
    bpf_program__set_expected_attach_type(sk->progs.lw_entry,
                                          static_cast<enum bpf_attach_type>(kAttachUprobeMulti));
    bpf_program__set_expected_attach_type(sk->progs.lw_alloc_return,
                                          static_cast<enum bpf_attach_type>(kAttachUprobeMulti));
    bpf_program__set_expected_attach_type(sk->progs.lw_tensor_return,
                                          static_cast<enum bpf_attach_type>(kAttachUprobeMulti));
  }
  // Uprobe sessions (decision tensor-tier): the tensor allocators' entry and
  // return in one program, the return skipped for calls that record nothing.
  s->uprobe_session_ = s->uprobe_multi_ && options.uprobe_sessions && kernel_has_uprobe_session();
  if (s->uprobe_session_)
    bpf_program__set_expected_attach_type(sk->progs.lw_tensor_session,
                                          static_cast<enum bpf_attach_type>(kAttachUprobeSession));
  else
    bpf_program__set_autoload(sk->progs.lw_tensor_session, false);
  if (!options.trace_syscalls) {
    bpf_program__set_autoload(sk->progs.lw_sys_enter, false);
    bpf_program__set_autoload(sk->progs.lw_sys_exit, false);
  }
  // OOM kill reports (decision oom-kill-reports): only where the kernel has
  // both tracepoints in its BTF; elsewhere the object loads without them.
  bool oom_tracepoints = false;
  if (btf* vmlinux = btf__load_vmlinux_btf()) {
    oom_tracepoints = btf__find_by_name_kind(vmlinux, "btf_trace_mark_victim", BTF_KIND_TYPEDEF) > 0 &&
                      btf__find_by_name_kind(vmlinux, "btf_trace_signal_generate", BTF_KIND_TYPEDEF) > 0;
    btf__free(vmlinux);
  }
  if (!options.oom_events || !oom_tracepoints) {
    bpf_program__set_autoload(sk->progs.lw_oom_victim, false);
    bpf_program__set_autoload(sk->progs.lw_signal, false);
  }
  if (int err = leakwatch_bpf__load(sk); err != 0) return load_error(-err);

  // Lifecycle tracepoints are system-wide but filter on the targets map
  // first thing. The skeleton owns these links and detaches them on destroy.
  sk->links.lw_exec = bpf_program__attach(sk->progs.lw_exec);
  if (!sk->links.lw_exec) return errno_error("attaching tp_btf/sched_process_exec");
  sk->links.lw_exit = bpf_program__attach(sk->progs.lw_exit);
  if (!sk->links.lw_exit) return errno_error("attaching tp_btf/sched_process_exit");
  sk->links.lw_fork = bpf_program__attach(sk->progs.lw_fork);
  if (!sk->links.lw_fork) return errno_error("attaching tp_btf/sched_process_fork");
  // The raw syscall tracepoints are loaded but attached only when a traced
  // process needs them (Tracer::update_raw_syscalls,
  // decision libc-syscall-wrappers).
  if (bpf_program__autoload(sk->progs.lw_oom_victim)) {
    // Optional: without them the daemon runs, with no OOM reports.
    sk->links.lw_oom_victim = bpf_program__attach(sk->progs.lw_oom_victim);
    sk->links.lw_signal = bpf_program__attach(sk->progs.lw_signal);
    s->oom_events_ = sk->links.lw_oom_victim && sk->links.lw_signal;
    if (!s->oom_events_) LW_LOG_WARN("OOM kill reports off: attaching tp_btf/mark_victim or signal_generate failed");
  } else if (options.oom_events) {
    LW_LOG_WARN("OOM kill reports off: the kernel's BTF has no mark_victim/signal_generate tracepoint");
  }

  s->ringbuf_ = ring_buffer__new(bpf_map__fd(sk->maps.events), &BpfSession::on_record, s.get(),
                                 nullptr);
  if (!s->ringbuf_) return errno_error("creating ring buffer consumer");
  return s;
}

// ---- overhead: kill switch ----
Status BpfSession::set_syscall_tracing(bool on) {
  leakwatch_bpf* sk = skel_;
  if (!on) {
    // bpf_link__destroy of a raw tracepoint link returns at once (no
    // uprobe grace period to wait out).
    if (sk->links.lw_sys_enter) bpf_link__destroy(sk->links.lw_sys_enter);
    if (sk->links.lw_sys_exit) bpf_link__destroy(sk->links.lw_sys_exit);
    sk->links.lw_sys_enter = sk->links.lw_sys_exit = nullptr;
    return ok_status();
  }
  if (!bpf_program__autoload(sk->progs.lw_sys_enter)) return ok_status();  // never loaded
  if (!sk->links.lw_sys_enter) {
    sk->links.lw_sys_enter = bpf_program__attach(sk->progs.lw_sys_enter);
    if (!sk->links.lw_sys_enter) return errno_error("attaching raw_tp/sys_enter");
  }
  if (!sk->links.lw_sys_exit) {
    sk->links.lw_sys_exit = bpf_program__attach(sk->progs.lw_sys_exit);
    if (!sk->links.lw_sys_exit) return errno_error("attaching raw_tp/sys_exit");
  }
  return ok_status();
}

bool BpfSession::syscall_tracing() const {
  return skel_->links.lw_sys_enter != nullptr;
}
// ---- end overhead ----

BpfSession::~BpfSession() {
  if (ringbuf_) ring_buffer__free(ringbuf_);
  if (skel_) leakwatch_bpf__destroy(skel_);
}

// A negative return stops libbpf's loop after this record, which it has
// consumed already (its consumer position is past it): the budget's stop.
constexpr int kBudgetSpent = -ECANCELED;

int BpfSession::on_record(void* ctx, void* data, size_t len) {
  auto* self = static_cast<BpfSession*>(ctx);
  if (self->handler_) self->handler_(data, len);
  return ++self->consumed_ >= kRecordsPerCall ? kBudgetSpent : 0;
}

Result<int> BpfSession::poll(int timeout_ms) {
  consumed_ = 0;
  int n = ring_buffer__poll(ringbuf_, timeout_ms);
  if (n == kBudgetSpent) return consumed_;
  if (n < 0 && n != -EINTR) return errno_error("polling ring buffer", -n);
  // Alloc/free events below the wakeup threshold raise no epoll event
  // (decision batched-wakeups): ring_buffer__poll only reads rings epoll
  // reported, so read whatever else is waiting too.
  int more = ring_buffer__consume(ringbuf_);
  if (more < 0 && more != -EINTR && more != kBudgetSpent) return errno_error("consuming ring buffer", -more);
  return consumed_;
}

Result<int> BpfSession::drain() {
  consumed_ = 0;
  int n = ring_buffer__consume(ringbuf_);
  if (n < 0 && n != kBudgetSpent) return errno_error("consuming ring buffer", -n);
  return consumed_;
}

Result<Link> BpfSession::attach_multi(bpf_program* prog, uint32_t attach_type, pid_t pid,
                                      const std::string& path, const std::vector<UprobeSpec>& specs,
                                      bool retprobe) {
  std::vector<uint64_t> offsets, cookies;
  for (const UprobeSpec& u : specs) {
    offsets.push_back(u.file_offset);
    cookies.push_back(u.cookie());
  }
  Result<int> fd = create_uprobe_link(bpf_program__fd(prog), attach_type, pid, path, offsets, cookies,
                                      retprobe);
  if (!fd) return fd.error();
  return Link::from_fd(*fd);
}

Result<std::vector<Link>> BpfSession::attach_tensor_sessions(pid_t pid, const std::string& path,
                                                             const std::vector<UprobeSpec>& specs) {
  std::vector<Link> links;
  if (specs.empty()) return links;
  if (!uprobe_session_) return Error{ENOTSUP, "uprobe sessions: not supported by this kernel"};
  Result<Link> l = attach_multi(skel_->progs.lw_tensor_session, kAttachUprobeSession, pid, path, specs,
                                false);
  if (!l) return l.error();
  links.push_back(std::move(*l));
  return links;
}

Result<std::vector<Link>> BpfSession::attach_uprobes(pid_t pid, const std::string& path,
                                                     const std::vector<UprobeSpec>& specs,
                                                     bool retprobe, bool tensor) {
  bpf_program* prog = !retprobe ? skel_->progs.lw_entry
                      : tensor  ? skel_->progs.lw_tensor_return
                                : skel_->progs.lw_alloc_return;
  std::vector<Link> links;
  if (specs.empty()) return links;
  if (uprobe_multi_) {
    Result<Link> l = attach_multi(prog, kAttachUprobeMulti, pid, path, specs, retprobe);
    if (!l) return l.error();
    links.push_back(std::move(*l));
    return links;
  }
  for (const UprobeSpec& u : specs) {
    LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = u.cookie(), .retprobe = retprobe);
    bpf_link* link = bpf_program__attach_uprobe_opts(prog, pid, path.c_str(),
                                                     static_cast<size_t>(u.file_offset), &opts);
    if (!link)
      return errno_error("attaching uprobe at " + path + "+" + std::to_string(u.file_offset));
    links.emplace_back(link);
  }
  return links;
}

Result<Link> BpfSession::attach_usdt(pid_t pid, const std::string& path, const char* provider,
                                     const char* name) {
  bpf_program* prog = std::string_view(name) == "malloc" ? skel_->progs.lw_torch_usdt_malloc
                                                         : skel_->progs.lw_torch_usdt_free;
  bpf_link* link = bpf_program__attach_usdt(prog, pid, path.c_str(), provider, name, nullptr);
  if (!link)
    return errno_error(std::string("attaching USDT ") + provider + ":" + name + " at " + path);
  return Link(link);
}

std::vector<BpfSession::PoolTotals> BpfSession::read_gpu_pools(pid_t tgid) const {
  std::vector<PoolTotals> out;
  const int fd = bpf_map__fd(skel_->maps.gpu_pools);
  lw_pool_key key{}, next{};
  const lw_pool_key* prev = nullptr;
  // The map is small (4,096 entries, a few per process using a pool).
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    key = next;
    prev = &key;
    if (key.tgid != static_cast<uint32_t>(tgid)) continue;
    lw_pool_val v{};
    if (bpf_map_lookup_elem(fd, &key, &v) != 0) continue;
    out.push_back({key.device, v.allocated, v.reserved});
  }
  return out;
}

Status BpfSession::acquire_shared_uprobes(const SharedKey& key, const std::string& path,
                                          std::vector<UprobeSpec> specs) {
  SharedUprobes& s = shared_[key];
  if (s.users == 0) {
    for (UprobeSpec& u : specs) u.shared = true;
    // Every process that maps the object, now or later: uprobe_multi's pid
    // 0, a perf-event uprobe's -1.
    Result<std::vector<Link>> links = attach_uprobes(uprobe_multi_ ? 0 : -1, path, specs, false);
    if (!links) return links.error();
    s.links = std::move(*links);
  }
  ++s.users;
  return ok_status();
}

std::vector<Link> BpfSession::release_shared_uprobes(const SharedKey& key) {
  auto it = shared_.find(key);
  if (it == shared_.end() || it->second.users == 0) return {};
  if (--it->second.users > 0) return {};
  return std::move(it->second.links);
}

Status BpfSession::set_target(pid_t tgid, uint32_t flags, uint64_t start_ns,
                              uint64_t sample_mean) {
  auto key = static_cast<uint32_t>(tgid);
  may_have_records_.insert(key);
  lw_target t{};
  t.flags = flags;
  t.start_ns = start_ns;
  t.sample_mean = sample_mean;
  // Keep the loss and hit counts across updates (exec re-arms flags only),
  // and the BPF side's own marks (CUDA state to purge at exit).
  if (auto old = get_target(tgid)) {
    t.lost = old->lost;
    t.hits = old->hits;
    t.tensor_hits = old->tensor_hits;
    t.stacks_added = old->stacks_added;
    t.stack_limit = old->stack_limit;
    t.records_added = old->records_added;
    t.record_limit = old->record_limit;
    t.seen = old->seen;
    t.maps_gen = old->maps_gen;
    t.brk_last = old->brk_last;
    t.brk_high = old->brk_high;
    t.brk_walk_ns = old->brk_walk_ns;
    std::copy(std::begin(old->unrec), std::end(old->unrec), std::begin(t.unrec));
  } else {
    // A random start: frame-cache entries of an earlier process on this pid
    // (keyed by pid and generation) never match the new one's.
    std::random_device rd;
    t.maps_gen = (static_cast<uint64_t>(rd()) << 32) | rd();
  }
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.targets), &key, &t, BPF_ANY) != 0)
    return errno_error("registering target " + std::to_string(tgid) +
                       " (targets map full or out of memory)");
  return ok_status();
}

bool BpfSession::set_share_limits(pid_t tgid, uint64_t record_limit, uint64_t stack_limit) {
  auto key = static_cast<uint32_t>(tgid);
  std::optional<lw_target> t = get_target(tgid);
  if (!t) return false;
  t->record_limit = record_limit;
  t->stack_limit = stack_limit;
  return bpf_map_update_elem(bpf_map__fd(skel_->maps.targets), &key, &*t, BPF_EXIST) == 0;
}

bool BpfSession::seed_brk(pid_t tgid, uint64_t brk) {
  auto key = static_cast<uint32_t>(tgid);
  std::optional<lw_target> t = get_target(tgid);
  // Set by the probe already (a brk call since it was attached): keep it.
  if (!t || t->brk_last != 0 || brk == 0) return false;
  t->brk_last = brk;
  t->brk_high = std::max<uint64_t>(t->brk_high, brk);
  return bpf_map_update_elem(bpf_map__fd(skel_->maps.targets), &key, &*t, BPF_EXIST) == 0;
}

Status BpfSession::remove_target(pid_t tgid) {
  auto key = static_cast<uint32_t>(tgid);
  if (bpf_map_delete_elem(bpf_map__fd(skel_->maps.targets), &key) != 0 && errno != ENOENT)
    return errno_error("removing target " + std::to_string(tgid));
  // Its CPython registration goes with it (a new process on the pid is
  // examined again).
  (void)bpf_map_delete_elem(bpf_map__fd(skel_->maps.py_procs), &key);
  take_rescan_request(tgid);
  return ok_status();
}

void BpfSession::take_rescan_request(pid_t tgid) {
  auto key = static_cast<uint32_t>(tgid);
  (void)bpf_map_delete_elem(bpf_map__fd(skel_->maps.rescan_req), &key);  // ENOENT: none asked
}

std::optional<lw_target> BpfSession::get_target(pid_t tgid) const {
  auto key = static_cast<uint32_t>(tgid);
  lw_target t{};
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.targets), &key, &t) != 0) return std::nullopt;
  return t;
}

namespace {

// Visits every (key, value) of the live map in batches. The map changes
// while we read; the tracker's resync is built to tolerate that.
template <typename F>
Status for_each_live_entry(int fd, F&& fn) {
  constexpr uint32_t kBatch = 4096;
  std::vector<lw_live_key> keys(kBatch);
  std::vector<lw_live_val> vals(kBatch);
  uint64_t in_token = 0, out_token = 0;
  bool first = true;
  for (;;) {
    uint32_t count = kBatch;
    LIBBPF_OPTS(bpf_map_batch_opts, opts);
    int err = bpf_map_lookup_batch(fd, first ? nullptr : &in_token, &out_token, keys.data(),
                                   vals.data(), &count, &opts);
    int e = err ? errno : 0;
    for (uint32_t i = 0; i < count; ++i) fn(keys[i], vals[i]);
    if (err) {
      if (e == ENOENT) return ok_status();  // end of map
      return errno_error("reading live map", e);
    }
    in_token = out_token;
    first = false;
  }
}

}  // namespace

Result<std::vector<KernelRecord>> BpfSession::read_live(pid_t tgid, uint32_t skip_kinds) const {
  std::vector<KernelRecord> out;
  auto want = static_cast<uint32_t>(tgid);
  Status st = for_each_live_entry(bpf_map__fd(skel_->maps.live),
                                  [&](const lw_live_key& k, const lw_live_val& v) {
                                    if (k.tgid == want &&
                                        !(k.kind < 32 && (skip_kinds >> k.kind) & 1u))
                                      out.push_back({k.kind, k.addr, v.size, v.alloc_ns,
                                                     v.stack_hash});
                                  });
  if (!st) return st.error();
  return out;
}

Status BpfSession::purge_live(pid_t tgid, int kind) {
  auto want = static_cast<uint32_t>(tgid);
  if (kind < 0 && !may_have_records_.count(want)) return ok_status();
  std::vector<lw_live_key> doomed;
  int fd = bpf_map__fd(skel_->maps.live);
  Status st = for_each_live_entry(fd, [&](const lw_live_key& k, const lw_live_val&) {
    if (k.tgid == want && (kind < 0 || k.kind == static_cast<uint32_t>(kind))) doomed.push_back(k);
  });
  if (!st) return st;
  for (const lw_live_key& k : doomed) bpf_map_delete_elem(fd, &k);  // ENOENT: freed meanwhile
  // Called after remove_target(): nothing records for it any more, but a
  // program that looked the target up just before may still insert (a
  // window of microseconds, against a pid reused only after a wrap).
  if (kind < 0) may_have_records_.erase(want);
  return ok_status();
}

Status BpfSession::purge_live_many(const std::vector<pid_t>& tgids) {
  std::unordered_set<uint32_t> want;
  for (pid_t p : tgids)
    if (may_have_records_.count(static_cast<uint32_t>(p))) want.insert(static_cast<uint32_t>(p));
  if (want.empty()) return ok_status();
  std::vector<lw_live_key> doomed;
  int fd = bpf_map__fd(skel_->maps.live);
  Status st = for_each_live_entry(fd, [&](const lw_live_key& k, const lw_live_val&) {
    if (want.count(k.tgid)) doomed.push_back(k);
  });
  if (!st) return st;
  for (const lw_live_key& k : doomed) bpf_map_delete_elem(fd, &k);
  for (uint32_t p : want) may_have_records_.erase(p);
  return ok_status();
}

uint64_t BpfSession::delete_live(pid_t tgid, uint32_t kind, const std::vector<ThinnedRecord>& records) {
  const int fd = bpf_map__fd(skel_->maps.live);
  uint64_t deleted = 0;
  std::vector<lw_live_key> keys;
  constexpr size_t kBatch = 1024;
  keys.reserve(std::min(records.size(), kBatch));
  auto flush = [&] {
    // The batch stops at the first key that is gone (ENOENT: freed since
    // the lookup) and says how far it got; the rest go again after it.
    size_t at = 0;
    while (at < keys.size()) {
      __u32 count = static_cast<__u32>(keys.size() - at);
      LIBBPF_OPTS(bpf_map_batch_opts, opts);
      int err = bpf_map_delete_batch(fd, keys.data() + at, &count, &opts);
      deleted += count;
      at += count;
      if (err == 0) break;
      if (errno == ENOENT) {
        ++at;  // the key it stopped at
        continue;
      }
      // No batch operation (an older kernel): one at a time.
      for (; at < keys.size(); ++at)
        if (bpf_map_delete_elem(fd, &keys[at]) == 0) ++deleted;
    }
    keys.clear();
  };
  for (const ThinnedRecord& r : records) {
    lw_live_key key{static_cast<__u32>(tgid), kind, r.addr};
    lw_live_val val{};
    if (bpf_map_lookup_elem(fd, &key, &val) != 0 || val.alloc_ns != r.alloc_ns) continue;
    keys.push_back(key);
    if (keys.size() == kBatch) flush();
  }
  flush();
  return deleted;
}

StoredStack BpfSession::read_stack(uint64_t stack_hash) const {
  if (stack_hash == 0) return {};
  auto s = std::make_unique<lw_stack>();
  if (!read_raw_stack(stack_hash, *s)) return {};
  return decode_stack(*s);
}

bool BpfSession::read_raw_stack(uint64_t stack_hash, lw_stack& out) const {
  return bpf_map_lookup_elem(bpf_map__fd(skel_->maps.stacks), &stack_hash, &out) == 0;
}

Result<std::vector<uint64_t>> BpfSession::stack_hashes(const uint64_t* after, size_t most,
                                                       bool& end) const {
  // Keys only: a batch lookup would copy every stored stack (2.6 KiB each).
  // A key deleted under the walk would restart it from the first; only
  // this thread deletes, and `most` bounds it all the same.
  const int fd = bpf_map__fd(skel_->maps.stacks);
  std::vector<uint64_t> out;
  uint64_t key = 0;
  end = false;
  while (out.size() < most) {
    if (bpf_map_get_next_key(fd, out.empty() ? after : &out.back(), &key) != 0) {
      if (errno != ENOENT) return errno_error("walking the stack map");
      end = true;
      break;
    }
    out.push_back(key);
  }
  // Full: is that the end? (Else a map of exactly `most` keys takes an
  // empty pass to end each walk.)
  if (!end && !out.empty() && bpf_map_get_next_key(fd, &out.back(), &key) != 0 && errno == ENOENT)
    end = true;
  return out;
}

size_t BpfSession::delete_stacks(const std::vector<uint64_t>& hashes) {
  const int fd = bpf_map__fd(skel_->maps.stacks);
  size_t deleted = 0;
  size_t at = 0;
  while (at < hashes.size()) {
    uint32_t count = static_cast<uint32_t>(hashes.size() - at);
    LIBBPF_OPTS(bpf_map_batch_opts, opts);
    if (bpf_map_delete_batch(fd, &hashes[at], &count, &opts) == 0) {
      deleted += count;
      break;
    }
    // Stopped at a key that failed (ENOENT: not stored): go on after it.
    deleted += count;
    at += count + 1;
  }
  return deleted;
}

bool BpfSession::restore_stack(uint64_t stack_hash, const lw_stack& s) {
  return bpf_map_update_elem(bpf_map__fd(skel_->maps.stacks), &stack_hash, &s, BPF_NOEXIST) == 0;
}

StoredStack BpfSession::decode_stack(const lw_stack& stack) {
  const lw_stack* s = &stack;
  uint32_t nr = s->nr > LW_MAX_STACK_DEPTH ? LW_MAX_STACK_DEPTH : s->nr;
  StoredStack out;
  out.flags = s->flags;
  out.frames.reserve(nr);
  for (uint32_t i = 0; i < nr; ++i) {
    const lw_frame& f = s->frames[i];
    StoredFrame sf;
    sf.ino = f.ino;
    sf.how = s->how[i];
    if (f.ino) {
      sf.dev = f.dev;
      sf.addr = f.off;
    } else {
      sf.addr = (static_cast<uint64_t>(f.dev) << 32) | f.off;
    }
    out.frames.push_back(sf);
  }
  out.py_flags = s->py_flags;
  const uint32_t py_nr = s->py_nr > LW_MAX_PY_FRAMES ? LW_MAX_PY_FRAMES : s->py_nr;
  out.py.assign(s->py, s->py + py_nr);
  return out;
}

Status BpfSession::set_python_process(pid_t tgid, const lw_py_proc& info) {
  auto key = static_cast<uint32_t>(tgid);
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.py_procs), &key, &info, BPF_ANY) != 0)
    return errno_error("registering CPython process " + std::to_string(tgid));
  return ok_status();
}

Status BpfSession::remove_python_process(pid_t tgid) {
  auto key = static_cast<uint32_t>(tgid);
  if (bpf_map_delete_elem(bpf_map__fd(skel_->maps.py_procs), &key) != 0 && errno != ENOENT)
    return errno_error("removing CPython process " + std::to_string(tgid));
  return ok_status();
}

Status BpfSession::set_unwind_object(const lw_obj_key& key, const lw_unwind_obj& obj) {
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.unwind_objs), &key, &obj, BPF_ANY) != 0)
    return errno_error("registering an object for unwinding");
  return ok_status();
}

Status BpfSession::remove_unwind_object(const lw_obj_key& key) {
  if (bpf_map_delete_elem(bpf_map__fd(skel_->maps.unwind_objs), &key) != 0 && errno != ENOENT)
    return errno_error("removing an object from unwinding");
  return ok_status();
}

namespace {

// An inner array map of `n` values of `value_size` bytes, filled in batches.
Result<Fd> make_filled_array(const char* name, uint32_t value_size, const void* values, uint32_t n) {
  LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_INNER_MAP);
  int fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, name, sizeof(uint32_t), value_size, n, &opts);
  if (fd < 0) return errno_error(std::string("creating unwind map ") + name);
  Fd map(fd);
  constexpr uint32_t kBatch = 65536;
  std::vector<uint32_t> keys(std::min(n, kBatch));
  for (uint32_t done = 0; done < n;) {
    uint32_t count = std::min(kBatch, n - done);
    for (uint32_t i = 0; i < count; ++i) keys[i] = done + i;
    LIBBPF_OPTS(bpf_map_batch_opts, bopts);
    const char* bytes = static_cast<const char*>(values) + static_cast<size_t>(done) * value_size;
    if (bpf_map_update_batch(map.get(), keys.data(), bytes, &count, &bopts) != 0)
      return errno_error(std::string("filling unwind map ") + name);
    done += count;
  }
  return map;
}

}  // namespace

Status BpfSession::load_unwind_table(uint32_t table, const std::vector<lw_unwind_row>& rows,
                                     const std::vector<uint32_t>& pages) {
  if (table >= max_unwind_tables_) return Error{ENOSPC, "unwind table slot out of range"};
  if (rows.empty() || pages.empty()) return Error{EINVAL, "empty unwind table"};
  Result<Fd> r = make_filled_array("lw_rows", sizeof(lw_unwind_row), rows.data(),
                                   static_cast<uint32_t>(rows.size()));
  if (!r) return r.error();
  Result<Fd> p = make_filled_array("lw_pages", sizeof(uint32_t), pages.data(),
                                   static_cast<uint32_t>(pages.size()));
  if (!p) return p.error();
  // Pages first: the BPF side looks up both and uses neither without the other.
  int rfd = r->get(), pfd = p->get();
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.unwind_pages), &table, &pfd, BPF_ANY) != 0 ||
      bpf_map_update_elem(bpf_map__fd(skel_->maps.unwind_rows), &table, &rfd, BPF_ANY) != 0)
    return errno_error("installing an unwind table");
  return ok_status();  // the outer maps hold the inner maps now; our fds close
}

Status BpfSession::remove_unwind_table(uint32_t table) {
  if (table >= max_unwind_tables_) return Error{EINVAL, "unwind table slot out of range"};
  bpf_map_delete_elem(bpf_map__fd(skel_->maps.unwind_rows), &table);
  bpf_map_delete_elem(bpf_map__fd(skel_->maps.unwind_pages), &table);
  return ok_status();
}

Counters BpfSession::read_counters() const {
  Counters total{};
  int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return total;
  std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu));
  int fd = bpf_map__fd(skel_->maps.counters);
  for (uint32_t i = 0; i < LW_CNT_MAX; ++i) {
    if (bpf_map_lookup_elem(fd, &i, per_cpu.data()) != 0) continue;
    for (uint64_t v : per_cpu) total[i] += v;
  }
  return total;
}

}  // namespace lw
