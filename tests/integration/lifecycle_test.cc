// SPDX-License-Identifier: Apache-2.0
// The lifecycle budget (decision lifecycle-budget): a process that changes
// its link map in a loop (dlopen/dlclose as fast as it can) must not make
// the daemon follow every change. The BPF side reports one change per
// rescan request, rescans wait for their token bucket, and a library
// dlopen'ed after the storm is still probed and attributed.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "daemon_harness.h"
#include "harness.h"

namespace lw::itest {
namespace {

using std::chrono::steady_clock;
using namespace std::chrono_literals;

// utime + stime of every thread of `pid`, in seconds.
double cpu_seconds(pid_t pid) {
  return static_cast<double>(cpu_ticks(pid)) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

class LeakwatchLifecycle : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "not root";
  }
};

// The daemon stays a small part of a core while its target loops
// dlopen/dlclose; the rescans it skipped are counted where the user looks
// (the API's process entry and the metrics), and the libraries the target
// dlopens afterwards are probed within the loader's grace.
//
// The issue's figure (under 10% of a core) is measured by
// bench/dlopen_loop.sh beside a bare loop (bench/README.md): CI machines
// differ too much for it (4-7% on the development VMs, 11-13% on one CI
// machine, 21.9% once in a loaded suite, 2026-11-28/29). The bound here is
// 30%, what the code before the lifecycle budget fails (95.8% of a core, 38%
// on a busier machine): it is measured again when over, and both must be
// over to fail; the other checks hold in every attempt.
constexpr double kCpuBound = 0.30;

void dlopen_storm(bool last, bool &cpu_over) {
  TempDir bin;
  const std::string dlopener = private_target_copy(bin.path(), "dlopener");
  // The libraries it loads live next to it.
  for (const char *lib : {"libdltarget.so", "libdltarget_cpp.so"})
    std::filesystem::copy_file(std::filesystem::path(target_path("dlopener")).parent_path() / lib,
                               bin.path() + "/" + lib);
  const std::string comm = file_name_of(dlopener);
  DaemonProcess daemon({.config_body = R"(top_sites_per_process: 200
limits:
  max_rescans_per_second: 5
# dlopen's own mallocs pass 50,000 a second: the governor would detach the
# heap probes, and the leaks after the loop must be seen.
governor:
  max_hits_per_second: 0
targets:
  - name: dl
    match: )" + comm_selector(comm) + R"(
    mode: full
)"});
  daemon.wait_notify("READY=1", kReadyTimeout);

  constexpr double kLoopSeconds = 4;
  Process target({dlopener, "--loop", std::to_string(kLoopSeconds)});
  daemon.wait_for_process(target.pid(), kApiTimeout);
  ASSERT_EQ(read_ready(target), target.pid());

  target.write_line("go");
  ASSERT_EQ(target.read_line(10s).value_or("(none)"), "looping") << target.stderr_text();
  const double cpu0 = cpu_seconds(daemon.pid());
  const auto t0 = steady_clock::now();
  const std::string looped = target.read_line(milliseconds(static_cast<int>(kLoopSeconds * 1000) + 20000))
                                 .value_or("(none)");
  const double wall = std::chrono::duration<double>(steady_clock::now() - t0).count();
  const double cpu = cpu_seconds(daemon.pid()) - cpu0;
  ASSERT_EQ(looped.rfind("looped ", 0), 0u) << looped << "; " << target.stderr_text();
  const unsigned long long pairs = std::stoull(looped.substr(7));
  std::printf("[ metric   ] %llu dlopen/dlclose pairs in %.1f s; the daemon used %.2f s of CPU (%.1f%% of a core)\n",
              pairs, wall, cpu, 100 * cpu / wall);
  ::testing::Test::RecordProperty("daemon_cpu_percent", std::to_string(100 * cpu / wall));
  // A loop the tracer could keep up with proves nothing: at least 500
  // link-map changes a second (a 2-core CI machine makes ~30,000).
  EXPECT_GE(static_cast<double>(pairs), 500 * kLoopSeconds);
  if (!last && cpu / wall >= kCpuBound)
    cpu_over = true;
  else
    EXPECT_LT(cpu / wall, kCpuBound) << daemon.diagnostics();

  // The truth: both libraries loaded after the loop, and their leaks.
  Json truth;
  for (;;) {
    auto line = target.read_line(30s);
    ASSERT_TRUE(line.has_value()) << "no 'done'; stderr: " << target.stderr_text();
    if (line->rfind("done ", 0) == 0) {
      truth = Json::parse(line->substr(5));
      break;
    }
  }
  const Json sites = daemon.sites_at_or_after(target.pid(), unix_now() + 0.5, kApiTimeout);
  expect_matches_truth(sites, truth, {comm, "libdltarget.so", "libdltarget_cpp.so"}, daemon.diagnostics());

  // What the budget did, per process and in the metrics. Each pair is at
  // least two link-map changes (_dl_debug_state runs before and after).
  const Json entry = daemon.wait_for_process(target.pid(), kApiTimeout);
  ASSERT_TRUE(entry.contains("lifecycle")) << entry.dump();
  const Json &lc = entry.at("lifecycle");
  std::printf("[ metric   ] lifecycle: %s\n", lc.dump().c_str());
  EXPECT_GE(lc.at("events").get<double>(), 2.0 * static_cast<double>(pairs)) << lc.dump();
  EXPECT_GT(lc.at("rescans_deferred").get<double>(), 0) << lc.dump();
  // The bucket: 2 x 5 at once, then 5 a second, over the loop and the
  // loads after it (a few seconds more), never one per change.
  const double elapsed = wall + 6;
  EXPECT_LE(lc.at("rescans").get<double>(), 10 + 5 * elapsed) << lc.dump();
  EXPECT_GE(lc.at("rescans").get<double>(), 2) << lc.dump();

  const HttpReply metrics = daemon.get("/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_GT(metric(metrics.body, "leakwatch_rescans_deferred_total"), 0) << metrics.body;
  EXPECT_GE(metric(metrics.body, "leakwatch_lifecycle_events_total"), 2.0 * static_cast<double>(pairs));
  EXPECT_GE(metric(metrics.body, "leakwatch_rescans_total"), 2);

  target.write_line("exit");
  auto status = target.wait_exit(10s);
  EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << target.stderr_text();
}

TEST_F(LeakwatchLifecycle, DlopenLoopStaysCheapAndLaterLibrariesAreAttached) {
  measure_again_if_over(dlopen_storm);
}

}  // namespace
}  // namespace lw::itest
