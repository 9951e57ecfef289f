/* SPDX-License-Identifier: Apache-2.0 */
// The path of one /proc/PID/maps entry, shared by every entry of the same
// read that names the same file (decision process-cost): a process mapping
// one file 15,000 times under a 3.8 KB path costs one copy of the path, not
// 57 MB. Immutable once made; reads like a const std::string.
// Thread-safety: a MapPath is immutable; copies share the string through a
// shared_ptr (atomic counts), safe to copy across threads.
#pragma once

#include <cstddef>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

namespace lw {

class MapPath {
 public:
  MapPath() = default;
  MapPath(std::string s) : s_(s.empty() ? nullptr : std::make_shared<const std::string>(std::move(s))) {}
  MapPath(const char* s) : MapPath(std::string(s)) {}
  explicit MapPath(std::string_view s) : MapPath(std::string(s)) {}
  explicit MapPath(std::shared_ptr<const std::string> shared) : s_(std::move(shared)) {}

  const std::string& str() const { return s_ ? *s_ : empty_string(); }
  operator const std::string&() const { return str(); }
  // The same string as `other` (interned together), not only equal text.
  bool shares(const MapPath& other) const { return s_ == other.s_; }

  bool empty() const { return str().empty(); }
  size_t size() const { return str().size(); }
  const char* c_str() const { return str().c_str(); }
  const char* data() const { return str().data(); }
  char operator[](size_t i) const { return str()[i]; }
  std::string substr(size_t pos, size_t n = std::string::npos) const { return str().substr(pos, n); }
  size_t find(char c, size_t pos = 0) const { return str().find(c, pos); }
  size_t find(std::string_view s, size_t pos = 0) const { return str().find(s, pos); }
  size_t rfind(char c, size_t pos = std::string::npos) const { return str().rfind(c, pos); }
  size_t rfind(std::string_view s, size_t pos = std::string::npos) const { return str().rfind(s, pos); }
  int compare(size_t pos, size_t n, std::string_view s) const { return str().compare(pos, n, s); }
  bool starts_with(std::string_view s) const { return str().starts_with(s); }
  bool ends_with(std::string_view s) const { return str().ends_with(s); }
  std::string::const_iterator begin() const { return str().begin(); }
  std::string::const_iterator end() const { return str().end(); }

 private:
  static const std::string& empty_string() {
    static const std::string kEmpty;
    return kEmpty;
  }
  std::shared_ptr<const std::string> s_;
};

inline bool operator==(const MapPath& a, const MapPath& b) { return a.str().compare(b.str()) == 0; }
inline bool operator==(const MapPath& a, const std::string& b) { return a.str().compare(b) == 0; }
inline bool operator==(const MapPath& a, const char* b) { return a.str().compare(b) == 0; }
inline bool operator==(const MapPath& a, std::string_view b) { return std::string_view(a.str()) == b; }
inline bool operator<(const MapPath& a, const MapPath& b) { return a.str() < b.str(); }
inline std::string operator+(const MapPath& a, const std::string& b) { return a.str() + b; }
inline std::string operator+(const MapPath& a, const char* b) { return a.str() + b; }
inline std::string operator+(const std::string& a, const MapPath& b) { return a + b.str(); }
inline std::string operator+(const char* a, const MapPath& b) { return a + b.str(); }
inline std::ostream& operator<<(std::ostream& os, const MapPath& p) { return os << p.str(); }

}  // namespace lw
