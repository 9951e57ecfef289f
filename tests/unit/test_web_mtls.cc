// SPDX-License-Identifier: Apache-2.0
// The web config's client certificates (mTLS), rate limit, TLS 1.2 cipher
// policy, and re-reading on change, through a real HttpServer on loopback
// and OpenSSL clients. Certificates are made at runtime with the openssl CLI.
#include <arpa/inet.h>
#include <crypt.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "exporter/http/http_server.h"
#include "exporter/http/web_config.h"

namespace lw {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::shared_ptr<const DaemonSnapshot> fresh_snapshot() {
  auto s = std::make_shared<DaemonSnapshot>();
  s->timestamp = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return s;
}

void run(const std::string& cmd) {
  ASSERT_EQ(std::system((cmd + " >/dev/null 2>&1").c_str()), 0) << cmd;
}

std::string bcrypt(const std::string& password) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  EXPECT_NE(crypt_gensalt_rn("$2b$", 4, nullptr, 0, salt, sizeof(salt)), nullptr);
  auto data = std::make_unique<crypt_data>();
  const char* hash = crypt_r(password.c_str(), salt, data.get());
  return hash ? hash : "";
}

struct TlsReply {
  bool handshake = false;
  int status = 0;  // 0: no HTTP reply
  std::string raw;
};

struct TlsClient {
  std::string cert, key;        // client certificate, or ""
  std::string ciphers;          // TLS 1.2 cipher list, or "" for OpenSSL's
  int max_version = 0;          // 0: any
  std::string authorization;    // header value, or ""
};

// One GET over TLS to 127.0.0.1:port.
TlsReply tls_get(int port, const std::string& path, const TlsClient& c = {}) {
  TlsReply r;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
  if (!c.cert.empty()) {
    SSL_CTX_use_certificate_chain_file(ctx.get(), c.cert.c_str());
    SSL_CTX_use_PrivateKey_file(ctx.get(), c.key.c_str(), SSL_FILETYPE_PEM);
  }
  if (!c.ciphers.empty()) SSL_CTX_set_cipher_list(ctx.get(), c.ciphers.c_str());
  if (c.max_version) SSL_CTX_set_max_proto_version(ctx.get(), c.max_version);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return r;
  }
  SSL* ssl = SSL_new(ctx.get());
  SSL_set_fd(ssl, fd);
  r.handshake = SSL_connect(ssl) == 1;
  if (r.handshake) {
    std::string req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n";
    if (!c.authorization.empty()) req += "Authorization: " + c.authorization + "\r\n";
    req += "\r\n";
    SSL_write(ssl, req.data(), static_cast<int>(req.size()));
    char buf[4096];
    int n;
    while ((n = SSL_read(ssl, buf, sizeof(buf))) > 0) r.raw.append(buf, static_cast<size_t>(n));
    if (r.raw.rfind("HTTP/1.1 ", 0) == 0) r.status = std::atoi(r.raw.c_str() + 9);
  }
  ERR_clear_error();
  SSL_free(ssl);
  close(fd);
  return r;
}

std::string basic(const std::string& user, const std::string& password) {
  std::string plain = user + ":" + password;
  std::string out(4 * ((plain.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(plain.data()), static_cast<int>(plain.size()));
  out.resize(static_cast<size_t>(n));
  return "Basic " + out;
}

class WebMtls : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string tmpl = testing::TempDir() + "lw_mtls_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = new fs::path(tmpl);
    const std::string d = dir_->string() + "/";
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    run("openssl req -x509 " + ec + " -subj /CN=test-ca -days 1 -keyout " + d + "ca.key -out " + d + "ca.crt");
    auto leaf = [&](const std::string& name, const std::string& key_args, const std::string& san) {
      run("openssl req " + key_args + " -subj /CN=" + name + " -keyout " + d + name + ".key -out " + d + name +
          ".csr");
      std::ofstream(d + name + ".ext") << "subjectAltName=" << san << "\n";
      run("openssl x509 -req -in " + d + name + ".csr -CA " + d + "ca.crt -CAkey " + d +
          "ca.key -CAcreateserial -days 1 -extfile " + d + name + ".ext -out " + d + name + ".crt");
    };
    leaf("server", ec, "DNS:localhost,IP:127.0.0.1");
    leaf("server_rsa", "-newkey rsa:2048 -nodes", "DNS:localhost,IP:127.0.0.1");
    leaf("client", ec, "DNS:scraper.example,email:ops@example.com");
    run("openssl req -x509 " + ec + " -subj /CN=stranger -days 1 -keyout " + d + "stranger.key -out " + d +
        "stranger.crt");
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string path(const std::string& name) { return (*dir_ / name).string(); }

  // Writes `text` as web.yml and starts a server re-reading it.
  void start(const std::string& text) {
    write_config(text);
    std::vector<ConfigError> errors;
    Result<WebConfig> web = load_web_config(path("web.yml"), &errors);
    ASSERT_TRUE(web.ok()) << web.error().message;
    HttpServerOptions options;
    options.max_series = 1000;
    options.web = std::make_shared<const WebConfig>(std::move(*web));
    options.web_config_path = path("web.yml");
    options.reload_interval = 100ms;
    server_ = std::make_unique<HttpServer>(fresh_snapshot, std::move(options));
    Result<int> port = server_->start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.error().message;
    port_ = *port;
  }
  void write_config(const std::string& text) {
    // Replaced by rename, as editors and ConfigMap updates do.
    std::ofstream(path("web.yml.new")) << text;
    fs::rename(path("web.yml.new"), path("web.yml"));
  }
  void TearDown() override {
    if (server_) server_->stop();
  }
  TlsClient client_cert() const { return {path("client.crt"), path("client.key"), "", 0, ""}; }
  TlsClient stranger_cert() const { return {path("stranger.crt"), path("stranger.key"), "", 0, ""}; }

  static std::string tls(const std::string& extra = "") {
    return "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n" + extra;
  }

  static fs::path* dir_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

fs::path* WebMtls::dir_ = nullptr;

TEST_F(WebMtls, RequireAndVerifyClientCert) {
  start(tls("  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"));
  EXPECT_EQ(tls_get(port_, "/metrics", client_cert()).status, 200);
  // Without a certificate, or with one the CA did not sign: no answer.
  EXPECT_EQ(tls_get(port_, "/metrics").status, 0);
  EXPECT_EQ(tls_get(port_, "/metrics", stranger_cert()).status, 0);
  EXPECT_EQ(tls_get(port_, "/healthz", stranger_cert()).status, 0);
}

TEST_F(WebMtls, ClientAllowedSans) {
  start(tls("  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
            "  client_allowed_sans: [other.example, ops@example.com]\n"));
  EXPECT_EQ(tls_get(port_, "/metrics", client_cert()).status, 200);  // by its email SAN
  write_config(tls("  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
                   "  client_allowed_sans: [other.example]\n"));
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(tls_get(port_, "/metrics", client_cert()).status, 0);
}

TEST_F(WebMtls, VerifyClientCertIfGiven) {
  start(tls("  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n"));
  EXPECT_EQ(tls_get(port_, "/metrics").status, 200);
  EXPECT_EQ(tls_get(port_, "/metrics", client_cert()).status, 200);
  EXPECT_EQ(tls_get(port_, "/metrics", stranger_cert()).status, 0);
}

TEST_F(WebMtls, MtlsConfigErrors) {
  struct Case {
    std::string text;
    std::string message;
  } cases[] = {
      {tls("  client_auth_type: RequireAndVerifyClientCert\n"), "needs 'tls_server_config.client_ca_file'"},
      {tls("  client_ca_file: ca.crt\n"), "is used only with client_auth_type"},
      {tls("  client_auth_type: RequireAnyClientCert\n  client_allowed_sans: [a]\n"),
       "needs client_auth_type RequireAndVerifyClientCert"},
      {tls("  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: nope.crt\n"), "nope.crt"},
      {tls("  client_auth_type: Mutual\n"), "must be one of NoClientCert|RequestClientCert"},
  };
  for (const Case& c : cases) {
    std::vector<ConfigError> errors;
    Result<WebConfig> r = parse_web_config(c.text, path("inline.yml"), &errors);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.error().message.find(c.message), std::string::npos) << r.error().message;
  }
}

TEST_F(WebMtls, PlainHealthzOnTheMtlsPort) {
  // A kubelet probe cannot present a client certificate: over plain HTTP
  // the TLS port answers /healthz, and nothing else.
  start(tls("  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"));
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port_));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string req = "GET /healthz HTTP/1.1\r\nHost: 10.0.0.1:9478\r\nUser-Agent: kube-probe/1.29\r\n"
                          "Connection: close\r\n\r\n";
  ASSERT_EQ(send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  std::string reply;
  char buf[1024];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) reply.append(buf, static_cast<size_t>(n));
  close(fd);
  EXPECT_EQ(reply.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << reply;
}

TEST_F(WebMtls, Tls12CipherPolicy) {
  start("tls_server_config:\n  cert_file: server_rsa.crt\n  key_file: server_rsa.key\n  max_version: TLS12\n");
  // Static-RSA key exchange and CBC with SHA-1: refused.
  for (const char* weak : {"AES128-SHA", "AES256-SHA256", "AES128-GCM-SHA256", "ECDHE-RSA-AES128-SHA"}) {
    TlsClient c;
    c.ciphers = weak;
    c.max_version = TLS1_2_VERSION;
    EXPECT_FALSE(tls_get(port_, "/healthz", c).handshake) << weak;
  }
  for (const char* strong : {"ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-CHACHA20-POLY1305"}) {
    TlsClient c;
    c.ciphers = strong;
    c.max_version = TLS1_2_VERSION;
    EXPECT_EQ(tls_get(port_, "/healthz", c).status, 200) << strong;
  }
}

TEST_F(WebMtls, RateLimit) {
  start(tls("rate_limit: {interval: 1h, burst: 2}\n"));
  EXPECT_EQ(tls_get(port_, "/metrics").status, 200);
  EXPECT_EQ(tls_get(port_, "/metrics").status, 200);
  TlsReply limited = tls_get(port_, "/metrics");
  EXPECT_EQ(limited.status, 429);
  EXPECT_NE(limited.raw.find("Retry-After: 3600"), std::string::npos) << limited.raw;
  // /healthz is not limited (probes).
  EXPECT_EQ(tls_get(port_, "/healthz").status, 200);
  // Removing the limit lifts it; an unchanged limit keeps its bucket.
  write_config(tls("rate_limit: {interval: 1h, burst: 2}\nhttp_server_config: {headers: {X-Frame-Options: deny}}\n"));
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(tls_get(port_, "/metrics").status, 429);
  write_config(tls());
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(tls_get(port_, "/metrics").status, 200);
  EXPECT_EQ(tls_get(port_, "/metrics").status, 200);
  EXPECT_EQ(tls_get(port_, "/metrics").status, 200);
  std::vector<ConfigError> errors;
  EXPECT_FALSE(parse_web_config("rate_limit: {interval: 1s, burst: 0}\n", path("x.yml"), &errors).ok());
  EXPECT_FALSE(parse_web_config("rate_limit: {interval: 10, burst: 1}\n", path("x.yml"), &errors).ok());
}

// Issue 32: requests without valid credentials do not use up the rate
// limit's tokens; the authenticated scraper still gets through.
TEST_F(WebMtls, RateLimitAppliesAfterAuthentication) {
  start(tls("basic_auth_users:\n  alice: " + bcrypt("one") + "\nrate_limit: {interval: 1h, burst: 2}\n"));
  TlsClient scraper;
  scraper.authorization = basic("alice", "one");
  TlsClient wrong;
  wrong.authorization = basic("alice", "nope");
  for (int i = 0; i < 10; ++i) EXPECT_EQ(tls_get(port_, "/metrics").status, 401);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(tls_get(port_, "/metrics", wrong).status, 401);
  EXPECT_EQ(tls_get(port_, "/metrics", scraper).status, 200);
  EXPECT_EQ(tls_get(port_, "/metrics", scraper).status, 200);
  // The limit itself still holds for the authenticated.
  EXPECT_EQ(tls_get(port_, "/metrics", scraper).status, 429);
}

TEST_F(WebMtls, ReReadOnChange) {
  start(tls("basic_auth_users:\n  alice: " + bcrypt("one") + "\n"));
  TlsClient one;
  one.authorization = basic("alice", "one");
  TlsClient two;
  two.authorization = basic("alice", "two");
  EXPECT_EQ(tls_get(port_, "/metrics", one).status, 200);
  EXPECT_EQ(tls_get(port_, "/metrics", two).status, 401);
  // A new password takes effect without a restart.
  write_config(tls("basic_auth_users:\n  alice: " + bcrypt("two") + "\n"));
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(tls_get(port_, "/metrics", two).status, 200);
  EXPECT_EQ(tls_get(port_, "/metrics", one).status, 401);
  EXPECT_EQ(server_->stats().web_config_reloads, 1u);
  // A broken file keeps the running config and is counted once.
  write_config(tls("basic_auth_users:\n  alice: plaintext\n"));
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(tls_get(port_, "/metrics", two).status, 200);
  EXPECT_EQ(server_->stats().web_config_reload_failures, 1u);
  EXPECT_FALSE(server_->stats().web_config_last_reload_successful);
  // Turning TLS off by an edit is refused: the API must not silently go
  // plain-text.
  write_config("basic_auth_users:\n  alice: " + bcrypt("three") + "\n");
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(tls_get(port_, "/metrics", two).status, 200);
  EXPECT_EQ(server_->stats().web_config_reload_failures, 2u);
  // A rotated certificate is picked up for new connections.
  const uint64_t reloads = server_->stats().web_config_reloads;
  write_config(tls("basic_auth_users:\n  alice: " + bcrypt("two") + "\n"));
  std::this_thread::sleep_for(400ms);
  fs::copy_file(path("server.crt"), path("server.crt.new"), fs::copy_options::overwrite_existing);
  fs::rename(path("server.crt.new"), path("server.crt"));
  std::this_thread::sleep_for(400ms);
  EXPECT_GT(server_->stats().web_config_reloads, reloads + 1);
  EXPECT_EQ(tls_get(port_, "/metrics", two).status, 200);
}

}  // namespace
}  // namespace lw
