// SPDX-License-Identifier: Apache-2.0
// TLS server contexts from the web config's tls_server_config (OpenSSL 3):
// protocol versions, a cipher policy, the certificate chain and key, and
// client certificates (mTLS) as exporter-toolkit's client_auth_type,
// client_ca_file and client_allowed_sans define them.
//
// Cipher policy: TLS 1.3's suites (all AEAD with forward secrecy), and for
// TLS 1.2 only ECDHE key exchange with AEAD ciphers (AES-GCM, ChaCha20-
// Poly1305): no static-RSA key exchange (no forward secrecy), no CBC, no
// SHA-1 MACs. Every client of the last decade (Prometheus, curl, browsers,
// Go's crypto/tls defaults) offers these.
//
// Thread-safety: configure_tls_context is reentrant. A context it set up
// keeps a pointer to the WebTlsConfig (client_allowed_sans): that object
// must outlive the context and every connection made from it.
#pragma once

#include <string>
#include <vector>

#include "core/platform/result.h"

// OpenSSL's SSL_CTX, declared here so that this header does not pull in
// <openssl/ssl.h>.
struct ssl_ctx_st;

namespace lw {

// exporter-toolkit's client_auth_type values.
enum class ClientAuth {
  kNone,                // NoClientCert (default)
  kRequest,             // RequestClientCert: asked for, not required, not verified
  kRequireAny,          // RequireAnyClientCert: required, not verified
  kVerifyIfGiven,       // VerifyClientCertIfGiven: verified against client_ca_file when sent
  kRequireAndVerify,    // RequireAndVerifyClientCert: required and verified
};

struct WebTlsConfig {
  std::string cert_file;     // absolute: relative paths are resolved at load
  std::string key_file;      // absolute; PEM, unencrypted
  int min_version = 0x0303;  // OpenSSL protocol version: TLS1_2_VERSION or TLS1_3_VERSION
  int max_version = 0;       // 0: the highest OpenSSL supports
  bool prefer_server_cipher_suites = true;
  ClientAuth client_auth = ClientAuth::kNone;
  std::string client_ca_file;  // absolute; PEM bundle; required to verify
  // With kRequireAndVerify: the client certificate must carry one of these
  // as a subjectAltName (DNS name, email address, IP address or URI,
  // compared exactly); empty: any certificate the CA signed.
  std::vector<std::string> client_allowed_sans;
};

// The TLS 1.2 cipher list (OpenSSL names) the policy above allows.
extern const char* const kTls12Ciphers;

// Which file a failure is about, to blame the right YAML key.
enum class TlsBlame { kCert, kKey, kClientCa, kOther };

// Configures `ctx` (a server context) from `tls`. Used at load to validate
// and by the server for each context it builds (at start and at reloads).
Status configure_tls_context(const WebTlsConfig& tls, ssl_ctx_st& ctx, TlsBlame* blame = nullptr);

// A name for a client_auth_type value, as exporter-toolkit spells it.
const char* client_auth_name(ClientAuth auth);

}  // namespace lw
