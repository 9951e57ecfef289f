// SPDX-License-Identifier: Apache-2.0
// Faults (issue #8) with real probes: the daemon SIGKILLed while a target
// hammers malloc (no probe may survive it, the target goes on unharmed, and
// a restarted daemon attaches exactly once), and a target under a strict
// seccomp allow-list (tracing must not make it call anything else).
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "daemon_harness.h"

namespace lw::itest {
namespace {

using std::chrono::steady_clock;
using namespace std::chrono_literals;


class LeakwatchFault : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "not root";
  }
};


// The BPF objects a process holds, from /proc/PID/fdinfo: "prog_id" and
// "link_id" lines, as "prog:N" / "link:N".
std::set<std::string> bpf_objects_of(pid_t pid) {
  std::set<std::string> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fdinfo";
  DIR *d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent *e = readdir(d)) {
    std::ifstream f(dir + "/" + e->d_name);
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("prog_id:", 0) == 0) out.insert("prog:" + line.substr(line.find_first_not_of(" \t", 8)));
      if (line.rfind("link_id:", 0) == 0) out.insert("link:" + line.substr(line.find_first_not_of(" \t", 8)));
    }
  }
  closedir(d);
  return out;
}

size_t count_prefix(const std::set<std::string> &objects, const std::string &prefix) {
  size_t n = 0;
  for (const std::string &o : objects) n += o.rfind(prefix, 0) == 0;
  return n;
}

// Whether the kernel still has a BPF program or link with this id.
bool bpf_object_exists(const std::string &object) {
  const std::string kind = object.substr(0, object.find(':')) == "prog" ? "prog" : "link";
  const std::string cmd = "bpftool " + kind + " show id " + object.substr(object.find(':') + 1) + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

TEST_F(LeakwatchFault, SigkillUnderLoadLeavesNoProbeTargetUnharmedRestartAttachesOnce) {
  TempDir bin;
  const std::string grower_bin = private_target_copy(bin.path(), "grower");
  // The governor off: the hot loop must stay traced the whole time.
  const std::string body = R"(targets:
  - name: traced
    match: )" + comm_selector(file_name_of(grower_bin)) + R"(
    mode: full
governor:
  max_hits_per_second: 0
)";
  Process target({grower_bin, "hot"});
  ASSERT_EQ(read_ready(target), target.pid());

  std::vector<ProbeLocation> probes;
  std::set<std::string> first_objects;
  int armed = 0;
  {
    DaemonProcess daemon({.config_body = body});
    daemon.wait_notify("READY=1", kReadyTimeout);
    daemon.wait_for_process(target.pid(), kApiTimeout);
    probes = attached_probes(daemon.wait_for_status(
        [](const Json &s) { return !attached_probes(s).empty(); }, kApiTimeout, "probes attached"));
    armed = scan_breakpoints(target.pid(), probes).breakpoints;
    ASSERT_GT(armed, 0);
    target.write_line("go");  // the hot loop: malloc+free as fast as it can
    ASSERT_EQ(target.read_line(10s).value_or(""), "going");
    std::this_thread::sleep_for(500ms);
    first_objects = bpf_objects_of(daemon.pid());
    ASSERT_GT(count_prefix(first_objects, "link:"), 0u);
    for (const std::string &o : first_objects) ASSERT_TRUE(bpf_object_exists(o)) << o;

    const auto t0 = steady_clock::now();
    ASSERT_EQ(kill(daemon.pid(), SIGKILL), 0);
    const bool gone = wait_until(
        1000ms,
        [&] {
          if (scan_breakpoints(target.pid(), probes).breakpoints != 0) return false;
          for (const std::string &o : first_objects)
            if (bpf_object_exists(o)) return false;
          return true;
        },
        10ms);
    const auto ms = std::chrono::duration_cast<milliseconds>(steady_clock::now() - t0).count();
    std::printf("[ metric   ] SIGKILL under load -> every breakpoint, program and link gone: %lld ms\n",
                static_cast<long long>(ms));
    ASSERT_TRUE(gone) << scan_breakpoints(target.pid(), probes).detail;
    // The harness reaps it; signal_and_wait on a dead process returns at once.
    EXPECT_TRUE(daemon.signal_and_wait(SIGKILL, 2s).has_value());
  }

  // The target never noticed: it still answers.
  target.write_line("count");
  auto line = target.read_line(10s);
  ASSERT_TRUE(line && line->rfind("held ", 0) == 0) << target.stderr_text();

  // A restarted daemon attaches once: the same breakpoints, the same number
  // of links, and the process listed once.
  {
    DaemonProcess daemon({.config_body = body});
    daemon.wait_notify("READY=1", kReadyTimeout);
    daemon.wait_for_process(target.pid(), kApiTimeout);
    const std::vector<ProbeLocation> again = attached_probes(daemon.wait_for_status(
        [](const Json &s) { return !attached_probes(s).empty(); }, kApiTimeout, "probes attached again"));
    EXPECT_EQ(again.size(), probes.size());
    EXPECT_EQ(scan_breakpoints(target.pid(), again).breakpoints, armed);
    const std::set<std::string> second = bpf_objects_of(daemon.pid());
    EXPECT_EQ(count_prefix(second, "link:"), count_prefix(first_objects, "link:"));
    size_t listed = 0;
    const Json all = daemon.get_json("/api/v1/processes");
    for (const Json &p : all.at("processes")) listed += p.at("pid").get<pid_t>() == target.pid();
    EXPECT_EQ(listed, 1u) << all.dump() << daemon.diagnostics();
    EXPECT_TRUE(daemon.signal_and_wait(SIGTERM, 5s).has_value());
  }
  target.write_line("exit");
  auto status = target.wait_exit(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << target.stderr_text();
}

// Heap live bytes at sites whose leaf function is `function`.
int64_t live_bytes_at(const Json &sites, const std::string &function) {
  int64_t n = 0;
  for (const Json &site : sites.at("sites")) {
    const Json &frames = site.at("frames");
    if (site.at("kind") != "heap" || frames.empty() || frames[0].value("function", "") != function) continue;
    n += site.at("live_bytes").get<int64_t>();
  }
  return n;
}

TEST_F(LeakwatchFault, TargetUnderStrictSeccompIsTracedAndNeverKilled) {
  TempDir bin;
  const std::string target_bin = private_target_copy(bin.path(), "seccomp_leaker");
  // Control: the filter alone lets the program do its work.
  {
    Process alone({target_bin});
    ASSERT_EQ(read_ready(alone), alone.pid());
    const Json truth = go_and_read_truth(alone);
    EXPECT_EQ(truth.at("facts").at("filtered"), 1);
    alone.write_line("exit");
    auto status = alone.wait_exit(10s);
    ASSERT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << alone.stderr_text();
  }
  DaemonProcess daemon({.config_body = R"(targets:
  - name: filtered
    match: )" + comm_selector(file_name_of(target_bin)) + R"(
    mode: full
)"});
  daemon.wait_notify("READY=1", kReadyTimeout);
  Process target({target_bin});
  ASSERT_EQ(read_ready(target), target.pid());
  daemon.wait_for_process(target.pid(), kApiTimeout);
  daemon.wait_for_status([](const Json &s) { return !attached_probes(s).empty(); }, kApiTimeout,
                         "probes attached");
  const Json truth = go_and_read_truth(target);
  const int64_t expected = truth.at("sites").at("leak_under_seccomp").get<int64_t>();
  const Json sites = daemon.sites_at_or_after(target.pid(), unix_now() + 0.5, kApiTimeout);
  EXPECT_EQ(live_bytes_at(sites, "leak_under_seccomp"), expected) << sites.dump(1);
  target.write_line("exit");
  auto status = target.wait_exit(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << "killed by signal " << (WIFSIGNALED(*status) ? WTERMSIG(*status) : 0) << target.stderr_text();
}

}  // namespace
}  // namespace lw::itest

namespace lw::itest {
namespace {

// Kernel maps full: a live map of 1,024 entries under a target that keeps
// 2,500 blocks amid 37,500 churned ones. In the kernel every allocation is
// either tracked (an ALLOC event) or counted live_insert_failed, and every
// free either retires a record (a FREE event) or is counted free_unknown:
// events seen + live_insert_failed + free_unknown = allocations + frees made,
// exactly, ring buffer drops or not. The daemon's view equals the kernel
// map's; nothing crashes.
TEST(LeakwatchMapsFull, LiveMapFullCountsEveryUntrackedAllocationExactly) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  // Automatic sampling off: this is the loss path (decision auto-sampling).
  TraceSession session(
      {.target = "burst", .leakwatch_args = {"--live-max", "1024", "--top", "100", "--no-auto-sampling"}});
  const Json &snapshot = session.snapshot();
  const Json &counters = snapshot.at("counters");
  const int64_t seen = snapshot.at("events").at("seen").get<int64_t>();
  const int64_t failed = counters.at("live_insert_failed").get<int64_t>();
  const int64_t free_unknown = counters.at("free_unknown").get<int64_t>();
  const int64_t made = session.truth().at("facts").at("allocations").get<int64_t>();
  const int64_t frees = made - made / 16;  // burst.c keeps every 16th block
  std::printf("[ metric   ] live map 1024: %lld events, %lld live_insert_failed, %lld free_unknown; "
              "%lld allocations and %lld frees made\n",
              static_cast<long long>(seen), static_cast<long long>(failed), static_cast<long long>(free_unknown),
              static_cast<long long>(made), static_cast<long long>(frees));
  EXPECT_GT(failed, 0);
  EXPECT_EQ(seen + failed + free_unknown, made + frees) << snapshot.dump(1);
  EXPECT_LE(snapshot.at("live_allocations").get<int64_t>(), 1024);
  EXPECT_EQ(snapshot.at("live_bytes").get<int64_t>(), snapshot.at("kernel_live_bytes").get<int64_t>());
  session.target().write_line("exit");
  auto status = session.target().wait_exit(std::chrono::seconds(10));
  ASSERT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
}

// Per process (decision unrecorded-per-kind): holder's 1,000 blocks against a
// live map of 64 entries. Its JSON says how many allocations and bytes were not
// recorded, the coverage is below 1 and the verdicts are marked incomplete; the
// live bytes never exceed the truth (no phantom bytes), and recorded + not
// recorded bytes cover it.
TEST(LeakwatchMapsFull, LiveMapFullIsCountedPerProcess) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  // Automatic sampling off: this is the loss path (decision auto-sampling).
  TraceSession session(
      {.target = "holder", .target_args = {"1000"}, .leakwatch_args = {"--live-max", "64", "--no-auto-sampling"}});
  const Json &snapshot = session.snapshot();
  const Json &u = snapshot.at("unrecorded");
  const int64_t truth = session.truth().at("total_live").get<int64_t>();
  const int64_t lost = u.at("allocations").at("map_full").get<int64_t>();
  const int64_t lost_bytes = u.at("bytes").at("map_full").get<int64_t>();
  const int64_t live = snapshot.at("live_bytes").get<int64_t>();
  const double coverage = u.at("coverage").get<double>();
  std::printf("[ metric   ] live map 64, holder 1000: %lld allocations (%lld B) not recorded, coverage %.4f, "
              "live %lld B of %lld B\n",
              static_cast<long long>(lost), static_cast<long long>(lost_bytes), coverage,
              static_cast<long long>(live), static_cast<long long>(truth));
  EXPECT_GE(lost, 1000 - 64) << u.dump();
  EXPECT_GT(lost_bytes, 0) << u.dump();
  EXPECT_LE(lost_bytes, truth) << u.dump();
  EXPECT_LT(coverage, 1.0) << u.dump();
  EXPECT_GT(coverage, 0.0) << u.dump();
  EXPECT_TRUE(u.at("verdicts_incomplete").get<bool>()) << u.dump();
  EXPECT_LE(live, truth) << u.dump();
  EXPECT_GE(live + lost_bytes, truth) << u.dump();
  // By kind: holder's blocks are heap; the kinds add up to the totals.
  const Json &kinds = u.at("kinds");
  ASSERT_TRUE(kinds.contains("heap")) << u.dump();
  const Json &heap = kinds.at("heap");
  std::printf("[ metric   ] by kind: %s\n", kinds.dump().c_str());
  EXPECT_GE(heap.at("allocations").at("map_full").get<int64_t>(), 1000 - 64) << u.dump();
  EXPECT_TRUE(heap.at("verdicts_incomplete").get<bool>()) << u.dump();
  int64_t kinds_lost = 0, kinds_lost_bytes = 0;
  for (const auto &[name, k] : kinds.items()) {
    kinds_lost += k.at("allocations").at("map_full").get<int64_t>();
    kinds_lost_bytes += k.at("bytes").at("map_full").get<int64_t>();
  }
  EXPECT_EQ(kinds_lost, lost) << u.dump();
  EXPECT_EQ(kinds_lost_bytes, lost_bytes) << u.dump();
  // Each site's verdict says it was made on incomplete data when its kind
  // lost allocations: every heap site here.
  ASSERT_FALSE(snapshot.at("sites").empty()) << snapshot.dump(1);
  for (const Json &site : snapshot.at("sites")) {
    const bool kind_lost = kinds.contains(site.at("kind").get<std::string>());
    EXPECT_EQ(site.at("incomplete").get<bool>(), kind_lost) << site.dump();
  }
  session.target().write_line("exit");
}

// The control: the default live map holds the 1,000 blocks; nothing is
// unrecorded and the coverage is 1.
TEST(LeakwatchMapsFull, BigLiveMapHasFullCoverage) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  TraceSession session({.target = "holder", .target_args = {"1000"}});
  const Json &u = session.snapshot().at("unrecorded");
  EXPECT_EQ(u.at("allocations").at("map_full").get<int64_t>(), 0) << u.dump();
  EXPECT_EQ(u.at("allocations").at("stack_map_full").get<int64_t>(), 0) << u.dump();
  EXPECT_EQ(u.at("bytes").at("map_full").get<int64_t>(), 0) << u.dump();
  EXPECT_EQ(u.at("coverage").get<double>(), 1.0) << u.dump();
  EXPECT_FALSE(u.at("verdicts_incomplete").get<bool>()) << u.dump();
  EXPECT_TRUE(u.at("kinds").empty()) << u.dump();
  for (const Json &site : session.snapshot().at("sites")) EXPECT_FALSE(site.at("incomplete").get<bool>()) << site.dump();
  EXPECT_EQ(session.snapshot().at("live_bytes").get<int64_t>(), session.truth().at("total_live").get<int64_t>());
  session.target().write_line("exit");
}

// A stack map of 4 entries under a target with 20-odd sites: stacks beyond
// it are `unknown` (stack_map_full counted) but their bytes still count,
// so the total stays exact.
TEST(LeakwatchMapsFull, TinyStackMapStillTracksEveryByteAsUnknown) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  TraceSession session({.target = "leaker", .leakwatch_args = {"--stack-max", "4", "--top", "100"}});
  const Json &snapshot = session.snapshot();
  const int64_t full = snapshot.at("counters").at("stack_map_full").get<int64_t>();
  int64_t unknown_bytes = 0;
  for (const Json &site : snapshot.at("sites"))
    if (site.at("frames").empty()) unknown_bytes += site.at("live_bytes").get<int64_t>();
  std::printf("[ metric   ] stack map 4: stack_map_full %lld, %lld live bytes at the unknown stack\n",
              static_cast<long long>(full), static_cast<long long>(unknown_bytes));
  EXPECT_GT(full, 0);
  EXPECT_GT(unknown_bytes, 0);
  // Per process (decision unrecorded-per-kind): recorded, so not lost; the
  // coverage stays 1.
  const Json &u = snapshot.at("unrecorded");
  EXPECT_GT(u.at("allocations").at("stack_map_full").get<int64_t>(), 0) << u.dump();
  EXPECT_LE(u.at("allocations").at("stack_map_full").get<int64_t>(), full) << u.dump();
  EXPECT_EQ(u.at("allocations").at("map_full").get<int64_t>(), 0) << u.dump();
  EXPECT_EQ(u.at("coverage").get<double>(), 1.0) << u.dump();
  // By kind: leaker's stacks are heap's; its sites' verdicts are incomplete
  // (their allocations may sit under the unknown stack), the process's not.
  EXPECT_GT(u.at("kinds").at("heap").at("allocations").at("stack_map_full").get<int64_t>(), 0) << u.dump();
  EXPECT_FALSE(u.at("kinds").at("heap").at("verdicts_incomplete").get<bool>()) << u.dump();
  for (const Json &site : snapshot.at("sites")) {
    if (site.at("kind") == "heap") {
      EXPECT_TRUE(site.at("incomplete").get<bool>()) << site.dump();
    }
  }
  EXPECT_EQ(snapshot.at("live_bytes").get<int64_t>(), session.truth().at("total_live").get<int64_t>())
      << snapshot.dump(1);
}

}  // namespace
}  // namespace lw::itest
