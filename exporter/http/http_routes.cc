// SPDX-License-Identifier: Apache-2.0
#include "exporter/http/http_routes.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <mutex>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/platform/daemon_user.h"
#include "exporter/metrics.h"
#include "exporter/profile.h"
#include "view/json.h"

namespace lw {

namespace {

using nlohmann::json;

constexpr double kStaleSnapshotSeconds = 10;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Bursts (decision busy-processes): null unless the governor has the
// process's heap in bursts.
json bursts_json(const BurstInfo& b) {
  if (!b.active) return nullptr;
  return {{"fraction", b.fraction},           {"burst_seconds", b.burst_seconds},
          {"period_seconds", b.period_seconds}, {"since", b.since},
          {"bursts", b.bursts},                {"in_burst", b.in_burst},
          {"burst_hits_per_second", b.burst_rate}, {"drain_hits_per_second", b.drain_rate},
          {"windows", b.windows},              {"parked", b.parked},
          {"window_seconds", b.windows ? json(b.window_seconds) : json(nullptr)},
          {"last_recorded_seconds", b.last_recorded_seconds >= 0 ? json(b.last_recorded_seconds) : json(nullptr)},
          {"last_scheduled_seconds", b.last_scheduled_seconds >= 0 ? json(b.last_scheduled_seconds) : json(nullptr)}};
}

json identity_json(const DaemonSnapshot& snap, const ProcessInfo& t) {
  const ProcessIdentity& id = t.identity;
  json j = {{"pid", id.pid},
            {"start_time", id.start_time},
            {"start_time_seconds", start_time_unix_seconds(snap, id.start_time)},
            {"comm", id.comm},
            {"exe", id.exe},
            {"target", t.target},
            {"mode", t.heap_attached ? "full" : "light"},
            {"configured_mode", mode_name(t.mode)},
            {"tracing_suspended", t.tracing_suspended},
            {"hit_budget_per_second", t.hit_budget},
            {"bursts", bursts_json(t.bursts)}};
  auto opt = [&](const char* key, const std::optional<std::string>& v) {
    j[key] = v ? json(*v) : json(nullptr);
  };
  opt("unit", id.unit);
  opt("uid", id.pod_uid);
  opt("container_id", id.container_id);
  opt("namespace", id.pod_namespace);
  opt("pod", id.pod_name);
  opt("cgroup", id.cgroup);
  if (t.parent) j["forked_from"] = t.parent;
  return j;
}

const char* kLanding = R"(<!doctype html>
<html><head><title>leakwatch</title></head><body>
<h1>leakwatch</h1>
<ul>
<li><a href="/metrics">/metrics</a>: Prometheus metrics</li>
<li><a href="/api/v1/processes">/api/v1/processes</a>: traced processes (JSON)</li>
<li>/api/v1/processes/PID/sites: the call stacks holding memory in PID (JSON)</li>
<li><a href="/api/v1/status">/api/v1/status</a>: the daemon's state (JSON)</li>
<li><a href="/api/v1/oom_kills">/api/v1/oom_kills</a>: reports of traced processes killed for memory, newest first (JSON)</li>
<li><a href="/debug/pprof/heap">/debug/pprof/heap</a>: pprof heap profile of every traced process (?pid=PID for one)</li>
<li><a href="/healthz">/healthz</a>: health</li>
</ul>
<p>Documentation: docs/api.md</p>
</body></html>
)";

HttpResponse ok(std::string body, std::string content_type) {
  HttpResponse r;
  r.body = std::move(body);
  r.content_type = std::move(content_type);
  return r;
}

std::optional<uint64_t> parse_uint(std::string_view s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

HttpResponse pprof_heap(const HttpRequest& req, const DaemonSnapshot& snap) {
  // Go's /debug/pprof/heap parameters: `debug` selects a text format and
  // `seconds` a delta profile over that window. Neither is served; both
  // are refused rather than silently ignored (docs/api.md).
  if (auto debug = req.param("debug"); debug && *debug != "0")
    return json_error(400, "debug=" + std::string(*debug) +
                               " (text output) is not supported: the profile is protobuf only "
                               "(go tool pprof reads it)");
  if (req.param("seconds"))
    return json_error(400, "seconds (a delta profile) is not supported: alloc_space and alloc_objects "
                           "count since attach; fetch twice and compare with go tool pprof -diff_base");
  std::optional<std::string_view> pid_s = req.param("pid");
  std::optional<std::string_view> st_s = req.param("start_time");
  uint64_t start_time = 0;
  if (st_s) {
    auto v = parse_uint(*st_s);
    if (!v) return json_error(400, "start_time must be an integer (clock ticks since boot)");
    start_time = *v;
  }
  PprofInput in;
  if (!pid_s) {
    if (st_s) return json_error(400, "start_time needs pid");
    // Every traced process in one profile, told apart by sample labels.
    in = profile_input_all(snap);
  } else {
    auto pid = parse_uint(*pid_s);
    if (!pid || *pid == 0 || *pid > 4194304) return json_error(400, "pid must be a process id");
    const ProcessEntry* found = nullptr;
    for (const ProcessEntry& e : snap.processes) {
      if (static_cast<uint64_t>(e.process.identity.pid) != *pid) continue;
      if (start_time && e.process.identity.start_time != start_time) {
        HttpResponse r = json_error(404, "pid " + std::to_string(*pid) + " is traced with another start_time");
        return r;
      }
      found = &e;
    }
    if (!found) return json_error(404, "pid " + std::to_string(*pid) + " is not traced");
    double attached = std::chrono::duration<double>(found->process.attached_at.time_since_epoch()).count();
    in = profile_input(found->snapshot, attached);
  }
  Result<std::string> gz = encode_pprof_gz(in);
  if (!gz) return json_error(500, gz.error().message);
  HttpResponse r = ok(std::move(*gz), "application/octet-stream");
  r.headers.emplace_back("Content-Disposition", "attachment; filename=\"heap.pb.gz\"");
  return r;
}

HttpResponse oom_kills(const HttpRequest& req, const DaemonSnapshot& snap) {
  OomKillsPage page;
  if (auto limit = req.param("limit")) {
    auto v = parse_uint(*limit);
    if (!v || *v == 0 || *v > OomKillsPage::kMaxLimit)
      return json_error(400, "limit must be an integer in 1.." + std::to_string(OomKillsPage::kMaxLimit));
    page.limit = *v;
  }
  if (auto after = req.param("after")) {
    // An id: oom-<digits>-<digits>[-gpu<digits>].
    const bool id = after->size() <= 64 && after->starts_with("oom-") &&
                    std::all_of(after->begin(), after->end(), [](char ch) {
                      return (ch >= '0' && ch <= '9') || ch == '-' || ch == 'o' || ch == 'm' || ch == 'g' ||
                             ch == 'p' || ch == 'u';
                    });
    if (!id) return json_error(400, "after must be a report id (a page's \"next\")");
    page.after = std::string(*after);
  }
  return ok(oom_kills_json(snap, page), "application/json");
}

HttpResponse sites(const HttpRequest& req, const DaemonSnapshot& snap, std::string_view pid_text) {
  auto pid = parse_uint(pid_text);
  if (!pid || *pid == 0 || *pid > 4194304) return json_error(404, "no such path: pid must be a process id");
  uint64_t start_time = 0;
  if (auto st = req.param("start_time")) {
    auto v = parse_uint(*st);
    if (!v) return json_error(400, "start_time must be an integer");
    start_time = *v;
  }
  int status = 200;
  std::string body = sites_json(snap, static_cast<pid_t>(*pid), start_time, &status);
  HttpResponse r = ok(std::move(body), "application/json");
  r.status = status;
  return r;
}

}  // namespace

std::string processes_json(const DaemonSnapshot& snap) {
  json procs = json::array();
  for (const ProcessEntry& e : snap.processes) {
    json p = identity_json(snap, e.process);
    p["live_bytes"] = e.snapshot.live_bytes;
    p["reserved_bytes"] = e.snapshot.reserved_bytes;  // decision reserved-address-space
    p["live_allocations"] = e.snapshot.live_allocations;
    p["kinds"] = kinds_to_json(e.snapshot);
    p["sampling"] = sampling_json(e.snapshot);
    p["heap_stale_since"] =
        e.snapshot.heap_stale_since > 0 ? json(e.snapshot.heap_stale_since) : json(nullptr);
    p["unrecorded"] = unrecorded_json(e.snapshot);
    p["lifecycle"] = to_json(e.snapshot.lifecycle);
    p["allocator"] = to_json(e.snapshot.allocator);
    p["python"] = to_json(e.snapshot.python);
    p["rss"] = rss_to_json(e.snapshot.rss);  // RSS explained (docs/api.md)
    p["tensor"] = to_json(e.snapshot.tensor);  // the tensor tier (decision tensor-tier)
    p["gpu_explained"] = gpu_explained_json(e.snapshot.gpu_explained);
    p["cost"] = cost_json(e.snapshot);  // what the daemon holds for it (decision process-cost)
    procs.push_back(std::move(p));
  }
  return dump({{"timestamp", snap.timestamp}, {"processes", std::move(procs)}});
}

// What the symbolizer refused or holds because of what objects declare
// (issue 32).
json symbols_json(const SymbolizerStats& s) {
  return {{"inflated_refused", s.inflated_refused},
          {"inflated_bytes", s.inflated_bytes},
          {"inflated_evictions", s.inflated_evictions}};
}

// Who the daemon runs as now (decision unprivileged-uid): the kernel's
// answer, and the account it switched to from root (null when it did not).
json sandbox_json() {
  const std::string& name = daemon_user_name();
  return {{"uid", getuid()},
          {"gid", getgid()},
          {"user", name.empty() ? json(nullptr) : json(name)},
          {"signals_refused", signals_refused()}};
}

std::string status_json(const DaemonSnapshot& snap) {
  const DaemonCounters& c = snap.counters;
  json errors = json::object();
  for (const auto& [reason, n] : c.attach_errors) errors[reason] = n;
  json kernel = json::object();
  for (size_t i = 0; i < LW_CNT_MAX; ++i)
    if (const char* name = counter_name(i)) kernel[name] = snap.kernel_counters[i];
  json probes = json::array();
  for (const auto& [object, p] : snap.probes)
    probes.push_back({{"object", object},
                      {"symbols", p.symbols},
                      {"file_offset", p.file_offset},
                      {"retprobe", p.retprobe},
                      {"placement", p.placement},
                      {"attached", p.attached},
                      {"parked", p.parked},
                      {"error", p.error}});
  return dump({{"timestamp", snap.timestamp},
               {"config_file", snap.config_path},
               {"tracked_processes", snap.processes.size()},
               {"max_processes", snap.max_processes},
               {"attached_total", c.attached_total},
               {"detached_total", c.detached_total},
               {"refused_max_processes", c.refused_max_processes},
               {"refused_memory_budget", c.refused_memory_budget},
               {"refused_user_share", c.refused_user_share},
               {"attach_failures", c.attach_failures},
               {"attach_errors", std::move(errors)},
               {"reconciliations", c.reconciliations},
               {"discoveries", {{"deferred", c.discoveries_deferred}, {"dropped", c.discoveries_dropped}}},
               {"symbols", symbols_json(snap.tracer_stats.symbols.symbolizer)},
               {"reloads_total", c.reloads_total},
               {"reload_failures_total", c.reload_failures_total},
               {"last_reload_successful", c.last_reload_successful},
               {"last_reload_success_timestamp", c.last_reload_success_timestamp},
               {"kernel_counters", std::move(kernel)},
               {"sandbox", sandbox_json()},
               {"kill_switch_engaged", c.kill_switch_engaged},
               {"escalations", {{"up", c.escalations_up}, {"down", c.escalations_down}}},
               {"governor_suspensions", c.governor_suspensions},
               {"governor_bursts", c.governor_bursts},
               {"memory_budget", {{"suspensions", c.memory_budget_suspensions},
                                  {"live_records", snap.tracer_stats.live_records},
                                  {"live_records_limit", snap.tracer_stats.live_record_cap}}},
               {"live_map", {{"entries", snap.live_map.entries},
                             {"automatic", snap.live_map.automatic},
                             {"worst_bytes", snap.live_map.worst_bytes},
                             {"ram_bytes", snap.live_map.ram_bytes},
                             {"cgroup_limit_bytes", snap.live_map.cgroup_limit_bytes != 0
                                                        ? json(snap.live_map.cgroup_limit_bytes)
                                                        : json(nullptr)},
                             {"preallocated", snap.live_map.preallocated}}},
               {"resyncs", snap.tracer_stats.resyncs},
               {"lifecycle", {{"events", snap.tracer_stats.lifecycle_events},
                              {"rescans", snap.tracer_stats.rescans},
                              {"rescans_deferred", snap.tracer_stats.rescans_deferred}}},
               {"syscall_tracepoints_attached", snap.tracer_stats.raw_syscall_tracepoints},
               {"kernel_features",
                {{"uprobe_multi", snap.tracer_stats.uprobe_multi},
                 {"uprobe_session", snap.tracer_stats.uprobe_session},
                 {"uretprobe_syscall", snap.tracer_stats.uretprobe_syscall},
                 {"uprobe_hits_serialize", snap.tracer_stats.uprobe_hits_serialize}}},
               {"unwind", to_json(snap.tracer_stats.unwind)},
               {"probes", std::move(probes)}});
}

std::string sites_json(const DaemonSnapshot& snap, pid_t pid, uint64_t start_time, int* status) {
  for (const ProcessEntry& e : snap.processes) {
    if (e.process.identity.pid != pid) continue;
    if (start_time != 0 && e.process.identity.start_time != start_time) {
      *status = 404;
      return dump({{"error", "pid " + std::to_string(pid) + " is traced with another start_time"},
                   {"start_time", e.process.identity.start_time}});
    }
    json j = to_json(e.snapshot);
    j["process"] = identity_json(snap, e.process);
    j["kinds"] = kinds_to_json(e.snapshot);
    *status = 200;
    return dump(j);
  }
  *status = 404;
  return dump({{"error", "pid " + std::to_string(pid) + " is not traced"}});
}

std::string oom_kills_json(const DaemonSnapshot& snap, const OomKillsPage& page) {
  // The reports are stored as JSON text (built at the kill or read back
  // from oom.report_dir): joined, not parsed again. Kept newest first, in
  // the order of their ids, so `after` needs not be a report still kept.
  std::string out = "{\"oom_kills\":[";
  size_t taken = 0, bytes = 0, total = 0;
  std::string next;
  if (snap.oom_reports) {
    const std::vector<StoredOomReport>& all = *snap.oom_reports;
    total = all.size();
    size_t i = 0;
    while (i < all.size() && !page.after.empty() && all[i].meta.id >= page.after) ++i;
    for (; i < all.size(); ++i) {
      const std::string& text = all[i].json;
      if (taken == page.limit || (taken > 0 && bytes + text.size() > OomKillsPage::kOomKillsPageBytes)) {
        next = all[i - 1].meta.id;
        break;
      }
      if (taken++ > 0) out += ',';
      out += text;
      bytes += text.size();
    }
  }
  out += "],\"total\":" + std::to_string(total) + ",\"next\":" + (next.empty() ? "null" : json(next).dump()) + "}";
  return out;
}

HttpResponse healthz_response(const DaemonSnapshot* snap) {
  double age = snap ? std::chrono::duration<double>(
                          std::chrono::system_clock::now().time_since_epoch()).count() -
                          snap->timestamp
                    : 1e9;
  HttpResponse r;
  r.content_type = "text/plain; charset=utf-8";
  if (age > kStaleSnapshotSeconds) {
    r.status = 503;
    r.body = snap ? "consumer stalled: last snapshot " + std::to_string(static_cast<long>(age)) + " s ago\n"
                  : "starting: no snapshot published yet\n";
    return r;
  }
  r.body = "ok\n";
  return r;
}

namespace {

// Whether the client takes gzip (Accept-Encoding lists it without q=0).
bool accepts_gzip(const HttpRequest& req) {
  std::optional<std::string_view> accept = req.header("accept-encoding");
  if (!accept) return false;
  std::string_view rest = *accept;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    if (item.substr(0, 4) == "gzip" || item.substr(0, 4) == "GZIP") {
      return item.find("q=0") == std::string_view::npos || item.find("q=0.") != std::string_view::npos;
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

HttpResponse route(const HttpRequest& req, const DaemonSnapshot* snap, const RouteOptions& options);

}  // namespace

HttpResponse route_request(const HttpRequest& req, const DaemonSnapshot* snap, const RouteOptions& options) {
  HttpResponse r = route(req, snap, options);
  // Prometheus asks for gzip: /metrics shrinks about tenfold, and so do the
  // bytes the front holds for a slow client. pprof is gzipped already.
  constexpr size_t kWorthCompressing = 4096;
  if (r.status == 200 && r.body.size() >= kWorthCompressing && r.content_type != "application/octet-stream" &&
      accepts_gzip(req)) {
    if (Result<std::string> gz = gzip(r.body)) {
      r.body = std::move(*gz);
      r.headers.emplace_back("Content-Encoding", "gzip");
    }
  }
  if (r.status == 200) r.headers.emplace_back("Vary", "Accept-Encoding");
  return r;
}

namespace {

HttpResponse route(const HttpRequest& req, const DaemonSnapshot* snap, const RouteOptions& options) {
  const std::string& path = req.path;
  if (path == "/") return ok(kLanding, "text/html; charset=utf-8");
  constexpr std::string_view kProcesses = "/api/v1/processes";
  const bool known = path == "/metrics" || path == kProcesses || path == "/api/v1/status" ||
                     path == "/api/v1/oom_kills" ||
                     path == "/debug/pprof/heap" ||
                     (path.starts_with(std::string(kProcesses) + "/") && path.ends_with("/sites"));
  if (!known) return json_error(404, "no such path (see / for the paths served)");
  if (!snap) return json_error(503, "starting: no snapshot published yet");
  if (path == "/metrics") {
    MetricsOptions opts;
    opts.max_series = options.max_series;
    opts.http = options.http;
    // One rendering at a time: each holds about 1 KiB per series while it
    // builds the families (docs/metrics.md, "Series cap"), so two workers
    // rendering at once would double the daemon's peak for nothing.
    static std::mutex rendering;
    std::lock_guard lock(rendering);
    return ok(render_metrics(*snap, opts), "text/plain; version=0.0.4; charset=utf-8");
  }
  if (path == kProcesses) return ok(processes_json(*snap), "application/json");
  if (path == "/api/v1/status") return ok(status_json(*snap), "application/json");
  if (path == "/api/v1/oom_kills") return oom_kills(req, *snap);
  if (path == "/debug/pprof/heap") return pprof_heap(req, *snap);
  // /api/v1/processes/PID/sites
  std::string_view rest = std::string_view(path).substr(kProcesses.size() + 1);
  rest.remove_suffix(std::string_view("/sites").size());
  return sites(req, *snap, rest);
}

}  // namespace

}  // namespace lw
