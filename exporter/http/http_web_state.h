// SPDX-License-Identifier: Apache-2.0
// One loaded web config as the HTTP front uses it: the TLS context built
// from it, the basic-auth checker, the rate limiter, and the stamps of the
// files it came from (to notice a change). Replaced whole on a reload;
// connections and queued jobs keep the one they started with.
// Thread-safety: immutable after build(), except RateLimiter (the front's
// epoll thread only) and BasicAuth (thread-safe).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "core/platform/result.h"
#include "core/platform/token_bucket.h"
#include "exporter/http/web_config.h"

struct ssl_ctx_st;

namespace lw {

struct FileStamp {
  std::string path;
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};
std::vector<FileStamp> stamp_files(const std::vector<std::string>& paths);

// exporter-toolkit's rate_limit: a token bucket holding up to `burst`
// tokens, one added every `interval`; each request takes one.
class RateLimiter {
 public:
  explicit RateLimiter(const WebRateLimit& config);
  bool allow(std::chrono::steady_clock::time_point now);
  const WebRateLimit& config() const { return config_; }

 private:
  WebRateLimit config_;
  TokenBucket bucket_;
};

struct SslCtxFree {
  void operator()(ssl_ctx_st* ctx) const;
};

struct WebState {
  std::shared_ptr<const WebConfig> config;  // null: no web config
  std::unique_ptr<ssl_ctx_st, SslCtxFree> ssl_ctx;  // null: plain HTTP
  std::shared_ptr<BasicAuth> auth;                  // null: no authentication
  std::shared_ptr<RateLimiter> limiter;             // null: no limit
  std::vector<std::pair<std::string, std::string>> headers;  // on every response
  std::vector<FileStamp> stamps;                    // of web_config_files(config)

  // Builds the state for `config` (null: plain, nothing). From `previous`,
  // an unchanged user list keeps its credential cache and an unchanged
  // rate limit its bucket (a reload must not hand out a fresh burst).
  static Result<std::shared_ptr<WebState>> build(std::shared_ptr<const WebConfig> config,
                                                 const WebState* previous);
};

}  // namespace lw
