// SPDX-License-Identifier: Apache-2.0
// What each path answers (docs/api.md), as pure functions of a request and
// the daemon's published snapshot: no sockets, no threads. The HTTP front
// (exporter/http/http_server.h) parses, authenticates and schedules; this file
// decides the response. Every error is a JSON object {"error": "..."}.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "exporter/http/http_request.h"
#include "exporter/http/http_stats.h"
#include "view/daemon_view.h"

namespace lw {

struct RouteOptions {
  size_t max_series = 50000;
  const HttpFrontStats* http = nullptr;  // the front's own counters, for /metrics
};

// GET/HEAD of any path but /healthz (which the front answers itself).
// `snap` null: the daemon has not published yet (503).
HttpResponse route_request(const HttpRequest& request, const DaemonSnapshot* snap,
                           const RouteOptions& options);

// /healthz: 200 "ok", or 503 when the consumer has not published for 10 s.
// It says nothing about the traced processes, so it is served without
// authentication, on the TLS port to plain HTTP too (Kubernetes probes).
HttpResponse healthz_response(const DaemonSnapshot* snap);

// JSON bodies, exposed for unit tests.
std::string processes_json(const DaemonSnapshot& snap);
// Daemon state: attach and reload counters, probes, kernel counters.
std::string status_json(const DaemonSnapshot& snap);
// One page of /api/v1/oom_kills (docs/api.md; issue 32): at most `limit`
// reports older than the id `after` ("" from the newest), and at most
// kOomKillsPageBytes of them (always one).
struct OomKillsPage {
  static constexpr size_t kDefaultLimit = 100;
  static constexpr size_t kMaxLimit = 1000;
  static constexpr size_t kOomKillsPageBytes = 4u << 20;
  size_t limit = kDefaultLimit;
  std::string after;
};
// {"oom_kills": [report, ...], "total": N, "next": ID or null}, newest first.
std::string oom_kills_json(const DaemonSnapshot& snap, const OomKillsPage& page = {});
// Sites of `pid` (and `start_time` if non-zero); *status 200 or 404.
std::string sites_json(const DaemonSnapshot& snap, pid_t pid, uint64_t start_time, int* status);

}  // namespace lw
