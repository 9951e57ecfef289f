// SPDX-License-Identifier: Apache-2.0
#include "exporter/http/http_web_state.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/stat.h>

#include <algorithm>

namespace lw {

std::vector<FileStamp> stamp_files(const std::vector<std::string>& paths) {
  std::vector<FileStamp> out;
  for (const std::string& p : paths) {
    FileStamp s;
    s.path = p;
    struct stat st;
    if (stat(p.c_str(), &st) == 0) {
      s.exists = true;
      s.dev = st.st_dev;
      s.ino = st.st_ino;
      s.size = st.st_size;
      s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    }
    out.push_back(std::move(s));
  }
  return out;
}

namespace {
uint64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}
}  // namespace

RateLimiter::RateLimiter(const WebRateLimit& config)
    : config_(config),
      bucket_(config.interval_ms * 1000000u, config.burst, steady_ns(std::chrono::steady_clock::now())) {}

bool RateLimiter::allow(std::chrono::steady_clock::time_point now) { return bucket_.take(steady_ns(now)); }

void SslCtxFree::operator()(ssl_ctx_st* ctx) const { SSL_CTX_free(ctx); }

Result<std::shared_ptr<WebState>> WebState::build(std::shared_ptr<const WebConfig> config,
                                                  const WebState* previous) {
  auto state = std::make_shared<WebState>();
  state->config = config;
  if (!config) return state;
  state->stamps = stamp_files(web_config_files(*config));
  state->headers = config->headers;
  if (config->tls) {
    state->ssl_ctx.reset(SSL_CTX_new(TLS_server_method()));
    if (!state->ssl_ctx) return Error{ENOMEM, "cannot create a TLS context"};
    // The context keeps a pointer to config->tls, which `state` owns.
    if (Status st = configure_tls_context(*config->tls, *state->ssl_ctx); !st) {
      ERR_clear_error();
      return Error{EINVAL, "TLS setup from " + config->file + " failed: " + st.error().message};
    }
  }
  if (!config->users.empty()) {
    if (previous && previous->auth && previous->auth->users() == config->users)
      state->auth = previous->auth;
    else
      state->auth = std::make_shared<BasicAuth>(config->users);
  }
  if (config->rate_limit.interval_ms != 0) {
    if (previous && previous->limiter && previous->limiter->config() == config->rate_limit)
      state->limiter = previous->limiter;
    else
      state->limiter = std::make_shared<RateLimiter>(config->rate_limit);
  }
  return state;
}

}  // namespace lw
