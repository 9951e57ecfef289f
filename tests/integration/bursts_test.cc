// SPDX-License-Identifier: Apache-2.0
// Bursts (issue 33; decision busy-processes): a process over the
// governor's budget is traced in bursts instead of losing its heap
// attribution. Real probes on busy_leaker (-O2, no frame pointers), whose
// call rate is fixed by an absolute clock: ~9,500 allocator calls a second
// in every mode, ~5,000 of them on the free side. With a budget of 7,000
// hits a second the full rate is over it and the free side alone is not.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "tests/integration/daemon_harness.h"
#include "tests/integration/harness.h"

namespace lw::itest {
namespace {

using namespace std::chrono_literals;

constexpr char kBurstGovernor[] = "max_hits_per_second: 7000, burst_seconds: 1, burst_period_seconds: 2";

std::string bursts_config(const std::string& comm, const std::string& over_budget, const std::string& governor) {
  return "top_sites_per_process: 50\n"
         "governor: {" +
         governor + ", over_budget: " + over_budget +
         "}\n"
         "targets:\n  - name: busy\n    match: " +
         comm_selector(comm) + "\n    mode: full\n";
}

// The `parked` flag of libc's probe on `symbol` in one /api/v1/status
// reply (the daemon traces one process), or nullopt when it is not listed.
std::optional<bool> libc_probe_parked(const Json& status, const std::string& symbol) {
  for (const Json& p : status.at("probes"))
    if (p.at("symbols") == symbol && p.at("object").get<std::string>().find("/libc.so") != std::string::npos)
      return p.at("parked").get<bool>();
  return std::nullopt;
}

// The leaked bytes the target reports at "stop".
int64_t stop_and_read_leaked(Process& target) {
  target.write_line("stop");
  for (;;) {
    std::optional<std::string> line = target.read_line(30s);
    if (!line) {
      ADD_FAILURE() << "no 'leaked' line: " << target.stderr_text();
      return -1;
    }
    long long bytes = 0, blocks = 0;
    if (std::sscanf(line->c_str(), "leaked %lld %lld", &bytes, &blocks) == 2) return bytes;
  }
}

// A daemon with bursts_config and busy_leaker started, attached with its
// heap probes, and told "go".
struct BusyRun {
  explicit BusyRun(const std::string& over_budget, const std::string& governor = kBurstGovernor,
                   const std::vector<std::string>& args = {})
      : target_bin(private_target_copy(bin.path(), "busy_leaker")),
        daemon({.config_body = bursts_config(file_name_of(target_bin), over_budget, governor)}) {
    daemon.wait_notify("READY=1", kReadyTimeout);
    std::vector<std::string> argv{target_bin};
    argv.insert(argv.end(), args.begin(), args.end());
    target.emplace(argv);
    ready_pid = read_ready(*target);
    if (ready_pid != target->pid()) return;  // the test's ASSERT says so
    daemon.wait_for_process(target->pid(), kApiTimeout);
    daemon.wait_for_status([](const Json& s) { return !attached_heap_probes(s).empty(); }, kApiTimeout,
                           "heap probes attached");
    target->write_line("go");
  }
  TempDir bin;
  std::string target_bin;
  DaemonProcess daemon;
  std::optional<Process> target;
  pid_t ready_pid = 0;  // what "ready" named
};

// Over budget: bursts, not a suspension. The steady leak under leak_block
// is estimated from what the bursts recorded (each record weighing
// period/burst = 2), and the short-lived blocks of hold_block, recorded in
// bursts and freed between them, are retired: none reads as live once the
// target has freed them all.
TEST(Bursts, ABusyProcessIsTracedInBurstsItsLeakEstimatedAndFreedBlocksRetired) {
  BusyRun run("bursts");
  DaemonProcess& daemon = run.daemon;
  Process& target = *run.target;
  ASSERT_EQ(run.ready_pid, target.pid());
  Json entry;
  ASSERT_TRUE(wait_until(
      15s,
      [&] {
        entry = *daemon.find_process(target.pid());
        return !entry.at("bursts").is_null();
      },
      100ms))
      << entry.dump().substr(0, 2000) << "\n"
      << daemon.diagnostics().substr(0, 4000);
  EXPECT_DOUBLE_EQ(entry.at("bursts").at("fraction").get<double>(), 0.5);
  EXPECT_FALSE(entry.at("tracing_suspended").get<bool>());
  std::this_thread::sleep_for(16s);
  entry = *daemon.find_process(target.pid());
  ASSERT_FALSE(entry.at("bursts").is_null()) << "left the bursts: " << daemon.diagnostics().substr(0, 4000);
  const Json b = entry.at("bursts");
  const int64_t leaked = stop_and_read_leaked(target);
  // Idle now: the next burst is within budget and ends the bursts; the
  // records they made keep their weight.
  Json sites;
  ASSERT_TRUE(wait_until(
      20s,
      [&] {
        sites = daemon.sites_at_or_after(target.pid(), unix_now(), kApiTimeout);
        return heap_live_at(sites, "hold_block").second == 0 &&
               daemon.find_process(target.pid())->at("bursts").is_null();
      },
      250ms))
      << "held blocks still live, or still in bursts: " << heap_live_at(sites, "hold_block").second << "\n"
      << daemon.diagnostics().substr(0, 4000);
  const auto [count, bytes] = heap_live_at(sites, "leak_block");
  const double ratio = static_cast<double>(bytes) / static_cast<double>(leaked);
  std::printf(
      "[ figures  ] bursts: %llu run, %.0f hits/s in a burst, %.0f between; leak_block %lld bytes "
      "estimated of %lld leaked (%.3f), basis %s; hold_block 0 live after its frees\n",
      static_cast<unsigned long long>(b.at("bursts").get<uint64_t>()),
      b.at("burst_hits_per_second").get<double>(), b.at("drain_hits_per_second").get<double>(),
      static_cast<long long>(bytes), static_cast<long long>(leaked), ratio,
      sites.at("sampling").at("heap_basis").get<std::string>().c_str());
  EXPECT_GE(b.at("bursts").get<uint64_t>(), 5u) << b.dump();
  // Each burst measured (decision busy-processes, "Measured bursts"): the
  // allocating probes recorded for about its scheduled length.
  ASSERT_TRUE(b.at("last_recorded_seconds").is_number()) << b.dump();
  const double scheduled = b.at("last_scheduled_seconds").get<double>();
  EXPECT_GE(scheduled, b.at("burst_seconds").get<double>() - 1e-6) << b.dump();  // a difference of two clock readings
  EXPECT_GT(b.at("last_recorded_seconds").get<double>(), 0.5 * scheduled) << b.dump();
  EXPECT_LT(b.at("last_recorded_seconds").get<double>(), scheduled + 0.5) << b.dump();
  EXPECT_LT(b.at("drain_hits_per_second").get<double>(), 7000) << b.dump();
  EXPECT_GT(b.at("burst_hits_per_second").get<double>(), 7000) << b.dump();
  EXPECT_NEAR(ratio, 1.0, 0.3) << count << " allocations";
  EXPECT_EQ(sites.at("sampling").at("heap_basis"), "bursts");
  for (const Json& s : sites.at("sites")) {
    if (s.at("kind") == "heap") {
      EXPECT_EQ(s.at("basis"), "bursts") << s.dump().substr(0, 500);
    }
  }
  EXPECT_GT(sites.at("counters").at("free_unsampled").get<int64_t>(), 0);
  const HttpReply metrics = daemon.get("/metrics");
  EXPECT_NE(metrics.body.find("leakwatch_governor_bursts_total 1"), std::string::npos);
  EXPECT_NE(metrics.body.find("leakwatch_governor_suspensions_total 0"), std::string::npos);
  target.write_line("exit");
}

// The free side alone over the budget (3,000 hits a second against its
// ~5,000 frees and reallocs), on glibc's heap: windows, not a suspension
// (decision busy-processes, "Windows and walks"). Bursts of 1 s in 4, the
// free side kept 1 s after each, then parked, the heap walked before the
// next burst. hold_block's blocks live 2.5 s here, past the window: the
// walks (or the marks, when glibc's bytes could not tell a free) must
// leave none of them live once the target has freed them all, and the
// steady leak under leak_block is estimated from the bursts' records that
// the walks kept.
TEST(Bursts, AFreeSideOverBudgetIsTracedInWindowsAndSettledByHeapWalks) {
  BusyRun run("bursts",
              "max_hits_per_second: 3000, burst_seconds: 1, burst_period_seconds: 4, drain_window_seconds: 1",
              {"2500"});
  DaemonProcess& daemon = run.daemon;
  Process& target = *run.target;
  ASSERT_EQ(run.ready_pid, target.pid());
  Json entry;
  ASSERT_TRUE(wait_until(
      20s,
      [&] {
        entry = *daemon.find_process(target.pid());
        return !entry.at("bursts").is_null() && entry.at("bursts").at("windows").get<bool>();
      },
      100ms))
      << entry.dump().substr(0, 2000) << "\n"
      << daemon.diagnostics().substr(0, 4000);
  EXPECT_EQ(entry.at("bursts").at("window_seconds"), 1);
  // The status says which side is lifted (nothing shown attached that is
  // not): both while parked, the allocating side alone in a window, none
  // in a burst; never the free side alone.
  bool seen_parked = false, seen_free_on = false;
  for (const auto until = std::chrono::steady_clock::now() + 20s; std::chrono::steady_clock::now() < until;) {
    const Json status = daemon.get_json("/api/v1/status");  // both flags from one reply
    const std::optional<bool> m = libc_probe_parked(status, "malloc"), f = libc_probe_parked(status, "free");
    ASSERT_TRUE(m && f) << status.at("probes").dump().substr(0, 3000);
    seen_parked |= *m && *f;
    seen_free_on |= !*f;
    EXPECT_TRUE(*m || !*f) << "free parked while malloc is attached";
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_TRUE(seen_parked) << "the probes never showed parked";
  EXPECT_TRUE(seen_free_on) << "the free side never showed attached";
  entry = *daemon.find_process(target.pid());
  ASSERT_FALSE(entry.at("bursts").is_null()) << "left the bursts: " << daemon.diagnostics().substr(0, 4000);
  EXPECT_FALSE(entry.at("tracing_suspended").get<bool>());
  const Json b = entry.at("bursts");
  const int64_t leaked = stop_and_read_leaked(target);
  Json sites;
  ASSERT_TRUE(wait_until(
      30s,
      [&] {
        sites = daemon.sites_at_or_after(target.pid(), unix_now(), kApiTimeout);
        return heap_live_at(sites, "hold_block").second == 0 &&
               daemon.find_process(target.pid())->at("bursts").is_null();
      },
      250ms))
      << "held blocks still live, or still in bursts: " << heap_live_at(sites, "hold_block").second << "\n"
      << sites.at("sampling").dump() << "\n"
      << daemon.diagnostics().substr(0, 4000);
  const Json& walk = sites.at("sampling").at("heap_walk");
  const auto [count, bytes] = heap_live_at(sites, "leak_block");
  const double ratio = static_cast<double>(bytes) / static_cast<double>(leaked);
  std::printf(
      "[ figures  ] windows: %llu bursts, %.0f hits/s in a burst, %.0f in a window; walks %s; leak_block %lld "
      "bytes estimated of %lld leaked (%.3f), basis %s\n",
      static_cast<unsigned long long>(b.at("bursts").get<uint64_t>()), b.at("burst_hits_per_second").get<double>(),
      b.at("drain_hits_per_second").get<double>(), walk.dump().c_str(), static_cast<long long>(bytes),
      static_cast<long long>(leaked), ratio, sites.at("sampling").at("heap_basis").get<std::string>().c_str());
  ASSERT_FALSE(walk.is_null());
  EXPECT_GE(walk.at("walks").get<uint64_t>(), 3u) << walk.dump();
  EXPECT_TRUE(walk.at("last_complete").get<bool>()) << walk.dump();
  EXPECT_GT(walk.at("last_bytes_read").get<uint64_t>(), 0u) << walk.dump();
  // The held blocks that outlived a window went by a walk or a mark.
  EXPECT_GT(walk.at("freed").get<uint64_t>() + walk.at("undecided").get<uint64_t>(), 0u) << walk.dump();
  EXPECT_NEAR(ratio, 1.0, 0.35) << count << " allocations; " << walk.dump();
  EXPECT_EQ(sites.at("sampling").at("heap_basis"), "bursts+walk");
  const HttpReply metrics = daemon.get("/metrics");
  EXPECT_NE(metrics.body.find("leakwatch_governor_suspensions_total 0"), std::string::npos);
  target.write_line("exit");
}

// With over_budget: suspend, the old answer: the heap probes go, nothing
// is estimated. The control that the test above sees bursts because of the
// setting, not by chance.
TEST(Bursts, OverBudgetSuspendsWhenBurstsAreOff) {
  BusyRun run("suspend");
  DaemonProcess& daemon = run.daemon;
  Process& target = *run.target;
  ASSERT_EQ(run.ready_pid, target.pid());
  daemon.wait_for_status([](const Json& s) { return s.at("governor_suspensions").get<uint64_t>() >= 1; }, 15s,
                         "governor suspension");
  const Json entry = *daemon.find_process(target.pid());
  EXPECT_TRUE(entry.at("bursts").is_null());
  EXPECT_TRUE(entry.at("tracing_suspended").get<bool>());
  EXPECT_EQ(daemon.get_json("/api/v1/status").at("governor_bursts").get<uint64_t>(), 0u);
  (void)stop_and_read_leaked(target);
  target.write_line("exit");
}

// Runs `top --json` on a fresh busy_leaker with `args` for `count`
// intervals of 1 s; the last report.
std::optional<Json> top_on_busy_leaker(const std::vector<std::string>& args, int count) {
  Process target({target_path("busy_leaker")});
  EXPECT_EQ(read_ready(target), target.pid());
  target.write_line("go");
  std::vector<std::string> argv{LW_LEAKWATCH_BIN, "top", "-p", std::to_string(target.pid()), "--json",
                                "--interval", "1", "--count", std::to_string(count)};
  argv.insert(argv.end(), args.begin(), args.end());
  Process top(argv);
  std::optional<Json> last;
  for (;;) {
    const std::optional<std::string> line = top.read_line(60s);
    if (!line) break;
    last = Json::parse(*line);
  }
  (void)stop_and_read_leaked(target);
  target.write_line("exit");
  if (!last) ADD_FAILURE() << top.stderr_text();
  return last;
}

// `top --bursts` forces them for one run (no budget: they never end by
// themselves): the heap figures say how they were made, and the leak is
// seen.
TEST(Bursts, TopForcesThemForOneRun) {
  const std::optional<Json> last = top_on_busy_leaker({"--bursts", "1/2"}, 9);
  ASSERT_TRUE(last.has_value());
  const Json& sampling = last->at("sampling");
  EXPECT_EQ(sampling.at("heap_basis"), "bursts") << sampling.dump();
  EXPECT_DOUBLE_EQ(sampling.at("burst_fraction").get<double>(), 0.5) << sampling.dump();
  EXPECT_TRUE(sampling.at("heap_walk").is_null()) << sampling.dump();
  EXPECT_GT(heap_live_at(*last, "leak_block").second, 0) << last->dump().substr(0, 3000);
}

// And `--window` forces windows and walks with them (decision
// busy-processes, "Windows and walks"), whatever the budget: the heap is
// walked before each burst after the first, the leak still seen.
TEST(Bursts, TopForcesWindowsForOneRun) {
  const std::optional<Json> last = top_on_busy_leaker({"--bursts", "1/3", "--window", "1"}, 12);
  ASSERT_TRUE(last.has_value());
  const Json& sampling = last->at("sampling");
  EXPECT_EQ(sampling.at("heap_basis"), "bursts+walk") << sampling.dump();
  ASSERT_FALSE(sampling.at("heap_walk").is_null()) << sampling.dump();
  EXPECT_GE(sampling.at("heap_walk").at("walks").get<uint64_t>(), 2u) << sampling.dump();
  EXPECT_GT(heap_live_at(*last, "leak_block").second, 0) << last->dump().substr(0, 3000);
}

}  // namespace
}  // namespace lw::itest
