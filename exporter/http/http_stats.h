// SPDX-License-Identifier: Apache-2.0
// The HTTP front's own counters (exporter/http/http_server.h), exported on
// /metrics as leakwatch_http_* (docs/metrics.md).
// Thread-safety: plain data; the server hands out copies.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace lw {

struct HttpFrontStats {
  uint64_t max_connections = 0;
  uint64_t connections_open = 0;      // now
  uint64_t connections_accepted = 0;  // since start
  // Connections closed by the front, by reason: "cap" (evicted, or refused,
  // at max_connections), "timeout" (no complete request head in time),
  // "write_timeout", "tls_handshake" (a failed handshake).
  std::map<std::string, uint64_t> connections_closed;
  uint64_t requests = 0;  // complete request heads
  // Requests answered with an error before any route ran, by reason:
  // "malformed" (400/414/505), "head_too_large" (431), "body" (413),
  // "method" (405), "unauthorized" (401), "rate_limited" (429),
  // "overloaded" (503: queues or response memory full), "plain_on_tls".
  std::map<std::string, uint64_t> refused;
  uint64_t response_bytes_in_flight = 0;  // held for clients now
  uint64_t response_bytes_limit = 0;
  uint64_t web_config_reloads = 0;          // successful re-reads
  uint64_t web_config_reload_failures = 0;  // rejected re-reads (old config kept)
  bool web_config_last_reload_successful = true;
};

}  // namespace lw
