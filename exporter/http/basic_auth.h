// SPDX-License-Identifier: Apache-2.0
// HTTP Basic authentication against bcrypt hashes (the web config's
// basic_auth_users), split so that the HTTP front never runs bcrypt on a
// thread that serves requests: cached() is a SHA-256 and a hash lookup,
// verify() is the bcrypt, run by the front's one authentication thread.
//
// bcrypt is slow by design (tens of milliseconds at cost 10), so successful
// checks are remembered for `ttl`, as exporter-toolkit does, so that a
// scraper pays it once per `ttl` and not per scrape. The cache is keyed by a
// SHA-256 of (user, stored hash, password): no password is kept in memory,
// and it holds at most `capacity` entries. Failures are not cached: each one
// costs a bcrypt, and bcrypt runs one at a time, so a flood of bad
// passwords costs at most one core and never delays a cached scraper.
//
// Thread-safety: every member function may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace lw {

// Whether `hash` is a bcrypt hash crypt(3) verifies: $2a$, $2b$ or $2y$, a
// cost of 04 to 31, 53 characters of salt and hash.
bool is_bcrypt_hash(std::string_view hash);

class BasicAuth {
 public:
  static constexpr std::chrono::seconds kDefaultTtl{300};
  static constexpr size_t kDefaultCapacity = 1024;

  // Decoded "Basic" credentials; the password is wiped on destruction.
  struct Credentials {
    std::string user;
    std::string password;
    Credentials() = default;
    Credentials(std::string u, std::string p) : user(std::move(u)), password(std::move(p)) {}
    Credentials(Credentials&&) = default;
    Credentials& operator=(Credentials&&) = default;
    ~Credentials();
  };

  explicit BasicAuth(std::map<std::string, std::string> users,
                     std::chrono::steady_clock::duration ttl = kDefaultTtl,
                     size_t capacity = kDefaultCapacity);

  // Credentials from an Authorization header value "Basic <base64>" (RFC
  // 7617; the scheme is case-insensitive), nullopt when malformed.
  static std::optional<Credentials> parse(std::string_view authorization);
  // Whether these credentials were verified within the ttl. Cheap.
  bool cached(const Credentials& credentials);
  // The bcrypt check (one at a time across threads); caches a success. An
  // unknown user costs a bcrypt too, so times do not tell which users exist.
  bool verify(const Credentials& credentials);
  // parse, then cached or verify: for callers that may block.
  bool check(std::string_view authorization);

  const std::map<std::string, std::string>& users() const { return users_; }
  size_t cached_entries() const;

  BasicAuth(const BasicAuth&) = delete;
  BasicAuth& operator=(const BasicAuth&) = delete;

 private:
  bool verify_uncached(const std::string& hash, const std::string& password);
  const std::string& hash_for(const std::string& user, bool* known) const;

  const std::map<std::string, std::string> users_;
  const std::chrono::steady_clock::duration ttl_;
  const size_t capacity_;
  mutable std::mutex cache_mutex_;
  // SHA-256 key -> expiry.
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> cache_;
  std::mutex bcrypt_mutex_;
};

}  // namespace lw
