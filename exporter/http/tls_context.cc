// SPDX-License-Identifier: Apache-2.0
#include "exporter/http/tls_context.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string_view>

#include "core/config/yaml_support.h"

namespace lw {

const char* const kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

namespace {

using yaml_support::quoted;

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

// Whether the leaf certificate carries one of the allowed SANs.
bool has_allowed_san(X509* cert, const std::vector<std::string>& allowed) {
  GENERAL_NAMES* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (!names) return false;
  bool found = false;
  for (int i = 0; i < sk_GENERAL_NAME_num(names) && !found; ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
    std::string value;
    if (name->type == GEN_DNS || name->type == GEN_EMAIL || name->type == GEN_URI) {
      const ASN1_IA5STRING* s = name->d.ia5;
      value.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                   static_cast<size_t>(ASN1_STRING_length(s)));
    } else if (name->type == GEN_IPADD) {
      // The textual form (as Go's net.IP.String prints v4 and v6).
      const ASN1_OCTET_STRING* ip = name->d.iPAddress;
      char text[INET6_ADDRSTRLEN] = {};
      int len = ASN1_STRING_length(ip);
      if ((len == 4 || len == 16) &&
          inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(ip), text, sizeof(text)))
        value = text;
    }
    if (!value.empty() && value.find('\0') == std::string::npos &&
        std::find(allowed.begin(), allowed.end(), value) != allowed.end())
      found = true;
  }
  GENERAL_NAMES_free(names);
  return found;
}

int verify_allowed_sans(int preverify_ok, X509_STORE_CTX* store) {
  if (!preverify_ok) return 0;
  // Only the client's own certificate (depth 0) names the client.
  if (X509_STORE_CTX_get_error_depth(store) != 0) return 1;
  SSL* ssl = static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  const auto* tls = static_cast<const WebTlsConfig*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
  if (!tls || tls->client_allowed_sans.empty()) return 1;
  if (has_allowed_san(X509_STORE_CTX_get_current_cert(store), tls->client_allowed_sans)) return 1;
  X509_STORE_CTX_set_error(store, X509_V_ERR_APPLICATION_VERIFICATION);
  return 0;
}

// RequestClientCert / RequireAnyClientCert: a certificate is taken as it
// comes, unverified (exporter-toolkit's semantics).
int accept_any(int, X509_STORE_CTX*) { return 1; }

}  // namespace

const char* client_auth_name(ClientAuth auth) {
  switch (auth) {
    case ClientAuth::kNone: return "NoClientCert";
    case ClientAuth::kRequest: return "RequestClientCert";
    case ClientAuth::kRequireAny: return "RequireAnyClientCert";
    case ClientAuth::kVerifyIfGiven: return "VerifyClientCertIfGiven";
    case ClientAuth::kRequireAndVerify: return "RequireAndVerifyClientCert";
  }
  return "?";
}

namespace {

// Options, buffers, the session cache, versions and TLS 1.2 ciphers.
Status set_protocol(const WebTlsConfig& tls, SSL_CTX& ctx) {
  // No compression (CRIME), no renegotiation (client-initiated renegotiation
  // is a cheap CPU DoS and nothing here needs it).
  uint64_t options = SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION;
  if (tls.prefer_server_cipher_suites) options |= SSL_OP_CIPHER_SERVER_PREFERENCE;
  SSL_CTX_set_options(&ctx, options);
  // Idle connections give their 2 x 17 KiB of record buffers back, and the
  // session cache is bounded (TLS 1.3 resumption uses stateless tickets).
  SSL_CTX_set_mode(&ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                             SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_sess_set_cache_size(&ctx, 1024);
  // Never below TLS 1.2, whatever a hand-built WebTlsConfig says.
  if (SSL_CTX_set_min_proto_version(&ctx, std::max(tls.min_version, TLS1_2_VERSION)) != 1 ||
      SSL_CTX_set_max_proto_version(&ctx, tls.max_version) != 1) {
    return Error{EINVAL, "cannot set the TLS versions: " + openssl_error()};
  }
  if (SSL_CTX_set_cipher_list(&ctx, kTls12Ciphers) != 1) {
    return Error{EINVAL, "cannot set the TLS 1.2 cipher suites: " + openssl_error()};
  }
  return ok_status();
}

Status load_certificate(const WebTlsConfig& tls, SSL_CTX& ctx) {
  if (Status st = check_regular_file(tls.cert_file); !st) return st;
  if (SSL_CTX_use_certificate_chain_file(&ctx, tls.cert_file.c_str()) != 1) {
    return Error{EINVAL, "cannot load the certificate " + yaml_support::quoted(tls.cert_file) + ": " +
                             openssl_error() + " (expected PEM)"};
  }
  return ok_status();
}

Status load_private_key(const WebTlsConfig& tls, SSL_CTX& ctx) {
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

// The client CA and how client certificates are asked for and checked.
Status set_client_verification(const WebTlsConfig& tls, SSL_CTX& ctx) {
  SSL_CTX_set_app_data(&ctx, const_cast<WebTlsConfig*>(&tls));
  if (!tls.client_ca_file.empty()) {
    if (Status st = check_regular_file(tls.client_ca_file); !st) return st;
    if (SSL_CTX_load_verify_locations(&ctx, tls.client_ca_file.c_str(), nullptr) != 1) {
      return Error{EINVAL, "cannot load the client CA " + yaml_support::quoted(tls.client_ca_file) + ": " +
                               openssl_error() + " (expected PEM)"};
    }
    // The CA names the server sends in its CertificateRequest.
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.client_ca_file.c_str());
    if (!names) return Error{EINVAL, "no certificate in the client CA " + yaml_support::quoted(tls.client_ca_file)};
    SSL_CTX_set_client_CA_list(&ctx, names);
  }
  switch (tls.client_auth) {
    case ClientAuth::kNone:
      SSL_CTX_set_verify(&ctx, SSL_VERIFY_NONE, nullptr);
      break;
    case ClientAuth::kRequest:
      SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER, accept_any);
      break;
    case ClientAuth::kRequireAny:
      SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, accept_any);
      break;
    case ClientAuth::kVerifyIfGiven:
      SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER, verify_allowed_sans);
      break;
    case ClientAuth::kRequireAndVerify:
      SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify_allowed_sans);
      break;
  }
  // TLS 1.3 would otherwise let a client send its certificate after the
  // handshake; leakwatch decides at the handshake.
  SSL_CTX_set_verify_depth(&ctx, 10);
  return ok_status();
}

}  // namespace

Status configure_tls_context(const WebTlsConfig& tls, SSL_CTX& ctx, TlsBlame* blame_out) {
  TlsBlame ignored;
  TlsBlame* blame = blame_out ? blame_out : &ignored;
  // Each step names the file to blame when it fails.
  *blame = TlsBlame::kOther;
  if (Status st = set_protocol(tls, ctx); !st) return st;
  *blame = TlsBlame::kCert;
  if (Status st = load_certificate(tls, ctx); !st) return st;
  *blame = TlsBlame::kKey;
  if (Status st = load_private_key(tls, ctx); !st) return st;
  *blame = TlsBlame::kClientCa;
  if (Status st = set_client_verification(tls, ctx); !st) return st;
  *blame = TlsBlame::kOther;
  return ok_status();
}

}  // namespace lw
