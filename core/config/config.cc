// SPDX-License-Identifier: Apache-2.0
#include "core/config/config.h"

#include "core/config/config_sections.h"
#include "core/config/yaml_support.h"
#include "core/platform/fd.h"
#include "lw_sampling.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <functional>
#include <initializer_list>
#include <map>
#include <set>
#include <span>
#include <sstream>
#include <type_traits>
#include <utility>

namespace lw {
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

// A sequence of at most kMaxSymbolPaths strings, each checked by `problem`
// ("" when fine). An empty sequence is allowed: it turns the feature off.
void read_symbol_list(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                      const std::function<std::string(const std::string&)>& problem,
                      std::vector<std::string>& out) {
  if (!node.IsSequence()) {
    errors.add(node.Mark(), quoted(path) + " must be a sequence, not " + kind_of(node),
               node.IsScalar() ? "[" + printable(node.Scalar()) + "]" : std::string());
    return;
  }
  if (node.size() > kMaxSymbolPaths) {
    errors.add(node.Mark(), quoted(path) + " lists more than " + std::to_string(kMaxSymbolPaths) +
                                " entries");
    return;
  }
  std::vector<std::string> values;
  size_t i = 0;
  for (const YAML::Node& item : node) {
    const std::string item_path = index_path(path, i++);
    std::optional<std::string> s = read_string(errors, item, item_path);
    if (!s) continue;
    if (std::string p = problem(*s); !p.empty()) {
      errors.add(item.Mark(), quoted(item_path) + " " + p);
      continue;
    }
    values.push_back(std::move(*s));
  }
  out = std::move(values);
}

std::string absolute_path_problem(const std::string& s) {
  if (s.empty() || s[0] != '/') return "must be an absolute path";
  if (s.size() > kMaxPathBytes) return "is longer than PATH_MAX";
  return {};
}

// The URL goes into DEBUGINFOD_URLS, a space-separated list: no spaces.
std::string debuginfod_url_problem(const std::string& s) {
  if (!s.starts_with("http://") && !s.starts_with("https://")) return "must start with http:// or https://";
  if (s.size() > 4096) return "is longer than 4096 characters";
  for (unsigned char ch : s)
    if (ch <= ' ' || ch == 0x7f) return "must not contain spaces or control characters";
  return {};
}

void parse_symbols(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                   SymbolsConfig& out) {
  parse_mapping(errors, node, path,
                {{"debug_dirs",
                  [&](const YAML::Node& v, const std::string& p) {
                    read_symbol_list(errors, v, p, absolute_path_problem, out.debug_dirs);
                  },
                  true},
                 {"debuginfod_urls",
                  [&](const YAML::Node& v, const std::string& p) {
                    read_symbol_list(errors, v, p, debuginfod_url_problem, out.debuginfod_urls);
                  },
                  true},
                 {"cache_dir",
                  [&](const YAML::Node& v, const std::string& p) {
                    std::optional<std::string> s = read_string(errors, v, p);
                    if (!s) return;
                    if (std::string problem = absolute_path_problem(*s); !problem.empty()) {
                      errors.add(v.Mark(), quoted(p) + " " + problem);
                      return;
                    }
                    out.cache_dir = std::move(*s);
                  }},
                 {"cache_max_bytes",
                  [&](const YAML::Node& v, const std::string& p) {
                    read_uint(errors, v, p, 1u << 20, 1ull << 40, out.cache_max_bytes);
                  }},
                 {"timeout_seconds", [&](const YAML::Node& v, const std::string& p) {
                    read_uint(errors, v, p, 1, 600, out.timeout_seconds);
                  }},
                 {"max_inflated_bytes", [&](const YAML::Node& v, const std::string& p) {
                    read_uint(errors, v, p, 0, 1ull << 40, out.max_inflated_bytes);
                  }},
                 {"perf_map_max_file_bytes", [&](const YAML::Node& v, const std::string& p) {
                    read_uint(errors, v, p, 0, 1ull << 40, out.perf_map_max_file_bytes);
                  }},
                 {"perf_map_max_memory_bytes", [&](const YAML::Node& v, const std::string& p) {
                    read_uint(errors, v, p, 0, 1ull << 40, out.perf_map_max_memory_bytes);
                  }}});
}

bool valid_hostname(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  return std::all_of(host.begin(), host.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.';
  });
}

// Splits "host:port" / "[v6]:port". Returns "" and fills host/port when
// valid, else the problem and, where one is obvious, a corrected address.
std::string listen_problem(const std::string& s, std::string& host, uint16_t& port,
                           std::string& suggestion) {
  const std::string form = "must be host:port, e.g. 127.0.0.1:9478 or [::1]:9478";
  std::string_view port_text;
  if (!s.empty() && s[0] == '[') {
    size_t close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':') return form;
    host = s.substr(1, close - 1);
    in6_addr addr;
    if (inet_pton(AF_INET6, host.c_str(), &addr) != 1) {
      return "has " + quoted(host) + " in brackets, which is not an IPv6 address";
    }
    port_text = std::string_view(s).substr(close + 2);
  } else {
    size_t colon = s.rfind(':');
    if (colon == std::string::npos) {
      bool digits = !s.empty() &&
                    std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
      suggestion = digits ? "127.0.0.1:" + s : (valid_hostname(s) ? s + ":9478" : "");
      return form;
    }
    host = s.substr(0, colon);
    in6_addr addr;
    if (host.find(':') != std::string::npos) {
      if (inet_pton(AF_INET6, host.c_str(), &addr) == 1)
        suggestion = "[" + host + "]" + s.substr(colon);
      return "has an IPv6 address without brackets; " + form;
    }
    if (host.empty()) {
      // Listening on every interface exposes stacks; make it explicit.
      suggestion = "0.0.0.0" + s;
      return "has no host; name the interface (0.0.0.0 for all)";
    }
    if (!valid_hostname(host)) return "has an invalid host " + quoted(host);
    port_text = std::string_view(s).substr(colon + 1);
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      value < 1 || value > 65535 || port_text[0] == '+') {
    return "has an invalid port " + quoted(port_text) + " (1-65535)";
  }
  port = static_cast<uint16_t>(value);
  return {};
}

void parse_listen(ErrorSink& errors, const YAML::Node& node, const std::string& path, Config& c) {
  std::optional<std::string> s = read_string(errors, node, path);
  if (!s) return;
  std::string host, suggestion;
  uint16_t port = 0;
  if (std::string problem = listen_problem(*s, host, port, suggestion); !problem.empty()) {
    errors.add(node.Mark(), quoted(path) + " " + quoted(*s) + " " + problem, suggestion);
    return;
  }
  c.listen = std::move(*s);
  c.listen_host = std::move(host);
  c.listen_port = port;
}

void read_log_level(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                    LogLevel& out) {
  read_enum<LogLevel>(errors, node, path,
                      {{"debug", LogLevel::kDebug},
                       {"info", LogLevel::kInfo},
                       {"warn", LogLevel::kWarn},
                       {"error", LogLevel::kError}},
                      out);
}

// Map sizes mirror `leakwatch top`'s bounds (docs/cli.md).
void parse_limits(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                  LimitsConfig& l) {
  using Node = YAML::Node;
  using Path = std::string;
  parse_mapping(errors, node, path,
                {{"max_processes",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 1, 65536, l.max_processes);
                  }},
                 {"live_map_entries",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 0, kLiveMapMaxEntries, l.live_map_entries);
                    if (l.live_map_entries != 0 && l.live_map_entries < kLiveMapMinEntries)
                      errors.add(x.Mark(),
                                 quoted(q) + " must be 0 (automatic) or between 16 and 67108864, not " +
                                     std::to_string(l.live_map_entries),
                                 "");
                  }},
                 {"live_map_memory_percent",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 1, 50, l.live_map_memory_percent);
                  }},
                 {"max_rescans_per_second",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 1, 1000, l.max_rescans_per_second);
                  }},
                 {"max_discoveries_per_second",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 0, 100000, l.max_discoveries_per_second);
                  }},
                 {"fair_share_percent",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 1, 100, l.fair_share_percent);
                  }},
                 {"stack_map_entries",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 1, 1u << 22, l.stack_map_entries);
                  }},
                 {"stack_gc_grace_seconds",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 0, 86400, l.stack_gc_grace_seconds);
                  }},
                 {"max_daemon_memory_bytes",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 1, UINT64_MAX, l.max_daemon_memory_bytes);
                  }},
                 {"max_process_memory_bytes",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 0, UINT64_MAX, l.max_process_memory_bytes);
                  }},
                 {"max_series", [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 1, 10000000, l.max_series);
                  }}});
}

void parse_ringbuf_bytes(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                         uint32_t& out) {
  uint32_t n = 0;
  read_uint(errors, node, path, 4096, 1u << 30, n);
  if (n == 0) return;
  if ((n & (n - 1)) != 0) {
    // n < 2^30 here, so the next power of two is still in range.
    errors.add(node.Mark(), quoted(path) + " must be a power of two, not " + std::to_string(n),
               std::to_string(1u << (32 - __builtin_clz(n))));
    return;
  }
  out = n;
}

// For the window/interval cross-check (check_analysis_window): where each
// value was given, and whether either was invalid (then its own error is
// enough).
struct AnalysisMarks {
  std::optional<YAML::Mark> window;
  std::optional<YAML::Mark> interval;
  bool invalid = false;
};

void parse_analysis(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                    AnalysisConfig& a, AnalysisMarks& marks) {
  using Node = YAML::Node;
  using Path = std::string;
  parse_mapping(errors, node, path,
                {{"window_seconds",
                  [&](const Node& x, const Path& q) {
                    uint32_t n = 0;
                    read_seconds(errors, x, q, 1, 7 * 86400, n);
                    marks.invalid |= n == 0;
                    if (n != 0) a.window_seconds = n;
                    marks.window = x.Mark();
                  }},
                 {"sample_interval_seconds",
                  [&](const Node& x, const Path& q) {
                    uint32_t n = 0;
                    read_seconds(errors, x, q, 1, 86400, n);
                    marks.invalid |= n == 0;
                    if (n != 0) a.sample_interval_seconds = n;
                    marks.interval = x.Mark();
                  }},
                 {"primed_min_span_seconds", [&](const Node& x, const Path& q) {
                    read_seconds(errors, x, q, 0, 7 * 86400, a.primed_min_span_seconds);
                  }}});
}

// Run after the whole document: the interval may come before or after the
// window, or only one of them be given against the other's default.
void check_analysis_window(ErrorSink& errors, const AnalysisConfig& a,
                           const AnalysisMarks& marks) {
  if (!marks.invalid && (marks.window || marks.interval) &&
      a.sample_interval_seconds > a.window_seconds) {
    errors.add(marks.interval ? *marks.interval : *marks.window,
               "'analysis.sample_interval_seconds' (" + std::to_string(a.sample_interval_seconds) +
                   ") must not exceed 'analysis.window_seconds' (" +
                   std::to_string(a.window_seconds) + ")");
  }
}

void parse_sampling(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                    SamplingConfig& s) {
  using Node = YAML::Node;
  using Path = std::string;
  parse_mapping(errors, node, path,
                {{"enabled",
                  [&](const Node& x, const Path& q) { read_bool(errors, x, q, s.enabled); }},
                 {"mean_bytes",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 1, LW_SAMPLE_MAX_MEAN, s.mean_bytes);
                  }},
                 {"automatic", [&](const Node& x, const Path& q) {
                    read_bool(errors, x, q, s.automatic);
                  }}});
}

void parse_escalation(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                      EscalationConfig& e) {
  using Node = YAML::Node;
  using Path = std::string;
  parse_mapping(errors, node, path,
                {{"check_interval_seconds",
                  [&](const Node& x, const Path& q) {
                    read_seconds(errors, x, q, 1, 3600, e.check_interval_seconds);
                  }},
                 {"growth_bytes",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 4096, UINT64_MAX, e.growth_bytes);
                  }},
                 {"growth_window_seconds",
                  [&](const Node& x, const Path& q) {
                    read_seconds(errors, x, q, 1, 7 * 86400, e.growth_window_seconds);
                  }},
                 {"full_window_seconds",
                  [&](const Node& x, const Path& q) {
                    read_seconds(errors, x, q, 1, 7 * 86400, e.full_window_seconds);
                  }},
                 {"cooldown_seconds",
                  [&](const Node& x, const Path& q) {
                    read_seconds(errors, x, q, 0, 7 * 86400, e.cooldown_seconds);
                  }},
                 {"confirm_checks", [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 1, EscalationConfig::kMaxConfirmChecks, e.confirm_checks);
                  }}});
}

void parse_governor(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                    GovernorConfig& g) {
  using Node = YAML::Node;
  using Path = std::string;
  parse_mapping(errors, node, path,
                {{"max_hits_per_second",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 0, UINT64_MAX, g.max_hits_per_second);
                  }},
                 {"max_tensor_hits_per_second",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 0, UINT64_MAX, g.max_tensor_hits_per_second);
                  }},
                 {"backoff_initial_seconds",
                  [&](const Node& x, const Path& q) {
                    read_seconds(errors, x, q, 1, 86400, g.backoff_initial_seconds);
                  }},
                 {"backoff_max_seconds",
                  [&](const Node& x, const Path& q) {
                    read_seconds(errors, x, q, 1, 7 * 86400, g.backoff_max_seconds);
                  }},
                 {"over_budget",
                  [&](const Node& x, const Path& q) {
                    read_enum<bool>(errors, x, q, {{"bursts", true}, {"suspend", false}}, g.bursts);
                  }},
                 {"burst_seconds",
                  [&](const Node& x, const Path& q) { read_seconds(errors, x, q, 1, 600, g.burst_seconds); }},
                 {"burst_period_seconds",
                  [&](const Node& x, const Path& q) { read_seconds(errors, x, q, 2, 3600, g.burst_period_seconds); }},
                 {"drain_window_seconds",
                  [&](const Node& x, const Path& q) { read_seconds(errors, x, q, 0, 600, g.drain_window_seconds); }},
                 {"heap_walk_max_bytes", [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 1 << 20, UINT64_MAX, g.heap_walk_max_bytes);
                  }}});
  if (g.burst_period_seconds < 2 * g.burst_seconds)
    errors.add(node.Mark(), quoted(path + ".burst_period_seconds") + " must be at least twice burst_seconds (" +
                                std::to_string(g.burst_seconds) + ")");
}

void parse_unwind(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                  UnwindConfig& u) {
  using Node = YAML::Node;
  using Path = std::string;
  parse_mapping(errors, node, path,
                {{"mode",
                  [&](const Node& x, const Path& q) {
                    read_enum<bool>(errors, x, q, {{"cfi", true}, {"frame_pointers", false}}, u.cfi);
                  }},
                 {"max_table_bytes",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 0, 1ull << 36, u.max_table_bytes);
                  }},
                 {"cache_dir",
                  [&](const Node& x, const Path& q) {
                    std::optional<std::string> d = read_string(errors, x, q);
                    if (!d) return;
                    if (!d->empty() && ((*d)[0] != '/' || d->size() > kMaxPathBytes)) {
                      errors.add(x.Mark(), quoted(q) + " must be an absolute path or empty");
                      return;
                    }
                    u.cache_dir = std::move(*d);
                  }},
                 {"cache_max_bytes",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 0, UINT64_MAX, u.cache_max_bytes);
                  }},
                 {"python_frames", [&](const Node& x, const Path& q) {
                    read_bool(errors, x, q, u.python_frames);
                  }},
                 {"native_frames_above_python", [&](const Node& x, const Path& q) {
                    read_bool(errors, x, q, u.native_frames_above_python);
                  }}});
}

void parse_oom(ErrorSink& errors, const YAML::Node& node, const std::string& path, OomConfig& o) {
  using Node = YAML::Node;
  using Path = std::string;
  parse_mapping(errors, node, path,
                {{"report_dir",
                  [&](const Node& x, const Path& q) {
                    std::optional<std::string> s = read_string(errors, x, q);
                    if (!s) return;
                    if (std::string problem = absolute_path_problem(*s); !s->empty() && !problem.empty()) {
                      errors.add(x.Mark(), quoted(q) + " " + problem + " (or empty: no files)");
                      return;
                    }
                    o.report_dir = std::move(*s);
                  }},
                 {"max_reports",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 1, 10000, o.max_reports);
                  }},
                 {"history_seconds",
                  [&](const Node& x, const Path& q) {
                    read_seconds(errors, x, q, 0, 3600, o.history_seconds);
                  }},
                 {"history_interval_seconds",
                  [&](const Node& x, const Path& q) {
                    read_seconds(errors, x, q, 1, 600, o.history_interval_seconds);
                  }},
                 {"max_total_bytes",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 1u << 20, 16ull << 30, o.max_total_bytes);
                  }},
                 {"max_report_bytes",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 64u << 10, 4u << 20, o.max_report_bytes);
                  }},
                 {"sigkill_reports_per_uid_per_minute",
                  [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 0, 10000, o.sigkill_reports_per_uid_per_minute);
                  }},
                 {"max_sigkill_reports_per_uid", [&](const Node& x, const Path& q) {
                    read_uint(errors, x, q, 1, 10000, o.max_sigkill_reports_per_uid);
                  }}});
}

void parse_web_config_file(ErrorSink& errors, const YAML::Node& node, const std::string& path,
                           std::string& out) {
  std::optional<std::string> s = read_string(errors, node, path);
  if (!s) return;
  // The daemon runs with cwd "/" under systemd; a relative path
  // would silently depend on how it was started.
  if (!s->empty() && (*s)[0] != '/') {
    errors.add(node.Mark(), quoted(path) + " must be an absolute path or empty");
    return;
  }
  if (s->size() > kMaxPathBytes) {
    errors.add(node.Mark(), quoted(path) + " is longer than PATH_MAX");
    return;
  }
  out = std::move(*s);
}

// A user name as the passwd database spells them; whether it exists is
// checked where it is used (cli/run.cc), on the host that runs the daemon.
void parse_sandbox_user(ErrorSink& errors, const YAML::Node& node, const std::string& path, std::string& out) {
  std::optional<std::string> s = read_string(errors, node, path);
  if (!s) return;
  const bool plain = !s->empty() && s->size() <= 64 &&
                     s->find_first_of(":/ \t\n\r") == std::string::npos && (*s)[0] != '-';
  if (!plain) {
    errors.add(node.Mark(), quoted(path) + " must be a user name (e.g. \"nobody\", or \"root\" to keep uid 0)");
    return;
  }
  out = std::move(*s);
}

// The root mapping: each section is parsed by its own function, in the
// order the document gives them.
Config parse_document(ErrorSink& errors, const YAML::Node& root) {
  Config c;
  if (root.IsNull()) return c;  // empty, or only comments: all defaults
  AnalysisMarks analysis_marks;
  using Node = YAML::Node;
  using Path = std::string;
  parse_mapping(
      errors, root, "",
      {{"listen", [&](const Node& v, const Path& p) { parse_listen(errors, v, p, c); }},
       {"log_level",
        [&](const Node& v, const Path& p) { read_log_level(errors, v, p, c.log_level); }},
       {"log_format",
        [&](const Node& v, const Path& p) {
          read_enum<LogFormat>(errors, v, p,
                               {{"text", LogFormat::kText}, {"logfmt", LogFormat::kLogfmt}, {"json", LogFormat::kJson}},
                               c.log_format);
        }},
       {"targets", [&](const Node& v, const Path& p) { config_sections::parse_targets(errors, v, p, c.targets); },
        true},
       {"exclude", [&](const Node& v, const Path& p) { config_sections::parse_exclude(errors, v, p, c.exclude); },
        true},
       {"limits", [&](const Node& v, const Path& p) { parse_limits(errors, v, p, c.limits); },
        true},
       {"ringbuf_bytes",
        [&](const Node& v, const Path& p) { parse_ringbuf_bytes(errors, v, p, c.ringbuf_bytes); }},
       {"top_sites_per_process",
        [&](const Node& v, const Path& p) {
          read_uint(errors, v, p, 1, 100000, c.top_sites_per_process);
        }},
       {"rss_interval_seconds",
        [&](const Node& v, const Path& p) { read_seconds(errors, v, p, 0, 3600, c.rss_interval_seconds); }},
       {"reconcile_interval_seconds",
        [&](const Node& v, const Path& p) {
          read_seconds(errors, v, p, 1, 3600, c.reconcile_interval_seconds);
        }},
       {"analysis",
        [&](const Node& v, const Path& p) {
          parse_analysis(errors, v, p, c.analysis, analysis_marks);
        },
        true},
       {"sampling", [&](const Node& v, const Path& p) { parse_sampling(errors, v, p, c.sampling); },
        true},
       {"escalation",
        [&](const Node& v, const Path& p) { parse_escalation(errors, v, p, c.escalation); }, true},
       {"governor", [&](const Node& v, const Path& p) { parse_governor(errors, v, p, c.governor); },
        true},
       {"unwind", [&](const Node& v, const Path& p) { parse_unwind(errors, v, p, c.unwind); }, true},
       {"kill_switch",
        [&](const Node& v, const Path& p) { read_bool(errors, v, p, c.kill_switch); }},
       {"sandbox", [&](const Node& v, const Path& p) { read_bool(errors, v, p, c.sandbox); }},
       {"sandbox_user",
        [&](const Node& v, const Path& p) { parse_sandbox_user(errors, v, p, c.sandbox_user); }},
       {"symbols", [&](const Node& v, const Path& p) { parse_symbols(errors, v, p, c.symbols); },
        true},
       {"oom", [&](const Node& v, const Path& p) { parse_oom(errors, v, p, c.oom); }, true},
       {"web_config_file", [&](const Node& v, const Path& p) {
          parse_web_config_file(errors, v, p, c.web_config_file);
        }}});
  check_analysis_window(errors, c.analysis, analysis_marks);
  return c;
}



Error summary_error(const std::vector<ConfigError>& all) {
  std::string msg = format_error(all.front());
  if (all.size() > 1) msg += " (and " + std::to_string(all.size() - 1) + " more errors)";
  return Error{EINVAL, std::move(msg)};
}

}  // namespace

std::string format_error(const ConfigError& e) {
  std::string out = e.file;
  if (e.line > 0) out += ":" + std::to_string(e.line) + ":" + std::to_string(e.column);
  out += ": " + e.message;
  if (!e.suggestion.empty()) out += " (did you mean " + quoted(e.suggestion) + "?)";
  return out;
}

Result<Config> parse_config(std::string_view text, const std::string& file_name,
                            std::vector<ConfigError>* errors) {
  ErrorSink sink(file_name);
  auto fail = [&]() -> Result<Config> {
    std::vector<ConfigError> all = sink.take();
    Error summary = summary_error(all);
    if (errors) errors->insert(errors->end(), all.begin(), all.end());
    return summary;
  };
  if (text.size() > kMaxConfigBytes) {
    sink.add_at(0, 0,
                "file is " + std::to_string(text.size()) + " bytes; the limit is " +
                    std::to_string(kMaxConfigBytes));
    return fail();
  }
  Config config;
  try {
    const std::string input(text);
    if (std::optional<YAML::Mark> extra = second_document(input)) {
      sink.add(*extra, "content after the first YAML document (a stray ',' or a second '---')");
    } else {
      config = parse_document(sink, YAML::Load(input));
    }
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp bounds its recursion (depthguard.h) but its message is just
    // "bad file".
    sink.add(e.mark, "YAML nesting is too deep");
  } catch (const YAML::Exception& e) {
    sink.add(e.mark, "YAML syntax error: " + printable(e.msg, 200));
  } catch (const std::exception& e) {
    // bad_alloc or a yaml-cpp failure outside its own exception types: the
    // reload must fail, not the daemon.
    sink.add_at(0, 0, std::string("could not parse: ") + e.what());
  }
  if (!sink.empty()) return fail();
  return config;
}

Result<Config> load_config_file(const std::string& path, std::vector<ConfigError>* errors) {
  auto fail = [&](Error err) -> Result<Config> {
    if (errors) errors->push_back(ConfigError{path, 0, 0, err.message, {}});
    return Error{err.code, path + ": " + err.message};
  };
  Result<std::string> text = read_regular_file(path, kMaxConfigBytes);
  if (!text) return fail(text.error());
  return parse_config(*text, path, errors);
}

}  // namespace lw
