// SPDX-License-Identifier: Apache-2.0
// The HTTP front under abuse (the security issue's "HTTP server" items),
// against the real `leakwatch run`: stalled connections, floods of headers
// and wrong passwords, request bodies, Range, pipelining, connection
// floods, a busy port. Each test prints the figures it measured.
//
// The daemon here watches nothing (no targets): the HTTP front is what is
// under test, and a daemon with nothing to trace still serves every path.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <thread>

#include "daemon_harness.h"
#include "http_client.h"

namespace lw::itest {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr char kUser[] = "prometheus";
constexpr char kPassword[] = "scrape-secret";

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double max_of(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

// A daemon with a web config written into its own directory. `web` is the
// web config's text; "" runs without one.
class HttpAbuse : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "not root";
  }

  void start(const std::string& web, int bcrypt_cost = 4) {
    std::string body;
    if (!web.empty()) {
      make_test_pki(pki_.path());
      std::string text = web;
      const std::string marker = "HASH";
      if (size_t at = text.find(marker); at != std::string::npos)
        text.replace(at, marker.size(), bcrypt_hash(kPassword, bcrypt_cost));
      std::ofstream(pki_.path() + "/web.yml") << text;
      body = "web_config_file: " + pki_.path() + "/web.yml\n";
    }
    DaemonProcess::Options options;
    options.config_body = body;
    options.args = {"--log-level", "info"};
    daemon_ = std::make_unique<DaemonProcess>(options);
    daemon_->wait_notify("READY=1", kReadyTimeout);
  }

  std::string tls_and_auth() const {
    return "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
           "basic_auth_users:\n  " + std::string(kUser) + ": HASH\n";
  }

  RawOptions scraper(bool tls) const {
    RawOptions o;
    o.tls = tls;
    o.basic_auth = std::string(kUser) + ":" + kPassword;
    o.timeout_seconds = 3;
    return o;
  }

  int port() const { return daemon_->port(); }

  TempDir pki_;
  std::unique_ptr<DaemonProcess> daemon_;
};

class StalledConnections_ : public HttpAbuse, public ::testing::WithParamInterface<int> {};

// The issue: eight sockets sending one header line every 2 s kept every
// worker busy (/healthz timed out for 20 s), and with TLS and basic auth 8
// idle TCP connections reopened every 4 s made 2 of 3 authenticated scrapes
// fail. Here half the attackers drip headers and half sit idle, each
// reopened as soon as the server closes it, while /healthz and an
// authenticated /metrics over HTTPS must each answer within 1 s, every
// time, for 8 s.
TEST_P(StalledConnections_, HealthzAndAuthenticatedScrapesAnswerWithinOneSecond) {
  start(tls_and_auth());
  const int n = GetParam();
  ASSERT_TRUE(raw_request(port(), "/metrics", scraper(true)).status == 200);
  StalledConnections drip(port(), n / 2, StalledConnections::Mode::kDripHeaders);
  StalledConnections idle(port(), n - n / 2, StalledConnections::Mode::kIdle);
  std::vector<double> health, scrape;
  int failures = 0;
  std::string first_failure;
  const auto end = Clock::now() + 8s;
  while (Clock::now() < end) {
    RawOptions anonymous;
    anonymous.tls = true;
    anonymous.timeout_seconds = 3;
    RawReply h = raw_request(port(), "/healthz", anonymous);
    RawReply m = raw_request(port(), "/metrics", scraper(true));
    health.push_back(h.seconds);
    scrape.push_back(m.seconds);
    for (const RawReply* r : {&h, &m}) {
      if (r->status != 200 || r->seconds > 1.0) {
        ++failures;
        if (first_failure.empty())
          first_failure = "status " + std::to_string(r->status) + " after " + std::to_string(r->seconds) +
                          " s: " + r->error;
      }
    }
    std::this_thread::sleep_for(500ms);
  }
  printf("[ figures  ] %d stalled connections (%d open at the end, %ld reopened): /healthz median %.1f ms, "
         "max %.1f ms; authenticated HTTPS /metrics median %.1f ms, max %.1f ms; %d of %zu requests "
         "failed or took over 1 s\n",
         n, drip.open_now() + idle.open_now(), drip.reopened() + idle.reopened(), median(health) * 1e3,
         max_of(health) * 1e3, median(scrape) * 1e3, max_of(scrape) * 1e3, failures, health.size() * 2);
  EXPECT_EQ(failures, 0) << first_failure << daemon_->diagnostics();
}

INSTANTIATE_TEST_SUITE_P(LeakwatchHttp, StalledConnections_, ::testing::Values(8, 200));

// A flood of wrong passwords (bcrypt at cost 10 each) must not slow down a
// scraper whose credentials are cached: the issue measured < 1 ms -> 588 ms.
TEST_F(HttpAbuse, WrongPasswordFloodDoesNotSlowCachedScrapes) {
  start("basic_auth_users:\n  " + std::string(kUser) + ": HASH\n", 10);
  ASSERT_EQ(raw_request(port(), "/api/v1/status", scraper(false)).status, 200);  // fills the cache
  std::atomic<bool> stop{false};
  std::atomic<long> attempts{0};
  std::vector<std::thread> flood;
  for (int i = 0; i < 8; ++i) {
    flood.emplace_back([&, i] {
      RawOptions wrong;
      wrong.basic_auth = std::string(kUser) + ":wrong" + std::to_string(i);
      wrong.timeout_seconds = 5;
      while (!stop) {
        raw_request(port(), "/metrics", wrong);
        ++attempts;
      }
    });
  }
  std::this_thread::sleep_for(1s);
  std::vector<double> cached;
  for (int i = 0; i < 20; ++i) {
    RawReply r = raw_request(port(), "/api/v1/status", scraper(false));
    EXPECT_EQ(r.status, 200) << r.error;
    cached.push_back(r.seconds);
    std::this_thread::sleep_for(100ms);
  }
  stop = true;
  for (auto& t : flood) t.join();
  printf("[ figures  ] wrong-password flood (8 clients, %ld attempts): cached valid requests median %.1f ms, "
         "max %.1f ms\n",
         attempts.load(), median(cached) * 1e3, max_of(cached) * 1e3);
  EXPECT_LT(median(cached), 0.05);
}

// Headers without end on 4 connections (the issue: 1.5 M headers took the
// daemon to 821 MB), with auth on and no credentials: the daemon's peak
// RSS grows by at most 32 MiB and it keeps answering.
TEST_F(HttpAbuse, HeaderFloodKeepsTheDaemonsMemoryBounded) {
  start("basic_auth_users:\n  " + std::string(kUser) + ": HASH\n");
  const MemoryUse before = memory_use(daemon_->pid());
  std::atomic<long> sent{0};
  std::vector<std::thread> flood;
  for (int c = 0; c < 4; ++c) {
    flood.emplace_back([&, c] {
      const auto end = Clock::now() + 4s;
      while (Clock::now() < end) {
        std::string error;
        std::string head = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
        std::string lines;
        for (int i = 0; i < 2000; ++i) lines += "X-Flood-" + std::to_string(c) + "-" + std::to_string(i) + ": y\r\n";
        RawOptions o;
        o.timeout_seconds = 1;
        // One connection: the head, then header lines until the server
        // closes it or the time is up.
        std::string bytes = head;
        for (int k = 0; k < 200; ++k) bytes += lines;
        size_t accepted = 0;
        std::string reply = raw_exchange(port(), bytes, 1, &accepted);
        sent += static_cast<long>(accepted);
        (void)reply;
      }
    });
  }
  for (auto& t : flood) t.join();
  const MemoryUse after = memory_use(daemon_->pid());
  RawReply health = raw_request(port(), "/healthz");
  printf("[ figures  ] header flood: %.1f MiB of headers taken by the daemon from 4 connections at a time; daemon RSS %.1f -> %.1f "
         "MiB, peak %.1f -> %.1f MiB\n",
         sent.load() / 1048576.0, before.rss / 1048576.0, after.rss / 1048576.0, before.hwm / 1048576.0,
         after.hwm / 1048576.0);
  EXPECT_LT(after.hwm, before.hwm + (32u << 20));
  EXPECT_EQ(health.status, 200) << health.error;
}

// One request head over the limit gets 431 and the connection closed.
TEST_F(HttpAbuse, OversizedHeadIsRefusedWith431) {
  start("");
  std::string head = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 5000; ++i) head += "X-" + std::to_string(i) + ": y\r\n";
  head += "\r\n";
  std::vector<RawReply> replies = parse_replies(raw_exchange(port(), head, 3));
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].status, 431);
  EXPECT_EQ(replies[0].headers["content-type"], "application/json");
}

// Bodies are refused before they are read, whatever their framing: no
// endpoint takes one (the issue: 300 MiB buffered before the 404; a 1 MB
// gzip bomb reached 1.23 GB).
TEST_F(HttpAbuse, RequestBodiesAreRefusedUnread) {
  start("");
  const MemoryUse before = memory_use(daemon_->pid());
  struct Case {
    const char* what;
    std::string head;
  };
  const std::string chunk(1 << 20, 'z');
  std::vector<Case> cases = {
      {"Content-Length 300 MiB", "POST /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 314572800\r\n\r\n"},
      {"chunked", "POST /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n100000\r\n"},
      {"gzip", "PUT /api/v1/processes HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 1048576\r\n\r\n"},
      {"GET with a body", "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"},
  };
  for (const Case& c : cases) {
    const auto t0 = Clock::now();
    // 16 MiB behind the head, as fast as the socket takes it.
    std::string bytes = c.head;
    for (int i = 0; i < 16; ++i) bytes += chunk;
    std::vector<RawReply> replies = parse_replies(raw_exchange(port(), bytes, 5));
    double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    ASSERT_FALSE(replies.empty()) << c.what;
    EXPECT_EQ(replies[0].status, 413) << c.what << ": " << replies[0].body;
    EXPECT_EQ(replies[0].headers["connection"], "close") << c.what;
    EXPECT_LT(seconds, 3.0) << c.what;
    printf("[ figures  ] %s: %d in %.0f ms\n", c.what, replies[0].status, seconds * 1e3);
  }
  const MemoryUse after = memory_use(daemon_->pid());
  printf("[ figures  ] bodies: daemon peak RSS %.1f -> %.1f MiB\n", before.hwm / 1048576.0, after.hwm / 1048576.0);
  EXPECT_LT(after.hwm, before.hwm + (16u << 20));
}

// Range is ignored (the whole representation, 200), so 1,000 ranges cannot
// make a 24 MB answer out of /metrics.
TEST_F(HttpAbuse, RangeHeadersDoNotAmplifyResponses) {
  start("");
  RawReply plain = raw_request(port(), "/metrics");
  ASSERT_EQ(plain.status, 200);
  std::string ranges = "Range: bytes=0-";
  for (int i = 0; i < 999; ++i) ranges += ",0-";
  RawOptions o;
  o.headers = {ranges};
  RawReply ranged = raw_request(port(), "/metrics", o);
  printf("[ figures  ] /metrics %zu bytes; with 1,000 ranges: status %d, %zu bytes\n", plain.body.size(),
         ranged.status, ranged.body.size());
  EXPECT_EQ(ranged.status, 200);
  EXPECT_LT(ranged.body.size(), plain.body.size() * 2);
}

// Pipelined keep-alive requests (the issue: dropped after the first) are
// all answered, in order.
TEST_F(HttpAbuse, PipelinedRequestsAreAllAnswered) {
  start("");
  std::string bytes = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                      "GET /api/v1/status HTTP/1.1\r\nHost: x\r\n\r\n"
                      "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
                      "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  std::vector<RawReply> replies = parse_replies(raw_exchange(port(), bytes, 5));
  ASSERT_EQ(replies.size(), 4u);
  EXPECT_EQ(replies[0].status, 200);
  EXPECT_EQ(replies[1].status, 200);
  EXPECT_NE(replies[1].body.find("attached_total"), std::string::npos);
  EXPECT_EQ(replies[2].status, 404);
  EXPECT_EQ(replies[3].status, 200);
}

// Thousands of connections: the daemon holds at most its cap (plus the
// listen backlog in the kernel), and a client still gets through.
TEST_F(HttpAbuse, ConnectionFloodIsCapped) {
  start("");
  struct rlimit lim;
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 8192);
  setrlimit(RLIMIT_NOFILE, &lim);
  const int base_fds = open_fds(daemon_->pid());
  std::vector<int> fds;
  for (int i = 0; i < 2000; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(1s);
  const int held = open_fds(daemon_->pid());
  RawReply health = raw_request(port(), "/healthz");
  printf("[ figures  ] 2,000 connections: daemon fds %d -> %d; /healthz %d in %.1f ms\n", base_fds, held,
         health.status, health.seconds * 1e3);
  for (int fd : fds) close(fd);
  EXPECT_LT(held, base_fds + 300);
  EXPECT_EQ(health.status, 200) << health.error;
  EXPECT_LT(health.seconds, 1.0);
}

// Errors are JSON everywhere (the issue: a 404 had an empty body).
TEST_F(HttpAbuse, ErrorsAreJson) {
  start("");
  for (const char* path : {"/nope", "/api/v1/processes/1/sites", "/debug/pprof/heap?pid=abc",
                           "/api/v1/processes/1/sites?start_time=x"}) {
    RawReply r = raw_request(port(), path);
    EXPECT_GE(r.status, 400) << path;
    EXPECT_EQ(r.headers["content-type"], "application/json") << path;
    Json j = Json::parse(r.body, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("error")) << path << ": " << r.body;
  }
  RawOptions del;
  del.method = "DELETE";
  RawReply r = raw_request(port(), "/metrics", del);
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "GET, HEAD");
  EXPECT_TRUE(Json::parse(r.body, nullptr, false).contains("error")) << r.body;
}

// A second daemon on a busy port is a clear error and a non-zero exit (the
// issue: cpp-httplib set SO_REUSEPORT and both served, alternating).
TEST_F(HttpAbuse, SecondDaemonOnABusyPortExitsWithAnError) {
  start("");
  TempDir dir;
  const std::string config = dir.path() + "/second.yaml";
  std::ofstream(config) << "listen: \"127.0.0.1:" << port() << "\"\n";
  Process second({LW_LEAKWATCH_BIN, "run", "--config", config});
  std::optional<int> status = second.wait_exit(30s);
  ASSERT_TRUE(status.has_value()) << "the second daemon is still running: " << second.stderr_text();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << *status;
  EXPECT_NE(second.stderr_text().find("in use"), std::string::npos) << second.stderr_text();
  // The first one still serves every request.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(raw_request(port(), "/api/v1/status").status, 200);
}

}  // namespace
}  // namespace lw::itest
