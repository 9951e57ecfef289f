// SPDX-License-Identifier: Apache-2.0
#include "exporter/http/web_config.h"

#include <openssl/ssl.h>
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

#include "core/platform/fd.h"
#include "core/config/yaml_support.h"

namespace lw {
namespace {

using yaml_support::ErrorSink;
using yaml_support::Field;
using yaml_support::kind_of;
using yaml_support::MappingStyle;
using yaml_support::quoted;
using yaml_support::read_bool;
using yaml_support::read_string;
using yaml_support::second_document;

// Every key of the web config is optional, and Go's YAML decoder reads an
// empty value as the zero value: empty values are skipped, as there.
const MappingStyle kStyle{"the web config", true, true};

void parse_keys(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                std::initializer_list<Field> fields) {
  yaml_support::parse_mapping(errors, node, path, fields, kStyle);
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

// Where each TLS key was written, for the messages about its value.
struct TlsMarks {
  YAML::Mark cert, key, max, ca, auth, sans;
  bool sans_given = false;
};

// tls_server_config's keys, read into `tls`; errors added to `errors`.
void read_tls_keys(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                   const std::filesystem::path& dir, WebTlsConfig& tls, TlsMarks& marks) {
  auto file_key = [&](std::string& out, YAML::Mark& mark) {
    return [&](const YAML::Node& v, const std::string& p) {
      if (auto s = read_string(errors, v, p); s && !s->empty()) {
        out = resolve(dir, *s);
        mark = v.Mark();
      }
    };
  };
  parse_keys(
      errors, node, path,
      {{"cert_file", file_key(tls.cert_file, marks.cert)},
       {"key_file", file_key(tls.key_file, marks.key)},
       {"client_auth_type",
        [&](const YAML::Node& v, const std::string& p) {
          yaml_support::read_enum<ClientAuth>(
              errors, v, p,
              {{"NoClientCert", ClientAuth::kNone},
               {"RequestClientCert", ClientAuth::kRequest},
               {"RequireAnyClientCert", ClientAuth::kRequireAny},
               {"VerifyClientCertIfGiven", ClientAuth::kVerifyIfGiven},
               {"RequireAndVerifyClientCert", ClientAuth::kRequireAndVerify}},
              tls.client_auth);
          marks.auth = v.Mark();
        }},
       {"client_ca_file", file_key(tls.client_ca_file, marks.ca)},
       {"client_allowed_sans",
        [&](const YAML::Node& v, const std::string& p) {
          marks.sans = v.Mark();
          marks.sans_given = true;
          if (!v.IsSequence()) {
            errors.add(v.Mark(), yaml_support::quoted(p) + " must be a sequence of names, not " + kind_of(v));
            return;
          }
          size_t i = 0;
          for (const YAML::Node& item : v) {
            if (auto s = read_string(errors, item, yaml_support::index_path(p, i++)); s && !s->empty())
              tls.client_allowed_sans.push_back(*s);
          }
        }},
       {"client_ca", {}, false, "inline client CAs are not supported; use client_ca_file"},
       {"cert", {}, false, "inline certificates are not supported; use cert_file"},
       {"key", {}, false, "inline keys are not supported; use key_file"},
       {"min_version",
        [&](const YAML::Node& v, const std::string& p) {
          if (auto version = read_tls_version(errors, v, p)) tls.min_version = *version;
        }},
       {"max_version",
        [&](const YAML::Node& v, const std::string& p) {
          if (auto version = read_tls_version(errors, v, p)) {
            tls.max_version = *version;
            marks.max = v.Mark();
          }
        }},
       {"cipher_suites", {}, false,
        "leakwatch's TLS 1.2 suites are fixed to ECDHE with AES-GCM or ChaCha20-Poly1305 "
        "(docs/api.md); remove the key"},
       {"curve_preferences", {}, false, "leakwatch uses OpenSSL's default curves; remove the key"},
       {"prefer_server_cipher_suites", [&](const YAML::Node& v, const std::string& p) {
          read_bool(errors, v, p, tls.prefer_server_cipher_suites);
        }}});
}

// What the keys mean together; false (the error added) when they do not fit.
bool check_tls_keys(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                    const WebTlsConfig& tls, const TlsMarks& marks) {
  if (tls.max_version != 0 && tls.max_version < tls.min_version) {
    errors.add(marks.max, yaml_support::quoted(path + ".max_version") + " is below " + yaml_support::quoted(path + ".min_version"));
    return false;
  }
  // exporter-toolkit would serve plain HTTP when neither file is given and
  // ignore the rest of the section; an operator who wrote a TLS section
  // expects TLS, so an incomplete one is an error.
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    errors.add(node.Mark(), yaml_support::quoted(path) + " needs both cert_file and key_file");
    return false;
  }
  const bool verifies = tls.client_auth == ClientAuth::kVerifyIfGiven ||
                        tls.client_auth == ClientAuth::kRequireAndVerify;
  if (verifies && tls.client_ca_file.empty()) {
    errors.add(marks.auth, yaml_support::quoted(path + ".client_auth_type") + " " + client_auth_name(tls.client_auth) +
                              " needs " + yaml_support::quoted(path + ".client_ca_file") + " to verify client certificates");
    return false;
  }
  if (!tls.client_ca_file.empty() && !verifies) {
    errors.add(marks.ca, yaml_support::quoted(path + ".client_ca_file") + " is used only with client_auth_type "
                        "VerifyClientCertIfGiven or RequireAndVerifyClientCert, not " +
                            std::string(client_auth_name(tls.client_auth)));
    return false;
  }
  // As exporter-toolkit: names are checked only on certificates that are
  // required and verified.
  if (marks.sans_given && tls.client_auth != ClientAuth::kRequireAndVerify) {
    errors.add(marks.sans, yaml_support::quoted(path + ".client_allowed_sans") +
                              " needs client_auth_type RequireAndVerifyClientCert");
    return false;
  }
  return true;
}

// Loads the files now so that a bad certificate stops the start, not the
// first scrape. The server loads them again when it starts.
bool load_tls_files(ErrorSink& errors, const YAML::Node& node, const WebTlsConfig& tls,
                    const TlsMarks& marks) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_server_method()),
                                                        SSL_CTX_free);
  if (!ctx) {
    errors.add(node.Mark(), "cannot create a TLS context");
    return false;
  }
  TlsBlame blame;
  if (Status st = configure_tls_context(tls, *ctx, &blame); !st) {
    const YAML::Mark& mark = blame == TlsBlame::kCert       ? marks.cert
                             : blame == TlsBlame::kKey      ? marks.key
                             : blame == TlsBlame::kClientCa ? marks.ca
                                                            : node.Mark();
    errors.add(mark, st.error().message);
    return false;
  }
  return true;
}

void parse_tls(ErrorSink& errors, const YAML::Node& node, const std::string& path,
               const std::filesystem::path& dir, WebConfig& config) {
  // An empty section, like an absent one, means plain HTTP.
  if (node.IsMap() && node.size() == 0) return;
  WebTlsConfig tls;
  TlsMarks marks;
  const size_t errors_before = errors.size();
  read_tls_keys(errors, node, path, dir, tls, marks);
  if (errors.size() != errors_before) return;
  if (!check_tls_keys(errors, node, path, tls, marks) || !load_tls_files(errors, node, tls, marks)) return;
  config.tls = std::move(tls);
}

void parse_rate_limit(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                      WebConfig& config) {
  WebRateLimit limit;
  std::optional<YAML::Mark> interval_mark, burst_mark;
  const size_t errors_before = errors.size();
  parse_keys(errors, node, path,
                {{"interval",
                  [&](const YAML::Node& v, const std::string& p) {
                    // Up to a day between tokens.
                    yaml_support::read_duration_ms(errors, v, p, 0, 86400000, limit.interval_ms);
                    interval_mark = v.Mark();
                  }},
                 {"burst", [&](const YAML::Node& v, const std::string& p) {
                    yaml_support::read_uint(errors, v, p, 0, 1000000, limit.burst);
                    burst_mark = v.Mark();
                  }}});
  if (errors.size() != errors_before) return;
  // interval 0 (or absent) means no limit, as in exporter-toolkit; a limit
  // with no burst would refuse every request.
  if (limit.interval_ms != 0 && limit.burst == 0) {
    errors.add(burst_mark ? *burst_mark : node.Mark(),
               yaml_support::quoted(path + ".burst") + " must be at least 1 when an interval is set (0 refuses every request)");
    return;
  }
  config.rate_limit = limit;
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
  parse_keys(
      errors, root, "",
      {{"tls_server_config",
        [&](const YAML::Node& v, const std::string& p) { parse_tls(errors, v, p, dir, config); }},
       {"http_server_config",
        [&](const YAML::Node& v, const std::string& p) {
          parse_keys(errors, v, p,
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
       {"rate_limit",
        [&](const YAML::Node& v, const std::string& p) { parse_rate_limit(errors, v, p, config); }}});
}



}  // namespace

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

std::vector<std::string> web_config_files(const WebConfig& config) {
  std::vector<std::string> files = {config.file};
  if (config.tls) {
    for (const std::string* f : {&config.tls->cert_file, &config.tls->key_file, &config.tls->client_ca_file})
      if (!f->empty()) files.push_back(*f);
  }
  return files;
}

}  // namespace lw
