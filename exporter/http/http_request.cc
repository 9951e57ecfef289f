// SPDX-License-Identifier: Apache-2.0
#include "exporter/http/http_request.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <nlohmann/json.hpp>

namespace lw {
namespace {

// RFC 9110 5.6.2 token characters.
bool is_tchar(unsigned char c) {
  if (std::isalnum(c)) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
  }
  return false;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); });
}

// Field values: visible characters, obs-text, SP and HTAB; no other control.
bool is_field_value(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char ch) {
    unsigned char c = static_cast<unsigned char>(ch);
    return c == '\t' || (c >= 0x20 && c != 0x7f);
  });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

HeadParse error(int status, std::string message) {
  HeadParse p;
  p.state = HeadParse::State::kError;
  p.status = status;
  p.error = std::move(message);
  return p;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Splits a comma-separated header value into lower-cased, trimmed tokens.
std::vector<std::string> list_tokens(std::string_view value) {
  std::vector<std::string> out;
  while (!value.empty()) {
    size_t comma = value.find(',');
    std::string_view item = trim(value.substr(0, comma));
    if (!item.empty()) out.push_back(lower(item));
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return out;
}

// Where the head ends (the index just past its blank line), or npos.
size_t find_head_end(std::string_view b, size_t from) {
  for (size_t i = from; i < b.size(); ++i) {
    if (b[i] != '\n') continue;
    if (i + 1 < b.size() && b[i + 1] == '\n') return i + 2;
    if (i + 2 < b.size() && b[i + 1] == '\r' && b[i + 2] == '\n') return i + 3;
  }
  return std::string_view::npos;
}

}  // namespace

std::optional<std::string_view> HttpRequest::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers)
    if (name == lower_name) return std::string_view(value);
  return std::nullopt;
}

std::optional<std::string_view> HttpRequest::param(std::string_view name) const {
  for (const auto& [key, value] : query)
    if (key == name) return std::string_view(value);
  return std::nullopt;
}

std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      int hi = hex_value(s[i + 1]);
      int lo = hex_value(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      c = ' ';
    }
    if (c == '\0') return std::nullopt;
    out += c;
  }
  return out;
}

namespace {

// The steps of parse_request_head, in order: each returns where parsing
// stops (an error; for locate_head also "incomplete"), or nullopt to go on.
using Stop = std::optional<HeadParse>;

// Finds the head in `bytes`: [*start, *end) from the request line to just
// past the blank line. A HeadParse while there is none yet (kIncomplete) or
// the limits say there will be none (kError).
Stop locate_head(std::string_view bytes, const HttpLimits& limits, size_t scan_from, size_t* start,
                    size_t* end) {
  // Up to one blank line may precede the request line (RFC 9112 2.2).
  *start = 0;
  if (bytes.substr(0, 2) == "\r\n") *start = 2;
  else if (bytes.substr(0, 1) == "\n") *start = 1;
  // Garbage is refused as soon as it shows: a request starts with a
  // method, and a TLS ClientHello on a plain port (0x16) does not.
  if (bytes.size() > *start && !is_tchar(static_cast<unsigned char>(bytes[*start])))
    return error(400, "malformed request line");
  *end = find_head_end(bytes, std::max(*start, scan_from >= 2 ? scan_from - 2 : 0));
  if (*end == std::string_view::npos) {
    if (bytes.size() > limits.max_head_bytes)
      return error(431, "request head larger than " + std::to_string(limits.max_head_bytes) + " bytes");
    size_t first_line = bytes.find('\n', *start);
    if (first_line == std::string_view::npos && bytes.size() - *start > limits.max_target_bytes + 64)
      return error(414, "request-target longer than " + std::to_string(limits.max_target_bytes) + " bytes");
    return HeadParse{};
  }
  if (*end > limits.max_head_bytes)
    return error(431, "request head larger than " + std::to_string(limits.max_head_bytes) + " bytes");
  return std::nullopt;
}

// The head's lines without their line ends and without the blank last one.
Stop split_lines(std::string_view head, std::vector<std::string_view>* lines) {
  while (!head.empty()) {
    size_t nl = head.find('\n');
    std::string_view line = head.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find('\r') != std::string_view::npos) return error(400, "bare CR in the request head");
    lines->push_back(line);
    head.remove_prefix(nl + 1);
  }
  // The last line is the blank one.
  if (lines->empty() || !lines->back().empty()) return error(400, "malformed request head");
  lines->pop_back();
  if (lines->empty()) return error(400, "malformed request line");
  return std::nullopt;
}

// request-line = method SP request-target SP HTTP-version
Stop parse_request_line(std::string_view rl, const HttpLimits& limits, HttpRequest* req) {
  size_t sp1 = rl.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos)
    return error(400, "malformed request line");
  std::string_view method = rl.substr(0, sp1);
  std::string_view target = rl.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = rl.substr(sp2 + 1);
  if (!is_token(method)) return error(400, "malformed method");
  if (target.size() > limits.max_target_bytes)
    return error(414, "request-target longer than " + std::to_string(limits.max_target_bytes) + " bytes");
  if (version == "HTTP/1.1") req->minor_version = 1;
  else if (version == "HTTP/1.0") req->minor_version = 0;
  else if (version.size() == 8 && version.substr(0, 5) == "HTTP/" &&
           std::isdigit(static_cast<unsigned char>(version[5])) && version[6] == '.' &&
           std::isdigit(static_cast<unsigned char>(version[7])))
    return error(505, "only HTTP/1.0 and HTTP/1.1 are served");
  else
    return error(400, "malformed HTTP version");
  req->method = std::string(method);
  req->target = std::string(target);
  req->head_only = method == "HEAD";
  return std::nullopt;
}

// The header fields: the lines after the request line.
Stop parse_header_fields(const std::vector<std::string_view>& lines, const HttpLimits& limits,
                            HttpRequest* req) {
  if (lines.size() - 1 > limits.max_headers)
    return error(431, "more than " + std::to_string(limits.max_headers) + " header fields");
  for (size_t i = 1; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    if (line.front() == ' ' || line.front() == '\t')
      return error(400, "obsolete line folding in a header field");
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon)))
      return error(400, "malformed header field");
    std::string_view value = trim(line.substr(colon + 1));
    if (!is_field_value(value)) return error(400, "control character in a header field");
    req->headers.emplace_back(lower(line.substr(0, colon)), std::string(value));
  }
  return std::nullopt;
}

// Framing: a body is announced by Content-Length > 0 or any
// Transfer-Encoding; conflicting or malformed lengths are errors (they are
// how requests are smuggled past proxies). Then whether the connection is
// kept after the response.
Stop parse_framing(HttpRequest* req) {
  std::optional<uint64_t> length;
  bool transfer_encoding = false;
  int hosts = 0;
  for (const auto& [name, value] : req->headers) {
    if (name == "host") ++hosts;
    if (name == "transfer-encoding") transfer_encoding = true;
    if (name != "content-length") continue;
    for (const std::string& item : list_tokens(value)) {
      uint64_t n = 0;
      auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), n);
      if (ec != std::errc() || p != item.data() + item.size())
        return error(400, "malformed Content-Length");
      if (length && *length != n) return error(400, "conflicting Content-Length values");
      length = n;
    }
  }
  if (transfer_encoding && length) return error(400, "both Transfer-Encoding and Content-Length");
  if (req->minor_version == 1 && hosts != 1)
    return error(400, hosts == 0 ? "missing Host header" : "more than one Host header");
  req->has_body = transfer_encoding || (length && *length > 0);

  req->keep_alive = req->minor_version == 1;
  for (const auto& [name, value] : req->headers) {
    if (name != "connection") continue;
    for (const std::string& token : list_tokens(value)) {
      if (token == "close") req->keep_alive = false;
      if (token == "keep-alive" && req->minor_version == 0) req->keep_alive = true;
    }
  }
  // A body we will not read leaves the connection unusable.
  if (req->has_body) req->keep_alive = false;
  return std::nullopt;
}

// The query's key=value pairs, percent-decoded ('+' as space), in order.
Stop parse_query(std::string_view query, HttpRequest* req) {
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view item = query.substr(0, amp);
    if (!item.empty()) {
      size_t eq = item.find('=');
      auto key = percent_decode(item.substr(0, eq), true);
      auto value =
          percent_decode(eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1), true);
      if (!key || !value) return error(400, "malformed percent-encoding in the query");
      req->query.emplace_back(std::move(*key), std::move(*value));
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

// request-target: origin-form, or absolute-form reduced to its path.
Stop parse_target(std::string_view t, HttpRequest* req) {
  if (t.substr(0, 7) == "http://" || t.substr(0, 8) == "https://") {
    size_t authority = t.find("//") + 2;
    size_t path_start = t.find_first_of("/?", authority);
    t = path_start == std::string_view::npos ? std::string_view("/") : t.substr(path_start);
    if (!t.empty() && t.front() == '?') return error(400, "malformed request-target");
  }
  if (t.empty() || t.front() != '/') return error(400, "request-target must be a path");
  if (t.find('#') != std::string_view::npos) return error(400, "fragment in the request-target");
  size_t q = t.find('?');
  std::optional<std::string> path = percent_decode(t.substr(0, q), false);
  if (!path) return error(400, "malformed percent-encoding in the path");
  req->path = std::move(*path);
  if (q != std::string_view::npos) return parse_query(t.substr(q + 1), req);
  return std::nullopt;
}

}  // namespace

HeadParse parse_request_head(std::string_view bytes, const HttpLimits& limits, HttpRequest* out,
                             size_t scan_from) {
  size_t start = 0, end = 0;
  if (Stop r = locate_head(bytes, limits, scan_from, &start, &end)) return std::move(*r);
  HttpRequest req;
  std::vector<std::string_view> lines;
  if (Stop r = split_lines(bytes.substr(start, end - start), &lines)) return std::move(*r);
  if (Stop r = parse_request_line(lines[0], limits, &req)) return std::move(*r);
  if (Stop r = parse_header_fields(lines, limits, &req)) return std::move(*r);
  if (Stop r = parse_framing(&req)) return std::move(*r);
  // req.target is the request line's target, as sent.
  if (Stop r = parse_target(req.target, &req)) return std::move(*r);

  HeadParse done;
  done.state = HeadParse::State::kComplete;
  done.consumed = end;
  *out = std::move(req);
  return done;
}

HttpResponse json_error(int status, std::string_view message) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = nlohmann::json{{"error", std::string(message)}}.dump(-1, ' ', false,
                                                               nlohmann::json::error_handler_t::replace);
  r.body += "\n";
  return r;
}

const char* status_reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
  }
  return "Unknown";
}

std::string serialize_response(const HttpResponse& r, bool head_only, bool keep_alive,
                               const std::vector<std::pair<std::string, std::string>>& common) {
  std::string out;
  out.reserve(256 + (head_only ? 0 : r.body.size()));
  out += "HTTP/1.1 ";
  out += std::to_string(r.status);
  out += ' ';
  out += status_reason(r.status);
  out += "\r\nContent-Type: ";
  out += r.content_type;
  out += "\r\nContent-Length: ";
  out += std::to_string(r.body.size());
  out += keep_alive && !r.close ? "\r\nConnection: keep-alive" : "\r\nConnection: close";
  out += "\r\nCache-Control: no-store";
  for (const auto* list : {&r.headers, &common}) {
    for (const auto& [name, value] : *list) {
      out += "\r\n";
      out += name;
      out += ": ";
      out += value;
    }
  }
  out += "\r\n\r\n";
  if (!head_only) out += r.body;
  return out;
}

}  // namespace lw
