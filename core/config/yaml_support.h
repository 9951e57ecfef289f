/* SPDX-License-Identifier: Apache-2.0 */
// The one set of YAML readers behind both file parsers (the daemon config,
// core/config*.cc, and the web config, exporter/http/web_config.cc): error
// collection with file:line:column, safe quoting of hostile text, the
// multi-document guard yaml-cpp 0.7 needs, strict mappings (unknown and
// duplicate keys are errors, with the nearest known key suggested), and the
// value readers (strings, booleans, bounded integers, enumerations,
// durations). A value syntax is defined here once, so the two files cannot
// drift apart.
// Thread-safety: free functions are reentrant; an ErrorSink belongs to one parse.
#pragma once

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/config.h"

namespace lw::yaml_support {

// Keys and values longer than this are cut when quoted in a message.
inline constexpr size_t kMaxQuotedBytes = 64;

// Text as it can be shown on a terminal: control and non-ASCII bytes escaped
// (a hostile file must not send escape sequences, C1 controls included, to
// the operator's screen), long text cut.
std::string printable(std::string_view s, size_t max = kMaxQuotedBytes);
inline std::string quoted(std::string_view s) { return "'" + printable(s) + "'"; }

// "a scalar", "a mapping", ... for messages.
std::string kind_of(const YAML::Node& node);

// Plain (unquoted) scalars carry the tag "?": a quoted "true" is a string.
inline bool is_plain_scalar(const YAML::Node& node) { return node.IsScalar() && node.Tag() == "?"; }

// Collects every error of one file, capped at kMaxConfigErrors.
class ErrorSink {
 public:
  explicit ErrorSink(const std::string& file) : file_(file) {}

  void add(const YAML::Mark& mark, std::string message, std::string suggestion = {}) {
    // yaml-cpp marks are 0-based, -1 when unknown.
    add_at(mark.line >= 0 ? mark.line + 1 : 0, mark.line >= 0 ? mark.column + 1 : 0,
           std::move(message), std::move(suggestion));
  }

  void add_at(int line, int column, std::string message, std::string suggestion = {}) {
    if (errors_.size() >= kMaxConfigErrors) {
      dropped_ = true;
      return;
    }
    errors_.push_back(ConfigError{file_, line, column, std::move(message), std::move(suggestion)});
  }

  bool empty() const { return errors_.empty(); }
  size_t size() const { return errors_.size(); }

  // All errors in file order; whole-file errors (line 0) first.
  std::vector<ConfigError> take() {
    std::stable_sort(errors_.begin(), errors_.end(),
                     [](const ConfigError& a, const ConfigError& b) {
                       return std::pair(a.line, a.column) < std::pair(b.line, b.column);
                     });
    if (dropped_) {
      errors_.push_back(ConfigError{
          file_,
          0,
          0,
          "too many errors; only the first " + std::to_string(kMaxConfigErrors) + " are shown",
          {}});
    }
    return std::move(errors_);
  }

 private:
  std::string file_;
  std::vector<ConfigError> errors_;
  bool dropped_ = false;
};

// Where a second document starts, if there is one. yaml-cpp 0.7's Load
// silently ignores whatever follows the first document, and its LoadAll
// loops forever, allocating, on a stray ',' (yaml-cpp issue #1040, fixed
// after 0.8): so documents are counted by hand, stopping at two. The stray
// ',' case shows up as a second, empty document. Throws what the parser
// throws.
std::optional<YAML::Mark> second_document(const std::string& text);


// "parent.key" ("key" at the root) and "parent[3]", for messages.
std::string child_path(const std::string& parent, std::string_view key);
std::string index_path(const std::string& parent, size_t index);

// The candidate nearest to `word`, if it is close enough to be a plausible
// typo (within about a third of the length) or `word` is a truncation of it
// ("ringbuf"), else "". Words longer than kMaxQuotedBytes get none.
std::string nearest(std::string_view word, std::span<const std::string_view> candidates);

// One key a mapping may hold and how to parse its value (given the value
// node and its dotted path, e.g. "targets[0].match.comm").
struct Field {
  std::string_view key;
  std::function<void(const YAML::Node&, const std::string&)> parse;
  // An empty value ("limits:") means the defaults; otherwise it is an
  // error ("'listen' has no value").
  bool may_be_empty = false;
  // Non-empty: the key is known but refused, and this says why (a feature
  // the operator would expect enforced is never silently ignored).
  std::string_view unsupported = {};
};

struct MappingStyle {
  // How the root mapping is named in messages ("the configuration").
  std::string_view root_name = "the configuration";
  // List the known keys in an unknown-key message (short lists).
  bool list_known = false;
  // Every key may be left empty, meaning its default (as Go's YAML decoder
  // reads an empty value as the zero value).
  bool empty_means_default = false;
};

// Parses the mapping `node` at `path` against `fields`. Non-string keys,
// duplicate keys and unknown keys are errors (with the nearest known key as
// suggestion). Returns the known keys that were present.
std::vector<std::string_view> parse_mapping(ErrorSink& errors, const YAML::Node& node,
                                            const std::string& path,
                                            std::initializer_list<Field> fields,
                                            const MappingStyle& style = {});

bool contains(const std::vector<std::string_view>& keys, std::string_view key);

// A scalar without NUL characters (a "\0" escape would silently cut paths
// and patterns handed to C APIs).
std::optional<std::string> read_string(ErrorSink& errors, const YAML::Node& node,
                                       const std::string& path);

// YAML 1.2 core schema booleans only (true/True/TRUE, false/False/FALSE);
// YAML 1.1's yes/no/on/off are refused with a suggestion.
void read_bool(ErrorSink& errors, const YAML::Node& node, const std::string& path, bool& out);

// A plain decimal integer in [min, max] (no quotes, signs, 0x or 1e3: a
// typo is likelier than an intended hex limit). `out` is left alone on error.
bool read_uint64(ErrorSink& errors, const YAML::Node& node, const std::string& path, uint64_t min,
                 uint64_t max, uint64_t& out);
template <typename T>
void read_uint(ErrorSink& errors, const YAML::Node& node, const std::string& path, uint64_t min,
               uint64_t max, T& out) {
  static_assert(std::is_unsigned_v<T>);
  uint64_t v = 0;
  if (read_uint64(errors, node, path, min, max, v)) out = static_cast<T>(v);
}

// Prometheus' duration syntax: one or more of <n>y <n>w <n>d <n>h <n>m <n>s
// <n>ms, each unit at most once and in that order ("1h30m", "10m", "500ms",
// "0"). A year is 365 days. Returns milliseconds; nullopt when malformed or
// past 2^53 ms.
std::optional<uint64_t> parse_duration_ms(std::string_view text);

// A duration key in whole seconds, in [min, max] seconds: a plain integer
// (seconds, as always) or a Prometheus duration ("10m"). A duration that is
// not a whole number of seconds ("1500ms") is an error. `out` is left alone
// on error; returns whether it was set.
bool read_seconds64(ErrorSink& errors, const YAML::Node& node, const std::string& path, uint64_t min,
                    uint64_t max, uint64_t& out);
template <typename T>
bool read_seconds(ErrorSink& errors, const YAML::Node& node, const std::string& path, uint64_t min,
                  uint64_t max, T& out) {
  static_assert(std::is_unsigned_v<T>);
  uint64_t v = 0;
  if (!read_seconds64(errors, node, path, min, max, v)) return false;
  out = static_cast<T>(v);
  return true;
}

// A duration in milliseconds (Prometheus syntax only; a bare integer is
// refused as ambiguous), in [min_ms, max_ms].
bool read_duration_ms(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                      uint64_t min_ms, uint64_t max_ms, uint64_t& out);

void report_enum_error(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                       const std::string& value, const std::vector<std::string_view>& names);
// One of `values` (exact spelling), with the nearest value suggested.
template <typename E>
void read_enum(ErrorSink& errors, const YAML::Node& node, const std::string& path,
               std::initializer_list<std::pair<std::string_view, E>> values, E& out) {
  std::vector<std::string_view> names;
  for (const auto& [name, value] : values) names.push_back(name);
  std::optional<std::string> s = read_string(errors, node, path);
  if (!s) return;
  for (const auto& [name, value] : values) {
    if (*s == name) {
      out = value;
      return;
    }
  }
  report_enum_error(errors, node, path, *s, names);
}

}  // namespace lw::yaml_support
