// SPDX-License-Identifier: Apache-2.0
#include "cli/gate_report.h"

#include <sys/wait.h>

#include "cli/exit_codes.h"
#include "cli/top_printer.h"

namespace lw::gate {

namespace {

// "gate_leak (gate_leaker.cc:12) [gate_leaker]", or the frame's key
// when it has no function.
std::string frame_text(const Frame& f) {
  if (f.function.empty()) return frame_key(f);
  std::string s = f.function;
  if (!f.file.empty()) {
    const size_t slash = f.file.rfind('/');
    s += " (" + (slash == std::string::npos ? f.file : f.file.substr(slash + 1));
    if (f.line > 0) s += ":" + std::to_string(f.line);
    s += ")";
  }
  if (f.language != "python" && !f.module.empty()) {
    const size_t slash = f.module.rfind('/');
    s += " [" + (slash == std::string::npos ? f.module : f.module.substr(slash + 1)) + "]";
  }
  return s;
}

std::string why_fails(const GateSite& g) {
  std::string why;
  auto add = [&](const char* s) { why += why.empty() ? s : std::string(", ") + s; };
  if (g.new_site) add("new site (not in the baseline)");
  if (g.over_site_limit) add("over --max-site-bytes");
  if (why.empty() && g.fails) add("held at exit");
  return why;
}

std::string site_line(const GateSite& g) {
  std::string line = std::string(g.fails ? "FAIL " : g.suppressed_by != 0 ? "supp " : "ok   ") +
                     human_bytes(g.live_bytes) + " in " + std::to_string(g.live_allocations) +
                     (g.live_allocations == 1 ? " allocation" : " allocations") + " [" + g.kind + "]";
  if (g.fails) line += ": " + why_fails(g);
  else if (g.suppressed_by > 0) line += ": suppressed by " + g.suppression + " (line " + std::to_string(g.suppressed_by) + ")";
  else if (g.suppressed_by < 0) line += ": suppressed by the default rule " + g.suppression;
  else if (g.in_baseline) line += ": in the baseline";
  return line;
}

std::string how_it_ended(const RunEnd& end) {
  if (!end.wait_status) return "did not end (its status is unknown)";
  const int st = *end.wait_status;
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st))
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(st)) +
           (end.interrupted ? " (leakwatch was interrupted and ended it)" : "");
  return "ended with wait status " + std::to_string(st);
}

}  // namespace

int run_exit_code(const Verdict& verdict, const RunEnd& end) {
  if (verdict.failed) return end.gate_failure_code;
  if (!end.wait_status) return exit_code::kError;
  if (WIFEXITED(*end.wait_status)) return WEXITSTATUS(*end.wait_status);
  if (WIFSIGNALED(*end.wait_status)) return 128 + WTERMSIG(*end.wait_status);
  return exit_code::kError;
}

std::string text_report(const Verdict& v, const Rules& rules, const RunEnd& end, size_t others) {
  std::string out = "leakwatch test: " + end.program + " " + how_it_ended(end) + "\n";
  size_t suppressed = 0;
  for (const GateSite& g : v.sites) suppressed += g.suppressed_by != 0;
  const size_t held = v.sites.size() - suppressed;
  out += "leakwatch test: " + std::to_string(held) + (held == 1 ? " site holds " : " sites hold ") +
         human_bytes(v.total_bytes) + " at exit; " + std::to_string(suppressed) + " suppressed (" +
         human_bytes(v.suppressed_bytes) + ")\n";
  if (end.children_untraced > 0)
    out += "leakwatch test: warning: " + end.program + " forked " + std::to_string(end.children_untraced) +
           " child process(es), not traced: their memory is not counted\n";
  size_t shown = 0;
  for (const GateSite& g : v.sites) {
    if (!g.fails && shown >= others) continue;
    if (!g.fails) ++shown;
    out += site_line(g) + "\n";
    const size_t n = g.fails ? g.frames.size() : std::min<size_t>(g.frames.size(), 1);
    for (size_t i = 0; i < n; ++i) out += "    " + frame_text(g.frames[i]) + "\n";
    if (g.fails && !g.truncated.empty()) out += "    (stack ends here: " + g.truncated + ")\n";
  }
  if (v.over_total_limit)
    out += "FAIL " + human_bytes(v.total_bytes) + " held in all, over --max-total-bytes " +
           human_bytes(*rules.max_total_bytes) + "\n";
  size_t failing = 0;
  for (const GateSite& g : v.sites) failing += g.fails;
  if (v.failed)
    out += "leakwatch test: FAILED: " + std::to_string(failing) + " site(s) fail the gate" +
           (v.over_total_limit ? ", and the total" : "") + " (exit " + std::to_string(end.gate_failure_code) + ")\n";
  else
    out += "leakwatch test: passed\n";
  return out;
}

nlohmann::json verdict_json(const Verdict& v, const Rules& rules, const RunEnd& end) {
  nlohmann::json sites = nlohmann::json::array();
  for (const GateSite& g : v.sites) {
    nlohmann::json frames = nlohmann::json::array();
    for (const Frame& f : g.frames)
      frames.push_back({{"key", frame_key(f)}, {"function", f.function}, {"module", f.module},
                        {"file", f.file}, {"line", f.line}, {"language", f.language}});
    sites.push_back({{"key", g.key},
                     {"kind", g.kind},
                     {"live_bytes", g.live_bytes},
                     {"live_allocations", g.live_allocations},
                     {"fails", g.fails},
                     {"new_site", g.new_site},
                     {"in_baseline", g.in_baseline},
                     {"over_site_limit", g.over_site_limit},
                     {"suppressed_by", g.suppressed_by == 0 ? nlohmann::json() : nlohmann::json(g.suppression)},
                     {"truncated", g.truncated.empty() ? nlohmann::json() : nlohmann::json(g.truncated)},
                     {"frames", frames}});
  }
  nlohmann::json status;
  if (end.wait_status && WIFEXITED(*end.wait_status)) status = {{"exited", WEXITSTATUS(*end.wait_status)}};
  else if (end.wait_status && WIFSIGNALED(*end.wait_status)) status = {{"signal", WTERMSIG(*end.wait_status)}};
  auto opt = [](const std::optional<uint64_t>& o) { return o ? nlohmann::json(*o) : nlohmann::json(); };
  return {{"passed", !v.failed},
          {"exit_code", run_exit_code(v, end)},
          {"program", end.program},
          {"program_status", status},
          {"interrupted", end.interrupted},
          {"children_untraced", end.children_untraced},
          {"total_bytes", v.total_bytes},
          {"suppressed_bytes", v.suppressed_bytes},
          {"over_total_limit", v.over_total_limit},
          {"rules",
           {{"max_site_bytes", opt(rules.max_site_bytes)},
            {"max_total_bytes", opt(rules.max_total_bytes)},
            {"baseline", rules.baseline.has_value()},
            {"match_depth", rules.depth},
            {"any_site_fails", v.any_site_fails}}},
          {"sites", sites}};
}

}  // namespace lw::gate
