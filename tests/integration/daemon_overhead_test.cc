// The daemon's overhead controls with real probes: escalation of an `auto`
// process (light -> full -> light, frozen figures, re-baseline), the
// governor, and the kill switch (SIGUSR2 and the config key).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "daemon_harness.h"

namespace lw::itest {
namespace {

using std::chrono::steady_clock;
using namespace std::chrono_literals;


class LeakwatchOverhead : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "not root";
  }
};


// Heap-kind live allocations whose leaf is `function`.
int64_t heap_allocations_at(const Json &sites, const std::string &function) {
  int64_t n = 0;
  for (const Json &site : sites.at("sites")) {
    const Json &frames = site.at("frames");
    if (site.at("kind") != "heap" || frames.empty() || frames[0].value("function", "") != function) continue;
    n += site.at("live_allocations").get<int64_t>();
  }
  return n;
}

int64_t held_blocks(Process &grower) {
  grower.write_line("count");
  auto line = grower.read_line(10s);
  if (!line || line->rfind("held ", 0) != 0) throw std::runtime_error("grower: no 'held' line");
  return std::stoll(line->substr(5));
}

uint64_t escalations(const Json &status, const char *direction) {
  return status.at("escalations").at(direction).get<uint64_t>();
}

// An auto process starts light, escalates while it grows, steps down after
// full_window_seconds with its figures frozen (and stale), and re-baselines
// at the next escalation: blocks it freed while light are not live then.
TEST_F(LeakwatchOverhead, AutoEscalatesStepsDownAndRebaselines) {
  TempDir bin;
  const std::string grower_bin = private_target_copy(bin.path(), "grower");
  DaemonProcess daemon({.config_body = R"(top_sites_per_process: 200
targets:
  - name: growers
    match: )" + comm_selector(file_name_of(grower_bin)) + R"(
    mode: auto
escalation:
  check_interval_seconds: 1
  growth_bytes: 2097152
  growth_window_seconds: 3
  full_window_seconds: 8
  cooldown_seconds: 1
governor:
  max_hits_per_second: 0
)"});
  daemon.wait_notify("READY=1", kReadyTimeout);
  Process grower({grower_bin, "grow"});
  ASSERT_EQ(read_ready(grower), grower.pid());
  Json entry = daemon.wait_for_process(grower.pid(), kApiTimeout);
  EXPECT_EQ(entry.at("mode"), "light") << entry.dump();
  EXPECT_EQ(entry.at("configured_mode"), "auto");
  EXPECT_TRUE(attached_probes(daemon.get_json("/api/v1/status")).empty()) << "light: no uprobe";

  grower.write_line("go");
  ASSERT_EQ(grower.read_line(10s).value_or(""), "going");
  const auto go = steady_clock::now();
  Json status = daemon.wait_for_status([](const Json &s) { return escalations(s, "up") >= 1; }, 20s,
                                       "first escalation");
  std::printf("[ metric   ] growth start -> escalation: %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<milliseconds>(steady_clock::now() - go).count()));
  const std::vector<ProbeLocation> probes = attached_probes(status);
  ASSERT_FALSE(probes.empty()) << status.dump();
  EXPECT_GT(scan_breakpoints(grower.pid(), probes).breakpoints, 0);
  entry = *daemon.find_process(grower.pid());
  EXPECT_EQ(entry.at("mode"), "full");
  EXPECT_TRUE(entry.at("heap_stale_since").is_null());
  std::this_thread::sleep_for(2s);
  const Json during = daemon.sites_at_or_after(grower.pid(), unix_now(), kApiTimeout);
  const int64_t seen_full = heap_allocations_at(during, "grow_steadily");
  EXPECT_GT(seen_full, 0) << describe_sites(during);
  EXPECT_LE(seen_full, held_blocks(grower)) << describe_sites(during);

  // Step-down: probes gone, figures frozen and marked stale, still listed.
  status = daemon.wait_for_status([](const Json &s) { return escalations(s, "down") >= 1; }, 20s, "step-down");
  const double stepped_down = unix_now();
  const BreakpointScan after = scan_breakpoints(grower.pid(), probes);
  EXPECT_EQ(after.breakpoints, 0) << after.detail;
  entry = *daemon.find_process(grower.pid());
  EXPECT_EQ(entry.at("mode"), "light");
  ASSERT_FALSE(entry.at("heap_stale_since").is_null()) << entry.dump();
  EXPECT_NEAR(entry.at("heap_stale_since").get<double>(), stepped_down, 3.0);
  const Json frozen = daemon.sites_at_or_after(grower.pid(), unix_now(), kApiTimeout);
  const int64_t frozen_allocs = heap_allocations_at(frozen, "grow_steadily");
  EXPECT_GT(frozen_allocs, 0) << "found sites stay queryable\n" << describe_sites(frozen);

  // Free everything while light (unseen), keep growing: the next escalation
  // must count only blocks allocated after it, never the frozen ones. The
  // short growth window lets it come a few seconds after the free, so the
  // target then holds fewer blocks than the frozen window recorded: without
  // the re-baseline the check below fails (tried: 89 live vs 121 held with a
  // 20 s window did not discriminate; with 3 s it does).
  grower.write_line("free");
  ASSERT_EQ(grower.read_line(10s).value_or(""), "freed");
  status = daemon.wait_for_status([](const Json &s) { return escalations(s, "up") >= 2; }, 20s,
                                  "second escalation");
  std::this_thread::sleep_for(1s);
  const Json again = daemon.sites_at_or_after(grower.pid(), unix_now(), kApiTimeout);
  const int64_t seen_again = heap_allocations_at(again, "grow_steadily");
  const int64_t held = held_blocks(grower);
  std::printf("[ metric   ] heap blocks of grow_steadily: %lld in window 1 (frozen), %lld live after "
              "re-escalation, %lld held by the target\n",
              static_cast<long long>(frozen_allocs), static_cast<long long>(seen_again),
              static_cast<long long>(held));
  EXPECT_GT(seen_again, 0) << describe_sites(again);
  EXPECT_LE(seen_again, held) << "phantom live blocks after re-escalation (frozen window had "
                              << frozen_allocs << ")\n" << describe_sites(again);
  EXPECT_TRUE(again.at("heap_stale_since").is_null());

  const HttpReply metrics = daemon.get("/metrics");
  EXPECT_NE(metrics.body.find("leakwatch_escalations_total{direction=\"up\"}"), std::string::npos);
  EXPECT_NE(metrics.body.find("leakwatch_process_mode{"), std::string::npos);
  grower.write_line("exit");
}

// A process over its hit budget has its heap probes detached, and they come
// back after the backoff (and go again, since it is still over).
TEST_F(LeakwatchOverhead, GovernorSuspendsAndReattachesWithBackoff) {
  TempDir bin;
  const std::string grower_bin = private_target_copy(bin.path(), "grower");
  DaemonProcess daemon({.config_body = R"(targets:
  - name: hot
    match: )" + comm_selector(file_name_of(grower_bin)) + R"(
    mode: full
governor:
  max_hits_per_second: 2000
  backoff_initial_seconds: 2
  backoff_max_seconds: 4
)"});
  daemon.wait_notify("READY=1", kReadyTimeout);
  Process hot({grower_bin, "hot"});
  ASSERT_EQ(read_ready(hot), hot.pid());
  daemon.wait_for_process(hot.pid(), kApiTimeout);
  // Attached at exec, the probes come once the loader has mapped libc.
  const std::vector<ProbeLocation> probes = attached_probes(daemon.wait_for_status(
      [](const Json &s) { return !attached_probes(s).empty(); }, kApiTimeout, "probes attached"));
  EXPECT_GT(scan_breakpoints(hot.pid(), probes).breakpoints, 0);
  hot.write_line("go");
  daemon.wait_for_status([](const Json &s) { return s.at("governor_suspensions").get<uint64_t>() >= 1; }, 10s,
                         "governor suspension");
  Json entry = *daemon.find_process(hot.pid());
  EXPECT_TRUE(entry.at("tracing_suspended").get<bool>()) << entry.dump();
  EXPECT_EQ(entry.at("mode"), "light");
  EXPECT_FALSE(entry.at("heap_stale_since").is_null());
  EXPECT_EQ(scan_breakpoints(hot.pid(), probes).breakpoints, 0);
  const HttpReply metrics = daemon.get("/metrics");
  EXPECT_NE(metrics.body.find("leakwatch_governor_suspensions_total 1"), std::string::npos) << metrics.body.substr(0, 2000);
  // Still over budget after the backoff: re-attached, then suspended again.
  daemon.wait_for_status([](const Json &s) { return s.at("governor_suspensions").get<uint64_t>() >= 2; }, 15s,
                         "second suspension after the backoff");
  EXPECT_NE(daemon.diagnostics().find("governor: backoff over"), std::string::npos);
  hot.write_line("exit");
}

// SIGUSR2 detaches every probe within a second and puts them back; the
// config key does the same on reload.
TEST_F(LeakwatchOverhead, KillSwitchDetachesEveryProbeWithinOneSecond) {
  TempDir bin;
  const std::string grower_bin = private_target_copy(bin.path(), "grower");
  const std::string body = R"(targets:
  - name: traced
    match: )" + comm_selector(file_name_of(grower_bin)) + R"(
    mode: full
governor:
  max_hits_per_second: 0
)";
  DaemonProcess daemon({.config_body = body});
  daemon.wait_notify("READY=1", kReadyTimeout);
  Process target({grower_bin, "grow"});
  ASSERT_EQ(read_ready(target), target.pid());
  daemon.wait_for_process(target.pid(), kApiTimeout);
  // Attached at exec, the probes come once the loader has mapped libc.
  const std::vector<ProbeLocation> probes = attached_probes(daemon.wait_for_status(
      [](const Json &s) { return !attached_probes(s).empty(); }, kApiTimeout, "probes attached"));
  const int armed = scan_breakpoints(target.pid(), probes).breakpoints;
  ASSERT_GT(armed, 0);

  const auto t0 = steady_clock::now();
  ASSERT_EQ(kill(daemon.pid(), SIGUSR2), 0);
  ASSERT_TRUE(wait_until(1000ms, [&] { return scan_breakpoints(target.pid(), probes).breakpoints == 0; }, 10ms))
      << scan_breakpoints(target.pid(), probes).detail << daemon.diagnostics();
  const auto detached_ms = std::chrono::duration_cast<milliseconds>(steady_clock::now() - t0).count();
  std::printf("[ metric   ] SIGUSR2 -> every breakpoint gone: %lld ms\n", static_cast<long long>(detached_ms));
  Json status = daemon.wait_for_status([](const Json &s) { return s.at("kill_switch_engaged").get<bool>(); }, 2s,
                                       "kill switch engaged");
  EXPECT_NE(daemon.get("/metrics").body.find("leakwatch_kill_switch_engaged 1"), std::string::npos);

  ASSERT_EQ(kill(daemon.pid(), SIGUSR2), 0);
  ASSERT_TRUE(wait_until(5000ms, [&] { return scan_breakpoints(target.pid(), probes).breakpoints == armed; }))
      << daemon.diagnostics();
  daemon.wait_for_status([](const Json &s) { return !s.at("kill_switch_engaged").get<bool>(); }, 2s, "released");

  // The config key.
  daemon.write_config(body + "kill_switch: true\n");
  ASSERT_TRUE(wait_until(5000ms, [&] { return scan_breakpoints(target.pid(), probes).breakpoints == 0; }))
      << daemon.diagnostics();
  daemon.wait_for_status([](const Json &s) { return s.at("kill_switch_engaged").get<bool>(); }, 2s,
                         "engaged by config");
  target.write_line("exit");
}

}  // namespace
}  // namespace lw::itest
