// SPDX-License-Identifier: Apache-2.0
#include "exporter/http_web_state.h"

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

RateLimiter::RateLimiter(const WebRateLimit& config)
    : config_(config), tokens_(static_cast<double>(config.burst)), last_(std::chrono::steady_clock::now()) {}

bool RateLimiter::allow(std::chrono::steady_clock::time_point now) {
  if (config_.interval_ms == 0) return true;
  const double elapsed_ms = std::chrono::duration<double, std::milli>(now - last_).count();
  last_ = now;
  tokens_ = std::min(static_cast<double>(config_.burst),
                     tokens_ + elapsed_ms / static_cast<double>(config_.interval_ms));
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

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
