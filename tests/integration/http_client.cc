// SPDX-License-Identifier: Apache-2.0
#include "http_client.h"

#include <arpa/inet.h>
#include <crypt.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace lw::itest {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int connect_loopback(int port, double timeout_seconds, std::string* error) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + strerror(errno);
    return -1;
  }
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno != EINPROGRESS) {
    *error = std::string("connect: ") + strerror(errno);
    close(fd);
    return -1;
  }
  pollfd p = {fd, POLLOUT, 0};
  int ready = poll(&p, 1, static_cast<int>(timeout_seconds * 1000));
  int err = 0;
  socklen_t len = sizeof(err);
  if (ready <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    *error = ready <= 0 ? "connect: timed out" : std::string("connect: ") + strerror(err);
    close(fd);
    return -1;
  }
  // Blocking from here, with a per-call timeout.
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv = {static_cast<time_t>(timeout_seconds),
                static_cast<suseconds_t>((timeout_seconds - static_cast<long>(timeout_seconds)) * 1e6)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// A connection, plain or TLS, with send/recv that return bytes or <= 0.
class Wire {
 public:
  Wire(int fd, SSL_CTX* ctx) : fd_(fd) {
    if (ctx) {
      ssl_ = SSL_new(ctx);
      SSL_set_fd(ssl_, fd_);
      SSL_set_tlsext_host_name(ssl_, "localhost");
    }
  }
  ~Wire() {
    if (ssl_) SSL_free(ssl_);
    if (fd_ >= 0) close(fd_);
  }
  bool handshake(std::string* error) {
    if (!ssl_) return true;
    if (SSL_connect(ssl_) == 1) return true;
    unsigned long e = ERR_get_error();
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    *error = std::string("TLS handshake: ") + (e ? buf : strerror(errno));
    ERR_clear_error();
    return false;
  }
  long send_all(const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      long n = ssl_ ? SSL_write(ssl_, data.data() + done, static_cast<int>(data.size() - done))
                    : ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return static_cast<long>(done);
      done += static_cast<size_t>(n);
    }
    return static_cast<long>(done);
  }
  long recv_some(char* buf, size_t len) {
    if (ssl_) {
      int n = SSL_read(ssl_, buf, static_cast<int>(len));
      if (n <= 0) ERR_clear_error();
      return n;
    }
    return ::recv(fd_, buf, len, 0);
  }

 private:
  int fd_;
  SSL* ssl_ = nullptr;
};

SSL_CTX* client_context(const RawOptions& o, std::string* error) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  if (!o.client_cert.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, o.client_cert.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, o.client_key.c_str(), SSL_FILETYPE_PEM) != 1) {
      *error = "cannot load the client certificate " + o.client_cert;
      SSL_CTX_free(ctx);
      return nullptr;
    }
  }
  return ctx;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Parses one response at `pos`; returns false when incomplete.
bool parse_one(const std::string& s, size_t& pos, RawReply& r) {
  size_t end = s.find("\r\n\r\n", pos);
  if (end == std::string::npos) return false;
  std::istringstream head(s.substr(pos, end - pos));
  std::string line;
  std::getline(head, line);
  if (line.rfind("HTTP/1.", 0) != 0 || line.size() < 12) return false;
  r.status = std::atoi(line.c_str() + 9);
  while (std::getline(head, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    r.headers[lower(line.substr(0, colon))] = value;
  }
  size_t body = end + 4;
  auto cl = r.headers.find("content-length");
  if (cl == r.headers.end()) {
    // Until the end of the stream.
    r.body = s.substr(body);
    pos = s.size();
    return true;
  }
  size_t len = std::strtoull(cl->second.c_str(), nullptr, 10);
  if (s.size() < body + len) return false;
  r.body = s.substr(body, len);
  pos = body + len;
  return true;
}

}  // namespace

std::string basic_authorization(const std::string& user_password) {
  std::string out(4 * ((user_password.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(user_password.data()),
                          static_cast<int>(user_password.size()));
  out.resize(static_cast<size_t>(n));
  return "Basic " + out;
}

RawReply raw_request(int port, const std::string& path, const RawOptions& o) {
  RawReply r;
  const auto t0 = Clock::now();
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(nullptr, SSL_CTX_free);
  if (o.tls) {
    ctx.reset(client_context(o, &r.error));
    if (!ctx) return r;
  }
  int fd = connect_loopback(port, o.timeout_seconds, &r.error);
  if (fd < 0) return r;
  Wire wire(fd, ctx.get());
  if (!wire.handshake(&r.error)) {
    r.seconds = since(t0);
    return r;
  }
  std::string req = o.method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  if (!o.basic_auth.empty()) req += "Authorization: " + basic_authorization(o.basic_auth) + "\r\n";
  for (const std::string& h : o.headers) req += h + "\r\n";
  req += "\r\n";
  req += o.body;
  wire.send_all(req);
  std::string in;
  char buf[65536];
  while (since(t0) < o.timeout_seconds) {
    long n = wire.recv_some(buf, sizeof(buf));
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
    size_t pos = 0;
    RawReply probe;
    if (parse_one(in, pos, probe) && probe.headers.count("content-length")) break;
  }
  r.seconds = since(t0);
  size_t pos = 0;
  if (!parse_one(in, pos, r)) {
    r.status = 0;
    r.error = in.empty() ? "no reply within " + std::to_string(o.timeout_seconds) + " s"
                         : "incomplete reply (" + std::to_string(in.size()) + " bytes)";
  }
  return r;
}

std::string raw_exchange(int port, const std::string& bytes, double timeout_seconds, size_t* accepted) {
  std::string error;
  int fd = connect_loopback(port, timeout_seconds, &error);
  if (fd < 0) return "";
  Wire wire(fd, nullptr);
  long sent = wire.send_all(bytes);
  if (accepted) *accepted = static_cast<size_t>(std::max(0L, sent));
  const auto t0 = Clock::now();
  std::string in;
  char buf[65536];
  while (since(t0) < timeout_seconds) {
    long n = wire.recv_some(buf, sizeof(buf));
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  return in;
}

std::vector<RawReply> parse_replies(const std::string& stream) {
  std::vector<RawReply> out;
  size_t pos = 0;
  while (pos < stream.size()) {
    RawReply r;
    if (!parse_one(stream, pos, r)) break;
    out.push_back(std::move(r));
  }
  return out;
}

StalledConnections::StalledConnections(int port, int count, Mode mode)
    : port_(port), count_(count), mode_(mode), thread_([this] { run(); }) {
  // Let every connection be made before the test measures anything.
  for (int i = 0; i < 200 && open_.load() < count_; ++i) usleep(10 * 1000);
}

StalledConnections::~StalledConnections() {
  stop_ = true;
  thread_.join();
}

void StalledConnections::run() {
  std::vector<int> fds(static_cast<size_t>(count_), -1);
  std::vector<int> lines(static_cast<size_t>(count_), 0);
  auto open_one = [&](size_t i) {
    std::string error;
    fds[i] = connect_loopback(port_, 1, &error);
    lines[i] = 0;
    if (fds[i] >= 0 && mode_ == Mode::kDripHeaders) {
      const char* start = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
      if (send(fds[i], start, strlen(start), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        close(fds[i]);
        fds[i] = -1;
      }
    }
  };
  for (size_t i = 0; i < fds.size() && !stop_; ++i) {
    open_one(i);
    open_ += fds[i] >= 0;
  }
  auto next_tick = Clock::now();
  while (!stop_) {
    // Closed by the server? Reopen (the attacker reconnects).
    for (size_t i = 0; i < fds.size(); ++i) {
      bool closed = fds[i] < 0;
      if (!closed) {
        char c;
        ssize_t n = recv(fds[i], &c, 1, MSG_DONTWAIT | MSG_PEEK);
        closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
        if (n > 0) {
          // Any answer (a 408, a 431) ends this connection's usefulness.
          closed = true;
        }
      }
      if (closed) {
        if (fds[i] >= 0) {
          close(fds[i]);
          --open_;
        }
        open_one(i);
        if (fds[i] >= 0) {
          ++open_;
          ++reopened_;
        }
      }
    }
    if (mode_ == Mode::kDripHeaders && Clock::now() >= next_tick) {
      next_tick = Clock::now() + std::chrono::seconds(2);
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i] < 0) continue;
        std::string line = "X-Stall-" + std::to_string(lines[i]++) + ": x\r\n";
        send(fds[i], line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      }
    }
    usleep(20 * 1000);
  }
  for (int fd : fds)
    if (fd >= 0) close(fd);
}

MemoryUse memory_use(pid_t pid) {
  MemoryUse m;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) m.rss = std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
    if (line.rfind("VmHWM:", 0) == 0) m.hwm = std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return m;
}

int open_fds(pid_t pid) {
  DIR* d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

void make_test_pki(const std::string& dir) {
  auto run = [](const std::string& cmd) {
    if (std::system((cmd + " >/dev/null 2>&1").c_str()) != 0) throw std::runtime_error("failed: " + cmd);
  };
  const std::string d = dir + "/";
  run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=leakwatch-test-ca"
      " -days 1 -keyout " + d + "ca.key -out " + d + "ca.crt");
  auto leaf = [&](const std::string& name, const std::string& cn, const std::string& san) {
    run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=" + cn + " -keyout " + d +
        name + ".key -out " + d + name + ".csr");
    std::ofstream(d + name + ".ext") << "subjectAltName=" << san << "\n";
    run("openssl x509 -req -in " + d + name + ".csr -CA " + d + "ca.crt -CAkey " + d +
        "ca.key -CAcreateserial -days 1 -extfile " + d + name + ".ext -out " + d + name + ".crt");
  };
  leaf("server", "localhost", "DNS:localhost,IP:127.0.0.1");
  leaf("client", "scraper", "DNS:scraper.example");
  run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=stranger -days 1"
      " -keyout " + d + "stranger.key -out " + d + "stranger.crt");
}

std::string bcrypt_hash(const std::string& password, int cost) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  if (!crypt_gensalt_rn("$2b$", cost, nullptr, 0, salt, sizeof(salt))) return "";
  auto data = std::make_unique<crypt_data>();
  const char* hash = crypt_r(password.c_str(), salt, data.get());
  return hash && hash[0] == '$' ? hash : "";
}

}  // namespace lw::itest
