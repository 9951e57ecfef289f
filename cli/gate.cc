// SPDX-License-Identifier: Apache-2.0
#include "cli/gate.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <map>

namespace lw::gate {

namespace {

constexpr const char* kBaselineHeader = "# leakwatch baseline v1: KIND<TAB>FRAME<TAB>FRAME..., leaf first";

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// '*' globbing over [p, p_end) against [t, t_end), the whole of both.
bool glob_whole(const char* p, const char* p_end, const char* t, const char* t_end) {
  const char* star = nullptr;
  const char* star_t = nullptr;
  while (t < t_end) {
    if (p < p_end && *p == '*') {
      star = p++;
      star_t = t;
    } else if (p < p_end && *p == *t) {
      ++p;
      ++t;
    } else if (star) {
      p = star + 1;
      t = ++star_t;
    } else {
      return false;
    }
  }
  while (p < p_end && *p == '*') ++p;
  return p == p_end;
}

bool matches(const Suppression& s, const Frame& f) {
  const bool python = f.language == "python";
  const std::string module = base_name(python ? f.file : f.module);
  switch (s.field) {
    case Suppression::Field::kFunction:
      return !f.function.empty() && pattern_matches(s.pattern, f.function);
    case Suppression::Field::kModule:
      return !module.empty() && pattern_matches(s.pattern, module);
    case Suppression::Field::kAny:
      return (!f.function.empty() && pattern_matches(s.pattern, f.function)) ||
             (!module.empty() && pattern_matches(s.pattern, module)) ||
             (!f.file.empty() && pattern_matches(s.pattern, f.file));
  }
  return false;
}

// The first rule (file order) that matches any frame of the site.
const Suppression* suppressed_by(const SiteSnapshot& site, const std::vector<Suppression>& rules) {
  for (const Suppression& rule : rules)
    for (const Frame& f : site.frames)
      if (matches(rule, f)) return &rule;
  return nullptr;
}

std::string rule_text(const Suppression& s) {
  switch (s.field) {
    case Suppression::Field::kFunction: return "function:" + s.pattern;
    case Suppression::Field::kModule: return "module:" + s.pattern;
    case Suppression::Field::kAny: break;
  }
  return "leak:" + s.pattern;
}

}  // namespace

std::string frame_key(const Frame& frame) {
  const bool python = frame.language == "python";
  std::string module = base_name(python ? frame.file : frame.module);
  if (module.empty()) module = "[unknown]";
  if (!frame.function.empty()) return module + "!" + frame.function;
  char off[32];
  snprintf(off, sizeof off, "+0x%" PRIx64, frame.offset);
  return module + off;
}

std::string site_key(const SiteSnapshot& site, size_t depth) {
  std::string key = kind_name(site.kind);
  size_t n = 0;
  for (const Frame& f : site.frames) {
    if (depth > 0 && n++ >= depth) break;
    key += '\t';
    key += frame_key(f);
  }
  return key;
}

bool pattern_matches(const std::string& pattern, const std::string& text) {
  const char* p = pattern.data();
  const char* p_end = p + pattern.size();
  const bool anchored_start = p < p_end && *p == '^';
  if (anchored_start) ++p;
  const bool anchored_end = p < p_end && p_end[-1] == '$';
  if (anchored_end) --p_end;
  // Unanchored ends are implicit '*'s: a substring match.
  std::string glob;
  if (!anchored_start) glob += '*';
  glob.append(p, p_end);
  if (!anchored_end) glob += '*';
  return glob_whole(glob.data(), glob.data() + glob.size(), text.data(), text.data() + text.size());
}

Result<std::vector<Suppression>> parse_suppressions(const std::string& text, const std::string& name) {
  std::vector<Suppression> out;
  size_t pos = 0;
  int line_no = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    auto fail = [&](const std::string& why) {
      return Error{EINVAL, name + ":" + std::to_string(line_no) + ": " + why};
    };
    if (colon == std::string::npos)
      return fail("expected TYPE:PATTERN (leak:, function: or module:), got '" + line + "'");
    Suppression s;
    s.line = line_no;
    const std::string type = trim(line.substr(0, colon));
    s.pattern = trim(line.substr(colon + 1));
    if (type == "leak") s.field = Suppression::Field::kAny;
    else if (type == "function") s.field = Suppression::Field::kFunction;
    else if (type == "module") s.field = Suppression::Field::kModule;
    else return fail("unknown type '" + type + "' (leak, function or module)");
    if (s.pattern.empty() || s.pattern == "^" || s.pattern == "$" || s.pattern == "^$")
      return fail("empty pattern");
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<Suppression> default_suppressions() {
  // Each holds memory until exit by design, whatever the program does.
  static const char* const kFunctions[] = {
      "^_IO_file_doallocate$",  // a stdio stream's buffer
      "^_dl_allocate_tls",      // ld.so: a thread's dynamic TLS
      "^_dl_new_object$",       // ld.so: a dlopen()ed object's link map
      "^_nl_",                  // locale data (setlocale)
      "^__tzfile_read$",        // the time zone (tzset, localtime)
      "^allocate_stack$",       // glibc's cache of exited threads' stacks
      "^(anonymous namespace)::pool::pool",  // libstdc++'s exception pool
  };
  std::vector<Suppression> out;
  for (const char* f : kFunctions) out.push_back({Suppression::Field::kFunction, f, -1});
  return out;
}

std::string format_baseline(const std::vector<std::string>& keys) {
  std::string out = std::string(kBaselineHeader) + "\n";
  std::vector<std::string> sorted(keys);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  for (const std::string& k : sorted) out += k + "\n";
  return out;
}

Result<std::set<std::string>> parse_baseline(const std::string& text, const std::string& name) {
  if (text.rfind("# leakwatch baseline v1", 0) != 0)
    return Error{EINVAL, name + ":1: not a leakwatch baseline (written by --write-baseline)"};
  std::set<std::string> keys;
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    if (line.find('\t') == std::string::npos)
      return Error{EINVAL, name + ":" + std::to_string(line_no) + ": expected KIND<TAB>FRAME..."};
    keys.insert(line);
  }
  return keys;
}

Verdict evaluate(const std::vector<SiteSnapshot>& sites, const std::vector<Suppression>& suppressions,
                 const Rules& rules) {
  std::map<std::string, GateSite> by_key;
  std::map<std::string, uint64_t> largest;  // the bytes of the stack whose frames are shown
  for (const SiteSnapshot& s : sites) {
    if (s.live_bytes == 0) continue;
    const std::string key = site_key(s, rules.depth);
    GateSite& g = by_key[key];
    if (g.key.empty()) {
      g.key = key;
      g.kind = kind_name(s.kind);
      if (const Suppression* rule = suppressed_by(s, suppressions)) {
        g.suppressed_by = rule->line;
        g.suppression = rule_text(*rule);
      }
    }
    g.live_bytes += s.live_bytes;
    g.live_allocations += s.live_allocations;
    if (s.live_bytes > largest[key]) {
      largest[key] = s.live_bytes;
      g.frames = s.frames;
      g.truncated = s.truncated;
    }
  }
  Verdict v;
  v.any_site_fails = !rules.max_site_bytes && !rules.max_total_bytes && !rules.baseline;
  for (auto& [key, g] : by_key) {
    if (g.suppressed_by != 0) {
      v.suppressed_bytes += g.live_bytes;
    } else {
      v.total_bytes += g.live_bytes;
      g.over_site_limit = rules.max_site_bytes && g.live_bytes > *rules.max_site_bytes;
      g.in_baseline = rules.baseline && rules.baseline->count(key) > 0;
      g.new_site = rules.baseline && !g.in_baseline;
      g.fails = g.over_site_limit || g.new_site || v.any_site_fails;
    }
    v.failed = v.failed || g.fails;
    v.sites.push_back(std::move(g));
  }
  v.over_total_limit = rules.max_total_bytes && v.total_bytes > *rules.max_total_bytes;
  v.failed = v.failed || v.over_total_limit;
  std::stable_sort(v.sites.begin(), v.sites.end(), [](const GateSite& a, const GateSite& b) {
    if ((a.suppressed_by != 0) != (b.suppressed_by != 0)) return a.suppressed_by == 0;
    return a.live_bytes > b.live_bytes;
  });
  return v;
}

std::vector<std::string> baseline_keys(const Verdict& verdict) {
  std::vector<std::string> keys;
  for (const GateSite& g : verdict.sites)
    if (g.suppressed_by == 0) keys.push_back(g.key);
  return keys;
}

}  // namespace lw::gate
