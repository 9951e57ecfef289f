// SPDX-License-Identifier: Apache-2.0
// `leakwatch test`, the leak gate (docs/cli.md; decision leak-gate),
// end to end with real probes: a clean program passes, a leaking one fails
// naming its site, a suppression lets it pass, and a baseline lets known
// sites pass and fails a new one. Targets: tests/targets/native/gate_leaker.cc
// (-O2, no frame pointers) and tests/targets/python/gate_leaker.py
// (/usr/bin/python3.11, keeping buffers from a named Python function).
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness.h"

namespace lw::itest {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr const char* kPython311 = "/usr/bin/python3.11";
constexpr int kLeaksFound = 23;  // cli/exit_codes.h

class LeakwatchGate : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "not root";
    char tmpl[] = "/tmp/lw-gate-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

struct GateRun {
  int code = -1;     // leakwatch's exit code
  std::string err;   // the report
  Json json;         // --json's file
};

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `leakwatch test --json DIR/out.json ARGS -- COMMAND` to its end.
GateRun run_gate(const std::string& json_path, const std::vector<std::string>& args,
                 const std::vector<std::string>& command) {
  std::vector<std::string> argv{LW_LEAKWATCH_BIN, "test", "--json", json_path};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  fs::remove(json_path);
  Process gate(argv);
  gate.drain();
  auto status = gate.wait_exit(120000ms);
  GateRun run;
  run.err = gate.stderr_text();
  if (!status) throw std::runtime_error("leakwatch test did not exit; stderr: " + run.err);
  if (!WIFEXITED(*status)) throw std::runtime_error("leakwatch test was killed; stderr: " + run.err);
  run.code = WEXITSTATUS(*status);
  const std::string text = read_all(json_path);
  if (!text.empty()) run.json = Json::parse(text);
  return run;
}

// The gate's sites whose innermost frame's function contains `name`.
std::vector<Json> sites_named(const GateRun& run, const std::string& name) {
  std::vector<Json> out;
  if (run.json.is_null()) return out;
  for (const Json& site : run.json.at("gate").at("sites")) {
    const Json& frames = site.at("frames");
    if (!frames.empty() && frames[0].at("function").get<std::string>().find(name) != std::string::npos)
      out.push_back(site);
  }
  return out;
}

std::vector<std::string> cxx(const std::string& mode) { return {target_path("gate_leaker"), mode}; }

TEST_F(LeakwatchGate, CxxCleanPassesLeakFailsSuppressionPasses) {
  const std::string json = file("out.json");
  const GateRun clean = run_gate(json, {}, cxx("clean"));
  EXPECT_EQ(clean.code, 0) << clean.err;
  EXPECT_NE(clean.err.find("leakwatch test: passed"), std::string::npos) << clean.err;

  const GateRun leak = run_gate(json, {"--pprof", file("heap.pb.gz")}, cxx("leak"));
  EXPECT_EQ(leak.code, kLeaksFound) << leak.err;
  // The JSON carries the final snapshot too, and the profile is written
  // (gzip; its contents are the snapshot's pprof, read by go tool pprof in
  // snapshot_test.cc).
  EXPECT_TRUE(leak.json.at("snapshot").at("final").get<bool>());
  const std::string profile = read_all(file("heap.pb.gz"));
  ASSERT_GE(profile.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(profile[0]), 0x1f);
  EXPECT_EQ(static_cast<unsigned char>(profile[1]), 0x8b);
  const std::vector<Json> sites = sites_named(leak, "gate::leak_first");
  ASSERT_EQ(sites.size(), 1u) << leak.err;
  EXPECT_TRUE(sites[0].at("fails").get<bool>());
  EXPECT_EQ(sites[0].at("live_bytes").get<uint64_t>(), 3u * 10000) << leak.err;
  EXPECT_NE(leak.err.find("gate::leak_first"), std::string::npos) << leak.err;
  EXPECT_FALSE(leak.json.at("gate").at("passed").get<bool>());

  std::ofstream(file("s.supp")) << "# the gate test's known leak\nleak:gate::leak_first\n";
  const GateRun suppressed = run_gate(json, {"--suppressions", file("s.supp")}, cxx("leak"));
  EXPECT_EQ(suppressed.code, 0) << suppressed.err;
  const std::vector<Json> s = sites_named(suppressed, "gate::leak_first");
  ASSERT_EQ(s.size(), 1u) << suppressed.err;
  EXPECT_EQ(s[0].at("suppressed_by").get<std::string>(), "leak:gate::leak_first");
}

// A baseline written by one run matches the next run of the same program
// (other addresses: ASLR), and fails a site that is not in it.
TEST_F(LeakwatchGate, CxxBaselineMatchesAcrossRunsAndFailsANewSite) {
  const std::string json = file("out.json");
  const std::string baseline = file("baseline.txt");
  const GateRun written = run_gate(json, {"--write-baseline", baseline}, cxx("leak"));
  EXPECT_EQ(written.code, kLeaksFound) << written.err;  // no baseline given yet
  ASSERT_NE(read_all(baseline).find("gate::leak_first"), std::string::npos) << read_all(baseline);

  const GateRun same = run_gate(json, {"--baseline", baseline}, cxx("leak"));
  EXPECT_EQ(same.code, 0) << same.err << "\nbaseline:\n" << read_all(baseline);

  const GateRun more = run_gate(json, {"--baseline", baseline}, cxx("two"));
  EXPECT_EQ(more.code, kLeaksFound) << more.err;
  const std::vector<Json> fresh = sites_named(more, "gate::leak_second");
  ASSERT_EQ(fresh.size(), 1u) << more.err;
  EXPECT_TRUE(fresh[0].at("new_site").get<bool>());
  const std::vector<Json> known = sites_named(more, "gate::leak_first");
  ASSERT_EQ(known.size(), 1u) << more.err;
  EXPECT_TRUE(known[0].at("in_baseline").get<bool>());
  EXPECT_FALSE(known[0].at("fails").get<bool>());
}

// The program's own status passes through when the gate passes; the
// gate's code wins when it fails.
TEST_F(LeakwatchGate, ProgramExitCodePassesThroughUnlessTheGateFails) {
  const GateRun run = run_gate(file("out.json"), {}, cxx("exit3"));
  EXPECT_EQ(run.code, 3) << run.err;
  EXPECT_NE(run.err.find("exited with status 3"), std::string::npos) << run.err;
  const GateRun bad = run_gate(file("out.json"), {"--error-exitcode", "99"}, cxx("leak"));
  EXPECT_EQ(bad.code, 99) << bad.err;
}

// Children are not traced, and the run says how many there were: the shell
// forks once for /bin/true (not its last command, so not exec'd in place).
TEST_F(LeakwatchGate, ForkedChildrenAreCountedNotTraced) {
  const GateRun run = run_gate(file("out.json"), {"--max-site-bytes", "100000000"},
                               {"/bin/sh", "-c", "/bin/true; exit 4"});
  EXPECT_EQ(run.code, 4) << run.err;
  EXPECT_EQ(run.json.at("gate").at("children_untraced").get<uint64_t>(), 1u) << run.err;
  EXPECT_NE(run.err.find("forked 1 child process(es), not traced"), std::string::npos) << run.err;
}

// Python: the interpreter holds its own memory at exit, so the gate runs
// with a per-site threshold (and a baseline) as a Python project would.
TEST_F(LeakwatchGate, PythonThresholdSuppressionAndBaseline) {
  if (access(kPython311, X_OK) != 0) GTEST_SKIP() << kPython311 << " not installed (python3.11-minimal)";
  const std::string script = std::string(LW_SOURCE_DIR) + "/tests/targets/python/gate_leaker.py";
  const std::string json = file("out.json");
  const std::vector<std::string> limit{"--max-site-bytes", std::to_string(4 << 20)};
  auto py = [&](const std::string& mode) { return std::vector<std::string>{kPython311, script, mode}; };

  const GateRun clean = run_gate(json, limit, py("clean"));
  EXPECT_EQ(clean.code, 0) << clean.err;

  const GateRun leak = run_gate(json, limit, py("leak"));
  EXPECT_EQ(leak.code, kLeaksFound) << leak.err;
  bool named_fails = false;
  for (const Json& site : leak.json.at("gate").at("sites"))
    if (site.at("fails").get<bool>() &&
        site.at("key").get<std::string>().find("gate_leaker.py!hold_buffers") != std::string::npos)
      named_fails = true;
  EXPECT_TRUE(named_fails) << leak.err;
  // Every kept block is under hold_buffers.
  uint64_t named_bytes = 0;
  for (const Json& site : leak.json.at("gate").at("sites"))
    if (site.at("key").get<std::string>().find("gate_leaker.py!hold_buffers") != std::string::npos)
      named_bytes += site.at("live_bytes").get<uint64_t>();
  EXPECT_GE(named_bytes, 8u << 21) << leak.err;  // and the list's own growth

  std::ofstream(file("py.supp")) << "function:^hold_buffers$\n";
  const GateRun suppressed = run_gate(json, {limit[0], limit[1], "--suppressions", file("py.supp")}, py("leak"));
  EXPECT_EQ(suppressed.code, 0) << suppressed.err;

  const std::string baseline = file("py.baseline");
  const GateRun written = run_gate(json, {"--write-baseline", baseline, "--max-site-bytes", "1000000000"}, py("clean"));
  ASSERT_EQ(written.code, 0) << written.err;
  const GateRun fresh = run_gate(json, {"--baseline", baseline}, py("leak"));
  EXPECT_EQ(fresh.code, kLeaksFound) << fresh.err;
  bool named_new = false;
  for (const Json& site : fresh.json.at("gate").at("sites"))
    if (site.at("new_site").get<bool>() &&
        site.at("key").get<std::string>().find("gate_leaker.py!hold_buffers") != std::string::npos)
      named_new = true;
  EXPECT_TRUE(named_new) << fresh.err;
}

}  // namespace
}  // namespace lw::itest
