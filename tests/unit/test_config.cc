// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/symbols/perf_map.h"
#include "core/config/yaml_support.h"
#include "tests/unit/config_test_support.h"

namespace lw {
namespace {

using config_test::all_errors;
using config_test::parse_bad;
using config_test::parse_ok;

const std::string kConfigDir = std::string(LW_TEST_DATA_DIR) + "/config/";
const std::string kExample = std::string(LW_TEST_DATA_DIR) + "/../../config/leakwatch.yaml";

// A unique temporary file holding `text`; removed by the destructor.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    path_ = testing::TempDir() + "lw_config_XXXXXX";
    int fd = mkstemp(path_.data());
    EXPECT_GE(fd, 0);
    EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    close(fd);
  }
  ~TempFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(Config, ExampleFileParsesWithoutErrors) {
  std::vector<ConfigError> errors;
  Result<Config> r = load_config_file(kExample, &errors);
  ASSERT_TRUE(r.ok()) << r.error().message << "\n" << all_errors(errors);
  EXPECT_TRUE(errors.empty());
  const Config& c = *r;
  EXPECT_EQ(c.listen, "127.0.0.1:9478");
  EXPECT_EQ(c.listen_host, "127.0.0.1");
  EXPECT_EQ(c.listen_port, 9478);
  EXPECT_EQ(c.log_level, LogLevel::kInfo);
  // Safe to try on a shared box: only the named targets, no host-wide one
  // (docs/config.md, "What is traced by default").
  ASSERT_EQ(c.targets.size(), 2u);
  for (const TargetConfig& target : c.targets)
    EXPECT_NE(target.match.cgroup, std::optional<std::string>("/"))
        << target.name << " matches every process";
  const TargetConfig& t = c.targets[0];
  EXPECT_EQ(t.name, "model-server");
  EXPECT_EQ(t.match.pids, std::vector<pid_t>{1234});
  ASSERT_TRUE(t.match.comm);
  EXPECT_EQ(t.match.comm->source, "^python3$");
  EXPECT_EQ(t.match.exe, "/opt/serving/bin/*");
  EXPECT_EQ(t.match.cgroup, "/system.slice/model-server.service");
  ASSERT_TRUE(t.match.k8s_namespace && t.match.k8s_pod);
  EXPECT_EQ(t.match.k8s_namespace->source, "^prod$");
  EXPECT_EQ(t.match.k8s_pod->source, "^model-");
  EXPECT_EQ(t.mode, TargetMode::kFull);
  EXPECT_TRUE(t.follow_forks);
  EXPECT_EQ(c.targets[1].name, "batch-workers");
  EXPECT_EQ(c.targets[1].match.cgroup, "/system.slice/batch.service");
  EXPECT_EQ(c.targets[1].mode, TargetMode::kAuto);
  ASSERT_EQ(c.exclude.size(), 1u);
  ASSERT_TRUE(c.exclude[0].match.comm);
  EXPECT_EQ(c.exclude[0].match.comm->source, "^leakwatch$");

  // Everything but the targets is shown at its default: the example must
  // not drift from the code.
  const Config d;
  EXPECT_EQ(c.listen, d.listen);
  EXPECT_EQ(c.log_level, d.log_level);
  EXPECT_EQ(c.limits.max_processes, d.limits.max_processes);
  EXPECT_EQ(c.limits.live_map_entries, d.limits.live_map_entries);
  EXPECT_EQ(c.limits.live_map_memory_percent, d.limits.live_map_memory_percent);
  EXPECT_EQ(c.limits.stack_map_entries, d.limits.stack_map_entries);
  EXPECT_EQ(c.limits.stack_gc_grace_seconds, d.limits.stack_gc_grace_seconds);
  EXPECT_EQ(c.limits.max_daemon_memory_bytes, d.limits.max_daemon_memory_bytes);
  EXPECT_EQ(c.limits.max_series, d.limits.max_series);
  EXPECT_EQ(c.ringbuf_bytes, d.ringbuf_bytes);
  EXPECT_EQ(c.top_sites_per_process, d.top_sites_per_process);
  EXPECT_EQ(c.reconcile_interval_seconds, d.reconcile_interval_seconds);
  EXPECT_EQ(c.analysis.window_seconds, d.analysis.window_seconds);
  EXPECT_EQ(c.analysis.sample_interval_seconds, d.analysis.sample_interval_seconds);
  EXPECT_EQ(c.sampling.enabled, d.sampling.enabled);
  EXPECT_EQ(c.web_config_file, d.web_config_file);
  EXPECT_EQ(c.sandbox, d.sandbox);
  EXPECT_EQ(c.sandbox_user, d.sandbox_user);
}

// docs/config.md, "What is traced by default": the example and the .deb's
// config leave another user's shell alone; the example traces what it names.
TEST(Config, ShippedConfigsTraceOnlyWhatTheyName) {
  const ProcessFacts shell{.pid = 4242,
                           .comm = "bash",
                           .exe = "/usr/bin/bash",
                           .cgroup_path = "/user.slice/user-1001.slice/session-4.scope",
                           .k8s_namespace = std::nullopt,
                           .k8s_pod = std::nullopt};
  const ProcessFacts batch{.pid = 4343,
                           .comm = "worker",
                           .exe = "/opt/batch/worker",
                           .cgroup_path = "/system.slice/batch.service",
                           .k8s_namespace = std::nullopt,
                           .k8s_pod = std::nullopt};
  std::vector<ConfigError> errors;
  Result<Config> example = load_config_file(kExample, &errors);
  ASSERT_TRUE(example.ok()) << all_errors(errors);
  EXPECT_EQ(match_target(*example, shell), nullptr) << "the example traces every process";
  const TargetConfig* t = match_target(*example, batch);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->name, "batch-workers");

  const std::string deb_path = std::string(LW_TEST_DATA_DIR) + "/../../deploy/debian/leakwatch.yaml";
  Result<Config> deb = load_config_file(deb_path, &errors);
  ASSERT_TRUE(deb.ok()) << all_errors(errors);
  EXPECT_TRUE(deb->targets.empty()) << "the .deb's config traces nothing until targets are added";
  EXPECT_EQ(match_target(*deb, shell), nullptr);
  EXPECT_EQ(match_target(*deb, batch), nullptr);
}

TEST(Config, DocumentedDefaults) {
  const Config d;
  EXPECT_EQ(d.listen, "127.0.0.1:9478");
  EXPECT_EQ(d.limits.max_processes, 1024u);
  EXPECT_EQ(d.limits.live_map_entries, 0u);
  EXPECT_EQ(d.limits.live_map_memory_percent, 2u);
  EXPECT_EQ(d.limits.stack_map_entries, 16384u);
  EXPECT_EQ(d.limits.stack_gc_grace_seconds, 60u);
  EXPECT_EQ(d.limits.max_daemon_memory_bytes, 536870912u);
  EXPECT_EQ(d.limits.max_process_memory_bytes, 64u << 20);
  EXPECT_EQ(d.limits.max_series, 50000u);
  EXPECT_EQ(d.ringbuf_bytes, 8388608u);
  EXPECT_EQ(d.top_sites_per_process, 20u);
  EXPECT_EQ(d.reconcile_interval_seconds, 10u);
  EXPECT_EQ(d.analysis.window_seconds, 600u);
  EXPECT_EQ(d.analysis.sample_interval_seconds, 10u);
  EXPECT_FALSE(d.sampling.enabled);
  EXPECT_TRUE(d.sampling.automatic);
  EXPECT_EQ(d.web_config_file, "");
}

TEST(Config, EmptyDocumentAndEmptySectionsGiveDefaults) {
  Config c = parse_ok("");
  EXPECT_TRUE(c.targets.empty());
  c = parse_ok("# only a comment\n---\n");
  EXPECT_EQ(c.listen_port, 9478);
  c = parse_ok("targets:\nexclude:\nlimits:\nanalysis:\nsampling:\n");
  EXPECT_TRUE(c.targets.empty());
  EXPECT_EQ(c.limits.max_processes, 1024u);
}

struct Expected {
  int line;
  int column;
  std::string message_part;
  std::string suggestion;
};

void expect_fixture(const std::string& name, const std::vector<Expected>& expected) {
  SCOPED_TRACE(name);
  std::vector<ConfigError> errors;
  Result<Config> r = load_config_file(kConfigDir + name, &errors);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, EINVAL);
  ASSERT_EQ(errors.size(), expected.size()) << all_errors(errors);
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(format_error(errors[i]));
    EXPECT_EQ(errors[i].file, kConfigDir + name);
    EXPECT_EQ(errors[i].line, expected[i].line);
    EXPECT_EQ(errors[i].column, expected[i].column);
    EXPECT_NE(errors[i].message.find(expected[i].message_part), std::string::npos);
    EXPECT_EQ(errors[i].suggestion, expected[i].suggestion);
  }
}

TEST(Config, UnknownKeysAtEveryDepthSuggestTheNearestKey) {
  expect_fixture("unknown_keys.yaml",
                 {{2, 1, "unknown key 'listn'", "listen"},
                  {4, 5, "'targets[0]' needs a 'match'", ""},
                  {5, 5, "unknown key 'mach' in 'targets[0]'", "match"},
                  {8, 3, "unknown key 'max_proces' in 'limits'", "max_processes"}});
}

TEST(Config, InvalidRegexes) {
  expect_fixture("bad_regex.yaml",
                 {{5, 13, "'targets[0].match.comm': invalid regex '^(python'", ""},
                  {6, 12, "'targets[0].match.pod': invalid regex '[a-'", ""}});
}

TEST(Config, InvalidGlobs) {
  expect_fixture("bad_glob.yaml",
                 {{4, 18, "invalid glob '/opt/[abc': has a '[' without a closing ']'", ""},
                  {6, 18, "unknown character class 'digits'", ""},
                  {8, 18, "starting with '/'", "/*/python*"}});
}

TEST(Config, BadEnumValues) {
  expect_fixture(
      "bad_enum.yaml",
      {{2, 12, "'log_level' must be one of debug|info|warn|error, not 'warning'", "warn"},
       {6, 11, "'targets[0].mode' must be one of full|light|auto, not 'ful'", "full"}});
}

TEST(Config, WrongTypes) {
  expect_fixture("bad_types.yaml",
                 {{4, 18, "'limits.max_processes' must be an integer", ""},
                  {8, 13, "'targets[0].match.pids' must be a sequence of process ids", "[1234]"},
                  {9, 19, "'targets[0].follow_forks' must be true or false, not 'yes'", "true"},
                  {10, 11, "'sampling' must be a mapping", ""}});
}

TEST(Config, ZeroNegativeAndOutOfRangeLimits) {
  expect_fixture("bad_limits.yaml",
                 {{3, 18, "'limits.max_processes' must be between 1 and 65536, not 0", ""},
                  {4, 21, "'limits.live_map_entries' must be an integer", ""},
                  {5, 16, "'ringbuf_bytes' must be a power of two, not 5000", "8192"},
                  {6, 29, "'reconcile_interval_seconds' must be between 1 and 3600", ""},
                  {9, 28, "(120) must not exceed 'analysis.window_seconds' (60)", ""}});
}

TEST(Config, DuplicateTargetNamesAndKeys) {
  expect_fixture("duplicate_names.yaml",
                 {{5, 11, "duplicate target name 'api' (first at line 3)", ""},
                  {8, 5, "duplicate key 'targets[1].mode'", ""}});
}

TEST(Config, EmptyAndMissingMatchesAndNames) {
  expect_fixture("empty_match.yaml",
                 {{5, 12, "'targets[0].match' needs at least one condition", ""},
                  {6, 5, "'targets[1]' needs a 'match'", ""},
                  {7, 5, "'targets[2]' needs a 'name'", ""},
                  {10, 13, "'targets[3].match.pids' is empty", ""},
                  {12, 5, "'exclude[0].match' has no value", ""}});
}

TEST(Config, UnbracketedIpv6ListenAddress) {
  expect_fixture("bad_listen.yaml", {{2, 9, "IPv6 address without brackets", "[::1]:9478"}});
}

TEST(Config, YamlSyntaxErrorCarriesYamlCppPosition) {
  expect_fixture("syntax_error.yaml", {{4, 24, "YAML syntax error", ""}});
}

TEST(Config, AllErrorsAreReportedAndSummarized) {
  std::vector<ConfigError> errors;
  Result<Config> r =
      parse_config("listn: x\nlog_level: loud\ntargets:\n  - name: a\n    match: {comm: \"(\"}\n",
                   "f.yaml", &errors);
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(errors.size(), 3u) << all_errors(errors);
  EXPECT_EQ(r.error().message, format_error(errors[0]) + " (and 2 more errors)");
  // In file order.
  EXPECT_EQ(errors[0].line, 1);
  EXPECT_EQ(errors[1].line, 2);
  EXPECT_EQ(errors[2].line, 5);
  // A null sink is allowed: the summary still says what is wrong.
  r = parse_config("listn: x\n", "f.yaml", nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "f.yaml:1:1: unknown key 'listn' (did you mean 'listen'?)");
}

TEST(Config, SuggestionsOnlyForPlausibleTypos) {
  std::vector<ConfigError> e = parse_bad("zzzzzzzz: 1\n");
  EXPECT_EQ(e[0].suggestion, "");
  e = parse_bad("limits: {max_proc: 1}\n");
  EXPECT_EQ(e[0].suggestion, "max_processes");
  e = parse_bad("log_level: INFO\n");
  EXPECT_EQ(e[0].suggestion, "info");
  e = parse_bad("ringbuf: 4096\n");
  EXPECT_EQ(e[0].suggestion, "ringbuf_bytes");
}

TEST(Config, LogFormatTakesExporterToolkitNames) {
  std::vector<ConfigError> errors;
  Result<Config> r = parse_config("log_format: json\n", "f.yaml", &errors);
  ASSERT_TRUE(r.ok()) << all_errors(errors);
  EXPECT_EQ(r->log_format, LogFormat::kJson);
  Result<Config> d = parse_config("", "f.yaml", &errors);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->log_format, LogFormat::kText);
  std::vector<ConfigError> e = parse_bad("log_format: JSON\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].suggestion, "json");
}

TEST(Config, FormatError) {
  EXPECT_EQ(format_error({"a.yaml", 3, 7, "bad thing", "good"}),
            "a.yaml:3:7: bad thing (did you mean 'good'?)");
  EXPECT_EQ(format_error({"a.yaml", 3, 7, "bad thing", ""}), "a.yaml:3:7: bad thing");
  EXPECT_EQ(format_error({"a.yaml", 0, 0, "too big", ""}), "a.yaml: too big");
}

TEST(Config, ListenAddresses) {
  Config c = parse_ok("listen: \"[::1]:9478\"\n");
  EXPECT_EQ(c.listen_host, "::1");
  EXPECT_EQ(c.listen_port, 9478);
  c = parse_ok("listen: localhost:80\n");
  EXPECT_EQ(c.listen_host, "localhost");
  EXPECT_EQ(c.listen_port, 80);
  c = parse_ok("listen: 0.0.0.0:65535\n");
  EXPECT_EQ(c.listen_port, 65535);

  EXPECT_EQ(parse_bad("listen: \":9478\"\n")[0].suggestion, "0.0.0.0:9478");
  EXPECT_EQ(parse_bad("listen: 9478\n")[0].suggestion, "127.0.0.1:9478");
  EXPECT_EQ(parse_bad("listen: localhost\n")[0].suggestion, "localhost:9478");
  for (const char* bad : {"\"[::1]\"", "\"[::1]9478\"", "\"[zz]:1\"", "host:0", "host:65536",
                          "host:", "host:+80", "host:80x", "\"bad host:80\"", "\"\""}) {
    SCOPED_TRACE(bad);
    parse_bad(std::string("listen: ") + bad + "\n");
  }
}

TEST(Config, ScalarTypesAreStrict) {
  // Quoted numbers stay strings; YAML 1.1 booleans and hex are refused.
  parse_bad("limits: {max_processes: \"10\"}\n");
  parse_bad("limits: {max_processes: 0x10}\n");
  parse_bad("limits: {max_processes: 1.5}\n");
  parse_bad("limits: {max_processes: [1]}\n");
  parse_bad("sampling: {enabled: \"true\"}\n");
  parse_bad("sampling: {enabled: 1}\n");
  EXPECT_EQ(parse_bad("sampling: {enabled: off}\n")[0].suggestion, "false");
  EXPECT_TRUE(parse_ok("sampling: {enabled: True}\n").sampling.enabled);
  // Automatic sampling (decision auto-sampling): globally, and per target over
  // it.
  EXPECT_FALSE(parse_ok("sampling: {automatic: false}\n").sampling.automatic);
  parse_bad("sampling: {automatic: no}\n");
  {
    const Config t = parse_ok(
        "targets:\n  - name: a\n    match: {comm: x}\n    automatic_sampling: false\n"
        "  - name: b\n    match: {comm: y}\n");
    ASSERT_EQ(t.targets.size(), 2u);
    EXPECT_EQ(t.targets[0].automatic_sampling, std::optional<bool>(false));
    EXPECT_FALSE(t.targets[1].automatic_sampling.has_value());
  }
  parse_bad("targets:\n  - name: a\n    match: {comm: x}\n    automatic_sampling: 0\n");
  EXPECT_EQ(parse_ok("limits: {max_daemon_memory_bytes: 18446744073709551615}\n")
                .limits.max_daemon_memory_bytes,
            UINT64_MAX);
  parse_bad("limits: {max_daemon_memory_bytes: 18446744073709551616}\n");
  EXPECT_EQ(parse_ok("limits: {max_process_memory_bytes: 0}\n").limits.max_process_memory_bytes, 0u);
  EXPECT_EQ(parse_ok("limits: {max_process_memory_bytes: 1048576}\n").limits.max_process_memory_bytes, 1048576u);
  parse_bad("limits: {max_process_memory_bytes: -1}\n");
  parse_bad("web_config_file: relative/web.yml\n");
  EXPECT_EQ(parse_ok("web_config_file: /etc/leakwatch/web.yml\n").web_config_file,
            "/etc/leakwatch/web.yml");
  // A string that a C API would cut short.
  parse_bad("targets: [{name: a, match: {cgroup: \"/a\\0b\"}}]\n");
}

TEST(Config, TargetFieldsAndNormalization) {
  Config c = parse_ok(
      "targets:\n"
      "  - name: a.b_c-1\n"
      "    match: {pids: [30, 10, 20, 10], cgroup: \"/system.slice/\"}\n"
      "    follow_forks: false\n");
  ASSERT_EQ(c.targets.size(), 1u);
  EXPECT_EQ(c.targets[0].match.pids, (std::vector<pid_t>{10, 20, 30}));
  EXPECT_EQ(c.targets[0].match.cgroup, "/system.slice");
  EXPECT_FALSE(c.targets[0].follow_forks);
  EXPECT_EQ(c.targets[0].mode, TargetMode::kAuto);

  parse_bad("targets: [{name: \"-x\", match: {pids: [1]}}]\n");
  parse_bad("targets: [{name: \"a b\", match: {pids: [1]}}]\n");
  parse_bad("targets: [{name: " + std::string(64, 'a') + ", match: {pids: [1]}}]\n");
  parse_bad("targets: [{name: a, match: {pids: [0]}}]\n");
  parse_bad("targets: [{name: a, match: {pids: [-1]}}]\n");
  parse_bad("targets: [{name: a, match: {comm: \"\"}}]\n");
  parse_bad("targets: [{name: a, match: {cgroup: system.slice}}]\n");
  parse_bad("targets: [{name: a, match: {exe: \"/x\\\\\"}}]\n");  // trailing backslash
  parse_bad("targets: {name: a}\n");
}

ProcessFacts facts(pid_t pid, std::string comm, std::string exe, std::string cgroup) {
  ProcessFacts p;
  p.pid = pid;
  p.comm = std::move(comm);
  p.exe = std::move(exe);
  p.cgroup_path = std::move(cgroup);
  return p;
}

TEST(Config, SymbolsDefaultsAreOffAndDocumented) {
  const Config c = parse_ok("");
  EXPECT_EQ(c.symbols.debug_dirs, (std::vector<std::string>{"/usr/lib/debug"}));
  EXPECT_TRUE(c.symbols.debuginfod_urls.empty());
  EXPECT_EQ(c.symbols.cache_dir, "/var/cache/leakwatch/debuginfod");
  EXPECT_EQ(c.symbols.cache_max_bytes, 1ull << 30);
  EXPECT_EQ(c.symbols.timeout_seconds, 30u);
  EXPECT_EQ(c.symbols.max_inflated_bytes, 128u << 20);  // decision compressed-sections
  EXPECT_EQ(c.symbols.perf_map_max_file_bytes, 64u << 20);  // PerfMapLimits' defaults
  EXPECT_EQ(c.symbols.perf_map_max_memory_bytes, 16u << 20);
  EXPECT_EQ(c.symbols.perf_map_max_file_bytes, PerfMapLimits{}.max_file_bytes);
  EXPECT_EQ(c.symbols.perf_map_max_memory_bytes, PerfMapLimits{}.max_memory_bytes);
  EXPECT_EQ(parse_ok("symbols:\n").symbols, SymbolsConfig{});
}

TEST(Config, SymbolsKeys) {
  const Config c = parse_ok(
      "symbols:\n"
      "  debug_dirs: [/usr/lib/debug, /opt/debug]\n"
      "  debuginfod_urls: [\"https://debuginfod.debian.net\", \"http://127.0.0.1:8002\"]\n"
      "  cache_dir: /var/cache/lw\n"
      "  cache_max_bytes: 1048576\n"
      "  timeout_seconds: 5\n"
      "  max_inflated_bytes: 0\n"
      "  perf_map_max_file_bytes: 268435456\n"
      "  perf_map_max_memory_bytes: 0\n");
  EXPECT_EQ(c.symbols.debug_dirs, (std::vector<std::string>{"/usr/lib/debug", "/opt/debug"}));
  EXPECT_EQ(c.symbols.debuginfod_urls,
            (std::vector<std::string>{"https://debuginfod.debian.net", "http://127.0.0.1:8002"}));
  EXPECT_EQ(c.symbols.cache_dir, "/var/cache/lw");
  EXPECT_EQ(c.symbols.cache_max_bytes, 1048576u);
  EXPECT_EQ(c.symbols.timeout_seconds, 5u);
  EXPECT_EQ(c.symbols.max_inflated_bytes, 0u);
  EXPECT_EQ(c.symbols.perf_map_max_file_bytes, 256u << 20);
  EXPECT_EQ(c.symbols.perf_map_max_memory_bytes, 0u);
  // An empty list turns the directory search off.
  EXPECT_TRUE(parse_ok("symbols: {debug_dirs: []}\n").symbols.debug_dirs.empty());
}

TEST(Config, BadSymbolsKeys) {
  auto has = [](const std::vector<ConfigError>& errors, const std::string& text) {
    for (const ConfigError& e : errors)
      if (e.message.find(text) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has(parse_bad("symbols: {debug_dirs: [usr/lib/debug]}\n"), "absolute path"));
  EXPECT_TRUE(has(parse_bad("symbols: {debug_dirs: /usr/lib/debug}\n"), "must be a sequence"));
  EXPECT_TRUE(has(parse_bad("symbols: {debuginfod_urls: [ftp://x]}\n"), "http:// or https://"));
  EXPECT_TRUE(has(parse_bad("symbols: {debuginfod_urls: [\"http://a b\"]}\n"), "spaces"));
  EXPECT_TRUE(has(parse_bad("symbols: {cache_dir: cache}\n"), "absolute path"));
  EXPECT_TRUE(has(parse_bad("symbols: {cache_max_bytes: 1000}\n"), "between 1048576"));
  EXPECT_TRUE(has(parse_bad("symbols: {timeout_seconds: 0}\n"), "between 1 and 600"));
  EXPECT_TRUE(has(parse_bad("symbols: {max_inflated_bytes: 1099511627777}\n"), "between 0 and"));
  EXPECT_TRUE(has(parse_bad("symbols: {perf_map_max_file_bytes: 1099511627777}\n"), "between 0 and"));
  EXPECT_TRUE(has(parse_bad("symbols: {perf_map_max_memory_bytes: -1}\n"), "perf_map_max_memory_bytes"));
  std::string many = "symbols:\n  debug_dirs:\n";
  for (int i = 0; i < 17; ++i) many += "    - /d" + std::to_string(i) + "\n";
  EXPECT_TRUE(has(parse_bad(many), "more than 16"));
  const std::vector<ConfigError> typo = parse_bad("symbols: {debuginfod_url: []}\n");
  ASSERT_FALSE(typo.empty());
  EXPECT_EQ(typo[0].suggestion, "debuginfod_urls");
}

TEST(ConfigMatch, AllConditionsMustHold) {
  Config c = parse_ok(
      "targets:\n"
      "  - name: t\n"
      "    match:\n"
      "      pids: [1, 2]\n"
      "      comm: \"^py\"\n"
      "      exe: \"/usr/bin/*\"\n"
      "      cgroup: /svc\n");
  const ProcessFacts good = facts(2, "python3", "/usr/bin/python3", "/svc/sub");
  EXPECT_EQ(match_target(c, good), &c.targets[0]);

  ProcessFacts p = good;
  p.pid = 3;
  EXPECT_EQ(match_target(c, p), nullptr);
  p = good;
  p.comm = "ruby";
  EXPECT_EQ(match_target(c, p), nullptr);
  p = good;
  p.exe = "/usr/bin/sub/python3";  // '*' does not cross '/'
  EXPECT_EQ(match_target(c, p), nullptr);
  p = good;
  p.exe = "";  // unreadable exe
  EXPECT_EQ(match_target(c, p), nullptr);
  p = good;
  p.cgroup_path = "/svc2";  // prefix by whole components only
  EXPECT_EQ(match_target(c, p), nullptr);
  p.cgroup_path = "/svc";
  EXPECT_EQ(match_target(c, p), &c.targets[0]);
}

TEST(ConfigMatch, ExcludeWinsAndFirstTargetWins) {
  Config c = parse_ok(
      "targets:\n"
      "  - {name: first, match: {comm: \"^a\"}}\n"
      "  - {name: second, match: {comm: \"b\"}}\n"
      "exclude:\n"
      "  - match: {comm: \"^leakwatch$\"}\n"
      "  - match: {pids: [7]}\n");
  EXPECT_EQ(match_target(c, facts(1, "ab", "/x", "/")), &c.targets[0]);
  EXPECT_EQ(match_target(c, facts(1, "xb", "/x", "/")), &c.targets[1]);
  EXPECT_EQ(match_target(c, facts(7, "ab", "/x", "/")), nullptr);
  EXPECT_EQ(match_target(c, facts(1, "leakwatch", "/x", "/")), nullptr);
  EXPECT_EQ(match_target(c, facts(1, "zz", "/x", "/")), nullptr);
}

TEST(ConfigMatch, KubernetesConditionsNeedKubernetesFacts) {
  Config c = parse_ok(
      "targets:\n"
      "  - {name: ns, match: {namespace: \"^prod$\"}}\n"
      "  - {name: any-pod, match: {pod: \".*\"}}\n");
  ProcessFacts host = facts(1, "x", "/x", "/system.slice/x.service");
  EXPECT_EQ(match_target(c, host), nullptr) << "'.*' must not match a process outside Kubernetes";

  ProcessFacts pod = host;
  pod.k8s_namespace = "prod";
  pod.k8s_pod = "model-0";
  EXPECT_EQ(match_target(c, pod), &c.targets[0]);
  pod.k8s_namespace = "staging";
  EXPECT_EQ(match_target(c, pod), &c.targets[1]);
}

TEST(ConfigMatch, PidLists) {
  Config c = parse_ok("targets: [{name: p, match: {pids: [5, 100, 42]}}]\n");
  for (pid_t pid : {5, 42, 100}) EXPECT_NE(match_target(c, facts(pid, "x", "/x", "/")), nullptr);
  for (pid_t pid : {0, 1, 41, 43, 101})
    EXPECT_EQ(match_target(c, facts(pid, "x", "/x", "/")), nullptr);
}

TEST(ConfigMatch, RootCgroupPrefixMatchesEverything) {
  Config c = parse_ok("targets: [{name: all, match: {cgroup: /}}]\n");
  EXPECT_NE(match_target(c, facts(1, "x", "/x", "/")), nullptr);
  EXPECT_NE(match_target(c, facts(1, "x", "/x", "/a/b")), nullptr);
}

TEST(ConfigMatch, EqualTargets) {
  // Target names are unique within a file: compare across parses, as a
  // reload does. Pid order does not matter.
  auto target = [](const std::string& fields) {
    Config c = parse_ok("targets: [{" + fields + "}]\n");
    return c.targets.empty() ? TargetConfig{} : c.targets[0];
  };
  const TargetConfig base = target("name: t, match: {pids: [2, 1], comm: \"^a$\"}, mode: full");
  EXPECT_TRUE(config_equal_target(
      base, target("name: t, match: {comm: \"^a$\", pids: [1, 2, 2]}, mode: full")));
  EXPECT_FALSE(config_equal_target(
      base, target("name: u, match: {pids: [2, 1], comm: \"^a$\"}, mode: full")));
  EXPECT_FALSE(config_equal_target(
      base, target("name: t, match: {pids: [2, 1], comm: \"^b$\"}, mode: full")));
  EXPECT_FALSE(
      config_equal_target(base, target("name: t, match: {pids: [2], comm: \"^a$\"}, mode: full")));
  EXPECT_FALSE(config_equal_target(
      base, target("name: t, match: {pids: [2, 1], comm: \"^a$\", pod: x}, mode: full")));
  EXPECT_FALSE(config_equal_target(
      base, target("name: t, match: {pids: [2, 1], comm: \"^a$\"}, mode: light")));
  EXPECT_FALSE(
      config_equal_target(base, target("name: t, match: {pids: [2, 1], comm: \"^a$\"}, mode: full, "
                                       "follow_forks: false")));
}

TEST(ConfigHostile, RandomBytesNeverCrash) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<size_t> length(0, 4096);
  for (int i = 0; i < 300; ++i) {
    std::string text(length(rng), '\0');
    for (char& ch : text) ch = static_cast<char>(byte(rng));
    std::vector<ConfigError> errors;
    Result<Config> r = parse_config(text, "random.yaml", &errors);
    // Random bytes may happen to be a valid (empty) document; either way
    // the outcome and the error list agree.
    EXPECT_EQ(r.ok(), errors.empty());
  }
}

TEST(ConfigHostile, YamlLookingNoiseNeverCrashes) {
  // Random sequences of YAML syntax reach deeper into the parser than bytes.
  static const char* kTokens[] = {"[",     "]",       "{",     "}",           ":",  " ", "\n",
                                  "- ",    "&a ",     "*a ",   "!!str ",      "? ", "'", "\"",
                                  "#",     "targets", "match", "name",        "|",  ">", "---\n",
                                  "...\n", "  ",      "\\0",   "%YAML 1.2\n", ",",  "1"};
  std::mt19937 rng(54321);
  std::uniform_int_distribution<size_t> pick(0, std::size(kTokens) - 1);
  for (int i = 0; i < 2000; ++i) {
    std::string text;
    for (int j = 0; j < 60; ++j) text += kTokens[pick(rng)];
    std::vector<ConfigError> errors;
    Result<Config> r = parse_config(text, "noise.yaml", &errors);
    EXPECT_EQ(r.ok(), errors.empty());
  }
}

// Runs `fn` on a thread with a `stack_bytes` stack: a reload may run on a
// thread smaller than the main thread's 8 MiB.
void run_with_stack(size_t stack_bytes, const std::function<void()>& fn) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, stack_bytes), 0);
  pthread_t thread;
  auto trampoline = [](void* arg) -> void* {
    (*static_cast<const std::function<void()>*>(arg))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, trampoline, const_cast<std::function<void()>*>(&fn)), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

TEST(ConfigHostile, DeepNestingIsAnErrorWithinASmallStack) {
  std::string block_sequences, block_maps;
  for (int i = 0; i < 100000; ++i) block_sequences += "- ";
  block_sequences += "x\n";
  for (int i = 0; i < 1400; ++i) block_maps += std::string(i, ' ') + "a:\n";
  const std::vector<std::string> inputs = {std::string(100000, '['), std::string(100000, '{'),
                                           block_sequences, block_maps};
  for (const std::string& text : inputs) {
    std::vector<ConfigError> errors;
    bool ok = true;
    // config.h promises parsing fits well within 1 MiB.
    run_with_stack(1 << 20, [&] { ok = parse_config(text, "deep.yaml", &errors).ok(); });
    EXPECT_FALSE(ok);
    ASSERT_FALSE(errors.empty());
    EXPECT_NE(errors[0].message.find("too deep"), std::string::npos) << errors[0].message;
  }
}

TEST(ConfigHostile, OversizedInputIsRefusedBeforeParsing) {
  const std::string big(2u << 20, '#');
  std::vector<ConfigError> errors;
  Result<Config> r = parse_config(big, "big.yaml", &errors);
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].line, 0);
  EXPECT_NE(errors[0].message.find("limit is 1048576"), std::string::npos);

  TempFile file(big);
  errors.clear();
  r = load_config_file(file.path(), &errors);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, EFBIG);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("larger than"), std::string::npos);
}

TEST(ConfigHostile, ErrorCountIsCapped) {
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "unknown_" + std::to_string(i) + ": 1\n";
  std::vector<ConfigError> errors = parse_bad(text);
  ASSERT_EQ(errors.size(), kMaxConfigErrors + 1);
  EXPECT_NE(errors.back().message.find("too many errors"), std::string::npos);
}

TEST(ConfigHostile, AliasesCannotAmplifyWork) {
  // One anchored pid list reused by every target: counts are capped, so a
  // small file costs at most kMaxTargets * kMaxPidsPerMatch entries.
  std::string pids;
  for (size_t i = 1; i <= kMaxPidsPerMatch; ++i) pids += std::to_string(i) + ",";
  pids.pop_back();
  std::string text = "targets:\n  - {name: t0, match: {pids: &p [" + pids + "]}}\n";
  for (size_t i = 1; i < kMaxTargets + 5; ++i) {
    text += "  - {name: t" + std::to_string(i) + ", match: {pids: *p}}\n";
  }
  std::vector<ConfigError> errors = parse_bad(text);
  ASSERT_EQ(errors.size(), 1u) << all_errors(errors);
  EXPECT_NE(errors[0].message.find("more than 1024 entries"), std::string::npos);
  EXPECT_EQ(errors[0].line, static_cast<int>(kMaxTargets) + 2);

  std::string many_pids = "targets: [{name: a, match: {pids: [" + pids + ",9999]}}]\n";
  EXPECT_NE(parse_bad(many_pids)[0].message.find("more than 4096 process ids"), std::string::npos);

  // Self-referencing aliases must not loop.
  parse_bad("targets: &t [*t]\n");
  parse_bad("targets: [{name: a, match: &m {pids: *m}}]\n");
}

TEST(ConfigHostile, HostileRegexesAreRejectedOrBounded) {
  // Too long to compile.
  parse_bad("targets: [{name: a, match: {comm: \"" + std::string(kMaxPatternBytes + 1, 'a') +
            "\"}}]\n");
  // Nested repetition that would explode the automaton: libstdc++ refuses
  // it (state limit) rather than exhausting memory.
  parse_bad("targets: [{name: a, match: {comm: \"(a{1000}){1000}\"}}]\n");
  // Deeply nested groups within the length limit compile without crashing.
  std::string nested = std::string(500, '(') + "a" + std::string(500, ')');
  std::vector<ConfigError> errors;
  Result<Config> r =
      parse_config("targets: [{name: a, match: {comm: \"" + nested + "\"}}]\n", "t.yaml", &errors);
  EXPECT_EQ(r.ok(), errors.empty());
}

TEST(ConfigHostile, ControlCharactersInMessagesAreEscaped) {
  std::vector<ConfigError> e = parse_bad("\"evil\\e[31m\": 1\n");
  EXPECT_EQ(e[0].message.find('\x1b'), std::string::npos);
  EXPECT_NE(e[0].message.find("\\x1b"), std::string::npos);
}

TEST(ConfigFile, MissingFileAndNonRegularFiles) {
  std::vector<ConfigError> errors;
  Result<Config> r = load_config_file(kConfigDir + "does-not-exist.yaml", &errors);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ENOENT);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].line, 0);

  r = load_config_file(kConfigDir, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, EINVAL);
}

TEST(ConfigFile, OneDocumentOnly) {
  std::vector<ConfigError> e = parse_bad("listen: a:1\n---\nlisten: b:2\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].line, 2);
  EXPECT_NE(e[0].message.find("content after the first YAML document"), std::string::npos);
  // yaml-cpp 0.7 takes a stray ',' for the start of another document: its
  // Load ignores it and its LoadAll never returns. It must be an error.
  e = parse_bad(",");
  EXPECT_EQ(e[0].line, 1);
  e = parse_bad("targets: []\n,\n");
  EXPECT_EQ(e[0].line, 2);
  // An explicit start and end marker around one document is fine.
  parse_ok("---\nlog_level: debug\n...\n");
}

}  // namespace
}  // namespace lw
