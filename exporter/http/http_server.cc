// SPDX-License-Identifier: Apache-2.0
#include "exporter/http/http_server.h"
#include "exporter/http/http_server_impl.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <latch>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/platform/fd.h"
#include "core/platform/log.h"
#include "exporter/http/http_web_state.h"
#include "core/policy/memory_budget.h"
#include "core/platform/sandbox.h"
#include "exporter/http/job_queue.h"

namespace lw {

using http_internal::kListenerTag;
using http_internal::kMaxAcceptsPerWake;
using http_internal::kReadChunk;
using http_internal::kSweepInterval;
using http_internal::kWakeTag;
using http_internal::Phase;


Result<int> HttpServer::Impl::start(const std::string& host, int port) {
  Result<std::shared_ptr<WebState>> state = WebState::build(options_.web, nullptr);
  if (!state) return state.error();
  current_ = std::move(*state);

  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found); rc != 0)
    return Error{EADDRNOTAVAIL, "cannot listen on " + host + ":" + port_text + ": " + gai_strerror(rc)};
  int last_errno = EADDRNOTAVAIL;
  for (addrinfo* a = found; a && !listen_fd_.valid(); a = a->ai_next) {
    Fd fd(socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last_errno = errno;
      continue;
    }
    // SO_REUSEADDR lets a restart bind while old connections sit in
    // TIME_WAIT; on Linux it never lets two listeners share a port.
    // SO_REUSEPORT, which does, is deliberately not set: a second daemon on
    // the same port must fail, not split the scrapes with the first.
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 ||
        listen(fd.get(), options_.listen_backlog) != 0) {
      last_errno = errno;
      continue;
    }
    listen_fd_ = std::move(fd);
  }
  freeaddrinfo(found);
  if (!listen_fd_.valid()) {
    std::string why = last_errno == EADDRINUSE
                          ? "address already in use (another leakwatch, or another program, holds the port)"
                          : strerror(last_errno);
    return Error{last_errno, "cannot listen on " + host + ":" + port_text + ": " + why};
  }
  sockaddr_storage addr = {};
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  const int bound = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                                     : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);

  epoll_fd_.reset(epoll_create1(EPOLL_CLOEXEC));
  wake_fd_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!epoll_fd_.valid() || !wake_fd_.valid()) return errno_error("epoll/eventfd");
  epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenerTag;
  epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), &ev);
  ev.data.u64 = kWakeTag;
  epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev);
  // OpenSSL writes to sockets with write(2): a peer gone mid-response must
  // be an error return, not a SIGPIPE for the whole daemon.
  signal(SIGPIPE, SIG_IGN);

  // The front's threads parse requests, TLS and credentials from the
  // network and need no capability at all: each drops them for itself
  // (capabilities are per thread), whatever the daemon keeps, before
  // start() returns (after which the daemon's seccomp filter may forbid
  // capset).
  const size_t workers = std::max<size_t>(1, options_.workers);
  std::latch dropped(static_cast<std::ptrdiff_t>(workers + 2));
  auto with_no_capabilities = [&dropped](auto body) {
    return [&dropped, body] {
      (void)drop_thread_capabilities();
      dropped.count_down();
      body();
    };
  };
  for (size_t i = 0; i < workers; ++i) threads_.emplace_back(with_no_capabilities([this] { work_.run(); }));
  threads_.emplace_back(with_no_capabilities([this] { auth_work_.run(); }));
  last_sweep_ = last_reload_check_ = Clock::now();
  io_thread_ = std::thread(with_no_capabilities([this] { loop(); }));
  dropped.wait();
  return bound;
}

void HttpServer::Impl::stop() {
  if (stopping_.exchange(true)) return;
  if (wake_fd_.valid()) {
    uint64_t one = 1;
    ssize_t ignored = write(wake_fd_.get(), &one, sizeof(one));
    (void)ignored;
  }
  if (io_thread_.joinable()) io_thread_.join();
  work_.stop();
  auth_work_.stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  conns_.clear();
}

void HttpServer::Impl::loop() {
  epoll_event events[64];
  while (!stopping_) {
    int n = epoll_wait(epoll_fd_.get(), events, 64, static_cast<int>(kSweepInterval.count()));
    if (n < 0 && errno != EINTR) {
      LW_LOG_ERROR("HTTP front: epoll_wait: %s", strerror(errno));
      break;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kListenerTag) {
        accept_all();
      } else if (tag == kWakeTag) {
        uint64_t count;
        ssize_t ignored = read(wake_fd_.get(), &count, sizeof(count));
        (void)ignored;
        handle_completions();
      } else if (auto it = conns_.find(tag); it != conns_.end()) {
        Conn& c = *it->second;
        if ((events[i].events & EPOLLERR) ||
            ((events[i].events & EPOLLHUP) && c.phase == Phase::kWait)) {
          close_conn(c, nullptr);
        } else {
          drive(c);
        }
      }
    }
    erase_dead();
    const Clock::time_point now = Clock::now();
    if (now - last_sweep_ >= kSweepInterval) {
      last_sweep_ = now;
      sweep(now);
    }
    if (now - last_reload_check_ >= options_.reload_interval) {
      last_reload_check_ = now;
      check_reload();
    }
  }
  conns_.clear();
  held_bytes_ = 0;
  update_gauges();
}

Conn* HttpServer::Impl::oldest_waiting() {
  Conn* oldest = nullptr;
  for (auto& [id, c] : conns_) {
    if (c->dead || c->phase == Phase::kWait || c->phase == Phase::kWrite) continue;
    if (!oldest || c->phase_start < oldest->phase_start) oldest = c.get();
  }
  return oldest;
}

void HttpServer::Impl::accept_all() {
  for (int i = 0; i < kMaxAcceptsPerWake; ++i) {
    int fd = accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: make room by dropping the connection that has
        // waited longest, or stop accepting until the next sweep (the
        // listener would otherwise stay readable and spin).
        if (Conn* victim = oldest_waiting()) {
          count_closed("cap");
          close_conn(*victim, nullptr);
          erase_dead();
          continue;
        }
        log_once("http-emfile", "HTTP front: out of file descriptors; pausing accept");
        epoll_event ev = {};
        ev.data.u64 = kListenerTag;
        epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, listen_fd_.get(), &ev);
        listening_paused_ = true;
      }
      break;
    }
    if (conns_.size() >= options_.max_connections) {
      // At the cap the connection that has waited longest for its request
      // (a slow or idle client) goes; a connection whose request is being
      // answered is never dropped for a newcomer.
      Conn* victim = oldest_waiting();
      count_closed("cap");
      if (!victim) {
        close(fd);
        continue;
      }
      close_conn(*victim, nullptr);
      erase_dead();
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Conn>();
    c->id = next_id_++;
    c->fd = fd;
    c->web = current_;
    c->phase = current_->ssl_ctx ? Phase::kSniff : Phase::kRead;
    c->phase_start = Clock::now();
    epoll_event ev = {};
    ev.events = EPOLLIN;
    ev.data.u64 = c->id;
    if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) continue;  // c closes fd
    c->events = EPOLLIN;
    conns_.emplace(c->id, std::move(c));
    {
      std::lock_guard lock(stats_mu_);
      ++stats_.connections_accepted;
    }
  }
  update_gauges();
}

void HttpServer::Impl::want(Conn& c, uint32_t events) {
  if (c.dead || c.events == events) return;
  epoll_event ev = {};
  ev.events = events;
  ev.data.u64 = c.id;
  epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, c.fd, &ev);
  c.events = events;
}

void HttpServer::Impl::close_conn(Conn& c, const char* reason) {
  if (c.dead) return;
  if (reason) count_closed(reason);
  if (c.ssl && c.phase != Phase::kHandshake && c.phase != Phase::kSniff) {
    // One close_notify, without waiting for the peer's.
    SSL_shutdown(c.ssl);
    ERR_clear_error();
  }
  epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, c.fd, nullptr);
  held_bytes_ -= c.held;
  c.held = 0;
  c.dead = true;
}

void HttpServer::Impl::erase_dead() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->second->dead) it = conns_.erase(it);
    else ++it;
  }
  update_gauges();
}

void HttpServer::Impl::sweep(Clock::time_point now) {
  const bool pressure = conns_.size() > options_.max_connections / 2;
  const auto request_timeout = pressure ? std::min(options_.request_timeout, options_.request_timeout_under_pressure)
                                        : options_.request_timeout;
  for (auto& [id, c] : conns_) {
    const auto age = now - c->phase_start;
    switch (c->phase) {
      case Phase::kSniff:
      case Phase::kHandshake:
      case Phase::kRead:
        if (age > request_timeout) close_conn(*c, "timeout");
        break;
      case Phase::kWrite:
        if (age > options_.write_timeout) close_conn(*c, "write_timeout");
        break;
      case Phase::kWait:
        break;
    }
  }
  erase_dead();
  if (listening_paused_) {
    epoll_event ev = {};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenerTag;
    epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, listen_fd_.get(), &ev);
    listening_paused_ = false;
  }
}

void HttpServer::Impl::check_reload() {
  const std::string& path = options_.web_config_path;
  if (path.empty()) return;
  std::vector<std::string> files =
      current_->config ? web_config_files(*current_->config) : std::vector<std::string>{path};
  if (current_->config && current_->config->file != path) files[0] = path;
  std::vector<FileStamp> stamps = stamp_files(files);
  if (stamps == current_->stamps || stamps == failed_stamps_) return;
  auto fail = [&](const std::string& why) {
    LW_LOG_ERROR("web config %s not reloaded, the running one stays in force: %s", path.c_str(), why.c_str());
    failed_stamps_ = stamps;
    std::lock_guard lock(stats_mu_);
    ++stats_.web_config_reload_failures;
    stats_.web_config_last_reload_successful = false;
  };
  std::vector<ConfigError> errors;
  Result<WebConfig> loaded = load_web_config(path, &errors);
  if (!loaded) {
    for (const ConfigError& e : errors) LW_LOG_ERROR("%s", format_error(e).c_str());
    return fail(loaded.error().message);
  }
  auto config = std::make_shared<const WebConfig>(std::move(*loaded));
  // A listener serves one protocol: an edit that removed TLS must not
  // quietly expose the API in plain text (nor the reverse break clients).
  if (config->tls.has_value() != (current_->ssl_ctx != nullptr))
    return fail(std::string("turning TLS ") + (config->tls ? "on" : "off") + " needs a restart");
  Result<std::shared_ptr<WebState>> state = WebState::build(config, current_.get());
  if (!state) return fail(state.error().message);
  current_ = std::move(*state);
  failed_stamps_.clear();
  LW_LOG_INFO("web config %s reloaded: %s, %s%s", path.c_str(),
              config->tls ? client_auth_name(config->tls->client_auth) : "plain HTTP",
              config->users.empty() ? "no basic auth" : "basic auth",
              config->rate_limit.interval_ms ? ", rate limited" : "");
  std::lock_guard lock(stats_mu_);
  ++stats_.web_config_reloads;
  stats_.web_config_last_reload_successful = true;
}

HttpServer::Impl::Io HttpServer::Impl::read_available(Conn& c, uint32_t* want_events) {
  // One byte past the head limit at most: enough for the parser to tell a
  // too-large head (431); pipelined requests wait in the kernel.
  const size_t cap = options_.limits.max_head_bytes + 1;
  char buf[kReadChunk];
  *want_events = EPOLLIN;
  while (c.in.size() < cap) {
    const size_t room = std::min(sizeof(buf), cap - c.in.size());
    if (c.ssl) {
      ERR_clear_error();
      int n = SSL_read(c.ssl, buf, static_cast<int>(room));
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        continue;
      }
      int e = SSL_get_error(c.ssl, n);
      if (e == SSL_ERROR_WANT_READ) return Io::kBlocked;
      if (e == SSL_ERROR_WANT_WRITE) {
        *want_events = EPOLLOUT;
        return Io::kBlocked;
      }
      if (e == SSL_ERROR_ZERO_RETURN) return Io::kEof;
      ERR_clear_error();
      return e == SSL_ERROR_SYSCALL && n == 0 ? Io::kEof : Io::kError;
    }
    ssize_t n = recv(c.fd, buf, room, 0);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return Io::kEof;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Io::kBlocked;
    if (errno == EINTR) continue;
    return Io::kError;
  }
  return Io::kMore;
}

HttpServer::Impl::Io HttpServer::Impl::write_pending(Conn& c, uint32_t* want_events) {
  *want_events = EPOLLOUT;
  while (c.out_off < c.out.size()) {
    const size_t len = c.out.size() - c.out_off;
    if (c.ssl) {
      ERR_clear_error();
      int n = SSL_write(c.ssl, c.out.data() + c.out_off, static_cast<int>(std::min<size_t>(len, 1 << 20)));
      if (n > 0) {
        c.out_off += static_cast<size_t>(n);
        continue;
      }
      int e = SSL_get_error(c.ssl, n);
      if (e == SSL_ERROR_WANT_WRITE) return Io::kBlocked;
      if (e == SSL_ERROR_WANT_READ) {
        *want_events = EPOLLIN;
        return Io::kBlocked;
      }
      ERR_clear_error();
      return Io::kError;
    }
    ssize_t n = send(c.fd, c.out.data() + c.out_off, len, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Io::kBlocked;
    if (n < 0 && errno == EINTR) continue;
    return Io::kError;
  }
  return Io::kMore;
}

void HttpServer::Impl::drive(Conn& c) {
  while (!c.dead) {
    switch (c.phase) {
      case Phase::kSniff: {
        unsigned char first = 0;
        ssize_t n = recv(c.fd, &first, 1, MSG_PEEK);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return want(c, EPOLLIN);
        if (n <= 0) return close_conn(c, nullptr);
        if (first == 0x16) {  // a TLS handshake record
          c.ssl = SSL_new(c.web->ssl_ctx.get());
          if (!c.ssl || SSL_set_fd(c.ssl, c.fd) != 1) return close_conn(c, "tls_handshake");
          SSL_set_accept_state(c.ssl);
          c.phase = Phase::kHandshake;
        } else {
          c.plain_on_tls = true;
          c.phase = Phase::kRead;
        }
        break;
      }
      case Phase::kHandshake: {
        ERR_clear_error();
        int r = SSL_do_handshake(c.ssl);
        if (r == 1) {
          c.phase = Phase::kRead;
          break;
        }
        int e = SSL_get_error(c.ssl, r);
        if (e == SSL_ERROR_WANT_READ) return want(c, EPOLLIN);
        if (e == SSL_ERROR_WANT_WRITE) return want(c, EPOLLOUT);
        ERR_clear_error();
        return close_conn(c, "tls_handshake");
      }
      case Phase::kRead: {
        uint32_t next = EPOLLIN;
        if (!c.peer_closed) {
          Io io = read_available(c, &next);
          if (io == Io::kError) return close_conn(c, nullptr);
          if (io == Io::kEof) c.peer_closed = true;
        }
        if (c.in.empty()) return c.peer_closed ? close_conn(c, nullptr) : want(c, next);
        HttpRequest request;
        HeadParse p = parse_request_head(c.in, options_.limits, &request, c.scanned);
        if (p.state == HeadParse::State::kIncomplete) {
          if (c.peer_closed) return close_conn(c, nullptr);
          c.scanned = c.in.size();
          return want(c, next);
        }
        if (p.state == HeadParse::State::kError) {
          count_refused(p.status == 431 ? "head_too_large" : "malformed");
          c.head_only = false;
          respond(c, json_error(p.status, p.error), true);
          break;
        }
        c.in.erase(0, p.consumed);
        c.scanned = 0;
        {
          std::lock_guard lock(stats_mu_);
          ++stats_.requests;
        }
        dispatch(c, std::move(request));
        break;
      }
      case Phase::kWait:
        return want(c, 0);
      case Phase::kWrite: {
        uint32_t next = EPOLLOUT;
        Io io = write_pending(c, &next);
        if (io == Io::kError) return close_conn(c, nullptr);
        if (io == Io::kBlocked) return want(c, next);
        held_bytes_ -= c.held;
        c.held = 0;
        std::string().swap(c.out);
        c.out_off = 0;
        if (c.close_after) return close_conn(c, nullptr);
        // The next request (perhaps already read: pipelining) has the whole
        // request_timeout again.
        c.phase = Phase::kRead;
        c.phase_start = Clock::now();
        break;
      }
    }
  }
}

HttpServer::HttpServer(SnapshotSource source, size_t max_series)
    : HttpServer(std::move(source), max_series, nullptr) {}

HttpServer::HttpServer(SnapshotSource source, size_t max_series, std::shared_ptr<const WebConfig> web) {
  HttpServerOptions options;
  options.max_series = max_series;
  options.web = std::move(web);
  impl_ = std::make_unique<Impl>(std::move(source), std::move(options));
}

HttpServer::HttpServer(SnapshotSource source, HttpServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(source), std::move(options))) {}

HttpServer::~HttpServer() = default;

Result<int> HttpServer::start(const std::string& host, int port) { return impl_->start(host, port); }
void HttpServer::stop() { impl_->stop(); }
HttpFrontStats HttpServer::stats() const { return impl_->stats(); }

}  // namespace lw
