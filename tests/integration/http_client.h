// SPDX-License-Identifier: Apache-2.0
// A raw HTTP/1.1 client for the HTTP front's abuse tests: plain or TLS
// (OpenSSL, optional client certificate), exact bytes on the wire, a hard
// deadline per request, and the attackers of the issue (stalled
// connections, header floods, large bodies). The daemon harness's
// cpp-httplib client is too polite for these: it retries, and it cannot
// send malformed or endless requests.
//
// Thread-safety: free functions are reentrant; a StalledConnections object
// runs one thread of its own.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace lw::itest {

struct RawReply {
  int status = 0;                             // 0: no complete reply (see error)
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  double seconds = 0;  // from connect to the end of the reply
  std::string error;   // why there is no reply
};

struct RawOptions {
  bool tls = false;
  std::string basic_auth;   // "user:password", or "" for none
  std::string client_cert;  // PEM files for mTLS, or ""
  std::string client_key;
  double timeout_seconds = 5;
  std::string method = "GET";
  std::vector<std::string> headers;  // extra "Name: value" lines
  std::string body;                  // sent after the head as is
};

// One request on a fresh connection to 127.0.0.1:port.
RawReply raw_request(int port, const std::string& path, const RawOptions& options = {});

// Sends `bytes` (one or more requests) on one plain connection, then reads
// until the peer closes or `timeout_seconds` pass; returns what came back.
// `accepted`, when given, receives how many bytes the server took before it
// closed the connection.
std::string raw_exchange(int port, const std::string& bytes, double timeout_seconds = 5,
                         size_t* accepted = nullptr);

// Parses every HTTP/1.1 response in `stream` (Content-Length bodies).
std::vector<RawReply> parse_replies(const std::string& stream);

// "Basic base64(user:password)".
std::string basic_authorization(const std::string& user_password);

// Connections held open by an attacker, each reopened soon after the server
// closes it, until the object goes away.
class StalledConnections {
 public:
  enum class Mode {
    kIdle,       // connect and send nothing (idle TCP, also on a TLS port)
    kDripHeaders // a request line, then one header line every 2 s, forever
  };
  StalledConnections(int port, int count, Mode mode);
  ~StalledConnections();
  StalledConnections(const StalledConnections&) = delete;
  StalledConnections& operator=(const StalledConnections&) = delete;

  int open_now() const { return open_.load(); }
  long reopened() const { return reopened_.load(); }

 private:
  void run();
  int port_;
  int count_;
  Mode mode_;
  std::atomic<bool> stop_{false};
  std::atomic<int> open_{0};
  std::atomic<long> reopened_{0};
  std::thread thread_;
};

// The daemon's memory from /proc/PID/status, in bytes.
struct MemoryUse {
  uint64_t rss = 0;  // VmRSS
  uint64_t hwm = 0;  // VmHWM (peak)
};
MemoryUse memory_use(pid_t pid);
// Open file descriptors of `pid`.
int open_fds(pid_t pid);

// Self-signed certificates made with the openssl CLI in `dir`: ca.crt/key
// (a CA), server.crt/key (for 127.0.0.1, signed by the CA), client.crt/key
// (signed by the CA, SAN DNS:scraper.example), stranger.crt/key (self-signed).
void make_test_pki(const std::string& dir);

// A bcrypt hash of `password` ($2b$, the given cost).
std::string bcrypt_hash(const std::string& password, int cost = 4);

}  // namespace lw::itest
