// SPDX-License-Identifier: Apache-2.0
// The leak gate's rules (`leakwatch test`, docs/cli.md; decision leak-gate):
// which sites still holding memory at exit fail a run, matched
// against suppressions and a baseline by names, never by addresses or stack
// ids (ASLR and rebuilds change those). Pure: no tracer, no files; the
// command (cli/test_cmd.cc) reads the files and hands their text here.
// Thread-safety: plain functions and data; no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/platform/result.h"
#include "view/process_view.h"

namespace lw::gate {

// One frame as the gate names it: "MODULE!FUNCTION", MODULE the object's
// file name (no directory: a checkout elsewhere is the same site); for a
// Python frame the script's file name. A frame without a function keeps its
// file offset, "MODULE+0xOFFSET" (stable across runs of one build: ASLR
// moves the base, not the offset). "[unknown]" for an unknown module.
std::string frame_key(const Frame& frame);

// A site's key: its kind, then the keys of its frames, leaf first, up to
// `depth` of them (0: all), tab-separated (no name holds a tab). Line
// numbers, addresses and stack ids are not in it.
std::string site_key(const SiteSnapshot& site, size_t depth);

// One line of a suppressions file: `leak:PATTERN` (a frame's function,
// module or source file), `function:PATTERN` or `module:PATTERN`.
struct Suppression {
  enum class Field { kAny, kFunction, kModule };
  Field field = Field::kAny;
  std::string pattern;
  int line = 0;  // in its file, for messages
};

// LeakSanitizer's pattern semantics: `*` matches any run of characters;
// without a leading `^` the pattern may start anywhere in the text, without
// a trailing `$` it may end anywhere (a substring); with both, the whole
// text. Case-sensitive.
bool pattern_matches(const std::string& pattern, const std::string& text);

// Parses a suppressions file: one rule a line, `#` starts a comment, blank
// lines and surrounding blanks ignored. An error names `name:LINE`.
Result<std::vector<Suppression>> parse_suppressions(const std::string& text, const std::string& name);

// The suppressions every run gets unless --no-default-suppressions: the C
// and C++ runtimes' one-time allocations, held until exit by design (stdio
// buffers, libstdc++'s exception pool, ld.so's and the dynamic TLS).
std::vector<Suppression> default_suppressions();

// A baseline file: a header line, then one site key a line.
std::string format_baseline(const std::vector<std::string>& keys);
// Parses one; `#` lines are comments. An error names `name:LINE`.
Result<std::set<std::string>> parse_baseline(const std::string& text, const std::string& name);

struct Rules {
  std::optional<uint64_t> max_site_bytes;   // a site holding more fails
  std::optional<uint64_t> max_total_bytes;  // the unsuppressed sites together
  std::optional<std::set<std::string>> baseline;  // a site not in it fails
  size_t depth = 0;  // frames in a key (0: all)
};

// Sites merged by key (several stacks may differ only in line or offset
// within a function), with what the gate made of them.
struct GateSite {
  std::string key;
  std::string kind;
  uint64_t live_bytes = 0;
  uint64_t live_allocations = 0;
  std::vector<Frame> frames;  // of its largest stack
  std::string truncated;      // that stack's, "" when complete
  int suppressed_by = 0;      // the rule's line (default rules: -1); 0: none
  std::string suppression;    // the rule's text
  bool in_baseline = false;
  bool over_site_limit = false;
  bool new_site = false;      // --baseline given and not in it
  bool fails = false;         // this site alone fails the run
};

struct Verdict {
  std::vector<GateSite> sites;  // unsuppressed first, each part by live bytes
  uint64_t total_bytes = 0;       // unsuppressed sites
  uint64_t suppressed_bytes = 0;
  bool over_total_limit = false;
  bool failed = false;
  // No threshold and no baseline: every unsuppressed site fails (the
  // LeakSanitizer default).
  bool any_site_fails = false;
};

// Sites with no live bytes are left out.
Verdict evaluate(const std::vector<SiteSnapshot>& sites, const std::vector<Suppression>& suppressions,
                 const Rules& rules);

// The keys of the unsuppressed sites, for --write-baseline.
std::vector<std::string> baseline_keys(const Verdict& verdict);

}  // namespace lw::gate
