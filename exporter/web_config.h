/* SPDX-License-Identifier: Apache-2.0 */
// TLS and basic auth for the HTTP server, configured with the file format of
// Prometheus' exporter-toolkit (--web.config.file), so that the same file and
// `promtool check web-config` work for leakwatch and for Go exporters:
//
//   tls_server_config:
//     cert_file: server.crt        # relative paths: to this file's directory
//     key_file: server.key
//     min_version: TLS12           # TLS12 (default) or TLS13
//   http_server_config:
//     headers: {X-Content-Type-Options: nosniff}
//   basic_auth_users:
//     alice: $2y$10$...            # bcrypt hashes only
//
// Supported is a subset: features leakwatch does not implement (client
// certificates, cipher suite and curve selection, TLS below 1.2, inline
// certificates) are errors, never silently ignored, because an operator who
// writes them expects them enforced. docs/api.md ("Security") is the
// reference.
//
// Errors are collected like the main config's (every problem, each with
// file:line:column) and returned, never thrown.
//
// Thread-safety: a WebConfig is plain immutable data once loaded.
// BasicAuth::check is safe to call from any number of threads.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/result.h"

// OpenSSL's SSL_CTX, declared here so that this header does not pull in
// <openssl/ssl.h>.
struct ssl_ctx_st;

namespace lw {

struct WebTlsConfig {
  std::string cert_file;     // absolute: relative paths are resolved at load
  std::string key_file;      // absolute; PEM, unencrypted
  int min_version = 0x0303;  // OpenSSL protocol version: TLS1_2_VERSION or TLS1_3_VERSION
  int max_version = 0;       // 0: the highest OpenSSL supports
  bool prefer_server_cipher_suites = true;
};

struct WebConfig {
  std::string file;                 // as given to load_web_config, for messages
  std::optional<WebTlsConfig> tls;  // nullopt: plain HTTP
  // Added to every response, including 401s (exporter-toolkit does the same).
  std::vector<std::pair<std::string, std::string>> headers;
  std::map<std::string, std::string> users;  // user -> bcrypt hash; empty: no auth
};

// Parses `text` as the web config at `path` (which labels errors and anchors
// relative certificate paths) and checks that the certificate and key load.
// Errors (code EINVAL) as parse_config's in core/config.h.
Result<WebConfig> parse_web_config(std::string_view text, const std::string& path,
                                   std::vector<ConfigError>* errors);

// Reads `path` (a regular file of at most kMaxConfigBytes) and parses it.
Result<WebConfig> load_web_config(const std::string& path, std::vector<ConfigError>* errors);

// Configures `ctx` (a server context) from `tls`: protocol versions,
// certificate chain and key. Used at load to validate and by the server.
Status configure_tls_context(const WebTlsConfig& tls, ssl_ctx_st& ctx);

// Whether `hash` is a bcrypt hash crypt(3) verifies: $2a$, $2b$ or $2y$, a
// cost of 04 to 31, 53 characters of salt and hash.
bool is_bcrypt_hash(std::string_view hash);

// Checks HTTP Basic credentials against bcrypt hashes.
//
// bcrypt is slow by design (tens of milliseconds at cost 10), so successful
// checks are remembered for `ttl`, as exporter-toolkit does, so that a
// scraper pays it once per `ttl` and not per scrape. The cache is keyed by a
// SHA-256 of (user, stored hash, password): no password is kept in memory,
// and it holds at most `capacity` entries. Failures are not cached: each one
// costs a bcrypt, and bcrypt runs one at a time so that a flood of bad
// passwords costs at most one core.
class BasicAuth {
 public:
  static constexpr std::chrono::seconds kDefaultTtl{300};
  static constexpr size_t kDefaultCapacity = 1024;

  explicit BasicAuth(std::map<std::string, std::string> users,
                     std::chrono::steady_clock::duration ttl = kDefaultTtl,
                     size_t capacity = kDefaultCapacity);

  // Whether `authorization` (an Authorization header value) carries Basic
  // credentials of a configured user with the right password.
  bool check(std::string_view authorization);

  size_t cached_entries() const;

  BasicAuth(const BasicAuth&) = delete;
  BasicAuth& operator=(const BasicAuth&) = delete;

 private:
  bool verify_uncached(const std::string& hash, const std::string& password);

  const std::map<std::string, std::string> users_;
  const std::chrono::steady_clock::duration ttl_;
  const size_t capacity_;
  mutable std::mutex cache_mutex_;
  // SHA-256 key -> expiry.
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> cache_;
  std::mutex bcrypt_mutex_;
};

}  // namespace lw
