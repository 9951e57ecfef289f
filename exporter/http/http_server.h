/* SPDX-License-Identifier: Apache-2.0 */
// The daemon's HTTP front: /healthz, /metrics, the JSON API and pprof
// (exporter/http/http_routes.h), over HTTP/1.1, plain or TLS, with the web
// config's basic auth, client certificates, headers and rate limit.
//
// Why not a library (decision own-http-server): cpp-httplib 0.11
// gave one blocking worker per connection out of 8, no deadline on a
// request, no bound on headers or bodies, SO_REUSEPORT and a backlog of 5;
// eight slow clients shut everyone out. This front is one epoll thread that
// owns every socket and does all I/O (TLS included) without blocking, so a
// stalled or slow client costs a connection slot and a buffer, never a
// thread:
//   - a connection must deliver a complete request head within
//     request_timeout (10 s; 1 s while over half the connection slots are
//     taken) of being accepted or idle, and take its response within
//     write_timeout (30 s);
//   - heads are bounded (HttpLimits: 16 KiB, 64 fields, 4 KiB target);
//     requests announcing a body get 413 and are closed, unread; Range is
//     ignored (the whole response, 200);
//   - at most max_connections are held; past that, the connection that has
//     waited longest for its request is closed to make room;
//   - routes run on a small worker pool and bcrypt on one authentication
//     thread, both behind bounded queues (503 when full), so neither slow
//     rendering nor a wrong-password flood delays /healthz (answered by the
//     epoll thread itself) or a scraper whose credentials are cached;
//   - the bytes of responses held for slow readers are bounded too.
// With TLS, a request in plain HTTP to the port is answered only on
// /healthz (what Kubernetes' httpGet probes send); every other path gets
// 400. The web config file, and the files it names, are re-read within
// reload_interval of a change; a bad one keeps the old one in force.
//
// Thread-safety: start() spawns the threads, stop() joins them; stats()
// may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "core/platform/result.h"
#include "exporter/http/http_request.h"
#include "exporter/http/http_routes.h"
#include "exporter/http/http_stats.h"
#include "exporter/http/web_config.h"
#include "view/daemon_view.h"

namespace lw {

using SnapshotSource = std::function<std::shared_ptr<const DaemonSnapshot>()>;

struct HttpServerOptions {
  size_t max_series = 50000;
  std::shared_ptr<const WebConfig> web;  // null: plain HTTP, no authentication
  std::string web_config_path;           // re-read when it changes; "" never
  HttpLimits limits;
  size_t max_connections = 256;
  size_t workers = 2;               // threads that render responses
  size_t max_queued_requests = 32;  // waiting for a worker
  size_t max_queued_auth = 16;      // waiting for a bcrypt check
  std::chrono::milliseconds request_timeout{10000};
  // Under pressure (over half of max_connections held), a connection gets
  // this long instead: a real client sends its request within
  // milliseconds, a stalled one frees its slot.
  std::chrono::milliseconds request_timeout_under_pressure{1000};
  std::chrono::milliseconds write_timeout{30000};
  size_t max_response_bytes = 16u << 20;  // responses held at once, all connections
  std::chrono::milliseconds reload_interval{1000};
  // The kernel's queue of completed handshakes (clamped to
  // net.core.somaxconn). A full queue drops SYNs, and a dropped SYN is
  // retried only after a second: with 128, a flood of a few thousand
  // connects made a real client wait that second. The kernel holds these,
  // not the daemon (no descriptor until accepted).
  int listen_backlog = 4096;
};

class HttpServer {
 public:
  // Plain HTTP, no authentication.
  HttpServer(SnapshotSource source, size_t max_series);
  // `web` null: as above. Otherwise TLS when web->tls is set, basic auth
  // when web->users is not empty, and web->headers on every response.
  HttpServer(SnapshotSource source, size_t max_series, std::shared_ptr<const WebConfig> web);
  HttpServer(SnapshotSource source, HttpServerOptions options);
  ~HttpServer();

  // Binds host:port (IPv4 or IPv6 literal or name; never SO_REUSEPORT, so a
  // port another process holds is an error, EADDRINUSE) and serves in a
  // thread. Returns once listening, with the bound port (useful with port
  // 0). Fails without listening when the TLS setup fails.
  Result<int> start(const std::string& host, int port);
  void stop();

  HttpFrontStats stats() const;

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lw
