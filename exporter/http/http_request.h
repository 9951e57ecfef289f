// SPDX-License-Identifier: Apache-2.0
// HTTP/1.1 request heads (RFC 9112), parsed from untrusted bytes with hard
// limits, and responses serialized for the wire. Pure code: no sockets, so
// the parser is unit-tested and fuzzed on its own.
//
// leakwatch serves GET and HEAD only and no endpoint takes a body, so the
// parser reads the head alone and reports whether a body was announced;
// the server then refuses the request (413) without reading the body.
//
// Thread-safety: free functions are reentrant; objects are plain data.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lw {

struct HttpLimits {
  size_t max_head_bytes = 16 * 1024;  // request line and every header, with their CRLFs
  size_t max_headers = 64;
  size_t max_target_bytes = 4096;  // the request-target (path and query)
};

struct HttpRequest {
  std::string method;  // as sent (case-sensitive: "get" is not GET)
  std::string target;  // the request-target as sent
  std::string path;    // percent-decoded, from the target (absolute-form reduced to its path)
  std::vector<std::pair<std::string, std::string>> query;  // decoded, in order
  int minor_version = 1;                                    // HTTP/1.<minor>: 0 or 1
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  bool keep_alive = true;     // after the response (Connection, version)
  bool has_body = false;      // Content-Length > 0 or any Transfer-Encoding
  bool head_only = false;     // HEAD: the response carries no body

  // The first header of that (lower-case) name.
  std::optional<std::string_view> header(std::string_view lower_name) const;
  // The first query parameter of that name.
  std::optional<std::string_view> param(std::string_view name) const;
};

// What parse_request_head found in the bytes so far.
struct HeadParse {
  enum class State { kIncomplete, kComplete, kError } state = State::kIncomplete;
  size_t consumed = 0;   // kComplete: bytes of the head (the request starts after them)
  int status = 0;        // kError: the status to answer (400, 414, 431, 501, 505)
  std::string error;     // kError: why, for the JSON body (no request bytes quoted)
};

// Parses the head at the start of `bytes`. kIncomplete while no blank line
// has arrived and the limits still allow one; kError once they do not
// (431 as soon as max_head_bytes pass without the head's end, however the
// bytes trickle in). Bare LF line ends are accepted (RFC 9112 2.2), bare CR
// and obsolete line folding are not. A request without Host (HTTP/1.1),
// with a malformed or conflicting Content-Length, or with an unknown
// Transfer-Encoding is an error. `scan_from` lets a caller resume the
// search for the head's end (pass the previous call's bytes.size()).
HeadParse parse_request_head(std::string_view bytes, const HttpLimits& limits, HttpRequest* out,
                             size_t scan_from = 0);

// Decodes %XX escapes (and '+' as space when `plus_is_space`); nullopt on a
// malformed escape or a decoded NUL.
std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space);

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
  std::string body;
  bool close = false;  // close the connection after this response
};

// A JSON error response: {"error": message} (and `extra` members).
HttpResponse json_error(int status, std::string_view message);

// The reason phrase of a status code ("Not Found").
const char* status_reason(int status);

// Status line, headers (Content-Type, Content-Length, Connection, the
// response's own and `common` ones), blank line, and the body unless
// `head_only`.
std::string serialize_response(const HttpResponse& response, bool head_only, bool keep_alive,
                               const std::vector<std::pair<std::string, std::string>>& common);

}  // namespace lw
