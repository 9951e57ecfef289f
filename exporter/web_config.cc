// SPDX-License-Identifier: Apache-2.0
#include "exporter/web_config.h"

#include <crypt.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <set>
#include <sstream>

#include "core/fd.h"
#include "core/yaml_support.h"

namespace lw {
namespace {

using yaml_support::ErrorSink;
using yaml_support::is_plain_scalar;
using yaml_support::kind_of;
using yaml_support::kMaxQuotedBytes;
using yaml_support::printable;
using yaml_support::second_document;





// One key a mapping may hold: how to parse its value (given the value node
// and its dotted path), or, when `unsupported` is set, why it is refused.
struct Field {
  std::string_view key;
  std::function<void(const YAML::Node&, const std::string&)> parse;
  std::string_view unsupported = {};
};

// Parses the mapping `node` at `path` against `fields`: non-scalar,
// duplicate and unknown keys are errors, as exporter-toolkit's strict
// unmarshalling makes them. A key with an empty value is skipped: every
// key here is optional, and Go's YAML decoder reads an empty value as the
// zero value.
void parse_mapping(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                   std::initializer_list<Field> fields) {
  if (!node.IsMap()) {
    errors.add(node.Mark(), (path.empty() ? std::string("the web config") : yaml_support::quoted(path)) +
                                " must be a mapping of keys to values, not " + kind_of(node));
    return;
  }
  std::set<std::string> seen;
  for (const auto& entry : node) {
    const YAML::Node& key = entry.first;
    if (!key.IsScalar()) {
      errors.add(key.Mark(), "keys must be plain names, not " + kind_of(key));
      continue;
    }
    const std::string& name = key.Scalar();
    const std::string key_path = path.empty() ? name : path + "." + name;
    if (!seen.insert(name).second) {
      errors.add(key.Mark(), "duplicate key " + yaml_support::quoted(key_path));
      continue;
    }
    auto field =
        std::find_if(fields.begin(), fields.end(), [&](const Field& f) { return f.key == name; });
    if (field == fields.end()) {
      std::string known;
      for (const Field& f : fields) {
        if (f.unsupported.empty()) known += (known.empty() ? "" : ", ") + std::string(f.key);
      }
      errors.add(key.Mark(), "unknown key " + yaml_support::quoted(name) +
                                 (path.empty() ? "" : " in " + yaml_support::quoted(path)) +
                                 " (known: " + known + ")");
      continue;
    }
    if (!field->unsupported.empty()) {
      errors.add(key.Mark(),
                 yaml_support::quoted(key_path) + " is not supported: " + std::string(field->unsupported));
      continue;
    }
    if (entry.second.IsNull()) continue;
    field->parse(entry.second, key_path);
  }
}

std::optional<std::string> read_string(ErrorSink& errors, const YAML::Node& node,
                                       const std::string& path) {
  if (!node.IsScalar()) {
    errors.add(node.Mark(), yaml_support::quoted(path) + " must be a string, not " + kind_of(node));
    return std::nullopt;
  }
  // A "\0" escape would silently cut paths handed to C APIs.
  if (node.Scalar().find('\0') != std::string::npos) {
    errors.add(node.Mark(), yaml_support::quoted(path) + " contains a NUL character");
    return std::nullopt;
  }
  return node.Scalar();
}

void read_bool(ErrorSink& errors, const YAML::Node& node, const std::string& path, bool& out) {
  // Plain (unquoted) scalars carry the tag "?": a quoted "true" is a string.
  if (node.IsScalar() && node.Tag() == "?") {
    const std::string& s = node.Scalar();
    if (s == "true" || s == "True" || s == "TRUE") {
      out = true;
      return;
    }
    if (s == "false" || s == "False" || s == "FALSE") {
      out = false;
      return;
    }
  }
  errors.add(node.Mark(), yaml_support::quoted(path) + " must be true or false, not " +
                              (node.IsScalar() ? yaml_support::quoted(node.Scalar()) : kind_of(node)));
}

// exporter-toolkit's names for TLS versions; below 1.2 is refused (RFC 8996
// deprecates TLS 1.0 and 1.1).
std::optional<int> read_tls_version(ErrorSink& errors, const YAML::Node& node,
                                    const std::string& path) {
  std::optional<std::string> s = read_string(errors, node, path);
  if (!s) return std::nullopt;
  if (*s == "TLS12") return TLS1_2_VERSION;
  if (*s == "TLS13") return TLS1_3_VERSION;
  if (*s == "TLS10" || *s == "TLS11") {
    errors.add(node.Mark(), yaml_support::quoted(path) + " " + yaml_support::quoted(*s) +
                                " is not supported: leakwatch requires TLS 1.2 or later");
  } else {
    errors.add(node.Mark(), yaml_support::quoted(path) + " must be TLS12 or TLS13, not " + yaml_support::quoted(*s));
  }
  return std::nullopt;
}

// Relative paths are relative to the web config's directory, as in
// exporter-toolkit; made absolute so that nothing depends on the daemon's
// working directory later.
std::string resolve(const std::filesystem::path& dir, const std::string& file) {
  return (dir / file).lexically_normal().string();
}

// Which file an OpenSSL failure is about, to blame the right YAML key.
enum class TlsBlame { kCert, kKey, kOther };

std::string openssl_error() {
  unsigned long e = ERR_peek_last_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  if (const char* reason = ERR_reason_error_string(e)) return reason;
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// A clear "No such file or directory" instead of OpenSSL's library-prefixed
// one, and no attempt to read a FIFO or directory.
Status check_regular_file(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return errno_error(yaml_support::quoted(path));
  if (!S_ISREG(st.st_mode)) return Error{EINVAL, yaml_support::quoted(path) + " is not a regular file"};
  if (access(path.c_str(), R_OK) != 0) return errno_error(yaml_support::quoted(path));
  return ok_status();
}

// OpenSSL prompts on the terminal for an encrypted key's passphrase unless
// a callback answers; answering "none" fails the load instead, and records
// that a passphrase was asked for, for the message.
int refuse_passphrase(char*, int, int, void* asked) {
  if (asked) *static_cast<bool*>(asked) = true;
  return 0;
}

Status configure_tls(const WebTlsConfig& tls, SSL_CTX& ctx, TlsBlame* blame) {
  *blame = TlsBlame::kOther;
  // No compression (CRIME), no renegotiation (client-initiated renegotiation
  // is a cheap CPU DoS and nothing here needs it).
  uint64_t options = SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION;
  if (tls.prefer_server_cipher_suites) options |= SSL_OP_CIPHER_SERVER_PREFERENCE;
  SSL_CTX_set_options(&ctx, options);
  // Never below TLS 1.2, whatever a hand-built WebTlsConfig says.
  if (SSL_CTX_set_min_proto_version(&ctx, std::max(tls.min_version, TLS1_2_VERSION)) != 1 ||
      SSL_CTX_set_max_proto_version(&ctx, tls.max_version) != 1) {
    return Error{EINVAL, "cannot set the TLS versions: " + openssl_error()};
  }

  *blame = TlsBlame::kCert;
  if (Status st = check_regular_file(tls.cert_file); !st) return st;
  if (SSL_CTX_use_certificate_chain_file(&ctx, tls.cert_file.c_str()) != 1) {
    return Error{EINVAL, "cannot load the certificate " + yaml_support::quoted(tls.cert_file) + ": " +
                             openssl_error() + " (expected PEM)"};
  }

  *blame = TlsBlame::kKey;
  if (Status st = check_regular_file(tls.key_file); !st) return st;
  bool asked_passphrase = false;
  SSL_CTX_set_default_passwd_cb(&ctx, refuse_passphrase);
  SSL_CTX_set_default_passwd_cb_userdata(&ctx, &asked_passphrase);
  int loaded = SSL_CTX_use_PrivateKey_file(&ctx, tls.key_file.c_str(), SSL_FILETYPE_PEM);
  // The context outlives this frame; the flag does not.
  SSL_CTX_set_default_passwd_cb_userdata(&ctx, nullptr);
  const std::string mismatch = "the private key " + yaml_support::quoted(tls.key_file) +
                               " does not match the certificate " + yaml_support::quoted(tls.cert_file);
  if (loaded != 1) {
    // A key of the certificate's type is checked against it right here.
    unsigned long e = ERR_peek_last_error();
    if (ERR_GET_LIB(e) == ERR_LIB_X509 && ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH) {
      ERR_clear_error();
      return Error{EINVAL, mismatch};
    }
    std::string why = openssl_error();
    if (asked_passphrase) why = "the key is encrypted; leakwatch needs an unencrypted key";
    return Error{EINVAL, "cannot load the private key " + yaml_support::quoted(tls.key_file) + ": " + why};
  }
  // A key of another type (EC key, RSA certificate) lands in another slot
  // and is caught only here.
  if (SSL_CTX_check_private_key(&ctx) != 1) return Error{EINVAL, mismatch + ": " + openssl_error()};
  return ok_status();
}

void parse_tls(ErrorSink& errors, const YAML::Node& node, const std::string& path,
               const std::filesystem::path& dir, WebConfig& config) {
  WebTlsConfig tls;
  YAML::Mark cert_mark, key_mark, max_mark;
  constexpr std::string_view kNoClientCerts =
      "leakwatch does not verify client certificates (only client_auth_type NoClientCert)";
  // An empty section, like an absent one, means plain HTTP.
  if (node.IsMap() && node.size() == 0) return;
  const size_t errors_before = errors.size();
  parse_mapping(
      errors, node, path,
      {{"cert_file",
        [&](const YAML::Node& v, const std::string& p) {
          if (auto s = read_string(errors, v, p); s && !s->empty()) {
            tls.cert_file = resolve(dir, *s);
            cert_mark = v.Mark();
          }
        }},
       {"key_file",
        [&](const YAML::Node& v, const std::string& p) {
          if (auto s = read_string(errors, v, p); s && !s->empty()) {
            tls.key_file = resolve(dir, *s);
            key_mark = v.Mark();
          }
        }},
       {"client_auth_type",
        [&](const YAML::Node& v, const std::string& p) {
          std::optional<std::string> s = read_string(errors, v, p);
          if (!s || s->empty() || *s == "NoClientCert") return;
          static constexpr std::string_view kClientCertTypes[] = {
              "RequestClientCert", "RequireAnyClientCert", "RequireClientCert",
              "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"};
          if (std::find(std::begin(kClientCertTypes), std::end(kClientCertTypes), *s) !=
              std::end(kClientCertTypes)) {
            errors.add(v.Mark(), yaml_support::quoted(p) + " " + yaml_support::quoted(*s) +
                                     " is not supported: " + std::string(kNoClientCerts));
          } else {
            errors.add(v.Mark(), yaml_support::quoted(p) + " must be NoClientCert, not " + yaml_support::quoted(*s));
          }
        }},
       {"client_ca_file", {}, kNoClientCerts},
       {"client_ca", {}, kNoClientCerts},
       {"client_allowed_sans", {}, kNoClientCerts},
       {"cert", {}, "inline certificates are not supported; use cert_file"},
       {"key", {}, "inline keys are not supported; use key_file"},
       {"min_version",
        [&](const YAML::Node& v, const std::string& p) {
          if (auto version = read_tls_version(errors, v, p)) tls.min_version = *version;
        }},
       {"max_version",
        [&](const YAML::Node& v, const std::string& p) {
          if (auto version = read_tls_version(errors, v, p)) {
            tls.max_version = *version;
            max_mark = v.Mark();
          }
        }},
       {"cipher_suites", {}, "leakwatch uses OpenSSL's default cipher suites; remove the key"},
       {"curve_preferences", {}, "leakwatch uses OpenSSL's default curves; remove the key"},
       {"prefer_server_cipher_suites", [&](const YAML::Node& v, const std::string& p) {
          read_bool(errors, v, p, tls.prefer_server_cipher_suites);
        }}});
  if (errors.size() != errors_before) return;
  if (tls.max_version != 0 && tls.max_version < tls.min_version) {
    errors.add(max_mark, yaml_support::quoted(path + ".max_version") + " is below " +
                             yaml_support::quoted(path + ".min_version"));
    return;
  }
  // exporter-toolkit would serve plain HTTP when neither file is given and
  // ignore the rest of the section; an operator who wrote a TLS section
  // expects TLS, so an incomplete one is an error.
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    errors.add(node.Mark(), yaml_support::quoted(path) + " needs both cert_file and key_file");
    return;
  }
  // Load the files now so that a bad certificate stops the start, not the
  // first scrape. The server loads them again when it starts.
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_server_method()),
                                                        SSL_CTX_free);
  if (!ctx) {
    errors.add(node.Mark(), "cannot create a TLS context: " + openssl_error());
    return;
  }
  TlsBlame blame;
  if (Status st = configure_tls(tls, *ctx, &blame); !st) {
    const YAML::Mark& mark = blame == TlsBlame::kCert  ? cert_mark
                             : blame == TlsBlame::kKey ? key_mark
                                                       : node.Mark();
    errors.add(mark, st.error().message);
    return;
  }
  config.tls = std::move(tls);
}

// The headers exporter-toolkit allows, with their allowed values where the
// header is an enumeration (empty: any value). Keeping the same list keeps a
// file valid for both.
struct AllowedHeader {
  std::string_view name;
  std::vector<std::string_view> values;
};
const AllowedHeader kAllowedHeaders[] = {
    {"Strict-Transport-Security", {}},
    {"X-Content-Type-Options", {"nosniff"}},
    {"X-Frame-Options", {"deny", "sameorigin"}},
    {"X-XSS-Protection", {}},
    {"Content-Security-Policy", {}},
};

void parse_headers(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                   WebConfig& config) {
  if (!node.IsMap()) {
    errors.add(
        node.Mark(),
        yaml_support::quoted(path) + " must be a mapping of header names to values, not " + kind_of(node));
    return;
  }
  std::set<std::string> seen;
  for (const auto& entry : node) {
    const YAML::Node& key = entry.first;
    if (!key.IsScalar()) {
      errors.add(key.Mark(), "header names must be strings, not " + kind_of(key));
      continue;
    }
    const std::string& name = key.Scalar();
    if (!seen.insert(name).second) {
      errors.add(key.Mark(), "duplicate header " + yaml_support::quoted(name));
      continue;
    }
    const AllowedHeader* allowed = nullptr;
    for (const AllowedHeader& h : kAllowedHeaders) {
      if (h.name == name) allowed = &h;
    }
    if (!allowed) {
      std::string names;
      for (const AllowedHeader& h : kAllowedHeaders) {
        names += (names.empty() ? "" : ", ") + std::string(h.name);
      }
      errors.add(key.Mark(),
                 "header " + yaml_support::quoted(name) + " can not be configured (allowed: " + names + ")");
      continue;
    }
    std::optional<std::string> value = read_string(errors, entry.second, path + "." + name);
    if (!value) continue;
    // A line break would let the file inject headers or split the response.
    if (value->find_first_of("\r\n") != std::string::npos) {
      errors.add(entry.second.Mark(), "header " + yaml_support::quoted(name) + " contains a line break");
      continue;
    }
    if (!allowed->values.empty() && std::find(allowed->values.begin(), allowed->values.end(),
                                              *value) == allowed->values.end()) {
      std::string values;
      for (std::string_view v : allowed->values) {
        values += (values.empty() ? "" : "|") + std::string(v);
      }
      errors.add(entry.second.Mark(), "header " + yaml_support::quoted(name) + " must be " + values +
                                          ", not " + yaml_support::quoted(*value));
      continue;
    }
    config.headers.emplace_back(name, std::move(*value));
  }
}

void parse_users(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                 WebConfig& config) {
  if (!node.IsMap()) {
    errors.add(node.Mark(), yaml_support::quoted(path) +
                                " must be a mapping of user names to bcrypt hashes, not " +
                                kind_of(node));
    return;
  }
  std::set<std::string> seen;
  for (const auto& entry : node) {
    const YAML::Node& key = entry.first;
    if (!key.IsScalar()) {
      errors.add(key.Mark(), "user names must be strings, not " + kind_of(key));
      continue;
    }
    const std::string& user = key.Scalar();
    // Basic auth sends "user:password"; a ':' in the name could never match.
    if (user.empty() || user.find_first_of(":\r\n") != std::string::npos ||
        user.find('\0') != std::string::npos) {
      errors.add(key.Mark(), "user name " + yaml_support::quoted(user) + " must be non-empty without ':'");
      continue;
    }
    if (!seen.insert(user).second) {
      errors.add(key.Mark(), "duplicate user " + yaml_support::quoted(user));
      continue;
    }
    // The value is never quoted in a message: it may be a plaintext password
    // written by mistake, and messages end up in logs.
    const YAML::Node& value = entry.second;
    if (!value.IsScalar() || !is_bcrypt_hash(value.Scalar())) {
      errors.add(value.Mark(), "the password of user " + yaml_support::quoted(user) +
                                   " must be a bcrypt hash ($2y$, $2b$ or $2a$), e.g. from "
                                   "'htpasswd -nBC 10 USER'");
      continue;
    }
    config.users.emplace(user, value.Scalar());
  }
}

void parse_document(ErrorSink& errors, const YAML::Node& root, const std::filesystem::path& dir,
                    WebConfig& config) {
  // An empty file is valid, as for exporter-toolkit: plain HTTP, no auth.
  if (root.IsNull()) return;
  parse_mapping(
      errors, root, "",
      {{"tls_server_config",
        [&](const YAML::Node& v, const std::string& p) { parse_tls(errors, v, p, dir, config); }},
       {"http_server_config",
        [&](const YAML::Node& v, const std::string& p) {
          parse_mapping(errors, v, p,
                        {// leakwatch speaks HTTP/1.1 only. exporter-toolkit uses the key to
                         // turn HTTP/2 off; either value is accepted and changes nothing
                         // a client could rely on.
                         {"http2",
                          [&](const YAML::Node& x, const std::string& q) {
                            bool ignored = false;
                            read_bool(errors, x, q, ignored);
                          }},
                         {"headers", [&](const YAML::Node& x, const std::string& q) {
                            parse_headers(errors, x, q, config);
                          }}});
        }},
       {"basic_auth_users",
        [&](const YAML::Node& v, const std::string& p) { parse_users(errors, v, p, config); }},
       {"rate_limit", {}, "put a rate-limiting proxy in front of leakwatch"}});
}



// Strict base64 (RFC 4648 with padding), as browsers and curl send it.
std::optional<std::string> base64_decode(std::string_view in) {
  if (in.empty() || in.size() % 4 != 0) return std::nullopt;
  size_t padding = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '=') {
      // Padding: only the last one or two characters.
      if (i < in.size() - 2) return std::nullopt;
      ++padding;
    } else if (padding != 0 ||
               !(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/')) {
      return std::nullopt;
    }
  }
  std::string out(in.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  if (n < 0 || static_cast<size_t>(n) < padding) return std::nullopt;
  // EVP_DecodeBlock counts the padding as zero bytes.
  out.resize(static_cast<size_t>(n) - padding);
  return out;
}

// (user, password) from an Authorization header value "Basic <base64>"
// (RFC 7617; the scheme is case-insensitive).
std::optional<std::pair<std::string, std::string>> basic_credentials(std::string_view header) {
  constexpr std::string_view kScheme = "basic ";
  if (header.size() <= kScheme.size()) return std::nullopt;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return std::nullopt;
  }
  header.remove_prefix(kScheme.size());
  while (!header.empty() && header.front() == ' ') header.remove_prefix(1);
  while (!header.empty() && header.back() == ' ') header.remove_suffix(1);
  std::optional<std::string> decoded = base64_decode(header);
  if (!decoded) return std::nullopt;
  size_t colon = decoded->find(':');
  // crypt(3) takes a C string: a NUL would cut the password short.
  if (colon == std::string::npos || decoded->find('\0') != std::string::npos) {
    OPENSSL_cleanse(decoded->data(), decoded->size());
    return std::nullopt;
  }
  std::pair<std::string, std::string> creds(decoded->substr(0, colon), decoded->substr(colon + 1));
  OPENSSL_cleanse(decoded->data(), decoded->size());
  return creds;
}

// SHA-256 of the length-prefixed fields, so that ("a:", "b") and ("a", ":b")
// differ.
std::string cache_key(std::initializer_list<std::string_view> fields) {
  std::string buf;
  for (std::string_view f : fields) {
    uint64_t len = f.size();
    buf.append(reinterpret_cast<const char*>(&len), sizeof(len));
    buf.append(f);
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  bool ok = EVP_Digest(buf.data(), buf.size(), md, &md_len, EVP_sha256(), nullptr) == 1;
  OPENSSL_cleanse(buf.data(), buf.size());
  // A failing SHA-256 means a broken OpenSSL; an empty key is never cached.
  return ok ? std::string(reinterpret_cast<const char*>(md), md_len) : std::string();
}

}  // namespace

bool is_bcrypt_hash(std::string_view h) {
  // "$2b$" cost "$" then 22 characters of salt and 31 of hash.
  constexpr size_t kLength = 60;
  if (h.size() != kLength || h[0] != '$' || h[1] != '2' ||
      (h[2] != 'a' && h[2] != 'b' && h[2] != 'y') || h[3] != '$' || h[6] != '$') {
    return false;
  }
  if (!std::isdigit(static_cast<unsigned char>(h[4])) ||
      !std::isdigit(static_cast<unsigned char>(h[5]))) {
    return false;
  }
  int cost = (h[4] - '0') * 10 + (h[5] - '0');
  if (cost < 4 || cost > 31) return false;
  return std::all_of(h.begin() + 7, h.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '/';
  });
}

Status configure_tls_context(const WebTlsConfig& tls, ssl_ctx_st& ctx) {
  TlsBlame blame;
  return configure_tls(tls, ctx, &blame);
}

Result<WebConfig> parse_web_config(std::string_view text, const std::string& path,
                                   std::vector<ConfigError>* errors) {
  ErrorSink sink(path);
  WebConfig config;
  config.file = path;
  if (text.size() > kMaxConfigBytes) {
    sink.add_at(0, 0,
                "file is " + std::to_string(text.size()) + " bytes; the limit is " +
                    std::to_string(kMaxConfigBytes));
  } else {
    std::error_code ec;
    std::filesystem::path absolute = std::filesystem::absolute(path, ec);
    if (ec) {
      sink.add_at(0, 0,
                  "cannot resolve the directory of " + yaml_support::quoted(path) + ": " + ec.message());
    } else {
      try {
        const std::string input(text);
        if (std::optional<YAML::Mark> extra = second_document(input)) {
          sink.add(*extra, "content after the first YAML document (a stray ',' or a second '---')");
        } else {
          parse_document(sink, YAML::Load(input), absolute.parent_path(), config);
        }
      } catch (const YAML::Exception& e) {
        // DeepRecursion included: yaml-cpp bounds its nesting.
        sink.add(e.mark, "YAML syntax error: " + e.msg);
      } catch (const std::exception& e) {
        sink.add_at(0, 0, std::string("could not parse: ") + e.what());
      }
    }
  }
  if (sink.size() == 0) return config;
  std::vector<ConfigError> all = sink.take();
  std::string summary = format_error(all.front());
  if (all.size() > 1) summary += " (and " + std::to_string(all.size() - 1) + " more errors)";
  if (errors) errors->insert(errors->end(), all.begin(), all.end());
  return Error{EINVAL, std::move(summary)};
}

Result<WebConfig> load_web_config(const std::string& path, std::vector<ConfigError>* errors) {
  auto fail = [&](Error err) -> Result<WebConfig> {
    if (errors) errors->push_back(ConfigError{path, 0, 0, err.message, {}});
    return Error{err.code, path + ": " + err.message};
  };
  Result<std::string> text = read_regular_file(path, kMaxConfigBytes);
  if (!text) return fail(text.error());
  return parse_web_config(*text, path, errors);
}

BasicAuth::BasicAuth(std::map<std::string, std::string> users,
                     std::chrono::steady_clock::duration ttl, size_t capacity)
    : users_(std::move(users)), ttl_(ttl), capacity_(capacity) {}

bool BasicAuth::check(std::string_view authorization) {
  if (users_.empty()) return false;
  std::optional<std::pair<std::string, std::string>> creds = basic_credentials(authorization);
  if (!creds) return false;
  auto& [user, password] = *creds;
  auto it = users_.find(user);
  const bool known = it != users_.end();
  // An unknown user still costs one bcrypt, against a configured hash, so
  // that response times do not tell which user names exist.
  const std::string& hash = known ? it->second : users_.begin()->second;
  const std::string key = cache_key({user, hash, password});
  const auto now = std::chrono::steady_clock::now();
  if (known && !key.empty()) {
    std::lock_guard lock(cache_mutex_);
    auto cached = cache_.find(key);
    if (cached != cache_.end()) {
      if (cached->second > now) {
        OPENSSL_cleanse(password.data(), password.size());
        return true;
      }
      cache_.erase(cached);
    }
  }
  const bool ok = verify_uncached(hash, password) && known;
  OPENSSL_cleanse(password.data(), password.size());
  if (ok && !key.empty() && capacity_ > 0) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= capacity_) {
      std::erase_if(cache_, [&](const auto& e) { return e.second <= now; });
    }
    if (cache_.size() >= capacity_) {
      // Still full of live entries: drop the one closest to expiry.
      cache_.erase(std::min_element(cache_.begin(), cache_.end(), [](const auto& a, const auto& b) {
        return a.second < b.second;
      }));
    }
    cache_[key] = now + ttl_;
  }
  return ok;
}

size_t BasicAuth::cached_entries() const {
  std::lock_guard lock(cache_mutex_);
  return cache_.size();
}

bool BasicAuth::verify_uncached(const std::string& hash, const std::string& password) {
  // One bcrypt at a time (exporter-toolkit does the same): bad passwords are
  // not cached, so this caps what a flood of them costs at one core.
  std::lock_guard lock(bcrypt_mutex_);
  // crypt_r needs zeroed data; 32 KiB, so not on the stack.
  auto data = std::make_unique<crypt_data>();
  const char* out = crypt_r(password.c_str(), hash.c_str(), data.get());
  // Failures return NULL or a string starting with '*', never a hash.
  bool ok = out != nullptr && strlen(out) == hash.size() &&
            CRYPTO_memcmp(out, hash.data(), hash.size()) == 0;
  // The scratch space held the password's key schedule.
  OPENSSL_cleanse(data.get(), sizeof(*data));
  return ok;
}

}  // namespace lw
