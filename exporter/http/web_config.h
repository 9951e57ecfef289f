/* SPDX-License-Identifier: Apache-2.0 */
// TLS, client certificates, basic auth, response headers and a rate limit
// for the HTTP server, configured with the file format of Prometheus'
// exporter-toolkit (--web.config.file), so that the same file and `promtool
// check web-config` work for leakwatch and for Go exporters:
//
//   tls_server_config:
//     cert_file: server.crt        # relative paths: to this file's directory
//     key_file: server.key
//     min_version: TLS12           # TLS12 (default) or TLS13
//     client_auth_type: RequireAndVerifyClientCert   # mTLS
//     client_ca_file: ca.crt
//   http_server_config:
//     headers: {X-Content-Type-Options: nosniff}
//   basic_auth_users:
//     alice: $2y$10$...            # bcrypt hashes only
//   rate_limit: {interval: 100ms, burst: 20}
//
// Features leakwatch does not implement (cipher suite and curve selection,
// TLS below 1.2, inline certificates) are errors, never silently ignored,
// because an operator who writes them expects them enforced. docs/api.md
// ("Security") is the reference. The server re-reads the file, and the
// files it names, when they change (exporter/http/http_server.h).
//
// Errors are collected like the main config's (every problem, each with
// file:line:column) and returned, never thrown.
//
// Thread-safety: a WebConfig is plain immutable data once loaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/config/config.h"
#include "core/platform/result.h"
#include "exporter/http/basic_auth.h"
#include "exporter/http/tls_context.h"

namespace lw {

// exporter-toolkit's rate_limit: a token bucket of `burst` requests,
// refilled with one token every `interval`; over it the answer is 429.
struct WebRateLimit {
  uint64_t interval_ms = 0;  // 0: no limit
  uint64_t burst = 0;
  bool operator==(const WebRateLimit&) const = default;
};

struct WebConfig {
  std::string file;                 // as given to load_web_config, for messages
  std::optional<WebTlsConfig> tls;  // nullopt: plain HTTP
  // Added to every response, including 401s (exporter-toolkit does the same).
  std::vector<std::pair<std::string, std::string>> headers;
  std::map<std::string, std::string> users;  // user -> bcrypt hash; empty: no auth
  WebRateLimit rate_limit;
};

// Parses `text` as the web config at `path` (which labels errors and anchors
// relative certificate paths) and checks that the certificates and key load.
// Errors (code EINVAL) as parse_config's in core/config/config.h.
Result<WebConfig> parse_web_config(std::string_view text, const std::string& path,
                                   std::vector<ConfigError>* errors);

// Reads `path` (a regular file of at most kMaxConfigBytes) and parses it.
Result<WebConfig> load_web_config(const std::string& path, std::vector<ConfigError>* errors);

// The files a loaded config depends on: itself, then the certificate, key
// and client CA files. A change to any of them is a reason to reload.
std::vector<std::string> web_config_files(const WebConfig& config);

}  // namespace lw
