// SPDX-License-Identifier: Apache-2.0
// A TracerControl without BPF: the daemon's parts run on it in the unit
// tests (no root, no kernel). It records what was asked of it and lets a
// test set what the engine would report (probe hits, exits, process events,
// budget sheds). Thread-safety: not thread-safe, as the real one; a test
// that runs Daemon::run on another thread only touches it before run() and
// after run() returned.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "service/discovery.h"
#include "service/tracer_control.h"

namespace lw {

class FakeTracer : public TracerControl {
 public:
  struct Proc {
    TraceOptions options;
    uint64_t start_ticks = 0;
    bool heap = false;        // heap probes attached
    bool accounting = true;
    bool all_probes = true;   // false once the kill switch closed every probe
    bool exited = false;
    uint64_t hits = 0;
    uint64_t tensor_hits = 0;
    bool tensors = true;      // the tensor tier's probes attached
    uint64_t explained = 0;   // tensor_cpu + cuda_host live bytes
    double fraction = 1;      // set_bursts()
    bool drain = false;       // set_drain()
    bool parked = false;      // set_parked()
    bool walkable = false;    // heap_walkable()
    HeapTracker heap_tracker;
  };

  Status attach(pid_t pid, const TraceOptions& options) override {
    if (attach_error) return *attach_error;
    Proc& p = procs[pid];
    p.options = options;
    p.heap = options.heap;
    // What the engine does: the start time read at attach.
    p.start_ticks = std::exchange(start_ticks_once, std::nullopt).value_or(read_start_ticks(pid));
    return ok_status();
  }
  void detach(pid_t pid) override { procs.erase(pid); }
  void detach_many(const std::vector<pid_t>& pids) override {
    ++teardowns;
    for (pid_t pid : pids) procs.erase(pid);
  }
  std::optional<uint64_t> start_ticks(pid_t pid) const override {
    auto it = procs.find(pid);
    if (it == procs.end()) return std::nullopt;
    return it->second.start_ticks;
  }
  std::vector<pid_t> exited() const override {
    std::vector<pid_t> out;
    for (const auto& [pid, p] : procs)
      if (p.exited) out.push_back(pid);
    return out;
  }
  std::vector<ProcessEvent> take_process_events() override { return std::exchange(events, {}); }
  std::vector<ProcessKill> take_kills() override { return std::exchange(kills, {}); }

  Status set_heap_tracing(pid_t pid, bool on) override {
    heap_calls.emplace_back(pid, on);
    auto it = procs.find(pid);
    if (it == procs.end()) return Error{ESRCH, "not attached"};
    it->second.heap = on;
    return ok_status();
  }
  Status set_bursts(pid_t pid, double fraction) override {
    auto it = procs.find(pid);
    if (it == procs.end()) return Error{ESRCH, "not attached"};
    it->second.fraction = fraction;
    return ok_status();
  }
  Status set_drain(pid_t pid, bool drain) override {
    auto it = procs.find(pid);
    if (it == procs.end()) return Error{ESRCH, "not attached"};
    it->second.drain = drain;
    drain_calls.emplace_back(pid, drain);
    return ok_status();
  }
  bool uprobe_hits_serialize() const override { return serialize; }
  std::optional<double> close_burst(pid_t pid, double scheduled_s) override {
    close_calls.emplace_back(pid, scheduled_s);
    return recorded_seconds;
  }
  Status set_parked(pid_t pid, bool parked) override {
    auto it = procs.find(pid);
    if (it == procs.end()) return Error{ESRCH, "not attached"};
    it->second.parked = parked;
    park_calls.emplace_back(pid, parked);
    return ok_status();
  }
  void walk_parked_heap(pid_t pid) override { parked_walks.push_back(pid); }
  bool heap_walkable(pid_t pid) override {
    auto it = procs.find(pid);
    return it != procs.end() && it->second.walkable;
  }
  void detach_heap_many(const std::vector<pid_t>& heap_pids,
                        const std::vector<pid_t>& all_probe_pids) override {
    ++teardowns;
    for (pid_t pid : heap_pids)
      if (auto it = procs.find(pid); it != procs.end()) it->second.heap = false;
    for (pid_t pid : all_probe_pids)
      if (auto it = procs.find(pid); it != procs.end()) it->second.all_probes = false;
  }
  Status set_accounting(pid_t pid, bool on) override {
    auto it = procs.find(pid);
    if (it == procs.end()) return Error{ESRCH, "not attached"};
    it->second.accounting = on;
    return ok_status();
  }
  void set_live_record_cap(uint64_t cap) override { live_record_cap = cap; }
  std::vector<pid_t> take_budget_sheds() override { return std::exchange(sheds, {}); }
  std::optional<uint64_t> probe_hits(pid_t pid) const override {
    auto it = procs.find(pid);
    if (it == procs.end()) return std::nullopt;
    return it->second.hits;
  }
  std::optional<uint64_t> tensor_hits(pid_t pid) const override {
    auto it = procs.find(pid);
    if (it == procs.end()) return std::nullopt;
    return it->second.tensor_hits;
  }
  // What the engine does: a suspended tier's records are dropped.
  Status set_tensor_tracing(pid_t pid, bool on) override {
    auto it = procs.find(pid);
    if (it == procs.end()) return Error{ESRCH, "not attached"};
    it->second.tensors = on;
    if (!on) it->second.explained = 0;
    return ok_status();
  }
  uint64_t explained_bytes(pid_t pid) const override {
    auto it = procs.find(pid);
    return it == procs.end() ? 0 : it->second.explained;
  }
  void set_raw_syscalls_allowed(bool allowed) override { raw_syscalls_allowed = allowed; }
  void configure_symbols(const SymbolsConfig& config) override { symbols = config; }
  SymbolsConfig symbols;

  Result<int> poll(int timeout_ms) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 5)));
    ++polls;
    return 0;
  }

  Counters counters() const override { return Counters{}; }
  TracerStats stats() const override {
    TracerStats s;
    s.live_record_cap = live_record_cap;
    return s;
  }
  const HeapTracker* heap(pid_t pid) const override {
    auto it = procs.find(pid);
    return it == procs.end() ? nullptr : &it->second.heap_tracker;
  }
  void append_probe_reports(pid_t pid,
                            std::vector<std::pair<std::string, ProbeReport>>* out) const override {
    if (!procs.count(pid)) return;
    ProbeReport r;
    r.symbols = "malloc";
    r.attached = procs.at(pid).heap;
    out->emplace_back("/fake/libc.so.6", r);
  }
  std::optional<ProcessSnapshot> snapshot(pid_t pid, size_t, const ProcessAnalyzer*,
                                          const Counters& counters, const TracerStats& stats) override {
    auto it = procs.find(pid);
    if (it == procs.end()) return std::nullopt;
    ProcessSnapshot s;
    s.pid = pid;
    s.live_bytes = it->second.heap_tracker.live_bytes_total();
    s.kernel_counters = counters;
    s.tracer_stats = stats;
    return s;
  }

  // What the engine reports, set by the test.
  std::map<pid_t, Proc> procs;
  std::vector<ProcessEvent> events;
  std::vector<ProcessKill> kills;
  std::vector<pid_t> sheds;
  std::optional<Error> attach_error;
  // The next attach finds this start time (a pid reused under the attach).
  std::optional<uint64_t> start_ticks_once;
  // What was asked.
  std::vector<std::pair<pid_t, bool>> heap_calls;
  std::vector<std::pair<pid_t, bool>> drain_calls;
  std::vector<std::pair<pid_t, bool>> park_calls;
  std::vector<std::pair<pid_t, double>> close_calls;  // close_burst(pid, scheduled_s)
  std::optional<double> recorded_seconds;             // what close_burst answers
  bool serialize = false;                             // uprobe_hits_serialize()
  std::vector<pid_t> parked_walks;
  uint64_t live_record_cap = 0;
  bool raw_syscalls_allowed = true;
  int teardowns = 0;
  int polls = 0;
};

}  // namespace lw
