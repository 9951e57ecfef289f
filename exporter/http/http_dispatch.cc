// SPDX-License-Identifier: Apache-2.0
// The HTTP front's requests (exporter/http/http_server_impl.h): what is
// refused before any work, authentication on its own thread, the rate limit
// after it, routing to the workers, and their completions.
#include <algorithm>
#include <string>
#include <utility>

#include "exporter/http/http_routes.h"
#include "exporter/http/http_server_impl.h"

namespace lw {

using http_internal::Phase;

void HttpServer::Impl::dispatch(Conn& c, HttpRequest request) {
  c.keep_alive = request.keep_alive && !c.peer_closed;
  c.head_only = request.head_only;
  if (request.has_body) {
    // Unread: the body would only be buffered to be thrown away.
    count_refused("body");
    return respond(c, json_error(413, "no endpoint takes a request body"), true);
  }
  if (request.method != "GET" && request.method != "HEAD") {
    count_refused("method");
    HttpResponse r = json_error(405, "only GET and HEAD are served");
    r.headers.emplace_back("Allow", "GET, HEAD");
    return respond(c, std::move(r));
  }
  if (c.plain_on_tls) {
    if (request.path == "/healthz") return respond(c, healthz_response(source_().get()));
    count_refused("plain_on_tls");
    return respond(c, json_error(400, "this port serves HTTPS; over plain HTTP only /healthz is answered"),
                   true);
  }
  // Answered here, by the epoll thread, without authentication: it says
  // nothing about the traced processes, and must answer while the workers
  // are busy (docs/api.md).
  if (request.path == "/healthz") return respond(c, healthz_response(source_().get()));
  const std::shared_ptr<WebState> web = current_;
  auto shared = std::make_shared<HttpRequest>(std::move(request));
  // The rate limit applies after authentication (route_if_allowed).
  if (!web->auth) return route_if_allowed(c, *web, std::move(shared));
  std::optional<std::string_view> header = shared->header("authorization");
  std::optional<BasicAuth::Credentials> creds = BasicAuth::parse(header.value_or(""));
  if (!creds) {
    count_refused("unauthorized");
    return respond(c, json_error(401, "authentication required"));
  }
  if (web->auth->cached(*creds)) return route_if_allowed(c, *web, std::move(shared));
  // bcrypt runs on the authentication thread, never here or on a worker.
  auto credentials = std::make_shared<BasicAuth::Credentials>(std::move(*creds));
  const uint64_t id = c.id;
  std::shared_ptr<BasicAuth> auth = web->auth;
  const bool queued = auth_work_.push([this, id, auth, credentials, shared] {
    const bool ok = auth->verify(*credentials);
    Completion done;
    done.conn = id;
    done.kind = ok ? Completion::Kind::kAuthorized : Completion::Kind::kUnauthorized;
    done.request = shared;
    post(std::move(done));
  });
  if (!queued) {
    count_refused("overloaded");
    HttpResponse r = json_error(503, "too many password checks in progress; retry");
    r.headers.emplace_back("Retry-After", "1");
    return respond(c, std::move(r));
  }
  c.phase = Phase::kWait;
}

// After authentication (issue 32): a request without valid credentials got
// 401 and takes no token from the scraper's. Failed password checks are
// bounded by the authentication queue (max_queued_auth) and bcrypt's cost.
void HttpServer::Impl::route_if_allowed(Conn& c, const WebState& web, std::shared_ptr<HttpRequest> request) {
  if (!web.limiter || web.limiter->allow(Clock::now())) return schedule_route(c, std::move(request));
  count_refused("rate_limited");
  HttpResponse r = json_error(429, "rate limit exceeded (web config rate_limit)");
  const uint64_t wait_s = (web.limiter->config().interval_ms + 999) / 1000;
  r.headers.emplace_back("Retry-After", std::to_string(std::max<uint64_t>(1, wait_s)));
  respond(c, std::move(r));
}

void HttpServer::Impl::schedule_route(Conn& c, std::shared_ptr<HttpRequest> request) {
  const uint64_t id = c.id;
  const bool fits = held_bytes_ < options_.max_response_bytes;
  const bool queued = fits && work_.push([this, id, request] {
    std::shared_ptr<const DaemonSnapshot> snap = source_();
    HttpFrontStats front = stats();
    RouteOptions route;
    route.max_series = options_.max_series;
    route.http = &front;
    Completion done;
    done.conn = id;
    done.response = route_request(*request, snap.get(), route);
    post(std::move(done));
  });
  if (!queued) {
    count_refused("overloaded");
    HttpResponse r = json_error(503, "busy: too many requests in progress; retry");
    r.headers.emplace_back("Retry-After", "1");
    return respond(c, std::move(r));
  }
  c.phase = Phase::kWait;
}

void HttpServer::Impl::respond(Conn& c, HttpResponse r, bool close) {
  if (r.status == 401) r.headers.emplace_back("WWW-Authenticate", R"(Basic realm="leakwatch")");
  // Range requests get the whole representation (RFC 9110 14.2 lets a
  // server ignore Range): no multi-range amplification.
  r.headers.emplace_back("Accept-Ranges", "none");
  c.close_after = close || r.close || !c.keep_alive;
  c.out = serialize_response(r, c.head_only, !c.close_after, current_->headers);
  c.out_off = 0;
  c.held = c.out.size();
  held_bytes_ += c.held;
  c.phase = Phase::kWrite;
  c.phase_start = Clock::now();
  update_gauges();
}

void HttpServer::Impl::post(Completion done) {
  {
    std::lock_guard lock(completions_mu_);
    completions_.push_back(std::move(done));
  }
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_.get(), &one, sizeof(one));
  (void)ignored;
}

void HttpServer::Impl::handle_completions() {
  std::vector<Completion> batch;
  {
    std::lock_guard lock(completions_mu_);
    batch.swap(completions_);
  }
  for (Completion& done : batch) {
    auto it = conns_.find(done.conn);
    if (it == conns_.end()) continue;  // the client went away meanwhile
    Conn& c = *it->second;
    if (c.dead || c.phase != Phase::kWait) continue;
    switch (done.kind) {
      case Completion::Kind::kResponse:
        // The responses held for clients stay within their bound: one that
        // would pass it is not sent (the client may retry).
        if (held_bytes_ + done.response.body.size() > options_.max_response_bytes) {
          count_refused("overloaded");
          HttpResponse busy = json_error(503, "busy: too many response bytes held for clients; retry");
          busy.headers.emplace_back("Retry-After", "1");
          respond(c, std::move(busy));
        } else {
          respond(c, std::move(done.response));
        }
        break;
      case Completion::Kind::kAuthorized:
        route_if_allowed(c, *current_, std::move(done.request));
        break;
      case Completion::Kind::kUnauthorized:
        count_refused("unauthorized");
        respond(c, json_error(401, "authentication required"));
        break;
    }
    drive(c);
  }
  erase_dead();
}

}  // namespace lw
