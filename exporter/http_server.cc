// SPDX-License-Identifier: Apache-2.0
#include "exporter/http_server.h"

#include <httplib.h>

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "core/label_sanitize.h"
#include "exporter/metrics.h"
#include "exporter/profile.h"
#include "view/json.h"

namespace lw {

namespace {

using nlohmann::json;

constexpr double kStaleSnapshotSeconds = 10;

json identity_json(const ProcessInfo& t) {
  const ProcessIdentity& id = t.identity;
  json j = {{"pid", id.pid},
            {"start_time", id.start_time},
            {"comm", id.comm},
            {"exe", id.exe},
            {"target", t.target},
            {"mode", t.heap_attached ? "full" : "light"},
            {"configured_mode", mode_name(t.mode)},
            {"tracing_suspended", t.tracing_suspended}};
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

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char* kLanding = R"(<!doctype html>
<html><head><title>leakwatch</title></head><body>
<h1>leakwatch</h1>
<ul>
<li><a href="/metrics">/metrics</a>: Prometheus metrics</li>
<li><a href="/api/v1/processes">/api/v1/processes</a>: traced processes (JSON)</li>
<li>/api/v1/processes/PID/sites: the call stacks holding memory in PID (JSON)</li>
<li><a href="/healthz">/healthz</a>: health</li>
</ul>
<p>Documentation: docs/api.md</p>
</body></html>
)";

}  // namespace

std::string processes_json(const DaemonSnapshot& snap) {
  json procs = json::array();
  for (const ProcessEntry& e : snap.processes) {
    json p = identity_json(e.process);
    p["live_bytes"] = e.snapshot.live_bytes;
    p["live_allocations"] = e.snapshot.live_allocations;
    p["kinds"] = kinds_to_json(e.snapshot);
    p["sampling"] = {{"mean_bytes", e.snapshot.sample_mean_bytes},
                     {"estimated_kinds",
                      e.snapshot.sample_mean_bytes ? json::array({"heap"}) : json::array()}};
    p["heap_stale_since"] =
        e.snapshot.heap_stale_since > 0 ? json(e.snapshot.heap_stale_since) : json(nullptr);
    p["allocator"] = to_json(e.snapshot.allocator);
    p["python"] = to_json(e.snapshot.python);
    procs.push_back(std::move(p));
  }
  return dump({{"timestamp", snap.timestamp}, {"processes", std::move(procs)}});
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
                      {"error", p.error}});
  return dump({{"timestamp", snap.timestamp},
               {"config_file", snap.config_path},
               {"tracked_processes", snap.processes.size()},
               {"max_processes", snap.max_processes},
               {"attached_total", c.attached_total},
               {"detached_total", c.detached_total},
               {"refused_max_processes", c.refused_max_processes},
               {"refused_memory_budget", c.refused_memory_budget},
               {"attach_failures", c.attach_failures},
               {"attach_errors", std::move(errors)},
               {"reconciliations", c.reconciliations},
               {"reloads_total", c.reloads_total},
               {"reload_failures_total", c.reload_failures_total},
               {"last_reload_successful", c.last_reload_successful},
               {"last_reload_success_timestamp", c.last_reload_success_timestamp},
               {"kernel_counters", std::move(kernel)},
               {"kill_switch_engaged", c.kill_switch_engaged},
               {"escalations", {{"up", c.escalations_up}, {"down", c.escalations_down}}},
               {"governor_suspensions", c.governor_suspensions},
               {"memory_budget", {{"suspensions", c.memory_budget_suspensions},
                                  {"live_records", snap.tracer_stats.live_records},
                                  {"live_records_limit", snap.tracer_stats.live_record_cap}}},
               {"resyncs", snap.tracer_stats.resyncs},
               {"syscall_tracepoints_attached", snap.tracer_stats.raw_syscall_tracepoints},
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
    j["process"] = identity_json(e.process);
    j["kinds"] = kinds_to_json(e.snapshot);
    *status = 200;
    return dump(j);
  }
  *status = 404;
  return dump({{"error", "pid " + std::to_string(pid) + " is not traced"}});
}

HttpServer::HttpServer(SnapshotSource source, size_t max_series)
    : HttpServer(std::move(source), max_series, nullptr) {}

HttpServer::HttpServer(SnapshotSource source, size_t max_series,
                       std::shared_ptr<const WebConfig> web)
    : source_(std::move(source)), max_series_(max_series), web_(std::move(web)) {
  if (web_ && web_->tls) {
    // The callback constructor leaves the whole context to us; the others
    // allow TLS 1.1 and cannot set a maximum version.
    server_ = std::make_unique<httplib::SSLServer>([this](SSL_CTX& ctx) {
      Status st = configure_tls_context(*web_->tls, ctx);
      if (!st) tls_error_ = st.error().message;
      return st.ok();
    });
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  security();
  routes();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::security() {
  if (!web_) return;
  if (!web_->headers.empty()) {
    // Default headers go on every response, 401s and 404s included.
    httplib::Headers headers(web_->headers.begin(), web_->headers.end());
    server_->set_default_headers(std::move(headers));
  }
  if (web_->users.empty()) return;
  auth_ = std::make_unique<BasicAuth>(web_->users);
  // Before routing, so that every path, unknown ones included, needs
  // credentials: call stacks reveal the traced programs' code structure.
  server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (auth_->check(req.get_header_value("Authorization"))) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.status = 401;
    res.set_header("WWW-Authenticate", R"(Basic realm="leakwatch")");
    res.set_content("Unauthorized\n", "text/plain");
    return httplib::Server::HandlerResponse::Handled;
  });
}

void HttpServer::routes() {
  httplib::Server& s = *server_;
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kLanding, "text/html; charset=utf-8");
  });
  s.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    auto snap = source_();
    double age = snap ? std::chrono::duration<double>(
                            std::chrono::system_clock::now().time_since_epoch()).count() -
                            snap->timestamp
                      : 1e9;
    if (age > kStaleSnapshotSeconds) {
      res.status = 503;
      res.set_content("consumer stalled: last snapshot " + std::to_string(age) + " s ago\n",
                      "text/plain");
      return;
    }
    res.set_content("ok\n", "text/plain");
  });
  s.Get("/api/v1/processes", [this](const httplib::Request&, httplib::Response& res) {
    auto snap = source_();
    if (!snap) {
      res.status = 503;
      return;
    }
    res.set_content(processes_json(*snap), "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    auto snap = source_();
    if (!snap) {
      res.status = 503;
      return;
    }
    MetricsOptions opts;
    opts.max_series = max_series_;
    res.set_content(render_metrics(*snap, opts), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/debug/pprof/heap", [this](const httplib::Request& req, httplib::Response& res) {
    auto snap = source_();
    if (!snap) {
      res.status = 503;
      return;
    }
    char* end = nullptr;
    std::string pid_s = req.get_param_value("pid");
    long pid = strtol(pid_s.c_str(), &end, 10);
    std::string st_s = req.get_param_value("start_time");
    uint64_t start_time = st_s.empty() ? 0 : strtoull(st_s.c_str(), nullptr, 10);
    if (pid_s.empty() || *end != '\0' || pid <= 0) {
      res.status = 400;
      res.set_content("pid=PID is required\n", "text/plain");
      return;
    }
    for (const ProcessEntry& e : snap->processes) {
      if (e.process.identity.pid != pid) continue;
      if (start_time && e.process.identity.start_time != start_time) break;
      double attached = std::chrono::duration<double>(
                            e.process.attached_at.time_since_epoch()).count();
      Result<std::string> gz = encode_pprof_gz(profile_input(e.snapshot, attached));
      if (!gz) {
        res.status = 500;
        res.set_content(gz.error().message + "\n", "text/plain");
        return;
      }
      res.set_header("Content-Disposition", "attachment; filename=\"heap.pb.gz\"");
      res.set_content(std::move(*gz), "application/octet-stream");
      return;
    }
    res.status = 404;
    res.set_content("pid " + pid_s + " is not traced\n", "text/plain");
  });
  s.Get("/api/v1/status", [this](const httplib::Request&, httplib::Response& res) {
    auto snap = source_();
    if (!snap) {
      res.status = 503;
      return;
    }
    res.set_content(status_json(*snap), "application/json");
  });
  s.Get(R"(/api/v1/processes/(\d+)/sites)", [this](const httplib::Request& req,
                                                   httplib::Response& res) {
    auto snap = source_();
    if (!snap) {
      res.status = 503;
      return;
    }
    char* end = nullptr;
    long pid = strtol(req.matches[1].str().c_str(), &end, 10);
    uint64_t start_time = 0;
    if (req.has_param("start_time")) {
      std::string v = req.get_param_value("start_time");
      start_time = strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0') {
        res.status = 400;
        res.set_content(R"({"error":"start_time must be an integer"})", "application/json");
        return;
      }
    }
    int status = 200;
    std::string body = sites_json(*snap, static_cast<pid_t>(pid), start_time, &status);
    res.status = status;
    res.set_content(body, "application/json");
  });
}

Result<int> HttpServer::start(const std::string& host, int port) {
  if (!server_->is_valid()) {
    return Error{EINVAL, "TLS setup from " + web_->file + " failed: " +
                             (tls_error_.empty() ? "cannot create a TLS context" : tls_error_)};
  }
  int bound = port;
  if (port == 0) {
    bound = server_->bind_to_any_port(host.c_str());
    if (bound < 0) return Error{EADDRNOTAVAIL, "cannot listen on " + host + ":0"};
  } else if (!server_->bind_to_port(host.c_str(), port)) {
    return Error{EADDRINUSE, "cannot listen on " + host + ":" + std::to_string(port) +
                                 " (address in use or not available)"};
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return bound;
}

void HttpServer::stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace lw
