// SPDX-License-Identifier: Apache-2.0
// The daemon's TracerControl on the real engine: a thin adapter over
// engine/tracer.h's Tracer, translating the service's types. With
// daemon_create.cc, the only service/ files that include engine/ (built into
// lw_service_engine; tests/layout/check_layout.py holds the rule).
// Thread-safety: not thread-safe, as Tracer; owned by the consumer thread.
#pragma once

#include <memory>

#include "engine/tracer.h"
#include "service/tracer_control.h"

namespace lw {

class EngineTracer final : public TracerControl {
 public:
  static Result<std::unique_ptr<EngineTracer>> create(const BpfOptions& options,
                                                     const UnwindTableOptions& unwind = {});
  explicit EngineTracer(std::unique_ptr<Tracer> tracer) : tracer_(std::move(tracer)) {}

  Status attach(pid_t pid, const TraceOptions& options) override;
  void detach(pid_t pid) override { tracer_->detach(pid); }
  void detach_many(const std::vector<pid_t>& pids) override { tracer_->detach_many(pids); }
  std::optional<uint64_t> start_ticks(pid_t pid) const override;
  std::vector<pid_t> exited() const override;
  std::vector<ProcessEvent> take_process_events() override;
  std::vector<ProcessKill> take_kills() override;

  Status set_heap_tracing(pid_t pid, bool on) override { return tracer_->set_heap_tracing(pid, on); }
  Status set_bursts(pid_t pid, double fraction) override { return tracer_->set_bursts(pid, fraction); }
  Status set_drain(pid_t pid, bool drain) override { return tracer_->set_drain(pid, drain); }
  bool uprobe_hits_serialize() const override { return tracer_->uprobe_hits_serialize(); }
  std::optional<double> close_burst(pid_t pid, double scheduled_s) override {
    return tracer_->close_burst(pid, scheduled_s);
  }
  Status set_parked(pid_t pid, bool parked) override { return tracer_->set_parked(pid, parked); }
  bool heap_walkable(pid_t pid) override { return tracer_->heap_walkable(pid); }
  void walk_parked_heap(pid_t pid) override { tracer_->walk_parked_heap(pid); }
  void set_heap_walk_max_bytes(uint64_t bytes) override { tracer_->set_heap_walk_max_bytes(bytes); }
  void detach_heap_many(const std::vector<pid_t>& heap_pids,
                        const std::vector<pid_t>& all_probe_pids) override {
    tracer_->detach_heap_many(heap_pids, all_probe_pids);
  }
  Status set_accounting(pid_t pid, bool on) override { return tracer_->set_accounting(pid, on); }
  void set_live_record_cap(uint64_t cap) override { tracer_->set_live_record_cap(cap); }
  std::vector<pid_t> take_budget_sheds() override { return tracer_->take_budget_sheds(); }
  std::optional<uint64_t> probe_hits(pid_t pid) const override { return tracer_->probe_hits(pid); }
  std::optional<uint64_t> tensor_hits(pid_t pid) const override { return tracer_->tensor_hits(pid); }
  Status set_tensor_tracing(pid_t pid, bool on) override { return tracer_->set_tensor_tracing(pid, on); }
  void note_tensor_rate(pid_t pid, double rate) override { tracer_->note_tensor_rate(pid, rate); }
  uint64_t explained_bytes(pid_t pid) const override;
  void set_raw_syscalls_allowed(bool allowed) override { tracer_->set_raw_syscalls_allowed(allowed); }
  void configure_symbols(const SymbolsConfig& config) override { tracer_->configure_symbols(config); }
  bool wait_for_symbols(std::chrono::milliseconds timeout) override { return tracer_->wait_for_symbols(timeout); }

  Result<int> poll(int timeout_ms) override { return tracer_->poll(timeout_ms); }

  Counters counters() const override { return tracer_->counters(); }
  TracerStats stats() const override { return tracer_->stats(); }
  const HeapTracker* heap(pid_t pid) const override;
  void append_probe_reports(pid_t pid,
                            std::vector<std::pair<std::string, ProbeReport>>* out) const override;
  std::optional<ProcessSnapshot> snapshot(pid_t pid, size_t max_sites,
                                          const ProcessAnalyzer* analyzer, const Counters& counters,
                                          const TracerStats& stats) override;

  Tracer& tracer() { return *tracer_; }

 private:
  const TracedProcess* find(pid_t pid) const;
  std::unique_ptr<Tracer> tracer_;
};

}  // namespace lw
