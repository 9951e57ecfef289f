/* SPDX-License-Identifier: Apache-2.0 */
// The daemon's configuration: which processes to watch system-wide and with
// what resources. docs/config.md is the reference for every key;
// config/leakwatch.yaml is the commented example.
//
// Parsing collects every error it can find (not just the first), each with a
// 1-based line:column, so an operator fixes a file in one pass. Errors are
// returned, never thrown: a reload of a bad file must leave the running
// daemon untouched.
//
// Thread-safety: all functions here are free functions without shared state
// and may run concurrently. A Config is plain data; concurrent const access
// (including match_target, whose std::regex matching is const) is safe. A
// reload builds a new Config and publishes it whole (e.g. swap a
// shared_ptr<const Config>) instead of mutating a shared one. Parsing needs
// about 256 KiB of stack at the deepest nesting yaml-cpp accepts (measured at
// -O2); a thread that parses should have 1 MiB or more.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "core/platform/log.h"
#include "core/platform/result.h"

namespace lw {

// Bounds on hostile or runaway input. A real config is a few KiB; these cap
// the memory and time one bad file can cost (YAML aliases let a small file
// repeat a large list many times, so counts are capped, not just bytes).
inline constexpr size_t kMaxConfigBytes = 1u << 20;
inline constexpr size_t kMaxTargets = 1024;  // also caps exclude entries
inline constexpr size_t kMaxPidsPerMatch = 4096;
inline constexpr size_t kMaxPatternBytes = 1024;  // regexes; globs and cgroups get PATH_MAX
inline constexpr size_t kMaxConfigErrors = 100;   // then one "too many errors" entry

// The live map's hard bounds (limits.live_map_entries, top --live-max).
inline constexpr uint32_t kLiveMapMinEntries = 16;
inline constexpr uint32_t kLiveMapMaxEntries = 1u << 26;

// How a target is traced; the tracer defines what each costs (docs/config.md).
enum class TargetMode { kFull, kLight, kAuto };

// An ECMAScript regex as written and compiled. Matching uses regex_search:
// anchor with ^...$ for a whole-string match.
struct RegexCondition {
  std::string source;
  std::regex regex;
};

// Conditions on one process; every condition present must hold. Parsing
// guarantees at least one is present.
struct MatchConfig {
  std::vector<pid_t> pids;                      // sorted, unique; empty: no pid condition
  std::optional<RegexCondition> comm;           // on /proc/PID/comm
  std::optional<std::string> exe;               // fnmatch(FNM_PATHNAME) glob on the exe path
  std::optional<std::string> cgroup;            // path prefix, whole components, no trailing '/'
  std::optional<RegexCondition> k8s_namespace;  // needs Kubernetes identity to match
  std::optional<RegexCondition> k8s_pod;        // needs Kubernetes identity to match
};

struct TargetConfig {
  std::string name;  // unique in the file, [A-Za-z0-9][A-Za-z0-9_.-]{0,62}
  MatchConfig match;
  TargetMode mode = TargetMode::kAuto;
  bool follow_forks = true;
  // Byte-sampling mean for this target's heap; unset: the global
  // `sampling` section decides; 0: record every allocation.
  std::optional<uint64_t> sampling_mean_bytes;
  // Automatic sampling for this target (docs/config.md, "Automatic
  // sampling"); unset: `sampling.automatic` decides.
  std::optional<bool> automatic_sampling;
  // The tensor tier (decision tensor-tier): the frameworks' own allocators
  // probed in every mode for a process that maps them.
  bool tensors = true;
};

struct ExcludeConfig {
  MatchConfig match;
};

struct LimitsConfig {
  // 1,024 (issue 17, measured: docs/config.md, bench/many_processes.sh).
  uint32_t max_processes = 1024;
  // 0: automatic, sized at start from RAM and the memory cgroup
  // (core/policy/live_map_size.h, decision live-map-sizing).
  uint32_t live_map_entries = 0;
  uint32_t live_map_memory_percent = 2;
  uint32_t stack_map_entries = 16384;
  // A stored stack no tracked record referenced for this long is deleted
  // from the stack map (decision stack-map-gc); 0: never.
  uint32_t stack_gc_grace_seconds = 60;
  uint64_t max_daemon_memory_bytes = 536870912;
  uint32_t max_series = 50000;
  // A process's lifecycle budget: link-map rescans (dlopen, dlclose, new
  // executable mappings) each process may cost per second; more are
  // deferred, never dropped (decision lifecycle-budget).
  uint32_t max_rescans_per_second = 5;
  // Per uid other than root: exec and fork events looked at per second
  // (burst twice that); more wait, in a bounded queue (issue 32,
  // core/policy/discovery_budget.h). 0: no budget.
  uint32_t max_discoveries_per_second = 20;
  // The most of the live map, the stack map and the process slots one
  // process, or one user other than root, may hold, in percent
  // (decision fair-shares). 100: no shares.
  uint32_t fair_share_percent = 50;
  // The hard cap on what the daemon holds for one process beside its live
  // records: resolved stacks, parsed maps, symbol and Python caches, per-site
  // figures; past it the process is shed (decision process-cost). 0: none.
  uint64_t max_process_memory_bytes = 64ull << 20;
};

// Carried for the analysis; validated only for range here.
struct AnalysisConfig {
  uint32_t window_seconds = 600;
  uint32_t sample_interval_seconds = 10;
  // Heap data an escalated process needs, at least, when the growth seen
  // before the escalation makes up the rest of the minimum span
  // (docs/analysis.md, "Escalated processes"); 0: no priming.
  uint32_t primed_min_span_seconds = 60;
};

struct SamplingConfig {
  bool enabled = false;
  uint64_t mean_bytes = 524288;  // 1..2^30 (bpf/lw_sampling.h)
  // A process whose heap records outgrow its share of the live map or of
  // the daemon's budget is sampled instead of losing allocations
  // (decision auto-sampling).
  bool automatic = true;
};

// `auto` targets: light, escalated to full while their memory keeps growing.
struct EscalationConfig {
  static constexpr uint32_t kMaxConfirmChecks = 10;
  uint32_t check_interval_seconds = 10;  // how often anonymous RSS is read
  uint64_t growth_bytes = 1u << 20;      // growth within growth_window that escalates
  uint32_t growth_window_seconds = 300;
  uint32_t full_window_seconds = 600;    // time in full before stepping down
  uint32_t cooldown_seconds = 600;       // after a step-down, before the next escalation
  // A rise counts once it has held for this many checks in a row: each
  // figure is the lowest of its last N readings (1: every reading as is).
  uint32_t confirm_checks = 3;
};

// Per-process budget of allocator probe hits; over it, the heap probes are
// detached and re-attached later with exponential backoff.
struct GovernorConfig {
  uint64_t max_hits_per_second = 50000;  // 0 = no budget
  // The tensor tier's own budget (decision tensor-tier), apart from the
  // heap's: the bench's conv serving loop makes ~35,000 a second (~60 an
  // iteration), which 20,000 suspended before the leak was named.
  uint64_t max_tensor_hits_per_second = 50000;  // 0 = no budget
  uint32_t backoff_initial_seconds = 60;
  uint32_t backoff_max_seconds = 3600;
  // What a process over max_hits_per_second gets (decision busy-processes):
  // bursts (its heap traced `burst_seconds` in every `burst_period_seconds`,
  // the free side in between) or, false, its heap probes suspended.
  bool bursts = true;
  uint32_t burst_seconds = 2;
  uint32_t burst_period_seconds = 60;
  // A process whose free side alone is over the budget, on glibc's heap:
  // the free side kept this long after each burst, the heap walked before
  // the next (decision busy-processes, "Windows and walks"); 0: suspended.
  uint32_t drain_window_seconds = 2;
  // At most this much of a process's memory read by one walk.
  uint64_t heap_walk_max_bytes = 256ull << 20;
};

// The native unwinder's tables (decision cfi-unwinding).
struct UnwindConfig {
  bool cfi = true;  // mode: cfi (call-frame information) | frame_pointers
  uint64_t max_table_bytes = 128ull << 20;
  std::string cache_dir = "/var/cache/leakwatch/unwind";  // "" = no disk cache
  uint64_t cache_max_bytes = 1ull << 30;
  // CPython frames in the stacks of CPython processes
  // (decision python-frames).
  bool python_frames = true;
  // Native frames above the first CPython evaluation frame, walked too
  // (false: the walk stops there; decision python-frames).
  bool native_frames_above_python = false;
};

// Symbolization (docs/config.md, "Symbols"): where debug files are looked
// for, and the debuginfod servers asked (none by default).
inline constexpr size_t kMaxSymbolPaths = 16;  // debug_dirs, debuginfod_urls
struct SymbolsConfig {
  std::vector<std::string> debug_dirs = {"/usr/lib/debug"};  // absolute
  std::vector<std::string> debuginfod_urls;                   // empty: off
  std::string cache_dir = "/var/cache/leakwatch/debuginfod";
  uint64_t cache_max_bytes = 1ull << 30;
  uint32_t timeout_seconds = 30;
  // What libelf may inflate for the compressed sections of the objects and
  // debug files open at once (issue 32; SymbolizerLimits::max_inflated_bytes).
  uint64_t max_inflated_bytes = 128u << 20;
  // A runtime's perf map (decision jit-perf-maps; PerfMapLimits): bytes
  // read from one process's map in all, and what its kept entries may take.
  uint64_t perf_map_max_file_bytes = 64ull << 20;
  uint64_t perf_map_max_memory_bytes = 16ull << 20;
  bool operator==(const SymbolsConfig&) const = default;
};

// OOM kill reports (docs/config.md "oom", decision oom-kill-reports).
struct OomConfig {
  std::string report_dir = "/var/lib/leakwatch/oom";  // absolute, or "" for no files
  uint32_t max_reports = 100;      // kept in report_dir and in the API; sigkill ones go first
  uint32_t history_seconds = 300;  // memory history kept per process for a report
  uint32_t history_interval_seconds = 5;
  // Issue 32: the reports kept, in all (bytes of JSON), and one report at
  // most; `sigkill` reports per user (real uid, root not limited).
  uint64_t max_total_bytes = 64ull << 20;
  uint64_t max_report_bytes = 512u << 10;
  uint32_t sigkill_reports_per_uid_per_minute = 6;  // 0: no limit
  uint32_t max_sigkill_reports_per_uid = 10;
};

struct Config {
  std::string listen = "127.0.0.1:9478";  // as written
  std::string listen_host = "127.0.0.1";  // IPv6 without brackets
  uint16_t listen_port = 9478;
  LogLevel log_level = LogLevel::kInfo;
  LogFormat log_format = LogFormat::kText;  // text | logfmt | json (core/platform/log.h)
  std::vector<TargetConfig> targets;  // in file order: the first match wins
  std::vector<ExcludeConfig> exclude;
  LimitsConfig limits;
  uint32_t ringbuf_bytes = 8u << 20;  // power of two in [4096, 1 GiB]
  uint32_t top_sites_per_process = 20;
  uint32_t reconcile_interval_seconds = 10;
  // RSS explained (decision rss-explained): /proc/PID/smaps read at most this
  // often per process, at publish; 0: off.
  uint32_t rss_interval_seconds = 15;
  AnalysisConfig analysis;
  SamplingConfig sampling;
  EscalationConfig escalation;
  GovernorConfig governor;
  UnwindConfig unwind;
  bool kill_switch = false;  // every probe detached (SIGUSR2 toggles it too)
  std::string web_config_file;  // absolute path, or "" for plain HTTP
  // After start: only the documented capabilities, no_new_privs and a
  // seccomp allow-list (core/platform/sandbox.h). Read at start only.
  bool sandbox = true;
  SymbolsConfig symbols;
  OomConfig oom;
  // Started as root, the account the daemon switches to (decision
  // unprivileged-uid); "root" keeps uid 0. Read at start only.
  std::string sandbox_user = "nobody";
};

struct ConfigError {
  std::string file;
  int line = 0;    // 1-based; 0 when the error concerns the whole file
  int column = 0;  // 1-based; 0 with line 0
  std::string message;
  std::string suggestion;  // a corrected value or key, or ""
};

// "FILE:LINE:COLUMN: MESSAGE (did you mean 'X'?)"; without ":LINE:COLUMN"
// when line is 0 and without the parenthesis when there is no suggestion.
std::string format_error(const ConfigError& error);

// Parses and validates `text`; `file_name` only labels errors. On failure
// the Error (code EINVAL) summarizes and, when `errors` is not null, every
// problem found is appended to it in file order (at most kMaxConfigErrors
// plus one entry saying more were dropped). Never throws on bad input.
Result<Config> parse_config(std::string_view text, const std::string& file_name,
                            std::vector<ConfigError>* errors);

// Reads `path` (a regular file of at most kMaxConfigBytes) and parses it.
// I/O failures carry their errno (ENOENT, EACCES, EFBIG, ...) and are also
// appended to `errors` as a whole-file error.
Result<Config> load_config_file(const std::string& path, std::vector<ConfigError>* errors);

// Facts the daemon gathered about one process.
struct ProcessFacts {
  pid_t pid = 0;
  std::string comm;                          // /proc/PID/comm
  std::string exe;                           // readlink /proc/PID/exe; "" when unknown
  std::string cgroup_path;                   // cgroup v2 path, e.g. "/system.slice/x.service"
  std::optional<std::string> k8s_namespace;  // set only for Kubernetes pods
  std::optional<std::string> k8s_pod;
};

// Whether every condition in `match` holds for `process`.
bool matches(const MatchConfig& match, const ProcessFacts& process);

// The first target (in file order) that matches `process`, or nullptr when
// none does or any exclude entry matches (exclude wins). The pointer is into
// `config` and lives as long as it.
const TargetConfig* match_target(const Config& config, const ProcessFacts& process);

// Same name, same match conditions (regexes compared by source, pids as
// sets), same mode and follow_forks: a reload keeps such a target's tracing
// as it is.
bool config_equal_target(const TargetConfig& a, const TargetConfig& b);

}  // namespace lw
