// SPDX-License-Identifier: Apache-2.0
// The `targets` and `exclude` sections of the config: which processes are
// traced, by name, exe glob, cgroup, pid list and regexes (docs/config.md).
#include "core/config/config_sections.h"

#include "lw_sampling.h"

#include <fnmatch.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace lw::config_sections {
namespace {

using yaml_support::contains;
using yaml_support::ErrorSink;
using yaml_support::index_path;
using yaml_support::kind_of;
using yaml_support::parse_mapping;
using yaml_support::printable;
using yaml_support::quoted;
using yaml_support::read_bool;
using yaml_support::read_enum;
using yaml_support::read_seconds;
using yaml_support::read_string;
using yaml_support::read_uint;
using yaml_support::second_document;

constexpr size_t kMaxPathBytes = PATH_MAX;

std::optional<RegexCondition> read_regex(ErrorSink& errors, const YAML::Node& node,
                                         const std::string& path) {
  std::optional<std::string> s = read_string(errors, node, path);
  if (!s) return std::nullopt;
  if (s->empty()) {
    errors.add(node.Mark(),
               quoted(path) + " is an empty pattern; remove the key to match any value");
    return std::nullopt;
  }
  if (s->size() > kMaxPatternBytes) {
    errors.add(node.Mark(),
               quoted(path) + " is longer than " + std::to_string(kMaxPatternBytes) + " bytes");
    return std::nullopt;
  }
  try {
    return RegexCondition{*s, std::regex(*s, std::regex::ECMAScript)};
  } catch (const std::regex_error& e) {
    errors.add(node.Mark(), quoted(path) + ": invalid regex " + quoted(*s) + ": " + e.what());
    return std::nullopt;
  }
}

// Checks a fnmatch glob ourselves: glibc's fnmatch quietly treats most
// malformed patterns (an unclosed '[') as literals, which would make a typo
// match nothing without a word. Returns "" when valid, else the problem.
std::string glob_problem(std::string_view glob) {
  static constexpr std::string_view kClasses[] = {"alnum", "alpha", "blank", "cntrl",
                                                  "digit", "graph", "lower", "print",
                                                  "punct", "space", "upper", "xdigit"};
  for (size_t i = 0; i < glob.size(); ++i) {
    if (glob[i] == '\\') {
      if (++i == glob.size()) return "ends in a lone '\\'";
      continue;
    }
    if (glob[i] != '[') continue;
    size_t j = i + 1;
    if (j < glob.size() && (glob[j] == '!' || glob[j] == '^')) ++j;
    if (j < glob.size() && glob[j] == ']') ++j;  // a leading ']' is a literal member
    for (;; ++j) {
      if (j >= glob.size()) return "has a '[' without a closing ']'";
      if (glob[j] == ']') break;
      // With FNM_PATHNAME a bracket never matches '/'.
      if (glob[j] == '/') return "has a '/' inside [...], which never matches a path";
      if (glob.substr(j, 2) == "[:") {
        size_t close = glob.find(":]", j + 2);
        if (close == std::string_view::npos) return "has a '[:' without a closing ':]'";
        std::string_view cls = glob.substr(j + 2, close - j - 2);
        if (std::find(std::begin(kClasses), std::end(kClasses), cls) == std::end(kClasses)) {
          return "has an unknown character class " + quoted(cls);
        }
        j = close + 1;
      }
    }
    i = j;
  }
  return {};
}

void read_exe_glob(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                   std::optional<std::string>& out) {
  std::optional<std::string> s = read_string(errors, node, path);
  if (!s) return;
  if (s->empty() || (*s)[0] != '/') {
    // '*' does not cross '/' (FNM_PATHNAME), so a relative glob such as
    // "*python*" could never match an absolute executable path.
    errors.add(node.Mark(),
               quoted(path) + " must be a glob on the absolute executable path, starting with '/'",
               s->empty() ? std::string() : "/*/" + *s);
    return;
  }
  if (s->size() > kMaxPathBytes) {
    errors.add(node.Mark(), quoted(path) + " is longer than PATH_MAX");
    return;
  }
  if (std::string problem = glob_problem(*s); !problem.empty()) {
    errors.add(node.Mark(), quoted(path) + ": invalid glob " + quoted(*s) + ": " + problem);
    return;
  }
  out = std::move(*s);
}

void read_cgroup(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                 std::optional<std::string>& out) {
  std::optional<std::string> s = read_string(errors, node, path);
  if (!s) return;
  if (s->empty() || (*s)[0] != '/') {
    errors.add(
        node.Mark(),
        quoted(path) + " must be a cgroup v2 path starting with '/' (as in /proc/PID/cgroup)",
        s->empty() ? std::string() : "/" + *s);
    return;
  }
  if (s->size() > kMaxPathBytes) {
    errors.add(node.Mark(), quoted(path) + " is longer than PATH_MAX");
    return;
  }
  // Prefixes compare by whole components; a trailing '/' would only make
  // "/a/" fail to match "/a" itself.
  while (s->size() > 1 && s->back() == '/') s->pop_back();
  out = std::move(*s);
}

void read_pids(ErrorSink& errors, const YAML::Node& node, const std::string& path,
               std::vector<pid_t>& out) {
  if (!node.IsSequence()) {
    errors.add(node.Mark(),
               quoted(path) + " must be a sequence of process ids, not " + kind_of(node),
               node.IsScalar() ? "[" + printable(node.Scalar()) + "]" : std::string());
    return;
  }
  if (node.size() == 0) {
    errors.add(node.Mark(), quoted(path) + " is empty and would match no process; remove the key");
    return;
  }
  if (node.size() > kMaxPidsPerMatch) {
    errors.add(node.Mark(), quoted(path) + " lists more than " + std::to_string(kMaxPidsPerMatch) +
                                " process ids");
    return;
  }
  size_t i = 0;
  for (const YAML::Node& item : node) {
    // PID_MAX_LIMIT on 64-bit Linux is 2^22.
    uint32_t pid = 0;
    read_uint(errors, item, index_path(path, i++), 1, 1u << 22, pid);
    if (pid != 0) out.push_back(static_cast<pid_t>(pid));
  }
  // Sorted and unique: matching is a binary search and equality is set
  // equality, so reordering a list on reload is not a change.
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

MatchConfig parse_match(ErrorSink& errors, const YAML::Node& node, const std::string& path) {
  MatchConfig m;
  std::vector<std::string_view> seen = parse_mapping(
      errors, node, path,
      {{"pids",
        [&](const YAML::Node& v, const std::string& p) { read_pids(errors, v, p, m.pids); }},
       {"comm",
        [&](const YAML::Node& v, const std::string& p) { m.comm = read_regex(errors, v, p); }},
       {"exe",
        [&](const YAML::Node& v, const std::string& p) { read_exe_glob(errors, v, p, m.exe); }},
       {"cgroup",
        [&](const YAML::Node& v, const std::string& p) { read_cgroup(errors, v, p, m.cgroup); }},
       {"namespace", [&](const YAML::Node& v,
                         const std::string& p) { m.k8s_namespace = read_regex(errors, v, p); }},
       {"pod",
        [&](const YAML::Node& v, const std::string& p) { m.k8s_pod = read_regex(errors, v, p); }}});
  // Judged on the keys present, not on the conditions that parsed: a bad
  // regex already has its own error.
  if (node.IsMap() && seen.empty()) {
    errors.add(
        node.Mark(),
        quoted(path) + " needs at least one condition: pids, comm, exe, cgroup, namespace or pod");
  }
  return m;
}

bool valid_target_name(std::string_view name) {
  auto word = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (name.empty() || name.size() > 63 || !word(name[0])) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return word(c) || c == '_' || c == '.' || c == '-'; });
}

}  // namespace

void parse_targets(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                   std::vector<TargetConfig>& out) {
  if (!node.IsSequence()) {
    errors.add(node.Mark(), quoted(path) + " must be a sequence of targets, not " + kind_of(node));
    return;
  }
  // Name -> line of its first definition, for duplicate errors.
  std::map<std::string, int> first_line;
  size_t i = 0;
  for (const YAML::Node& item : node) {
    const std::string item_path = index_path(path, i++);
    if (i > kMaxTargets) {
      errors.add(item.Mark(),
                 quoted(path) + " has more than " + std::to_string(kMaxTargets) + " entries");
      return;
    }
    TargetConfig t;
    YAML::Mark name_mark;
    std::vector<std::string_view> seen = parse_mapping(
        errors, item, item_path,
        {{"name",
          [&](const YAML::Node& v, const std::string& p) {
            std::optional<std::string> s = read_string(errors, v, p);
            if (!s) return;
            if (!valid_target_name(*s)) {
              errors.add(v.Mark(), quoted(p) + " " + quoted(*s) +
                                       " must be 1-63 characters of [A-Za-z0-9_.-], starting "
                                       "with a letter or digit");
              return;
            }
            t.name = std::move(*s);
            name_mark = v.Mark();
          }},
         {"match",
          [&](const YAML::Node& v, const std::string& p) { t.match = parse_match(errors, v, p); }},
         {"mode",
          [&](const YAML::Node& v, const std::string& p) {
            read_enum<TargetMode>(errors, v, p,
                                  {{"full", TargetMode::kFull},
                                   {"light", TargetMode::kLight},
                                   {"auto", TargetMode::kAuto}},
                                  t.mode);
          }},
         {"follow_forks", [&](const YAML::Node& v, const std::string& p) {
            read_bool(errors, v, p, t.follow_forks);
          }},
         {"tensors", [&](const YAML::Node& v, const std::string& p) {
            read_bool(errors, v, p, t.tensors);
          }},
         {"sampling_mean_bytes", [&](const YAML::Node& v, const std::string& p) {
            uint64_t n = UINT64_MAX;
            read_uint(errors, v, p, 0, LW_SAMPLE_MAX_MEAN, n);
            if (n != UINT64_MAX) t.sampling_mean_bytes = n;
          }},
         {"automatic_sampling", [&](const YAML::Node& v, const std::string& p) {
            // Unset until read: a bad value leaves the global deciding
            // (and the error stops the load).
            const size_t before = errors.size();
            bool b = true;
            read_bool(errors, v, p, b);
            if (errors.size() == before) t.automatic_sampling = b;
          }}});
    if (!item.IsMap()) continue;  // parse_mapping reported it
    if (!contains(seen, "name")) errors.add(item.Mark(), quoted(item_path) + " needs a 'name'");
    if (!contains(seen, "match")) {
      errors.add(item.Mark(), quoted(item_path) + " needs a 'match' with at least one condition");
    }
    if (!t.name.empty()) {
      auto [it, inserted] = first_line.emplace(t.name, name_mark.line + 1);
      if (!inserted) {
        errors.add(name_mark, "duplicate target name " + quoted(t.name) + " (first at line " +
                                  std::to_string(it->second) + ")");
      }
    }
    out.push_back(std::move(t));
  }
}

void parse_exclude(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                   std::vector<ExcludeConfig>& out) {
  if (!node.IsSequence()) {
    errors.add(node.Mark(),
               quoted(path) + " must be a sequence of {match: ...} entries, not " + kind_of(node));
    return;
  }
  size_t i = 0;
  for (const YAML::Node& item : node) {
    const std::string item_path = index_path(path, i++);
    if (i > kMaxTargets) {
      errors.add(item.Mark(),
                 quoted(path) + " has more than " + std::to_string(kMaxTargets) + " entries");
      return;
    }
    ExcludeConfig e;
    std::vector<std::string_view> seen = parse_mapping(
        errors, item, item_path, {{"match", [&](const YAML::Node& v, const std::string& p) {
                                     e.match = parse_match(errors, v, p);
                                   }}});
    if (item.IsMap() && !contains(seen, "match")) {
      errors.add(item.Mark(), quoted(item_path) + " needs a 'match' with at least one condition");
    }
    out.push_back(std::move(e));
  }
}

}  // namespace lw::config_sections
