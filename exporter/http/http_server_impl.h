// SPDX-License-Identifier: Apache-2.0
// The HTTP front's internals (exporter/http/http_server.h), shared by its two
// halves: connections (http_server.cc: accept, TLS, reading heads, writing
// responses, timeouts, reloads) and requests (http_dispatch.cc: refusals,
// authentication, the rate limit, routing to the workers, completions).
// Not part of any interface: included by those two files only.
#pragma once

#include <openssl/ssl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/platform/fd.h"
#include "core/policy/memory_budget.h"
#include "exporter/http/http_server.h"
#include "exporter/http/http_web_state.h"
#include "exporter/http/job_queue.h"

namespace lw {
namespace http_internal {

using Clock = std::chrono::steady_clock;

// epoll tags: the listener and the wake-up eventfd; connections count up
// from kFirstConnection.
constexpr uint64_t kListenerTag = 1, kWakeTag = 2, kFirstConnection = 16;
constexpr size_t kReadChunk = 16 * 1024;
constexpr int kMaxAcceptsPerWake = 256;
constexpr auto kSweepInterval = std::chrono::milliseconds(100);

// The front's memory at the defaults, counted in the daemon's budget
// (core/policy/memory_budget.h): each connection holds at most a request head and
// a TLS session (OpenSSL's record buffers, released when idle), and the
// responses held for clients are bounded as a whole.
constexpr uint64_t kTlsSessionBytes = 40 * 1024;
static_assert(256 * (16 * 1024 + 1 + kTlsSessionBytes + 1024) + (16u << 20) <= kHttpFrontReserveBytes,
              "the HTTP front's defaults must fit the memory reserve kept for it");

enum class Phase {
  kSniff,      // TLS port: waiting for the first byte (TLS record or plain HTTP)
  kHandshake,  // TLS handshake
  kRead,       // reading a request head (or idle between requests)
  kWait,       // a worker or the authentication thread has the request
  kWrite,      // sending a response
};

struct Conn {
  uint64_t id = 0;
  int fd = -1;
  SSL* ssl = nullptr;
  std::shared_ptr<WebState> web;  // the web config it was accepted under
  Phase phase = Phase::kRead;
  bool plain_on_tls = false;  // plain HTTP on the TLS port: /healthz only
  bool peer_closed = false;   // EOF seen: answer what was read, then close
  bool dead = false;
  std::string in;
  size_t scanned = 0;
  std::string out;
  size_t out_off = 0;
  size_t held = 0;  // bytes of `out` counted in the front's response budget
  bool close_after = false;
  bool keep_alive = true;
  bool head_only = false;
  Clock::time_point phase_start;
  uint32_t events = 0;

  ~Conn() {
    if (ssl) SSL_free(ssl);
    if (fd >= 0) close(fd);
  }
};

struct Completion {
  enum class Kind { kResponse, kAuthorized, kUnauthorized };
  uint64_t conn = 0;
  Kind kind = Kind::kResponse;
  HttpResponse response;
  std::shared_ptr<HttpRequest> request;
};

}  // namespace http_internal

using http_internal::Clock;
using http_internal::Completion;
using http_internal::Conn;

class HttpServer::Impl {
 public:
  Impl(SnapshotSource source, HttpServerOptions options)
      : source_(std::move(source)),
        options_(std::move(options)),
        work_(options_.max_queued_requests),
        auth_work_(options_.max_queued_auth) {
    stats_.max_connections = options_.max_connections;
    stats_.response_bytes_limit = options_.max_response_bytes;
  }
  ~Impl() { stop(); }

  Result<int> start(const std::string& host, int port);
  void stop();

  HttpFrontStats stats() const {
    std::lock_guard lock(stats_mu_);
    return stats_;
  }

 private:
  void loop();
  void accept_all();
  void sweep(Clock::time_point now);
  void check_reload();
  void drive(Conn& c);
  enum class Io { kMore, kBlocked, kEof, kError };
  Io read_available(Conn& c, uint32_t* want);
  Io write_pending(Conn& c, uint32_t* want);
  void dispatch(Conn& c, HttpRequest request);
  void route_if_allowed(Conn& c, const WebState& web, std::shared_ptr<HttpRequest> request);
  void schedule_route(Conn& c, std::shared_ptr<HttpRequest> request);
  void respond(Conn& c, HttpResponse response, bool close = false);
  void want(Conn& c, uint32_t events);
  void close_conn(Conn& c, const char* reason);
  void erase_dead();
  void handle_completions();
  void post(Completion done);
  Conn* oldest_waiting();
  void count_refused(const char* reason) {
    std::lock_guard lock(stats_mu_);
    ++stats_.refused[reason];
  }
  void count_closed(const char* reason) {
    std::lock_guard lock(stats_mu_);
    ++stats_.connections_closed[reason];
  }
  void update_gauges() {
    std::lock_guard lock(stats_mu_);
    stats_.connections_open = conns_.size();
    stats_.response_bytes_in_flight = held_bytes_;
  }

  SnapshotSource source_;
  HttpServerOptions options_;
  JobQueue work_;
  JobQueue auth_work_;
  std::vector<std::thread> threads_;
  std::thread io_thread_;
  Fd listen_fd_, epoll_fd_, wake_fd_;
  std::atomic<bool> stopping_{false};
  bool listening_paused_ = false;

  // Owned by the epoll thread once started.
  std::shared_ptr<WebState> current_;
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  uint64_t next_id_ = http_internal::kFirstConnection;
  size_t held_bytes_ = 0;
  Clock::time_point last_sweep_, last_reload_check_;
  std::vector<FileStamp> failed_stamps_;  // a rejected file is reported once

  std::mutex completions_mu_;
  std::vector<Completion> completions_;

  mutable std::mutex stats_mu_;
  HttpFrontStats stats_;
};

}  // namespace lw
