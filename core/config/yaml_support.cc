// SPDX-License-Identifier: Apache-2.0
#include "core/config/yaml_support.h"

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <climits>
#include <set>
#include <sstream>

namespace lw::yaml_support {

namespace {

// Receives parse events only to find where a second document starts.
class DocumentCounter : public YAML::EventHandler {
 public:
  int documents = 0;
  YAML::Mark last_start;

  void OnDocumentStart(const YAML::Mark& mark) override {
    ++documents;
    last_start = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

std::string printable(std::string_view s, size_t max) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch < 0x20 || ch >= 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[ch >> 4];
      out += kHex[ch & 0xf];
    } else {
      out += static_cast<char>(ch);
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

std::string kind_of(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "an empty value";
    case YAML::NodeType::Scalar: return "a scalar";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Undefined: break;
  }
  return "an undefined node";
}

std::optional<YAML::Mark> second_document(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentCounter counter;
  while (counter.documents < 2 && parser.HandleNextDocument(counter)) {
  }
  if (counter.documents < 2) return std::nullopt;
  return counter.last_start;
}


std::string child_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

std::string index_path(const std::string& parent, size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

namespace {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string nearest(std::string_view word, std::span<const std::string_view> candidates) {
  // Edit distance is quadratic: long words get no suggestion.
  if (word.size() > kMaxQuotedBytes) return {};
  std::string_view best;
  size_t best_distance = SIZE_MAX;
  for (std::string_view c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  size_t threshold = std::max<size_t>(1, (std::max(word.size(), best.size()) + 2) / 3);
  if (best_distance <= threshold) return std::string(best);
  if (word.size() >= 4) {
    for (std::string_view c : candidates) {
      if (c.starts_with(word)) return std::string(c);
    }
  }
  return {};
}

std::vector<std::string_view> parse_mapping(ErrorSink& errors, const YAML::Node& node,
                                            const std::string& path,
                                            std::initializer_list<Field> fields,
                                            const MappingStyle& style) {
  std::vector<std::string_view> seen;
  if (!node.IsMap()) {
    errors.add(node.Mark(), (path.empty() ? std::string(style.root_name) : quoted(path)) +
                                " must be a mapping of keys to values, not " + kind_of(node));
    return seen;
  }
  std::vector<std::string_view> known;
  std::string known_list;
  for (const Field& f : fields) {
    if (!f.unsupported.empty()) continue;
    known.push_back(f.key);
    known_list += (known_list.empty() ? "" : ", ") + std::string(f.key);
  }
  std::set<std::string> keys_found;
  for (const auto& entry : node) {
    const YAML::Node& key = entry.first;
    if (!key.IsScalar()) {
      errors.add(key.Mark(), "keys must be plain names, not " + kind_of(key));
      continue;
    }
    const std::string& name = key.Scalar();
    const std::string key_path = child_path(path, name);
    if (!keys_found.insert(name).second) {
      errors.add(key.Mark(), "duplicate key " + quoted(key_path));
      continue;
    }
    auto field =
        std::find_if(fields.begin(), fields.end(), [&](const Field& f) { return f.key == name; });
    if (field == fields.end()) {
      errors.add(key.Mark(),
                 "unknown key " + quoted(name) + (path.empty() ? "" : " in " + quoted(path)) +
                     (style.list_known ? " (known: " + known_list + ")" : ""),
                 nearest(name, known));
      continue;
    }
    if (!field->unsupported.empty()) {
      errors.add(key.Mark(), quoted(key_path) + " is not supported: " + std::string(field->unsupported));
      continue;
    }
    seen.push_back(field->key);
    if (entry.second.IsNull()) {
      // Blamed on the key: yaml-cpp marks an empty value at the next token,
      // which may be lines below.
      if (!field->may_be_empty && !style.empty_means_default) errors.add(key.Mark(), quoted(key_path) + " has no value");
      continue;
    }
    field->parse(entry.second, key_path);
  }
  return seen;
}

bool contains(const std::vector<std::string_view>& keys, std::string_view key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

std::optional<std::string> read_string(ErrorSink& errors, const YAML::Node& node,
                                       const std::string& path) {
  if (!node.IsScalar()) {
    errors.add(node.Mark(), quoted(path) + " must be a string, not " + kind_of(node));
    return std::nullopt;
  }
  const std::string& s = node.Scalar();
  if (s.find('\0') != std::string::npos) {
    errors.add(node.Mark(), quoted(path) + " contains a NUL character");
    return std::nullopt;
  }
  return s;
}

void read_bool(ErrorSink& errors, const YAML::Node& node, const std::string& path, bool& out) {
  // "no" is also a country code: YAML 1.1's forms are ambiguous.
  static constexpr std::string_view kTrue[] = {"true", "True", "TRUE"};
  static constexpr std::string_view kFalse[] = {"false", "False", "FALSE"};
  if (is_plain_scalar(node)) {
    const std::string& s = node.Scalar();
    if (std::find(std::begin(kTrue), std::end(kTrue), s) != std::end(kTrue)) {
      out = true;
      return;
    }
    if (std::find(std::begin(kFalse), std::end(kFalse), s) != std::end(kFalse)) {
      out = false;
      return;
    }
    std::string suggestion;
    if (s == "yes" || s == "on" || s == "y") suggestion = "true";
    if (s == "no" || s == "off" || s == "n") suggestion = "false";
    errors.add(node.Mark(), quoted(path) + " must be true or false, not " + quoted(s), suggestion);
    return;
  }
  errors.add(node.Mark(), quoted(path) + " must be true or false, not " +
                              (node.IsScalar() ? "a quoted string" : kind_of(node)));
}

bool read_uint64(ErrorSink& errors, const YAML::Node& node, const std::string& path, uint64_t min,
                 uint64_t max, uint64_t& out) {
  const std::string range = "between " + std::to_string(min) + " and " + std::to_string(max);
  if (!is_plain_scalar(node)) {
    errors.add(node.Mark(), quoted(path) + " must be an integer " + range + ", not " +
                                (node.IsScalar() ? "a quoted string" : kind_of(node)));
    return false;
  }
  const std::string& s = node.Scalar();
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  bool digits_only = !s.empty() && end == s.data() + s.size() && s[0] != '-' && s[0] != '+';
  if (!digits_only || ec == std::errc::invalid_argument) {
    errors.add(node.Mark(), quoted(path) + " must be an integer " + range + ", not " + quoted(s));
    return false;
  }
  if (ec == std::errc::result_out_of_range || v < min || v > max) {
    errors.add(node.Mark(), quoted(path) + " must be " + range + ", not " + printable(s));
    return false;
  }
  out = v;
  return true;
}

std::optional<uint64_t> parse_duration_ms(std::string_view text) {
  if (text == "0") return 0;
  struct Unit {
    std::string_view name;
    uint64_t ms;
  };
  // In the order they must appear; "ms" before "m" so "5ms" is not 5m + "s".
  static constexpr Unit kUnits[] = {{"y", 365ull * 86400000}, {"w", 7ull * 86400000},
                                    {"d", 86400000},          {"h", 3600000},
                                    {"m", 60000},             {"s", 1000},
                                    {"ms", 1}};
  constexpr uint64_t kMaxMs = 1ull << 53;
  uint64_t total = 0;
  size_t next_unit = 0;
  bool any = false;
  while (!text.empty()) {
    size_t digits = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
    if (digits == 0 || digits > 15) return std::nullopt;
    uint64_t n = 0;
    std::from_chars(text.data(), text.data() + digits, n);
    text.remove_prefix(digits);
    std::optional<size_t> unit;
    for (size_t u = next_unit; u < std::size(kUnits); ++u) {
      std::string_view name = kUnits[u].name;
      if (text.substr(0, name.size()) != name) continue;
      // "m" must not swallow the "m" of "ms".
      if (name == "m" && text.substr(0, 2) == "ms") continue;
      unit = u;
      break;
    }
    if (!unit) return std::nullopt;
    text.remove_prefix(kUnits[*unit].name.size());
    next_unit = *unit + 1;
    if (n > kMaxMs / kUnits[*unit].ms) return std::nullopt;
    total += n * kUnits[*unit].ms;
    if (total > kMaxMs) return std::nullopt;
    any = true;
  }
  if (!any) return std::nullopt;
  return total;
}

namespace {

std::string seconds_text(uint64_t s) {
  return std::to_string(s) + (s == 1 ? " second" : " seconds");
}

}  // namespace

bool read_seconds64(ErrorSink& errors, const YAML::Node& node, const std::string& path, uint64_t min,
                    uint64_t max, uint64_t& out) {
  const std::string range = "between " + seconds_text(min) + " and " + seconds_text(max);
  if (!node.IsScalar()) {
    errors.add(node.Mark(), quoted(path) + " must be a duration " + range + " (e.g. 600 or 10m), not " +
                                kind_of(node));
    return false;
  }
  const std::string& s = node.Scalar();
  uint64_t seconds = 0;
  const bool digits = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits && is_plain_scalar(node)) {
    // Plain integers are seconds, as these keys always took.
    return read_uint64(errors, node, path, min, max, out);
  }
  std::optional<uint64_t> ms = parse_duration_ms(s);
  if (!ms) {
    errors.add(node.Mark(), quoted(path) + " must be a duration " + range +
                                " (seconds, or Prometheus style such as 90s, 10m, 1h30m), not " + quoted(s));
    return false;
  }
  if (*ms % 1000 != 0) {
    errors.add(node.Mark(), quoted(path) + " must be a whole number of seconds, not " + quoted(s));
    return false;
  }
  seconds = *ms / 1000;
  if (seconds < min || seconds > max) {
    errors.add(node.Mark(), quoted(path) + " must be " + range + ", not " + quoted(s) + " (" +
                                seconds_text(seconds) + ")");
    return false;
  }
  out = seconds;
  return true;
}

bool read_duration_ms(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                      uint64_t min_ms, uint64_t max_ms, uint64_t& out) {
  std::optional<std::string> s = read_string(errors, node, path);
  if (!s) return false;
  std::optional<uint64_t> ms = parse_duration_ms(*s);
  if (!ms || (*ms != 0 && std::all_of(s->begin(), s->end(), [](char c) { return c >= '0' && c <= '9'; }))) {
    errors.add(node.Mark(), quoted(path) + " must be a duration such as 1s, 500ms or 1m, not " + quoted(*s));
    return false;
  }
  if (*ms < min_ms || *ms > max_ms) {
    errors.add(node.Mark(), quoted(path) + " must be between " + std::to_string(min_ms) + " ms and " +
                                std::to_string(max_ms) + " ms, not " + quoted(*s));
    return false;
  }
  out = *ms;
  return true;
}

void report_enum_error(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                       const std::string& value, const std::vector<std::string_view>& names) {
  std::string expected;
  for (std::string_view n : names) expected += (expected.empty() ? "" : "|") + std::string(n);
  std::string lower = value;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  errors.add(node.Mark(), quoted(path) + " must be one of " + expected + ", not " + quoted(value),
             nearest(lower, names));
}

}  // namespace lw::yaml_support
