// SPDX-License-Identifier: Apache-2.0
// Matching processes against the config's targets and excludes, and target
// equality for reloads (core/config/config.h).
#include <fnmatch.h>

#include <algorithm>
#include <regex>
#include <string_view>

#include "core/config/config.h"

namespace lw {
namespace {

// Whole component prefix: "/a/b" is under "/a" but "/ab" is not.
bool cgroup_under(std::string_view path, std::string_view prefix) {
  if (prefix == "/") return !path.empty() && path[0] == '/';
  return path.substr(0, prefix.size()) == prefix &&
         (path.size() == prefix.size() || path[prefix.size()] == '/');
}

bool same_regex(const std::optional<RegexCondition>& a, const std::optional<RegexCondition>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || a->source == b->source;
}

bool search(const std::optional<RegexCondition>& cond, const std::optional<std::string>& value) {
  return value && std::regex_search(*value, cond->regex);
}

}  // namespace

bool matches(const MatchConfig& m, const ProcessFacts& p) {
  if (!m.pids.empty() && !std::binary_search(m.pids.begin(), m.pids.end(), p.pid)) return false;
  if (m.comm && !std::regex_search(p.comm, m.comm->regex)) return false;
  if (m.exe && fnmatch(m.exe->c_str(), p.exe.c_str(), FNM_PATHNAME) != 0) return false;
  if (m.cgroup && !cgroup_under(p.cgroup_path, *m.cgroup)) return false;
  // A process outside Kubernetes has no namespace or pod: it cannot satisfy
  // a condition on one, even a pattern that would match "".
  if (m.k8s_namespace && !search(m.k8s_namespace, p.k8s_namespace)) return false;
  if (m.k8s_pod && !search(m.k8s_pod, p.k8s_pod)) return false;
  return true;
}

const TargetConfig* match_target(const Config& config, const ProcessFacts& process) {
  for (const ExcludeConfig& e : config.exclude) {
    if (matches(e.match, process)) return nullptr;
  }
  for (const TargetConfig& t : config.targets) {
    if (matches(t.match, process)) return &t;
  }
  return nullptr;
}

bool config_equal_target(const TargetConfig& a, const TargetConfig& b) {
  const MatchConfig& x = a.match;
  const MatchConfig& y = b.match;
  return a.name == b.name && a.mode == b.mode && a.follow_forks == b.follow_forks && a.tensors == b.tensors &&
         a.sampling_mean_bytes == b.sampling_mean_bytes && a.automatic_sampling == b.automatic_sampling &&
         x.pids == y.pids && same_regex(x.comm, y.comm) && x.exe == y.exe && x.cgroup == y.cgroup &&
         same_regex(x.k8s_namespace, y.k8s_namespace) && same_regex(x.k8s_pod, y.k8s_pod);
}

}  // namespace lw
