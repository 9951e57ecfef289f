// SPDX-License-Identifier: Apache-2.0
// The HTTP/1.1 request-head parser (exporter/http/http_request.h): limits that
// hold however bytes trickle in, framing errors that smuggle requests, and
// what a route sees of the target.
#include "exporter/http/http_request.h"

#include <gtest/gtest.h>

#include <string>

namespace lw {
namespace {

using State = HeadParse::State;

HeadParse parse(const std::string& bytes, HttpRequest* out = nullptr, HttpLimits limits = {}) {
  HttpRequest ignored;
  return parse_request_head(bytes, limits, out ? out : &ignored);
}

TEST(HttpRequest, ParsesAGetWithQuery) {
  HttpRequest r;
  HeadParse p = parse("GET /debug/pprof/heap?pid=42&start_time=9&x=a%20b+c HTTP/1.1\r\nHost: h\r\n"
                      "Authorization: Basic abc\r\n\r\nGET /next",
                      &r);
  ASSERT_EQ(p.state, State::kComplete) << p.error;
  EXPECT_EQ(p.consumed, std::string("GET /debug/pprof/heap?pid=42&start_time=9&x=a%20b+c HTTP/1.1\r\nHost: h\r\n"
                                    "Authorization: Basic abc\r\n\r\n").size());
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.path, "/debug/pprof/heap");
  EXPECT_EQ(r.param("pid"), "42");
  EXPECT_EQ(r.param("x"), "a b c");
  EXPECT_EQ(r.header("authorization"), "Basic abc");
  EXPECT_TRUE(r.keep_alive);
  EXPECT_FALSE(r.has_body);
  EXPECT_FALSE(r.head_only);
}

TEST(HttpRequest, IncompleteUntilTheBlankLine) {
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: h\r\n").state, State::kIncomplete);
  EXPECT_EQ(parse("GET / HTT").state, State::kIncomplete);
  EXPECT_EQ(parse("").state, State::kIncomplete);
  // Bare LF line ends are accepted (RFC 9112 2.2).
  EXPECT_EQ(parse("GET / HTTP/1.1\nHost: h\n\n").state, State::kComplete);
}

TEST(HttpRequest, HeadLimitsHoldAsBytesTrickleIn) {
  HttpLimits limits;
  limits.max_head_bytes = 1024;
  std::string head = "GET / HTTP/1.1\r\nHost: h\r\n";
  while (head.size() <= 1024) head += "X-A: b\r\n";
  HeadParse p = parse(head, nullptr, limits);
  EXPECT_EQ(p.state, State::kError);
  EXPECT_EQ(p.status, 431);
  // Too many fields, each small.
  std::string many = "GET / HTTP/1.1\r\nHost: h\r\n";
  for (int i = 0; i < 70; ++i) many += "X: y\r\n";
  EXPECT_EQ(parse(many + "\r\n").status, 431);
  // A request line that never ends.
  EXPECT_EQ(parse("GET /" + std::string(5000, 'a')).status, 414);
  EXPECT_EQ(parse("GET /" + std::string(5000, 'a') + " HTTP/1.1\r\nHost: h\r\n\r\n").status, 414);
}

TEST(HttpRequest, BodiesAreAnnounced) {
  HttpRequest r;
  ASSERT_EQ(parse("POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n", &r).state, State::kComplete);
  EXPECT_TRUE(r.has_body);
  EXPECT_FALSE(r.keep_alive);
  ASSERT_EQ(parse("POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", &r).state,
            State::kComplete);
  EXPECT_TRUE(r.has_body);
  ASSERT_EQ(parse("GET /x HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", &r).state, State::kComplete);
  EXPECT_FALSE(r.has_body);
}

TEST(HttpRequest, SmugglingShapesAreErrors) {
  const char* bad[] = {
      "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1e3\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: h\r\n Folded: x\r\n\r\n",
      "GET / HTTP/1.1\r\nHost : h\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
      "GET / HTTP/1.1\r\n\r\n",  // no Host
      "GET  / HTTP/1.1\r\nHost: h\r\n\r\n",
      "GET / HTTP/1.1 \r\nHost: h\r\n\r\n",
      "GET /a#frag HTTP/1.1\r\nHost: h\r\n\r\n",
      "GET /%zz HTTP/1.1\r\nHost: h\r\n\r\n",
      "GET /%00 HTTP/1.1\r\nHost: h\r\n\r\n",
      "GET * HTTP/1.1\r\nHost: h\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: h\r\nX: a\x01" "b\r\n\r\n",
  };
  for (const char* b : bad) {
    HeadParse p = parse(b);
    EXPECT_EQ(p.state, State::kError) << b;
    EXPECT_EQ(p.status, 400) << b;
  }
  EXPECT_EQ(parse("GET / HTTP/2.0\r\nHost: h\r\n\r\n").status, 505);
}

TEST(HttpRequest, GarbageIsRefusedAtItsFirstByte) {
  // A TLS ClientHello sent to a plain port: refused at once, not after 16 KiB.
  EXPECT_EQ(parse(std::string("\x16\x03\x01", 3)).state, State::kError);
}

TEST(HttpRequest, KeepAliveFollowsVersionAndConnection) {
  HttpRequest r;
  ASSERT_EQ(parse("GET / HTTP/1.0\r\n\r\n", &r).state, State::kComplete);
  EXPECT_FALSE(r.keep_alive);
  ASSERT_EQ(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &r).state, State::kComplete);
  EXPECT_TRUE(r.keep_alive);
  ASSERT_EQ(parse("GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, close\r\n\r\n", &r).state, State::kComplete);
  EXPECT_FALSE(r.keep_alive);
  ASSERT_EQ(parse("HEAD /metrics HTTP/1.1\r\nHost: h\r\n\r\n", &r).state, State::kComplete);
  EXPECT_TRUE(r.head_only);
}

TEST(HttpRequest, AbsoluteFormIsReducedToItsPath) {
  HttpRequest r;
  ASSERT_EQ(parse("GET http://node1:9478/metrics?x=1 HTTP/1.1\r\nHost: node1\r\n\r\n", &r).state,
            State::kComplete);
  EXPECT_EQ(r.path, "/metrics");
  EXPECT_EQ(r.param("x"), "1");
}

TEST(HttpRequest, ResponsesAreFramedAndHeadHasNoBody) {
  HttpResponse r = json_error(404, "pid 7 is not traced");
  EXPECT_EQ(r.body, "{\"error\":\"pid 7 is not traced\"}\n");
  std::string wire = serialize_response(r, false, true, {{"X-Frame-Options", "deny"}});
  EXPECT_EQ(wire.rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u) << wire;
  EXPECT_NE(wire.find("Content-Length: " + std::to_string(r.body.size()) + "\r\n"), std::string::npos);
  EXPECT_NE(wire.find("Connection: keep-alive\r\n"), std::string::npos);
  EXPECT_NE(wire.find("X-Frame-Options: deny\r\n"), std::string::npos);
  EXPECT_TRUE(wire.ends_with(r.body));
  std::string head = serialize_response(r, true, false, {});
  EXPECT_TRUE(head.ends_with("\r\n\r\n"));
  EXPECT_NE(head.find("Connection: close"), std::string::npos);
}

}  // namespace
}  // namespace lw
