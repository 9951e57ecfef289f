/* SPDX-License-Identifier: Apache-2.0 */
// Pieces shared by the YAML file parsers (the daemon config and the web
// config): error collection with file:line:column, safe quoting of hostile
// text, and the multi-document guard yaml-cpp 0.7 needs.
// Thread-safety: free functions are reentrant; an ErrorSink belongs to one parse.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"

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

}  // namespace lw::yaml_support
