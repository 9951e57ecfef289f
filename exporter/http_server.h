/* SPDX-License-Identifier: Apache-2.0 */
// The HTTP side of the daemon: /healthz, the JSON API and (with the
// exporter) /metrics, served from the daemon's published snapshot only: no
// BPF map walk and no symbolization happens inside a request.
// With a WebConfig (exporter/web_config.h): HTTPS, basic auth on every
// path, and the configured response headers.
// Thread-safety: start() spawns the server's threads; stop() joins them.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "core/result.h"
#include "view/daemon_view.h"
#include "exporter/web_config.h"

namespace httplib {
class Server;
}

namespace lw {

using SnapshotSource = std::function<std::shared_ptr<const DaemonSnapshot>()>;

class HttpServer {
 public:
  // Plain HTTP, no authentication.
  HttpServer(SnapshotSource source, size_t max_series);
  // `web` null: as above. Otherwise TLS when web->tls is set, basic auth
  // when web->users is not empty, and web->headers on every response.
  HttpServer(SnapshotSource source, size_t max_series, std::shared_ptr<const WebConfig> web);
  ~HttpServer();

  // Binds host:port (IPv4 or IPv6 literal or name) and serves in a thread.
  // Returns once listening, with the bound port (useful with port 0). Fails
  // without listening when the TLS certificate or key cannot be loaded.
  Result<int> start(const std::string& host, int port);
  void stop();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

 private:
  void routes();
  void security();
  SnapshotSource source_;
  size_t max_series_;
  std::shared_ptr<const WebConfig> web_;
  std::unique_ptr<BasicAuth> auth_;  // null: no authentication
  std::string tls_error_;            // why the TLS context could not be set up
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

// JSON bodies, exposed for unit tests.
std::string processes_json(const DaemonSnapshot& snap);
// Daemon state: attach and reload counters, probes, kernel counters.
std::string status_json(const DaemonSnapshot& snap);
// Sites of `pid` (and `start_time` if non-zero); empty when unknown.
std::string sites_json(const DaemonSnapshot& snap, pid_t pid, uint64_t start_time, int* status);

}  // namespace lw
