// SPDX-License-Identifier: Apache-2.0
#include "exporter/http/basic_auth.h"

#include <crypt.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <initializer_list>
#include <memory>

namespace lw {
namespace {

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

}  // namespace

std::optional<BasicAuth::Credentials> BasicAuth::parse(std::string_view header) {
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
  Credentials creds(decoded->substr(0, colon), decoded->substr(colon + 1));
  OPENSSL_cleanse(decoded->data(), decoded->size());
  return creds;
}

namespace {

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

BasicAuth::BasicAuth(std::map<std::string, std::string> users,
                     std::chrono::steady_clock::duration ttl, size_t capacity)
    : users_(std::move(users)), ttl_(ttl), capacity_(capacity) {}

BasicAuth::Credentials::~Credentials() { OPENSSL_cleanse(password.data(), password.size()); }

const std::string& BasicAuth::hash_for(const std::string& user, bool* known) const {
  auto it = users_.find(user);
  *known = it != users_.end();
  // An unknown user is checked against a configured hash, at the same cost.
  return *known ? it->second : users_.begin()->second;
}

bool BasicAuth::cached(const Credentials& creds) {
  if (users_.empty()) return false;
  bool known = false;
  const std::string& hash = hash_for(creds.user, &known);
  if (!known) return false;
  const std::string key = cache_key({creds.user, hash, creds.password});
  if (key.empty()) return false;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(cache_mutex_);
  auto it = cache_.find(key);
  if (it == cache_.end()) return false;
  if (it->second > now) return true;
  cache_.erase(it);
  return false;
}

bool BasicAuth::check(std::string_view authorization) {
  std::optional<Credentials> creds = parse(authorization);
  if (!creds) return false;
  return cached(*creds) || verify(*creds);
}

bool BasicAuth::verify(const Credentials& creds) {
  if (users_.empty()) return false;
  bool known = false;
  const std::string& hash = hash_for(creds.user, &known);
  const bool ok = verify_uncached(hash, creds.password) && known;
  const std::string key = ok ? cache_key({creds.user, hash, creds.password}) : std::string();
  const auto now = std::chrono::steady_clock::now();
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
