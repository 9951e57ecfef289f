// SPDX-License-Identifier: Apache-2.0
// The web config (exporter-toolkit format) and the HTTPS / basic auth server
// built from it. Certificates are generated at runtime with the openssl CLI
// and bcrypt hashes with crypt_r, so no key or secret is committed; the one
// fixed hash in tests/data/web is of the published test password
// "wonderland".
#include <arpa/inet.h>
#include <crypt.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "exporter/http/http_server.h"
#include "exporter/http/web_config.h"

namespace lw {
namespace {

namespace fs = std::filesystem;

const fs::path kWebDataDir = fs::path(LW_TEST_DATA_DIR) / "web";
constexpr char kFixtureHash[] = "$2y$10$49lyfHpRmaUOHYQ/u..Xl.dkHuLDu81MbpegYOdoemrn.ZzRWaqHu";
constexpr char kFixturePassword[] = "wonderland";

std::string all_errors(const std::vector<ConfigError>& errors) {
  std::string out;
  for (const ConfigError& e : errors) out += format_error(e) + "\n";
  return out;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// A bcrypt hash of `password` with a fresh $2b$ salt at cost 4 (the
// minimum: these tests check logic, not bcrypt's strength).
std::string bcrypt(const std::string& password) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  EXPECT_NE(crypt_gensalt_rn("$2b$", 4, nullptr, 0, salt, sizeof(salt)), nullptr);
  auto data = std::make_unique<crypt_data>();
  const char* hash = crypt_r(password.c_str(), salt, data.get());
  EXPECT_TRUE(hash != nullptr && hash[0] == '$');
  return hash ? hash : "";
}

std::string basic_header(const std::string& user, const std::string& password) {
  std::string plain = user + ":" + password;
  std::string out(4 * ((plain.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(plain.data()),
                          static_cast<int>(plain.size()));
  out.resize(static_cast<size_t>(n));
  return "Basic " + out;
}

// A temporary directory holding copies of the fixtures and, next to them,
// a self-signed certificate for localhost, 127.0.0.1 and ::1
// (server.crt/server.key) and an unrelated key (other.key).
class WebConfigTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string tmpl = testing::TempDir() + "lw_web_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = new fs::path(tmpl);
    for (const auto& entry : fs::directory_iterator(kWebDataDir)) {
      fs::copy_file(entry.path(), *dir_ / entry.path().filename());
    }
    const std::string d = dir_->string();
    const std::string req =
        "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost -days 1"
        " -addext subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1"
        " -keyout " +
        d + "/server.key -out " + d + "/server.crt 2>/dev/null";
    ASSERT_EQ(std::system(req.c_str()), 0) << req;
    const std::string other = "openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out " +
                              d + "/other.key 2>/dev/null";
    ASSERT_EQ(std::system(other.c_str()), 0) << other;
  }

  static void TearDownTestSuite() {
    if (dir_) fs::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }

  static fs::path path(const std::string& name) { return *dir_ / name; }

  static WebConfig load_ok(const std::string& name) {
    std::vector<ConfigError> errors;
    Result<WebConfig> r = load_web_config(path(name).string(), &errors);
    EXPECT_TRUE(r.ok()) << all_errors(errors);
    EXPECT_TRUE(errors.empty()) << all_errors(errors);
    return r.ok() ? std::move(r).value() : WebConfig{};
  }

  // The errors of `name`, which must not load, as "LINE:COLUMN: MESSAGE".
  static std::vector<std::string> load_bad(const std::string& name) {
    std::vector<ConfigError> errors;
    Result<WebConfig> r = load_web_config(path(name).string(), &errors);
    EXPECT_FALSE(r.ok());
    std::vector<std::string> out;
    if (r.ok()) return out;
    EXPECT_EQ(r.error().code, EINVAL);
    // The summary names the file and the first error's position.
    EXPECT_NE(r.error().message.find(path(name).string() + ":"), std::string::npos);
    for (const ConfigError& e : errors) {
      EXPECT_EQ(e.file, path(name).string());
      out.push_back(std::to_string(e.line) + ":" + std::to_string(e.column) + ": " + e.message);
    }
    return out;
  }

  static fs::path* dir_;
};

fs::path* WebConfigTest::dir_ = nullptr;

// Each expected entry is "LINE:COLUMN: " plus a substring of the message.
void expect_errors(const std::vector<std::string>& actual,
                   const std::vector<std::pair<std::string, std::string>>& expected) {
  std::string all;
  for (const std::string& a : actual) all += a + "\n";
  ASSERT_EQ(actual.size(), expected.size()) << all;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(actual[i].rfind(expected[i].first + ": ", 0), 0u) << all;
    EXPECT_NE(actual[i].find(expected[i].second), std::string::npos) << all;
  }
}

TEST_F(WebConfigTest, ValidFullConfig) {
  WebConfig c = load_ok("valid_tls_auth.yml");
  ASSERT_TRUE(c.tls.has_value());
  // Relative to the web config's directory, not the working directory.
  EXPECT_EQ(c.tls->cert_file, path("server.crt").string());
  EXPECT_EQ(c.tls->key_file, path("server.key").string());
  EXPECT_EQ(c.tls->min_version, TLS1_2_VERSION);
  EXPECT_EQ(c.tls->max_version, TLS1_3_VERSION);
  EXPECT_TRUE(c.tls->prefer_server_cipher_suites);
  std::vector<std::pair<std::string, std::string>> headers = {
      {"X-Content-Type-Options", "nosniff"},
      {"X-Frame-Options", "deny"},
      {"Strict-Transport-Security", "max-age=31536000"}};
  EXPECT_EQ(c.headers, headers);
  ASSERT_EQ(c.users.size(), 1u);
  EXPECT_EQ(c.users.at("alice"), kFixtureHash);
}

TEST_F(WebConfigTest, ValidSmallConfigs) {
  WebConfig tls13 = load_ok("valid_tls13.yml");
  ASSERT_TRUE(tls13.tls.has_value());
  EXPECT_EQ(tls13.tls->min_version, TLS1_3_VERSION);
  EXPECT_EQ(tls13.tls->max_version, 0);
  EXPECT_TRUE(tls13.users.empty());

  EXPECT_EQ(WebTlsConfig{}.min_version, TLS1_2_VERSION);

  WebConfig auth = load_ok("valid_auth_only.yml");
  EXPECT_FALSE(auth.tls.has_value());
  EXPECT_EQ(auth.users.size(), 1u);

  WebConfig empty = load_ok("valid_empty.yml");
  EXPECT_FALSE(empty.tls.has_value());
  EXPECT_TRUE(empty.users.empty());
  EXPECT_TRUE(empty.headers.empty());
}

TEST_F(WebConfigTest, EmptyTlsSectionMeansPlainHttp) {
  for (const char* text : {"tls_server_config:\n", "tls_server_config: {}\n"}) {
    std::vector<ConfigError> errors;
    Result<WebConfig> r = parse_web_config(text, path("inline.yml").string(), &errors);
    ASSERT_TRUE(r.ok()) << all_errors(errors);
    EXPECT_FALSE(r->tls.has_value()) << text;
  }
}

TEST_F(WebConfigTest, PromtoolAcceptsValidFixtures) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool is not installed: cannot cross-check with exporter-toolkit";
  }
  for (const char* name :
       {"valid_tls_auth.yml", "valid_tls13.yml", "valid_auth_only.yml", "valid_empty.yml"}) {
    std::string cmd = "promtool check web-config " + path(name).string() + " >/dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
}

TEST_F(WebConfigTest, UnknownAndUnsupportedKeys) {
  expect_errors(load_bad("bad_keys.yml"),
                {{"4:3", "unknown key 'cert_flie' in 'tls_server_config' (known: cert_file"},
                 {"5:3", "'tls_server_config.cipher_suites' is not supported"},
                 {"6:3", "'tls_server_config.curve_preferences' is not supported"},
                 {"8:10", "'http_server_config.http2' must be true or false"},
                 {"10:5", "header 'X-Powered-By' can not be configured"},
                 {"11:22", "header 'X-Frame-Options' must be deny|sameorigin, not 'allow'"},
                 {"12:1", "unknown key 'web_listen_address'"}});
}

TEST_F(WebConfigTest, UnsupportedTlsSettings) {
  expect_errors(load_bad("bad_tls.yml"),
                {{"4:21", "'tls_server_config.client_auth_type' must be one of NoClientCert|"},
                 {"5:3", "'tls_server_config.cert' is not supported: inline certificates"},
                 {"6:16", "'TLS11' is not supported: leakwatch requires TLS 1.2 or later"},
                 {"7:16", "must be TLS12 or TLS13, not 'TLS14'"}});
  expect_errors(load_bad("bad_versions.yml"),
                {{"5:16", "'tls_server_config.max_version' is below"}});
  expect_errors(load_bad("bad_key_only.yml"),
                {{"2:3", "'tls_server_config' needs both cert_file and key_file"}});
}

TEST_F(WebConfigTest, BadUsers) {
  std::vector<std::string> errors = load_bad("bad_users.yml");
  expect_errors(errors, {{"2:10", "the password of user 'alice' must be a bcrypt hash"},
                         {"3:8", "the password of user 'bob' must be a bcrypt hash"},
                         {"4:3", "user name 'carol:x' must be non-empty without ':'"},
                         {"5:3", "duplicate user 'alice'"},
                         {"6:9", "the password of user 'dave' must be a bcrypt hash"}});
  // A plaintext password written by mistake must not reach the logs.
  for (const std::string& e : errors) EXPECT_EQ(e.find("wonderland"), std::string::npos) << e;
}

TEST_F(WebConfigTest, DuplicateUser) {
  std::vector<ConfigError> errors;
  std::string text = "basic_auth_users:\n  alice: " + std::string(kFixtureHash) +
                     "\n  alice: " + kFixtureHash + "\n";
  ASSERT_FALSE(parse_web_config(text, path("inline.yml").string(), &errors).ok());
  ASSERT_EQ(errors.size(), 1u) << all_errors(errors);
  EXPECT_EQ(format_error(errors[0]), path("inline.yml").string() + ":3:3: duplicate user 'alice'");
}

TEST_F(WebConfigTest, CertificateAndKeyAreLoaded) {
  std::vector<std::string> missing = load_bad("bad_cert_missing.yml");
  expect_errors(missing, {{"2:14", "No such file or directory"}});
  EXPECT_NE(missing[0].find(path("missing.crt").string()), std::string::npos) << missing[0];
  expect_errors(load_bad("bad_key_mismatch.yml"), {{"3:13", "does not match the certificate"}});
  // A key of another type than the certificate's.
  const std::string ec = "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out " +
                         path("ec.key").string() + " 2>/dev/null";
  ASSERT_EQ(std::system(ec.c_str()), 0) << ec;
  std::vector<ConfigError> ec_errors;
  EXPECT_FALSE(parse_web_config("tls_server_config:\n  cert_file: server.crt\n"
                                "  key_file: ec.key\n",
                                path("inline.yml").string(), &ec_errors)
                   .ok());
  ASSERT_EQ(ec_errors.size(), 1u) << all_errors(ec_errors);
  EXPECT_EQ(ec_errors[0].line, 3);
  EXPECT_NE(ec_errors[0].message.find("does not match the certificate"), std::string::npos)
      << all_errors(ec_errors);

  // Not PEM: the certificate's own error, at cert_file.
  write_file(path("garbage.crt"), "not a certificate\n");
  std::vector<ConfigError> errors;
  EXPECT_FALSE(parse_web_config("tls_server_config:\n  cert_file: garbage.crt\n"
                                "  key_file: server.key\n",
                                path("inline.yml").string(), &errors)
                   .ok());
  ASSERT_EQ(errors.size(), 1u) << all_errors(errors);
  EXPECT_EQ(errors[0].line, 2);
  EXPECT_NE(errors[0].message.find("cannot load the certificate"), std::string::npos)
      << all_errors(errors);
}

TEST_F(WebConfigTest, EncryptedKeyIsAnErrorNotAPrompt) {
  const std::string cmd =
      "openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 "
      "-aes256 -pass pass:secret -out " +
      path("encrypted.key").string() + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<ConfigError> errors;
  EXPECT_FALSE(parse_web_config("tls_server_config:\n  cert_file: server.crt\n"
                                "  key_file: encrypted.key\n",
                                path("inline.yml").string(), &errors)
                   .ok());
  ASSERT_EQ(errors.size(), 1u) << all_errors(errors);
  EXPECT_EQ(errors[0].line, 3);
  EXPECT_NE(errors[0].message.find("the key is encrypted"), std::string::npos)
      << all_errors(errors);
}

TEST_F(WebConfigTest, SyntaxErrorsAndFiles) {
  std::vector<std::string> syntax = load_bad("bad_syntax.yml");
  ASSERT_EQ(syntax.size(), 1u);
  EXPECT_EQ(syntax[0].rfind("3:", 0), 0u) << syntax[0];
  EXPECT_NE(syntax[0].find("YAML syntax error"), std::string::npos) << syntax[0];

  std::vector<ConfigError> errors;
  EXPECT_FALSE(parse_web_config("- a\n- b\n", "seq.yml", &errors).ok());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(format_error(errors[0]),
            "seq.yml:1:1: the web config must be a mapping of keys to values, not a sequence");

  errors.clear();
  EXPECT_FALSE(parse_web_config("basic_auth_users: {}\n---\nx: 1\n", "two.yml", &errors).ok());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("content after the first YAML document"), std::string::npos);

  errors.clear();
  Result<WebConfig> missing = load_web_config(path("absent.yml").string(), &errors);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ENOENT);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].line, 0);

  errors.clear();
  Result<WebConfig> dir = load_web_config(dir_->string(), &errors);
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.error().message.find("not a regular file"), std::string::npos);
}

TEST(BcryptHash, Format) {
  EXPECT_TRUE(is_bcrypt_hash(kFixtureHash));
  std::string h = kFixtureHash;
  for (const char* prefix : {"$2a$", "$2b$", "$2y$"}) {
    EXPECT_TRUE(is_bcrypt_hash(prefix + h.substr(4))) << prefix;
  }
  EXPECT_FALSE(is_bcrypt_hash("$2x$" + h.substr(4)));  // the buggy 2x variant
  EXPECT_FALSE(is_bcrypt_hash("$2y$03$" + h.substr(7)));
  EXPECT_FALSE(is_bcrypt_hash("$2y$32$" + h.substr(7)));
  EXPECT_FALSE(is_bcrypt_hash(h.substr(0, 59)));
  EXPECT_FALSE(is_bcrypt_hash(h.substr(0, 59) + "!"));
  EXPECT_FALSE(is_bcrypt_hash("$6$salt$" + std::string(52, 'a')));  // sha512crypt
  EXPECT_FALSE(is_bcrypt_hash("wonderland"));
  EXPECT_FALSE(is_bcrypt_hash(""));
}

TEST(BasicAuth, ChecksCredentials) {
  BasicAuth auth({{"alice", kFixtureHash}, {"bob", bcrypt("pa:ss word")}});
  EXPECT_TRUE(auth.check(basic_header("alice", kFixturePassword)));
  EXPECT_TRUE(auth.check(basic_header("bob", "pa:ss word")));  // ':' ends only the user
  // The scheme is case-insensitive (RFC 7617).
  std::string lower = basic_header("alice", kFixturePassword);
  lower.replace(0, 5, "basic");
  EXPECT_TRUE(auth.check(lower));

  EXPECT_FALSE(auth.check(basic_header("alice", "wonderlanD")));
  EXPECT_FALSE(auth.check(basic_header("alice", "")));
  EXPECT_FALSE(auth.check(basic_header("bob", kFixturePassword)));
  EXPECT_FALSE(auth.check(basic_header("carol", kFixturePassword)));
  EXPECT_FALSE(auth.check(""));
  EXPECT_FALSE(auth.check("Basic"));
  EXPECT_FALSE(auth.check("Basic "));
  EXPECT_FALSE(auth.check("Basic !!!!"));
  EXPECT_FALSE(auth.check("Basic YWxpY2U"));   // unpadded
  EXPECT_FALSE(auth.check("Basic YWxpY2U="));  // "alice": no ':'
  EXPECT_FALSE(auth.check("Bearer " + basic_header("alice", kFixturePassword).substr(6)));
  // "alice:wonderland\0x": crypt(3) would see only "wonderland".
  EXPECT_FALSE(auth.check("Basic YWxpY2U6d29uZGVybGFuZAB4"));
}

TEST(BasicAuth, CachesOnlySuccesses) {
  const std::string hash = bcrypt("right");
  BasicAuth auth({{"u", hash}});
  EXPECT_FALSE(auth.check(basic_header("u", "wrong")));
  EXPECT_EQ(auth.cached_entries(), 0u);
  EXPECT_TRUE(auth.check(basic_header("u", "right")));
  EXPECT_EQ(auth.cached_entries(), 1u);
  EXPECT_TRUE(auth.check(basic_header("u", "right")));
  EXPECT_EQ(auth.cached_entries(), 1u);
  // A cached success does not let another password in.
  EXPECT_FALSE(auth.check(basic_header("u", "wrong")));
  EXPECT_EQ(auth.cached_entries(), 1u);
}

TEST(BasicAuth, CacheIsBoundedAndExpires) {
  std::map<std::string, std::string> users;
  for (int i = 0; i < 4; ++i) users["u" + std::to_string(i)] = bcrypt("p" + std::to_string(i));
  BasicAuth bounded(users, std::chrono::minutes(5), 2);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 4; ++i) {
      EXPECT_TRUE(bounded.check(basic_header("u" + std::to_string(i), "p" + std::to_string(i))));
      EXPECT_LE(bounded.cached_entries(), 2u);
    }
  }

  // A zero TTL: every check runs bcrypt again, and still succeeds.
  BasicAuth expiring(users, std::chrono::seconds(0));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(expiring.check(basic_header("u1", "p1")));
  EXPECT_LE(expiring.cached_entries(), 1u);

  BasicAuth uncached(users, std::chrono::minutes(5), 0);
  EXPECT_TRUE(uncached.check(basic_header("u2", "p2")));
  EXPECT_EQ(uncached.cached_entries(), 0u);
}

// --- A real server -----------------------------------------------------

std::shared_ptr<const DaemonSnapshot> fresh_snapshot() {
  auto snap = std::make_shared<DaemonSnapshot>();
  snap->timestamp =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return snap;
}

struct Handshake {
  bool ok = false;
  int version = 0;          // negotiated, when ok
  unsigned long error = 0;  // ERR_peek_last_error() otherwise
};

// A raw OpenSSL handshake limited to [min_version, max_version], at
// security level 0 so that the client itself allows TLS 1.0/1.1 and it is
// the server that refuses.
Handshake handshake(int port, int min_version, int max_version) {
  Handshake h;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        SSL_CTX_free);
  if (!ctx) return h;
  SSL_CTX_set_security_level(ctx.get(), 0);
  SSL_CTX_set_cipher_list(ctx.get(), "DEFAULT:@SECLEVEL=0");
  SSL_CTX_set_min_proto_version(ctx.get(), min_version);
  SSL_CTX_set_max_proto_version(ctx.get(), max_version);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) close(fd);
    return h;
  }
  SSL* ssl = SSL_new(ctx.get());
  SSL_set_fd(ssl, fd);
  ERR_clear_error();
  h.ok = SSL_connect(ssl) == 1;
  if (h.ok) {
    h.version = SSL_version(ssl);
    SSL_shutdown(ssl);
  } else {
    h.error = ERR_peek_last_error();
  }
  ERR_clear_error();
  SSL_free(ssl);
  close(fd);
  return h;
}

bool ipv6_loopback_available() {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in6 addr = {};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_loopback;
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

class WebServerTest : public WebConfigTest {
 protected:
  // Starts a server from a web config written at runtime with a fresh
  // bcrypt hash of kPassword for kUser, plus `extra` YAML.
  void start(const std::string& tls_yaml, const std::string& host = "127.0.0.1") {
    std::string text = tls_yaml +
                       "http_server_config:\n  headers:\n"
                       "    X-Content-Type-Options: nosniff\n"
                       "basic_auth_users:\n  " +
                       std::string(kUser) + ": " + bcrypt(kPassword) + "\n";
    std::vector<ConfigError> errors;
    Result<WebConfig> web = parse_web_config(text, path("runtime.yml").string(), &errors);
    ASSERT_TRUE(web.ok()) << all_errors(errors);
    server_ = std::make_unique<HttpServer>(fresh_snapshot, 1000,
                                           std::make_shared<const WebConfig>(std::move(*web)));
    Result<int> port = server_->start(host, 0);
    ASSERT_TRUE(port.ok()) << port.error().message;
    port_ = *port;
  }

  std::unique_ptr<httplib::SSLClient> client(const std::string& host = "127.0.0.1") {
    auto cli = std::make_unique<httplib::SSLClient>(host, port_);
    // Verify the server for real: the generated certificate is the CA.
    cli->set_ca_cert_path(path("server.crt").string().c_str());
    cli->enable_server_certificate_verification(true);
    cli->set_connection_timeout(5);
    cli->set_read_timeout(5);
    return cli;
  }

  void TearDown() override {
    if (server_) server_->stop();
  }

  static constexpr char kUser[] = "scraper";
  static constexpr char kPassword[] = "correct horse battery staple";
  static constexpr char kTls[] =
      "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

TEST_F(WebServerTest, HttpsWithBasicAuth) {
  start(kTls);
  auto cli = client();
  cli->set_basic_auth(kUser, kPassword);
  for (const char* p : {"/", "/healthz", "/metrics", "/api/v1/processes", "/api/v1/status"}) {
    auto res = cli->Get(p);
    ASSERT_TRUE(res) << p << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200) << p;
    EXPECT_EQ(res->get_header_value("X-Content-Type-Options"), "nosniff") << p;
  }
  // Authenticated, past the pre-routing check, to the route's own 404.
  auto sites = cli->Get("/api/v1/processes/1/sites");
  ASSERT_TRUE(sites);
  EXPECT_EQ(sites->status, 404);
}

TEST_F(WebServerTest, EveryPathNeedsCredentials) {
  start(kTls);
  auto anonymous = client();
  auto wrong = client();
  wrong->set_basic_auth(kUser, "incorrect horse");
  auto stranger = client();
  stranger->set_basic_auth("someone", kPassword);
  for (httplib::SSLClient* cli : {anonymous.get(), wrong.get(), stranger.get()}) {
    for (const char* p : {"/", "/metrics", "/api/v1/processes", "/api/v1/status",
                          "/api/v1/processes/1/sites", "/debug/pprof/heap?pid=1", "/unknown"}) {
      auto res = cli->Get(p);
      ASSERT_TRUE(res) << p << ": " << httplib::to_string(res.error());
      EXPECT_EQ(res->status, 401) << p;
      EXPECT_EQ(res->get_header_value("WWW-Authenticate"), R"(Basic realm="leakwatch")");
      // Configured headers go on refusals too.
      EXPECT_EQ(res->get_header_value("X-Content-Type-Options"), "nosniff") << p;
    }
  }
}

TEST_F(WebServerTest, HealthzNeedsNoCredentials) {
  // It says nothing about the traced processes, and Kubernetes probes
  // carry no credentials (docs/api.md).
  start(kTls);
  auto res = client()->Get("/healthz");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "ok\n");
  // Configured headers go on it too.
  EXPECT_EQ(res->get_header_value("X-Content-Type-Options"), "nosniff");
}

TEST_F(WebServerTest, PlainHttpToTheTlsPortAnswersOnlyHealthz) {
  // What a kubelet httpGet probe sends: plain HTTP, no credentials. It gets
  // /healthz; every other path gets 400 and no data, credentials or not.
  start(kTls);
  httplib::Client plain("127.0.0.1", port_);
  plain.set_connection_timeout(5);
  plain.set_read_timeout(5);
  auto health = plain.Get("/healthz");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  plain.set_basic_auth(kUser, kPassword);
  for (const char* p : {"/metrics", "/api/v1/processes", "/", "/debug/pprof/heap"}) {
    auto res = plain.Get(p);
    ASSERT_TRUE(res) << p;
    EXPECT_EQ(res->status, 400) << p;
    EXPECT_NE(res->body.find("this port serves HTTPS"), std::string::npos) << res->body;
  }
}

TEST_F(WebServerTest, RefusesTlsBelow12) {
  start(kTls);
  for (int old : {TLS1_VERSION, TLS1_1_VERSION}) {
    Handshake h = handshake(port_, old, old);
    EXPECT_FALSE(h.ok) << std::hex << old;
    // The server's protocol_version alert: the client did offer the old
    // version, and the server refused it.
    EXPECT_EQ(ERR_GET_REASON(h.error), SSL_R_TLSV1_ALERT_PROTOCOL_VERSION)
        << ERR_reason_error_string(h.error);
  }
  Handshake tls12 = handshake(port_, TLS1_2_VERSION, TLS1_2_VERSION);
  EXPECT_TRUE(tls12.ok) << ERR_reason_error_string(tls12.error);
  EXPECT_EQ(tls12.version, TLS1_2_VERSION);
  Handshake best = handshake(port_, TLS1_VERSION, TLS1_3_VERSION);
  EXPECT_TRUE(best.ok);
  EXPECT_EQ(best.version, TLS1_3_VERSION);
}

TEST_F(WebServerTest, HandBuiltConfigCannotGoBelowTls12) {
  auto web = std::make_shared<WebConfig>();
  web->tls = WebTlsConfig{path("server.crt").string(), path("server.key").string(), TLS1_VERSION};
  server_ = std::make_unique<HttpServer>(fresh_snapshot, 1000, web);
  Result<int> port = server_->start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.error().message;
  Handshake tls11 = handshake(*port, TLS1_1_VERSION, TLS1_1_VERSION);
  EXPECT_FALSE(tls11.ok);
  EXPECT_EQ(ERR_GET_REASON(tls11.error), SSL_R_TLSV1_ALERT_PROTOCOL_VERSION);
}

TEST_F(WebServerTest, MinVersionTls13) {
  start(std::string(kTls) + "  min_version: TLS13\n");
  Handshake tls12 = handshake(port_, TLS1_VERSION, TLS1_2_VERSION);
  EXPECT_FALSE(tls12.ok);
  EXPECT_EQ(ERR_GET_REASON(tls12.error), SSL_R_TLSV1_ALERT_PROTOCOL_VERSION);
  Handshake tls13 = handshake(port_, TLS1_3_VERSION, TLS1_3_VERSION);
  EXPECT_TRUE(tls13.ok);
}

TEST_F(WebServerTest, MaxVersionTls12) {
  start(std::string(kTls) + "  max_version: TLS12\n");
  Handshake best = handshake(port_, TLS1_2_VERSION, TLS1_3_VERSION);
  EXPECT_TRUE(best.ok);
  EXPECT_EQ(best.version, TLS1_2_VERSION);
}

TEST_F(WebServerTest, Ipv6Loopback) {
  if (!ipv6_loopback_available()) GTEST_SKIP() << "no IPv6 loopback (::1) on this host";
  start(kTls, "::1");
  auto cli = client("::1");
  cli->set_basic_auth(kUser, kPassword);
  auto res = cli->Get("/healthz");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  auto anonymous = client("::1")->Get("/metrics");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
}

TEST_F(WebServerTest, BasicAuthOverPlainHttp) {
  start("");
  httplib::Client cli("127.0.0.1", port_);
  auto anonymous = cli.Get("/metrics");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  cli.set_basic_auth(kUser, kPassword);
  auto res = cli.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST_F(WebServerTest, StartFailsWhenTheCertificateIsGone) {
  fs::copy_file(path("server.crt"), path("moved.crt"), fs::copy_options::overwrite_existing);
  std::vector<ConfigError> errors;
  Result<WebConfig> web =
      parse_web_config("tls_server_config:\n  cert_file: moved.crt\n  key_file: server.key\n",
                       path("runtime.yml").string(), &errors);
  ASSERT_TRUE(web.ok()) << all_errors(errors);
  fs::remove(path("moved.crt"));
  HttpServer server(fresh_snapshot, 1000, std::make_shared<const WebConfig>(std::move(*web)));
  Result<int> port = server.start("127.0.0.1", 0);
  ASSERT_FALSE(port.ok());
  EXPECT_NE(port.error().message.find("moved.crt"), std::string::npos) << port.error().message;
  EXPECT_NE(port.error().message.find("No such file"), std::string::npos) << port.error().message;
}

TEST(HttpServerPlain, OldConstructorStillServesHttp) {
  HttpServer server(fresh_snapshot, 1000);
  Result<int> port = server.start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.error().message;
  httplib::Client cli("127.0.0.1", *port);
  auto res = cli.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_FALSE(res->has_header("WWW-Authenticate"));
  server.stop();
}

}  // namespace
}  // namespace lw
