// SPDX-License-Identifier: Apache-2.0
#include "view/oom_report.h"

#include <algorithm>

#include "view/json.h"

namespace lw {

const char* kill_reason_name(KillReason r) {
  switch (r) {
    case KillReason::kGlobalOom: return "global";
    case KillReason::kMemcgOom: return "memory_cgroup";
    case KillReason::kOomSender: return "oom_sender";
    case KillReason::kSigkill: return "sigkill";
    case KillReason::kGpuOom: return "gpu_oom";
  }
  return "unknown";
}

const char* cuda_alloc_function_name(uint32_t func) {
  switch (func) {
    case LW_FUNC_CUDART_MALLOC: return "cudaMalloc";
    case LW_FUNC_CUDART_MALLOC_MANAGED: return "cudaMallocManaged";
    case LW_FUNC_CUDART_MALLOC_HOST: return "cudaMallocHost";
    case LW_FUNC_CUDART_MALLOC_PITCH: return "cudaMallocPitch";
    case LW_FUNC_CUDART_MALLOC_3D: return "cudaMalloc3D";
    case LW_FUNC_CU_MEM_ALLOC: return "cuMemAlloc";
    case LW_FUNC_CU_MEM_ALLOC_MANAGED: return "cuMemAllocManaged";
    case LW_FUNC_CU_MEM_ALLOC_HOST: return "cuMemAllocHost";
    case LW_FUNC_CU_MEM_ALLOC_PITCH: return "cuMemAllocPitch";
    case LW_FUNC_CU_MEM_CREATE: return "cuMemCreate";
  }
  return "unknown";
}

nlohmann::json to_json(const OomReport& r) {
  using nlohmann::json;
  const ProcessIdentity& id = r.process.identity;
  auto opt = [](const std::optional<std::string>& v) { return v ? json(*v) : json(nullptr); };
  json process = {{"pid", id.pid},
                  {"start_time", id.start_time},
                  {"comm", id.comm},
                  {"exe", id.exe},
                  {"cgroup", opt(id.cgroup)},
                  {"unit", opt(id.unit)},
                  {"uid", opt(id.pod_uid)},
                  {"container_id", opt(id.container_id)},
                  {"namespace", opt(id.pod_namespace)},
                  {"pod", opt(id.pod_name)},
                  {"target", r.process.target},
                  {"mode", r.light ? "light" : "full"},
                  {"configured_mode", mode_name(r.process.mode)},
                  {"real_uid", id.real_uid ? json(*id.real_uid) : json(nullptr)}};
  json memcg = nullptr;
  const bool from_user = r.reason == KillReason::kSigkill || r.reason == KillReason::kOomSender;
  if (!from_user && r.reason != KillReason::kGpuOom)
    memcg = {{"limit_bytes", r.limit_bytes ? json(r.limit_bytes) : json(nullptr)},
             {"usage_bytes", r.memcg_usage_bytes},
             {"limit_hit", r.reason == KillReason::kMemcgOom}};
  json killed_by = nullptr;
  if (from_user) killed_by = {{"pid", r.sender_pid}, {"comm", r.sender_comm}};
  json verdicts = json::object();
  for (uint32_t k = 0; k < LW_KIND_MAX; ++k) {
    const KindTotals& t = r.snapshot.kinds[k];
    if (t.allocations == 0 && t.live_allocations == 0) continue;
    const LeakVerdict& v = r.snapshot.kind_verdicts[k];
    verdicts[kind_name(k)] = {{"trend", trend_name(v.trend)},
                              {"suspected_leak", v.suspected_leak},
                              {"leak_rate_bytes_per_second", v.rate_bytes_per_s},
                              {"incomplete", r.snapshot.unrecorded.kind_incomplete(k)}};
  }
  json history = json::array();
  for (const MemorySample& s : r.history) {
    json live = json::object();
    for (uint32_t k = 0; k < LW_KIND_MAX; ++k)
      if (s.live_bytes[k]) live[kind_name(k)] = s.live_bytes[k];
    history.push_back({{"timestamp", s.timestamp}, {"rss_bytes", s.rss_bytes}, {"live_bytes", std::move(live)}});
  }
  json snap = to_json(r.snapshot);
  json out = {{"id", r.id},
              {"timestamp", r.timestamp},
              {"reason", kill_reason_name(r.reason)},
              {"for_memory", for_memory(r.reason)},
              {"process", std::move(process)},
              {"memory_cgroup", std::move(memcg)},
              {"killed_by", std::move(killed_by)},
              {"rss_bytes", r.rss_bytes},
              {"live_bytes", r.snapshot.live_bytes},
              {"live_allocations", r.snapshot.live_allocations},
              {"kinds", kinds_to_json(r.snapshot)},
              {"verdicts", std::move(verdicts)},
              {"light", r.light},
              {"sites_total", r.snapshot.sites_total},
              {"sites", std::move(snap["sites"])},
              {"allocator", std::move(snap["allocator"])},
              {"python", std::move(snap["python"])},
              {"sampling", std::move(snap["sampling"])},
              {"history", std::move(history)},
              {"report_latency_seconds", r.report_latency_s},
              {"file", r.file.empty() ? json(nullptr) : json(r.file)},
              {"file_error", r.file_error.empty() ? json(nullptr) : json(r.file_error)},
              {"truncated", nullptr}};
  if (r.reason == KillReason::kGpuOom) {
    const GpuOomInfo& g = r.gpu;
    json live = json::object();
    for (uint32_t k : {LW_KIND_CUDA_DEVICE, LW_KIND_CUDA_HOST, LW_KIND_CUDA_MANAGED})
      live[kind_name(k)] = r.snapshot.kinds[k].live_bytes;
    out["gpu"] = {{"device", g.device < 0 ? json(nullptr) : json(g.device)},
                  {"kind", kind_name(g.kind)},
                  {"requested_bytes", g.requested_bytes ? json(g.requested_bytes) : json(nullptr)},
                  {"api", g.driver ? "driver" : "runtime"},
                  {"function", cuda_alloc_function_name(g.func)},
                  {"error_code", g.error_code},
                  {"live_bytes", std::move(live)}};
    out["suppressed"] = g.suppressed;
    out["recovered"] = g.recovered;
    out["recovered_timestamp"] = g.recovered ? json(g.recovered_timestamp) : json(nullptr);
  }
  if (r.light)
    out["note"] =
        "traced in light mode: only mmap/brk sites and the statm history are known, not heap (malloc) sites";
  return out;
}

OomReportTier oom_report_tier(KillReason r) {
  return for_memory(r) ? OomReportTier::kForMemory : OomReportTier::kSigkill;
}

namespace {

size_t dumped_size(const nlohmann::json& j) { return j.dump().size(); }

// Drops elements from the back of `array` (from the front with
// `from_front`) until `size` fits in `max`; each element costs its dumped
// size and a comma. Returns how many went.
size_t shed(nlohmann::json& array, size_t& size, size_t max, bool from_front) {
  size_t dropped = 0;
  if (!array.is_array()) return 0;
  while (size > max && !array.empty()) {
    const size_t i = from_front ? 0 : array.size() - 1;
    size -= std::min(size, dumped_size(array[i]) + 1);
    array.erase(i);
    ++dropped;
  }
  return dropped;
}

}  // namespace

bool cap_report_size(nlohmann::json& doc, size_t max_bytes) {
  const size_t before = dumped_size(doc);
  if (before <= max_bytes) return false;
  // Room for the `truncated` object itself.
  constexpr size_t kMarkerBytes = 200;
  const size_t max = max_bytes > kMarkerBytes ? max_bytes - kMarkerBytes : 0;
  size_t size = before;
  nlohmann::json& sites = doc["sites"];
  // Sites from the lowest-ranked, keeping one...
  size_t sites_dropped = 0;
  while (size > max && sites.is_array() && sites.size() > 1) {
    size -= std::min(size, dumped_size(sites.back()) + 1);
    sites.erase(sites.size() - 1);
    ++sites_dropped;
  }
  // ...then that one's outermost frames, keeping the leaf...
  size_t frames_dropped = 0;
  if (size > max && sites.is_array() && !sites.empty() && sites[0].contains("frames")) {
    nlohmann::json& frames = sites[0]["frames"];
    const size_t frames_size = dumped_size(frames);
    nlohmann::json leaf = frames.is_array() && !frames.empty() ? frames[0] : nlohmann::json();
    size_t rest = size - std::min(size, frames_size);
    size_t budget = max > rest ? max - rest : 0;
    size_t kept_size = frames_size;
    frames_dropped = shed(frames, kept_size, budget, false);
    if (frames.empty() && !leaf.is_null()) {  // the leaf stays, whatever it weighs
      frames.push_back(std::move(leaf));
      --frames_dropped;
    }
    if (frames_dropped) sites[0]["frames_truncated"] = frames_dropped;
    size = dumped_size(doc);
  }
  // ...then the oldest history, then the last site.
  const size_t history_dropped = shed(doc["history"], size, max, true);
  if (size > max) sites_dropped += shed(sites, size, max, false);
  doc["truncated"] = {{"sites_dropped", sites_dropped},
                      {"frames_dropped", frames_dropped},
                      {"history_dropped", history_dropped},
                      {"bytes_before", before},
                      {"max_report_bytes", max_bytes}};
  return true;
}

}  // namespace lw
