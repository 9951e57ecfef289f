// SPDX-License-Identifier: Apache-2.0
// The daemon's overhead controls with real probes: escalation of an `auto`
// process (light -> full -> light, frozen figures, re-baseline), the
// governor, and the kill switch (SIGUSR2 and the config key).
#include <signal.h>
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

// Size of the [heap] mapping (the program break's region) of `pid`, 0 if none.
int64_t heap_mapping_bytes(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.size() < 6 || line.compare(line.size() - 6, 6, "[heap]") != 0) continue;
    const size_t dash = line.find('-'), space = line.find(' ');
    return static_cast<int64_t>(std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16) -
                                std::stoull(line.substr(0, dash), nullptr, 16));
  }
  return 0;
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
  confirm_checks: 1
governor:
  max_hits_per_second: 0
)"});
  daemon.wait_notify("READY=1", kReadyTimeout);
  Process grower({grower_bin, "grow"});
  ASSERT_EQ(read_ready(grower), grower.pid());
  Json entry = daemon.wait_for_process(grower.pid(), kApiTimeout);
  EXPECT_EQ(entry.at("mode"), "light") << entry.dump();
  EXPECT_EQ(entry.at("configured_mode"), "auto");
  {
    // Light: no allocator probe, only libc's syscall wrappers and ld.so's
    // hook (decision libc-syscall-wrappers), and no host-wide syscall
    // tracepoint.
    const Json light = daemon.get_json("/api/v1/status");
    EXPECT_TRUE(attached_heap_probes(light).empty()) << light.dump();
    EXPECT_FALSE(attached_probes(light).empty()) << light.dump();
    EXPECT_FALSE(light.at("syscall_tracepoints_attached").get<bool>()) << light.dump();
  }

  grower.write_line("go");
  ASSERT_EQ(grower.read_line(10s).value_or(""), "going");
  const auto go = steady_clock::now();
  Json status = daemon.wait_for_status([](const Json &s) { return escalations(s, "up") >= 1; }, 20s,
                                       "first escalation");
  std::printf("[ metric   ] growth start -> escalation: %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<milliseconds>(steady_clock::now() - go).count()));
  const std::vector<ProbeLocation> probes = attached_heap_probes(status);
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
  over_budget: suspend
)"});
  daemon.wait_notify("READY=1", kReadyTimeout);
  Process hot({grower_bin, "hot"});
  ASSERT_EQ(read_ready(hot), hot.pid());
  daemon.wait_for_process(hot.pid(), kApiTimeout);
  // Attached at exec, the heap probes come once the loader has mapped libc.
  const std::vector<ProbeLocation> probes = attached_heap_probes(daemon.wait_for_status(
      [](const Json &s) { return !attached_heap_probes(s).empty(); }, kApiTimeout, "probes attached"));
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
  // Attached at exec, the heap probes come once the loader has mapped libc.
  // Every probe counts here, the syscall wrappers' and ld.so's included.
  const std::vector<ProbeLocation> probes = attached_probes(daemon.wait_for_status(
      [](const Json &s) { return !attached_heap_probes(s).empty(); }, kApiTimeout, "probes attached"));
  const int armed = scan_breakpoints(target.pid(), probes).breakpoints;
  ASSERT_GT(armed, static_cast<int>(attached_heap_probes(daemon.get_json("/api/v1/status")).size()));

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

// Light mode sees anonymous mmap, mremap, munmap and brk through probes on
// libc's wrappers, in the target only: exact bytes per site, no host-wide
// syscall tracepoint, no breakpoint in a control mapping the same libc
// (decision libc-syscall-wrappers). A process in full mode with an interposed
// mmap (tcmalloc) brings the tracepoints, and they go again with it.
TEST_F(LeakwatchOverhead, LightTracesMmapThroughLibcWrappersNotHostWideTracepoints) {
  TempDir bin;
  const std::string leaker_bin = private_target_copy(bin.path(), "leaker");
  const std::string tc_bin = private_target_copy(bin.path(), "grower");
  DaemonProcess daemon({.config_body = R"(targets:
  - name: light
    match: )" + comm_selector(file_name_of(leaker_bin)) + R"(
    mode: light
  - name: interposed
    match: )" + comm_selector(file_name_of(tc_bin)) + R"(
    mode: full
governor:
  max_hits_per_second: 0
)"});
  daemon.wait_notify("READY=1", kReadyTimeout);
  Process leaker({leaker_bin});
  Process control({target_path("realloc_edge")});
  ASSERT_EQ(read_ready(leaker), leaker.pid());
  ASSERT_EQ(read_ready(control), control.pid());
  Json entry = daemon.wait_for_process(leaker.pid(), kApiTimeout);
  EXPECT_EQ(entry.at("mode"), "light");
  EXPECT_EQ(entry.at("allocator").at("mmap_tracing"), "wrappers") << entry.dump();
  const Json status = daemon.wait_for_status(
      [](const Json &s) { return !attached_probes(s).empty(); }, kApiTimeout, "wrapper probes attached");
  EXPECT_FALSE(status.at("syscall_tracepoints_attached").get<bool>()) << status.dump();
  EXPECT_NE(daemon.get("/metrics").body.find("leakwatch_syscall_tracepoints_attached 0"), std::string::npos);
  const std::vector<ProbeLocation> probes = attached_probes(status);
  std::set<std::string> names;
  for (const ProbeLocation &p : probes) {
    EXPECT_TRUE(is_syscall_probe(p)) << p.symbols << " in light mode\n" << status.dump();
    names.insert(p.symbols);
  }
  EXPECT_EQ(names, (std::set<std::string>{"mmap", "munmap", "mremap", "brk", "_dl_debug_state"}));
  const BreakpointScan traced = scan_breakpoints(leaker.pid(), probes);
  EXPECT_EQ(traced.breakpoints, traced.mapped) << traced.detail;
  EXPECT_GT(traced.mapped, 0) << traced.detail;
  const BreakpointScan untouched = scan_breakpoints(control.pid(), probes);
  EXPECT_EQ(untouched.mapped, traced.mapped) << untouched.detail;
  EXPECT_EQ(untouched.breakpoints, 0) << "the control must not be probed\n" << untouched.detail;

  // Exact bytes at every mmap site: mmap, a partial munmap, mremap, sbrk.
  // The stacks start inside libc's wrappers (after their `syscall`): their
  // callers come from libc's call-frame information (decision cfi-unwinding),
  // so the tables must be in before the workload (the daemon does not wait for
  // them; until then a stack falls back to frame pointers, marked
  // table_pending, and glibc's sbrk uses %rbp as a general register).
  daemon.wait_for_status(
      [](const Json &s) {
        const Json &u = s.at("unwind");
        return u.at("queue_depth").get<int64_t>() == 0 && u.at("objects").at("pending").get<int64_t>() == 0;
      },
      kApiTimeout, "unwind tables built");
  const Json truth = go_and_read_truth(leaker);
  const Json sites = daemon.sites_at_or_after(leaker.pid(), unix_now() + 0.5, kApiTimeout);
  const auto leaves = live_by_leaf(sites);
  // The sbrk wrapper and brk's are the allocator's own frames: the site is
  // the caller, and its bytes are its own.
  ASSERT_TRUE(leaves.count("leak_sbrk")) << describe_sites(sites);
  EXPECT_EQ(leaves.at("leak_sbrk").live_bytes, truth.at("sites").at("leak_sbrk").get<int64_t>()) << describe_sites(sites);
  EXPECT_EQ(leaves.at("leak_sbrk").kinds, std::set<std::string>{"mmap"});
  // The break before each call comes from glibc's __curbrk (read through
  // the attach cookie's offset): the regions, all grown since the attach
  // at exec, can be no larger than the [heap] mapping itself.
  EXPECT_LE(leaves.at("leak_sbrk").live_bytes, heap_mapping_bytes(leaker.pid())) << describe_sites(sites);
  // brk's probe sits past glibc's store of the new break
  // (decision brk-emulated-probe): the break before each call is the probe's
  // own last one, seeded from __curbrk at attach. No call went without it.
  EXPECT_NE(daemon.get("/metrics").body.find("leakwatch_bpf_failures_total{reason=\"brk_unknown\"} 0"),
            std::string::npos);
  for (const Json &fn : truth.at("mmap_sites")) {
    const std::string name = fn.get<std::string>();
    if (name == "leak_sbrk") continue;
    const auto it = leaves.find(name);
    ASSERT_NE(it, leaves.end()) << name << " not reported\n" << describe_sites(sites);
    EXPECT_EQ(it->second.live_bytes, truth.at("sites").at(name).get<int64_t>()) << name << "\n" << describe_sites(sites);
    EXPECT_EQ(it->second.kinds, std::set<std::string>{"mmap"}) << name;
  }
  EXPECT_EQ(heap_allocations_at(sites, "leak_malloc"), 0) << "light: no heap record";

  // tcmalloc interposes mmap: in mode full the raw tracepoints come...
  const std::string tcmalloc = "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4";
  if (access(tcmalloc.c_str(), F_OK) == 0) {
    Process interposed({tc_bin, "grow"}, {.env = {"LD_PRELOAD=" + tcmalloc}});
    ASSERT_EQ(read_ready(interposed), interposed.pid());
    daemon.wait_for_status([](const Json &s) { return s.at("syscall_tracepoints_attached").get<bool>(); },
                           kApiTimeout, "tracepoints attached for the interposed mmap");
    entry = *daemon.find_process(interposed.pid());
    EXPECT_EQ(entry.at("allocator").at("mmap_tracing"), "tracepoints") << entry.dump();
    // ...and go with it.
    interposed.write_line("go");
    ASSERT_EQ(interposed.read_line(10s).value_or(""), "going");
    interposed.write_line("exit");
    ASSERT_TRUE(interposed.wait_exit(10s).has_value());
    daemon.wait_for_status([](const Json &s) { return !s.at("syscall_tracepoints_attached").get<bool>(); },
                           kApiTimeout, "tracepoints detached after the process left");
  } else {
    std::printf("[ skipped  ] tcmalloc part: libgoogle-perftools4 not installed (scripts/install-deps.sh --with-test-tools)\n");
  }
  leaker.write_line("exit");
  EXPECT_TRUE(leaker.wait_exit(10s).has_value());
  control.write_line("exit");
}

}  // namespace
}  // namespace lw::itest
