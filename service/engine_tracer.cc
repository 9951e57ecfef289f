// SPDX-License-Identifier: Apache-2.0
#include "service/engine_tracer.h"

#include "core/platform/clock.h"
#include "engine/snapshot.h"

namespace lw {

Result<std::unique_ptr<EngineTracer>> EngineTracer::create(const BpfOptions& options,
                                                           const UnwindTableOptions& unwind) {
  auto tracer = Tracer::create(options, unwind);
  if (!tracer) return tracer.error();
  return std::make_unique<EngineTracer>(std::move(*tracer));
}

const TracedProcess* EngineTracer::find(pid_t pid) const {
  auto it = tracer_->processes().find(pid);
  return it == tracer_->processes().end() ? nullptr : it->second.get();
}

Status EngineTracer::attach(pid_t pid, const TraceOptions& options) {
  AttachOptions o;
  o.heap = options.heap;
  o.mmap = options.mmap;
  o.follow_forks = options.follow_forks;
  o.sample_mean_bytes = options.sample_mean_bytes;
  o.auto_sampling = options.auto_sampling;
  o.max_rescans_per_second = options.max_rescans_per_second;
  o.max_process_memory_bytes = options.max_process_memory_bytes;
  o.tensors = options.tensors;
  o.uid = options.uid;
  return tracer_->attach(pid, o);
}

uint64_t EngineTracer::explained_bytes(pid_t pid) const {
  const TracedProcess* proc = find(pid);
  if (!proc) return 0;
  // Only records that have lived kSettledNs: a serving loop's tensors in
  // flight (0.2-1.5 MB from one check to the next on the conv loop) are not
  // in VmData's high-water mark, and taking them off it made the remainder
  // jump by about the growth threshold (decision tensor-tier, "Tensors in
  // flight"). A tensor kept for good counts kSettledNs after it was made.
  constexpr uint64_t kSettledNs = 5'000'000'000;
  const uint64_t now = monotonic_ns();
  const uint64_t before = now > kSettledNs ? now - kSettledNs : 0;
  return proc->heap.live_bytes_settled(LW_KIND_TENSOR_CPU, before) +
         proc->heap.live_bytes_settled(LW_KIND_CUDA_HOST, before);
}

std::optional<uint64_t> EngineTracer::start_ticks(pid_t pid) const {
  const TracedProcess* proc = find(pid);
  if (!proc) return std::nullopt;
  return proc->start_ticks;
}

std::vector<pid_t> EngineTracer::exited() const {
  std::vector<pid_t> out;
  for (const auto& [pid, proc] : tracer_->processes())
    if (proc->exited) out.push_back(pid);
  return out;
}

std::vector<ProcessEvent> EngineTracer::take_process_events() { return tracer_->take_discoveries(); }

std::vector<ProcessKill> EngineTracer::take_kills() { return tracer_->take_kills(); }

const HeapTracker* EngineTracer::heap(pid_t pid) const {
  const TracedProcess* proc = find(pid);
  return proc ? &proc->heap : nullptr;
}

void EngineTracer::append_probe_reports(
    pid_t pid, std::vector<std::pair<std::string, ProbeReport>>* out) const {
  const TracedProcess* proc = find(pid);
  if (!proc || !proc->attacher) return;
  for (const AttachedObject& o : proc->attacher->objects())
    for (const ProbeReport& r : o.probes) out->emplace_back(o.path, r);
}

std::optional<ProcessSnapshot> EngineTracer::snapshot(pid_t pid, size_t max_sites,
                                                      const ProcessAnalyzer* analyzer,
                                                      const Counters& counters,
                                                      const TracerStats& stats) {
  TracedProcess* proc = tracer_->process(pid);
  if (!proc) return std::nullopt;
  return take_snapshot(*tracer_, *proc, max_sites, false, analyzer, counters, stats);
}

}  // namespace lw
