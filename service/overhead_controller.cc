// SPDX-License-Identifier: Apache-2.0
#include "service/overhead_controller.h"

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "core/platform/log.h"
#include "core/policy/memory_budget.h"
#include "core/proc/procfs.h"

namespace lw {

namespace {
// How long a process whose free side alone was over the budget is
// suspended at once, without bursts (TrackedProcess::drain_over_budget_at).
constexpr double kDrainMemorySeconds = 3600;
}  // namespace

OverheadController::OverheadController(DaemonState& state, TracerControl& tracer, MemoryReader read_memory)
    : state_(state), tracer_(tracer), read_memory_(std::move(read_memory)), read_threads_(process_threads) {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  cpus_ = n > 0 ? static_cast<uint64_t>(n) : 1;
}

GovernorParams OverheadController::params_for(const TrackedProcess& t, GovernorParams gp) const {
  if (tracer_.uprobe_hits_serialize())
    gp.max_hits_per_second = thread_scaled_budget(gp.max_hits_per_second, t.threads, cpus_);
  return gp;
}

// Once a second, where hits serialize: only processes whose heap probes
// the governor watches (attached, suspended or in bursts), one
// /proc/PID/stat read each.
void OverheadController::refresh_threads(pid_t pid, TrackedProcess& t) {
  if (!tracer_.uprobe_hits_serialize()) return;
  if (!t.info.heap_attached && !t.governor.suspended() && !t.bursts.active()) return;
  const uint64_t before = t.threads;
  t.threads = read_threads_ ? std::max<uint64_t>(1, read_threads_(pid)) : 1;
  if (std::min(before, cpus_) != std::min(t.threads, cpus_))
    LW_LOG_INFO("governor: pid %d (%s): %llu threads; uprobe hits serialize on this kernel (before 6.14): "
                "its budget is %llu probe hits/s",
                pid, t.info.identity.comm.c_str(), static_cast<unsigned long long>(t.threads),
                static_cast<unsigned long long>(
                    thread_scaled_budget(state_.config.governor.max_hits_per_second, t.threads, cpus_)));
}

std::optional<StatmBytes> OverheadController::read_proc_statm(pid_t pid) {
  std::optional<StatmPages> p = read_statm_pages(pid);
  if (!p) return std::nullopt;
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return statm_bytes(*p, page);
}

void OverheadController::sync_heap(pid_t pid, TrackedProcess& t, const char* why) {
  const bool want = t.full() && !t.governor.suspended() && !state_.counters.kill_switch_engaged;
  if (want == t.info.heap_attached) return;
  if (!want && t.bursts.active()) leave_bursts(pid, t, false);
  Status st = tracer_.set_heap_tracing(pid, want);
  if (!st) {
    LW_LOG_WARN("pid %d (%s): %s heap probes (%s): %s", pid, t.info.identity.comm.c_str(),
                want ? "attaching" : "detaching", why, st.error().message.c_str());
    if (want) return;  // stays light
  }
  t.info.heap_attached = want;
  state_.dirty = true;
  LW_LOG_INFO("pid %d (%s): heap probes %s (%s)", pid, t.info.identity.comm.c_str(),
              want ? "attached, heap re-baselined" : "detached, heap figures frozen", why);
}

GovernorParams OverheadController::governor_params() const {
  const GovernorConfig& g = state_.config.governor;
  GovernorParams gp;
  gp.max_hits_per_second = g.max_hits_per_second;
  gp.backoff_initial_s = g.backoff_initial_seconds;
  gp.backoff_max_s = std::max(g.backoff_max_seconds, g.backoff_initial_seconds);
  gp.bursts = g.bursts;
  return gp;
}

BurstParams OverheadController::burst_params(pid_t pid) const {
  const GovernorConfig& g = state_.config.governor;
  BurstParams p{static_cast<double>(g.burst_seconds), static_cast<double>(g.burst_period_seconds)};
  // A window longer than the gap between two bursts is the whole gap.
  p.window_s = std::min<double>(g.drain_window_seconds, g.burst_period_seconds - g.burst_seconds);
  p.walk = g.drain_window_seconds > 0 && tracer_.heap_walkable(pid);
  return p;
}

void OverheadController::enter_bursts(pid_t pid, TrackedProcess& t, double now_s, uint64_t hits,
                                      const GovernorParams& gp) {
  const BurstParams bp = burst_params(pid);
  Status st = tracer_.set_bursts(pid, bp.fraction());
  if (st) st = tracer_.set_drain(pid, true);
  if (!st) {
    // No bursts to be had: the old answer, a suspension.
    const double wait = t.governor.suspend(now_s, gp);
    LW_LOG_WARN("governor: pid %d (%s): bursts refused (%s): heap probes suspended for %.0f s", pid,
                t.info.identity.comm.c_str(), st.error().message.c_str(), wait);
    (void)tracer_.set_bursts(pid, 1);
    ++state_.counters.governor_suspensions;
    sync_heap(pid, t, "governor: over budget");
    return;
  }
  t.bursts.enter(now_s, hits, bp, uniform());
  t.info.bursts.fraction = bp.fraction();
  t.info.bursts.burst_seconds = state_.config.governor.burst_seconds;
  t.info.bursts.period_seconds = state_.config.governor.burst_period_seconds;
  t.info.bursts.since = unix_now();
  ++state_.counters.governor_bursts;
  LW_LOG_WARN(
      "governor: pid %d (%s) over %llu probe hits/s: heap traced in bursts of %u s every %u s "
      "(%.1f%% of the time), the frees of what they record followed; heap figures are estimates",
      pid, t.info.identity.comm.c_str(), static_cast<unsigned long long>(gp.max_hits_per_second),
      state_.config.governor.burst_seconds, state_.config.governor.burst_period_seconds, 100 * bp.fraction());
  state_.dirty = true;
}

void OverheadController::leave_bursts(pid_t pid, TrackedProcess& t, bool exact_again) {
  t.bursts.leave();
  t.info.bursts = BurstInfo{};
  // Otherwise the heap probes are about to go, and the bursts with them.
  if (exact_again && t.info.heap_attached) (void)tracer_.set_bursts(pid, 1);
  state_.dirty = true;
}

void OverheadController::burst_step(pid_t pid, TrackedProcess& t, double now_s, const GovernorParams& gp) {
  std::optional<uint64_t> hits = tracer_.probe_hits(pid);
  if (!hits) return;
  const BurstParams bp = burst_params(pid);
  const bool was_windowed = t.bursts.windowed();
  const BurstAction action = t.bursts.tick(now_s, *hits, gp.max_hits_per_second, bp, uniform());
  const char* comm = t.info.identity.comm.c_str();
  switch (action) {
    case BurstAction::kNone:
      if (t.bursts.parked() && now_s - t.parked_walk_at >= kParkedWalkSeconds) {
        t.parked_walk_at = now_s;
        tracer_.walk_parked_heap(pid);
        state_.dirty = true;
      }
      return;
    case BurstAction::kBurstStart:
    case BurstAction::kBurstEnd:
    case BurstAction::kWalkThenBurst: {
      if (action == BurstAction::kBurstEnd) close_burst(pid, t);
      // A burst after a parked phase: set_drain(false) brings the free side
      // back and walks the heap before the allocating side (Tracer::set_parked).
      if (action == BurstAction::kWalkThenBurst) tracer_.set_heap_walk_max_bytes(state_.config.governor.heap_walk_max_bytes);
      if (Status st = tracer_.set_drain(pid, action == BurstAction::kBurstEnd); !st)
        LW_LOG_WARN("pid %d (%s): %s: %s", pid, comm,
                    action == BurstAction::kBurstEnd ? "ending a burst" : "starting a burst",
                    st.error().message.c_str());
      break;
    }
    case BurstAction::kPark:
      t.parked_walk_at = now_s;
      if (Status st = tracer_.set_parked(pid, true); !st)
        LW_LOG_WARN("pid %d (%s): parking the free side: %s", pid, comm, st.error().message.c_str());
      if (!was_windowed) {
        t.info.bursts.window_seconds = state_.config.governor.drain_window_seconds;
        LW_LOG_WARN(
            "governor: pid %d (%s): its frees alone made %.0f probe hits/s between bursts, over %llu: "
            "the free side kept %u s after each burst, the rest settled by walking its heap (glibc)",
            pid, comm, t.bursts.drain_rate(), static_cast<unsigned long long>(gp.max_hits_per_second),
            state_.config.governor.drain_window_seconds);
      }
      break;
    case BurstAction::kLeaveCalm:
      close_burst(pid, t);
      LW_LOG_INFO(
          "governor: pid %d (%s): a burst ran at %.0f probe hits/s, within budget: heap traced exactly again",
          pid, comm, t.bursts.burst_rate());
      leave_bursts(pid, t, true);
      break;
    case BurstAction::kLeaveDrainOverBudget: leave_drain_over_budget(pid, t, now_s, gp); break;
  }
  state_.dirty = true;
}

// The burst ends: its records weigh what was really recorded
// (Tracer::close_burst), shown as bursts.last_recorded_seconds.
void OverheadController::close_burst(pid_t pid, TrackedProcess& t) {
  if (std::optional<double> s = tracer_.close_burst(pid, t.bursts.scheduled_seconds())) {
    t.info.bursts.last_recorded_seconds = *s;
    t.info.bursts.last_scheduled_seconds = t.bursts.scheduled_seconds();
  }
}

void OverheadController::leave_drain_over_budget(pid_t pid, TrackedProcess& t, double now_s,
                                                 const GovernorParams& gp) {
  const double rate = t.bursts.drain_rate();
  leave_bursts(pid, t, false);
  t.drain_over_budget_at = now_s;
  ++state_.counters.governor_suspensions;
  const double wait = t.governor.suspend(now_s, gp);
  LW_LOG_WARN(
      "governor: pid %d (%s): its frees alone made %.0f probe hits/s between bursts, over %llu: "
      "heap probes suspended for %.0f s",
      pid, t.info.identity.comm.c_str(), rate, static_cast<unsigned long long>(gp.max_hits_per_second), wait);
  sync_heap(pid, t, "governor: free side over budget");
}

void OverheadController::tick_bursts(double now_s) {
  if (state_.counters.kill_switch_engaged) return;
  const GovernorParams gp = governor_params();
  for (auto& [pid, t] : state_.tracked)
    if (t.bursts.active()) burst_step(pid, t, now_s, params_for(t, gp));
}

void OverheadController::apply_memory_budget(uint64_t baseline_rss) {
  const uint64_t budget = state_.config.limits.max_daemon_memory_bytes;
  const uint64_t cap = live_record_cap(budget, baseline_rss);
  tracer_.set_live_record_cap(cap);
  LW_LOG_INFO(
      "memory budget %llu bytes, baseline RSS %llu: at most %llu live records "
      "(%llu bytes each at worst)",
      static_cast<unsigned long long>(budget), static_cast<unsigned long long>(baseline_rss),
      static_cast<unsigned long long>(cap), static_cast<unsigned long long>(kBytesPerLiveRecord));
  // A warning only for a size the operator chose: the automatic size is
  // meant to outgrow the record budget on a big host (the budget, not the
  // map, is then the bound; decision live-map-sizing), and a default must
  // not warn at every start and reload.
  if (!live_map_fits(state_.live_map.entries, cap))
    log_at(state_.live_map.automatic ? LogLevel::kInfo : LogLevel::kWarn,
           "limits.live_map_entries (%u%s) holds more records than limits.max_daemon_memory_bytes "
           "(%llu) lets the daemon keep (%llu): when tracked allocations reach that, the "
           "process with the most is suspended (leakwatch_memory_budget_suspensions_total)",
           state_.live_map.entries, state_.live_map.automatic ? ", sized automatically" : "",
           static_cast<unsigned long long>(budget), static_cast<unsigned long long>(cap));
}

void OverheadController::handle_budget_sheds(double now_s) {
  std::vector<pid_t> shed = tracer_.take_budget_sheds();
  if (shed.empty()) return;
  const GovernorParams gp = governor_params();
  for (pid_t pid : shed) {
    auto it = state_.tracked.find(pid);
    if (it == state_.tracked.end()) {
      (void)tracer_.set_heap_tracing(pid, false);
      continue;
    }
    TrackedProcess& t = it->second;
    const double wait = t.governor.suspend(now_s, gp);
    ++state_.counters.memory_budget_suspensions;
    const TracerStats st = tracer_.stats();
    log_once("memory_budget_shed",
             "limits.max_daemon_memory_bytes: live records reached the cap of " +
                 std::to_string(st.live_record_cap) +
                 "; the process holding the most has its heap tracing suspended, per-site "
                 "figures frozen (leakwatch_memory_budget_suspensions_total)");
    LW_LOG_INFO("memory budget: pid %d (%s) heap records shed, heap probes suspended for %.0f s", pid,
                t.info.identity.comm.c_str(), wait);
    sync_heap(pid, t, "memory budget");
  }
  // The records' arrays were freed; hand the pages back to the kernel now
  // (glibc keeps freed heap memory otherwise).
  malloc_trim(0);
  state_.dirty = true;
}

void OverheadController::govern(pid_t pid, TrackedProcess& t, double now_s, const GovernorParams& gp) {
  if (!t.info.heap_attached && !t.governor.suspended()) return;
  if (t.bursts.active()) return;  // tick_bursts() measures each phase
  std::optional<uint64_t> hits = tracer_.probe_hits(pid);
  if (!hits) return;
  switch (t.governor.observe(now_s, *hits, gp)) {
    case GovernorAction::kBursts:
      if (t.drain_over_budget_at >= 0 && now_s - t.drain_over_budget_at < kDrainMemorySeconds) {
        GovernorParams no_bursts = gp;
        no_bursts.bursts = false;
        (void)t.governor.suspend(now_s, no_bursts);
        ++state_.counters.governor_suspensions;
        LW_LOG_WARN(
            "governor: pid %d (%s) over %llu probe hits/s: heap probes suspended for %.0f s "
            "(its free side alone was over budget %.0f s ago: no bursts)",
            pid, t.info.identity.comm.c_str(), static_cast<unsigned long long>(gp.max_hits_per_second),
            t.governor.backoff_s(), now_s - t.drain_over_budget_at);
        sync_heap(pid, t, "governor: over budget");
        state_.dirty = true;
      } else {
        enter_bursts(pid, t, now_s, *hits, gp);
      }
      break;
    case GovernorAction::kSuspend:
      ++state_.counters.governor_suspensions;
      LW_LOG_WARN(
          "governor: pid %d (%s) over %llu probe hits/s: heap probes suspended "
          "for %.0f s",
          pid, t.info.identity.comm.c_str(), static_cast<unsigned long long>(gp.max_hits_per_second),
          t.governor.backoff_s());
      sync_heap(pid, t, "governor: over budget");
      state_.dirty = true;
      break;
    case GovernorAction::kResume:
      sync_heap(pid, t, "governor: backoff over");
      state_.dirty = true;
      break;
    case GovernorAction::kNone: break;
  }
}

void OverheadController::govern_tensors(pid_t pid, TrackedProcess& t, double now_s,
                                        const GovernorParams& gp) {
  std::optional<uint64_t> hits = tracer_.tensor_hits(pid);
  if (!hits) return;
  const GovernorAction action = t.tensor_governor.observe(now_s, *hits, gp);
  tracer_.note_tensor_rate(pid, t.tensor_governor.rate());
  if (action == GovernorAction::kNone) return;
  const bool on = action == GovernorAction::kResume;
  // The tier's records leave (or re-enter) the bytes escalation subtracts:
  // not growth (decision tensor-tier).
  t.escalation.rebase();
  if (!on) {
    ++state_.counters.governor_suspensions;
    LW_LOG_WARN("governor: pid %d (%s) over %llu tensor-tier hits/s: tensor probes suspended for %.0f s", pid,
                t.info.identity.comm.c_str(), static_cast<unsigned long long>(gp.max_hits_per_second),
                t.tensor_governor.backoff_s());
  }
  if (Status st = tracer_.set_tensor_tracing(pid, on); !st)
    LW_LOG_WARN("pid %d (%s): %s tensor probes: %s", pid, t.info.identity.comm.c_str(),
                on ? "attaching" : "detaching", st.error().message.c_str());
  else if (on)
    LW_LOG_INFO("pid %d (%s): tensor probes attached again (governor backoff over)", pid,
                t.info.identity.comm.c_str());
  state_.dirty = true;
}

void OverheadController::escalate(pid_t pid, TrackedProcess& t, double now_s) {
  const EscalationConfig& e = state_.config.escalation;
  EscalationAction action = t.escalation.tick(now_s, e);
  if (action == EscalationAction::kStepDown) {
    ++state_.counters.escalations_down;
    LW_LOG_INFO("escalation: pid %d (%s) full -> light after %u s", pid, t.info.identity.comm.c_str(),
                e.full_window_seconds);
    sync_heap(pid, t, "step-down");
    state_.dirty = true;
    return;
  }
  // While escalated a reading changes nothing (the step-down forgets the
  // history) and the explained bytes would walk every heap record.
  if (action != EscalationAction::kReadMemory || t.escalation.full()) return;
  std::optional<StatmBytes> mem = read_memory_(pid);
  // Growth the tensor tier and CUDA pinned memory explain is named already:
  // only the rest calls for the heap tier (decision tensor-tier).
  const uint64_t explained = tracer_.explained_bytes(pid);
  if (!mem || t.escalation.sample(now_s, *mem, e, explained) != EscalationAction::kEscalate) return;
  ++state_.counters.escalations_up;
  LW_LOG_INFO(
      "escalation: pid %d (%s) light -> full for %u s: VmData %llu, anonymous "
      "resident %llu bytes, grew >= %llu within %u s (rising for %.0f s at %.0f B/s)",
      pid, t.info.identity.comm.c_str(), e.full_window_seconds, static_cast<unsigned long long>(mem->data),
      static_cast<unsigned long long>(mem->anon_resident), static_cast<unsigned long long>(e.growth_bytes),
      e.growth_window_seconds, t.escalation.growth_span_s(), t.escalation.growth_rate_bytes_per_s());
  sync_heap(pid, t, "escalation");
  // The rise seen while light counts towards the heap analysis's span
  // (decision auto-mode-detection); heap records start now (the re-baseline).
  if (auto an = state_.analyzers.find(pid); an != state_.analyzers.end() && t.info.heap_attached)
    an->second.prime(now_s, t.escalation.growth_span_s(), t.escalation.growth_rate_bytes_per_s());
  state_.dirty = true;
}

void OverheadController::tick(double now_s) {
  tick_bursts(now_s);
  if (now_s - last_tick_s_ < 1.0) return;
  last_tick_s_ = now_s;
  if (state_.counters.kill_switch_engaged) return;
  const GovernorParams gp = governor_params();
  GovernorParams tensor_gp = gp;
  tensor_gp.max_hits_per_second = state_.config.governor.max_tensor_hits_per_second;
  tensor_gp.bursts = false;  // the tier's own budget suspends (decision tensor-tier)
  for (auto& [pid, t] : state_.tracked) {
    refresh_threads(pid, t);
    const GovernorParams own = params_for(t, gp);
    t.info.hit_budget = own.max_hits_per_second;
    govern(pid, t, now_s, own);
    govern_tensors(pid, t, now_s, tensor_gp);  // the tier's few hits: not scaled
    if (t.info.mode == TargetMode::kAuto) escalate(pid, t, now_s);
  }
}

void OverheadController::apply_kill_switch(bool engage, const char* why) {
  const auto t0 = std::chrono::steady_clock::now();
  if (engage) {
    state_.counters.kill_switch_engaged = true;
    std::vector<pid_t> heap_pids, all_pids;
    for (auto& [pid, t] : state_.tracked) {
      (void)tracer_.set_accounting(pid, false);
      t.bursts.leave();  // the engine ends them with the heap probes
      t.info.bursts = BurstInfo{};
      if (t.info.heap_attached) heap_pids.push_back(pid);
      all_pids.push_back(pid);
      t.info.heap_attached = false;
    }
    // Every probe, CUDA's included, in one parallel teardown.
    tracer_.detach_heap_many(heap_pids, all_pids);
    tracer_.set_raw_syscalls_allowed(false);
  } else {
    state_.counters.kill_switch_engaged = false;
    tracer_.set_raw_syscalls_allowed(true);
    for (auto& [pid, t] : state_.tracked) {
      (void)tracer_.set_accounting(pid, true);
      sync_heap(pid, t, "kill switch released");
    }
  }
  state_.dirty = true;
  LW_LOG_WARN("kill switch %s (%s): %zu processes, %.0f ms", engage ? "engaged" : "released", why,
              state_.tracked.size(),
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace lw
