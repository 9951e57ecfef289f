// SPDX-License-Identifier: Apache-2.0
#include "engine/event_router.h"

#include <type_traits>
#include <variant>

#include "core/accounting/cuda_devices.h"
#include "engine/process_attacher.h"

namespace lw {

namespace {

// The device bits of the event flags (LW_EVF_DEVICE_*) for a device
// ordinal; an ordinal past 254 does not fit (as in the kernel's flags).
uint16_t device_bits(int device) {
  return static_cast<uint16_t>(((device + 1) << LW_EVF_DEVICE_SHIFT) & LW_EVF_DEVICE_MASK);
}

}  // namespace

void EventRouter::route(DecodedEvent& e) {
  const uint32_t tgid = event_tgid(e);
  auto it = procs_.find(static_cast<pid_t>(tgid));
  if (it == procs_.end()) {
    const ExecEvent* exec = std::get_if<ExecEvent>(&e);
    if (exec && exec->untracked)
      discoveries_.push_back({static_cast<pid_t>(tgid), 0, false, exec->ts_ns});
    else
      ++stats_.events_unknown_pid;
    return;
  }
  TracedProcess& p = *it->second;
  std::visit(
      [&](auto& ev) {
        using T = std::decay_t<decltype(ev)>;
        if constexpr (std::is_same_v<T, Event>) on_record(p, ev);
        else if constexpr (std::is_same_v<T, ExitEvent>) on_exit(p, ev);
        else if constexpr (std::is_same_v<T, ExecEvent>) on_exec(p, ev);
        else if constexpr (std::is_same_v<T, MapExecEvent>) on_map_exec(p, ev);
        else if constexpr (std::is_same_v<T, ForkEvent>) on_fork(p, ev);
        else if constexpr (std::is_same_v<T, OomKillEvent>) on_oom_kill(p, ev);
        else if constexpr (std::is_same_v<T, SigkillEvent>) on_sigkill(p, ev);
        else if constexpr (std::is_same_v<T, GpuOomEvent>) on_gpu_oom(p, ev);
        else static_assert(sizeof(T) == 0, "an event type without a handler");
      },
      e);
}

int EventRouter::sole_device(TracedProcess& p) {
  // Made current before we attached (PyTorch selects device 0 once, at
  // its start): a process that sees one device has only ordinal 0.
  if (p.sole_cuda_device == -2) p.sole_cuda_device = sole_cuda_device_of(p.pid);
  return p.sole_cuda_device;
}

void EventRouter::on_record(TracedProcess& p, Event& e) {
  if (is_device_kind(e.kind) && (e.flags & LW_EVF_DEVICE_MASK) == 0) {
    const int sole = sole_device(p);
    if (sole >= 0) e.flags |= device_bits(sole);
  }
  if (p.exec_pending) return;
  const uint64_t before = p.heap.record_count();
  p.heap.apply(e);
  p.cuda_devices.apply(e);
  note_gpu_recovery(p, e);
  budget_.after_record(p, e, before);
}

void EventRouter::note_gpu_recovery(TracedProcess& p, const Event& e) {
  if (e.type != EventType::kAlloc || p.gpu_oom_devices.empty() ||
      (e.kind != LW_KIND_CUDA_DEVICE && e.kind != LW_KIND_CUDA_MANAGED))
    return;
  const int dev = event_device(e);
  if (!p.gpu_oom_devices.erase(dev) || kills_.size() >= kMaxPendingKills) return;
  KillNotice k;
  k.pid = p.pid;
  k.gpu_recovered = true;
  k.gpu_device = dev;
  k.event_ns = e.ts_ns;
  kills_.push_back(std::move(k));
}

void EventRouter::on_exit(TracedProcess& p, const ExitEvent& e) {
  p.exited = true;
  if (e.stale) ++stats_.stale_exits;
}

void EventRouter::on_exec(TracedProcess& p, const ExecEvent& e) {
  p.exec_pending = true;
  p.sole_cuda_device = -2;
  discoveries_.push_back({p.pid, 0, true, e.ts_ns});
}

void EventRouter::on_map_exec(TracedProcess& p, const MapExecEvent&) {
  // One event per rescan request (bpf map rescan_req): the changes are
  // counted from maps_gen when the request is served or deferred.
  p.rescan_pending = true;
}

void EventRouter::on_fork(TracedProcess& p, const ForkEvent& e) {
  discoveries_.push_back({static_cast<pid_t>(e.child), p.pid, false, e.ts_ns});
}

void EventRouter::on_oom_kill(TracedProcess& p, const OomKillEvent& e) {
  KillNotice k;
  k.pid = p.pid;
  k.memcg = e.memcg;
  k.limit_bytes = e.limit_bytes;
  k.memcg_usage_bytes = e.memcg_usage_bytes;
  k.rss_bytes = e.rss_bytes;
  k.event_ns = e.ts_ns;
  push_kill(std::move(k));
}

void EventRouter::on_sigkill(TracedProcess& p, const SigkillEvent& e) {
  KillNotice k;
  k.pid = p.pid;
  k.sigkill = true;
  k.rss_bytes = e.rss_bytes;
  k.sender_pid = static_cast<pid_t>(e.sender_pid);
  k.sender_comm = e.sender_comm();
  k.event_ns = e.ts_ns;
  push_kill(std::move(k));
}

void EventRouter::on_gpu_oom(TracedProcess& p, GpuOomEvent& e) {
  if (e.device < 0) {
    const int sole = sole_device(p);
    if (sole >= 0) e.device = static_cast<int>(device_bits(sole) >> LW_EVF_DEVICE_SHIFT) - 1;
  }
  if (kills_.size() >= kMaxPendingKills) return;
  KillNotice k;
  k.pid = p.pid;
  k.gpu_oom = true;
  k.gpu_device = e.device;
  k.gpu_kind = e.kind;
  k.gpu_requested = e.requested;
  k.gpu_error = e.error;
  k.gpu_func = e.func;
  k.gpu_driver = e.driver;
  k.event_ns = e.ts_ns;
  p.gpu_oom_devices.insert(k.gpu_device);
  kills_.push_back(std::move(k));
}

void EventRouter::push_kill(KillNotice k) {
  if (kills_.size() < kMaxPendingKills) kills_.push_back(std::move(k));
}

}  // namespace lw
