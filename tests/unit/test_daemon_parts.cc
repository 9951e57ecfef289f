// SPDX-License-Identifier: Apache-2.0
// The daemon's parts (service/) on a fake tracer: discovery, the config
// watch and reload, the overhead controller (escalation, governor, memory
// budget, kill switch), the publisher, and Daemon::run wiring them. No root,
// no BPF: what used to be testable only as root with real probes.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "core/policy/memory_budget.h"
#include "fake_tracer.h"
#include "service/config_watch.h"
#include "service/daemon.h"
#include "service/discovery.h"
#include "service/overhead_controller.h"
#include "service/publisher.h"

namespace lw {
namespace {

constexpr uint64_t kMiB = 1 << 20;

Config parse(const std::string& yaml) {
  std::vector<ConfigError> errors;
  Result<Config> c = parse_config(yaml, "test.yaml", &errors);
  if (!c) {
    std::string all;
    for (const ConfigError& e : errors) all += format_error(e) + "\n";
    ADD_FAILURE() << all;
    return Config{};
  }
  return std::move(*c);
}

// A child process of this test that runs `sleep 60` (comm "sleep"), or,
// with exec_sleep false, a forked copy of this test that waits (comm of the
// test binary). Killed and reaped at the end of the test.
class Child {
 public:
  explicit Child(bool exec_sleep = true) {
    pid_ = fork();
    if (pid_ == 0) {
      if (exec_sleep) execl("/bin/sleep", "sleep", "60", static_cast<char*>(nullptr));
      pause();
      _exit(0);
    }
    if (!exec_sleep) return;
    // Wait for the exec (the identity is read from /proc): up to 10 s on a
    // loaded machine.
    for (int i = 0; i < 5000 && comm() != "sleep"; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_EQ(comm(), "sleep") << "child " << pid_ << " did not exec sleep";
  }
  ~Child() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }
  std::string comm() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/comm");
    std::string s;
    std::getline(f, s);
    return s;
  }

 private:
  pid_t pid_ = -1;
};

// A DaemonState, a fake tracer and the parts on them.
struct Parts {
  explicit Parts(const std::string& yaml) : state{parse(yaml), ""} {}
  DaemonState state;
  FakeTracer tracer;
  std::map<pid_t, StatmBytes> memory;  // what /proc/PID/statm reads
  ProcessDiscovery discovery{state, tracer, PodDirectoryOptions{}};
  OverheadController overhead{state, tracer, [this](pid_t pid) -> std::optional<StatmBytes> {
    auto it = memory.find(pid);
    if (it == memory.end()) return std::nullopt;
    return it->second;
  }};
  Publisher publisher{state, tracer};

  // Discovery looks at `child` (found by a /proc scan); returns its pid.
  pid_t track(const Child& child) {
    discovery.consider(child.pid(), 0);
    return child.pid();
  }
};

const char* kSleepFull = R"(
targets:
  - name: sleepers
    match: {comm: "^sleep$"}
    mode: full
)";

const char* kSleepAuto = R"(
targets:
  - name: sleepers
    match: {comm: "^sleep$"}
    mode: auto
escalation:
  check_interval_seconds: 10
  growth_bytes: 4194304
  growth_window_seconds: 300
  full_window_seconds: 600
  cooldown_seconds: 600
  confirm_checks: 1
)";

// ---- discovery ----

TEST(DaemonDiscovery, AttachesAMatchingProcessWithItsTargetsOptions) {
  Parts p(kSleepFull);
  Child sleeper;
  Child other(false);
  p.discovery.consider(sleeper.pid(), 0);
  p.discovery.consider(other.pid(), 0);
  ASSERT_EQ(p.state.tracked.count(sleeper.pid()), 1u);
  EXPECT_EQ(p.state.tracked.count(other.pid()), 0u);
  const TrackedProcess& t = p.state.tracked.at(sleeper.pid());
  EXPECT_EQ(t.info.target, "sleepers");
  EXPECT_EQ(t.info.identity.comm, "sleep");
  EXPECT_TRUE(t.full());
  EXPECT_TRUE(t.info.heap_attached);
  ASSERT_EQ(p.tracer.procs.count(sleeper.pid()), 1u);
  EXPECT_TRUE(p.tracer.procs.at(sleeper.pid()).options.heap);
  EXPECT_EQ(p.state.counters.attached_total, 1u);
  EXPECT_EQ(p.state.analyzers.count(sleeper.pid()), 1u);
  EXPECT_TRUE(p.state.dirty);
  // Looking again changes nothing.
  p.discovery.consider(sleeper.pid(), 0);
  EXPECT_EQ(p.state.counters.attached_total, 1u);
}

TEST(DaemonDiscovery, AutoStartsLightAndExecEventsAttach) {
  Parts p(kSleepAuto);
  Child sleeper;
  p.tracer.events.push_back({sleeper.pid(), 0, false, 0});
  p.discovery.handle_events();
  ASSERT_EQ(p.state.tracked.count(sleeper.pid()), 1u);
  EXPECT_FALSE(p.state.tracked.at(sleeper.pid()).info.heap_attached);
  EXPECT_FALSE(p.tracer.procs.at(sleeper.pid()).options.heap);
}

TEST(DaemonDiscovery, AForkedChildOfATargetBelongsToItsTarget) {
  Parts p(kSleepFull);
  Child sleeper;
  Child forked(false);  // its comm matches no target
  p.discovery.consider(sleeper.pid(), 0);
  p.tracer.events.push_back({forked.pid(), sleeper.pid(), false, 0});
  p.discovery.handle_events();
  ASSERT_EQ(p.state.tracked.count(forked.pid()), 1u);
  EXPECT_EQ(p.state.tracked.at(forked.pid()).info.target, "sleepers");
  EXPECT_EQ(p.state.tracked.at(forked.pid()).info.parent, sleeper.pid());
}

TEST(DaemonDiscovery, APidReusedUnderTheAttachIsMatchedAfresh) {
  Parts p(kSleepFull);
  Child sleeper;
  p.tracer.start_ticks_once = 1;  // the engine found another process on the pid
  p.discovery.consider(sleeper.pid(), 0);
  EXPECT_EQ(p.state.counters.pid_reuse_detected, 1u);
  // The newcomer (here the same process, read again) is attached once.
  EXPECT_EQ(p.state.tracked.count(sleeper.pid()), 1u);
  EXPECT_EQ(p.state.counters.attached_total, 1u);
}

// The tracer reports an exec of the traced `pid`.
void exec_seen(Parts& p, pid_t pid) {
  p.tracer.events.push_back({pid, 0, true, 0});
  p.discovery.handle_events();
}

TEST(DaemonDiscovery, AnExecOfATracedPidByAnotherProcessIsMatchedAfresh) {
  Parts p(kSleepFull);
  Child sleeper;
  const pid_t pid = p.track(sleeper);
  // The traced process's exit went unseen and another took its pid: the
  // exec event's process has another start time.
  p.state.tracked.at(pid).info.identity.start_time = 1;
  exec_seen(p, pid);
  EXPECT_EQ(p.state.counters.pid_reuse_detected, 1u);
  EXPECT_EQ(p.state.counters.detached_total, 1u);
  ASSERT_EQ(p.state.tracked.count(pid), 1u);
  EXPECT_EQ(p.state.tracked.at(pid).info.identity.start_time, read_start_ticks(pid));
  EXPECT_EQ(p.state.counters.attached_total, 2u);
}

TEST(DaemonDiscovery, AnExecIntoAnImageNoTargetMatchesDetaches) {
  Parts p(kSleepFull);
  Child sleeper;
  const pid_t pid = p.track(sleeper);
  exec_seen(p, pid);  // still "sleep": kept
  EXPECT_EQ(p.state.tracked.count(pid), 1u);
  p.state.config.targets[0].match.comm->regex = std::regex("^other$");  // as if it exec'd "other"
  exec_seen(p, pid);
  EXPECT_EQ(p.state.tracked.count(pid), 0u);
  EXPECT_EQ(p.tracer.procs.count(pid), 0u);
}

TEST(DaemonDiscovery, AttachFailuresAreCountedByReasonAndNothingIsTracked) {
  Parts p(kSleepFull);
  Child sleeper;
  p.tracer.attach_error = Error{EPERM, "denied"};
  p.discovery.consider(sleeper.pid(), 0);
  EXPECT_EQ(p.state.tracked.count(sleeper.pid()), 0u);
  EXPECT_EQ(p.state.counters.attach_failures, 1u);
  EXPECT_EQ(p.state.counters.attach_errors["permission_denied"], 1u);
}

TEST(DaemonDiscovery, ExitsAreReapedInOneTeardown) {
  Parts p(kSleepFull);
  Child a, b;
  p.discovery.consider(a.pid(), 0);
  p.discovery.consider(b.pid(), 0);
  ASSERT_EQ(p.state.tracked.size(), 2u);
  p.tracer.procs.at(a.pid()).exited = true;
  p.tracer.procs.at(b.pid()).exited = true;
  p.discovery.reap_exited();
  EXPECT_TRUE(p.state.tracked.empty());
  EXPECT_TRUE(p.state.analyzers.empty());
  EXPECT_EQ(p.state.counters.detached_total, 2u);
  EXPECT_EQ(p.tracer.teardowns, 1);
}

TEST(DaemonDiscovery, ReconcileFindsAProcessAndDropsOneThatIsGone) {
  Parts p(kSleepFull);
  auto sleeper = std::make_unique<Child>();
  const pid_t pid = sleeper->pid();
  p.discovery.reconcile();
  ASSERT_EQ(p.state.tracked.count(pid), 1u);
  sleeper.reset();  // killed and reaped, no exit event
  p.discovery.reconcile();
  EXPECT_EQ(p.state.tracked.count(pid), 0u);
  EXPECT_GE(p.state.counters.detached_total, 1u);
}

// ---- overhead: escalation, governor, memory budget, kill switch ----

TEST(DaemonOverhead, EscalationUpAndDownThroughTheController) {
  Parts p(kSleepAuto);
  Child sleeper;
  const pid_t pid = p.track(sleeper);
  ASSERT_FALSE(p.state.tracked.at(pid).info.heap_attached);
  p.memory[pid] = {100 * kMiB, 10 * kMiB};
  p.overhead.tick(0);
  p.overhead.tick(5);  // not a check yet
  p.memory[pid] = {105 * kMiB, 10 * kMiB};
  p.state.dirty = false;
  p.overhead.tick(10);
  const TrackedProcess& t = p.state.tracked.at(pid);
  EXPECT_TRUE(t.full());
  EXPECT_TRUE(t.info.heap_attached);
  EXPECT_TRUE(p.tracer.procs.at(pid).heap);
  EXPECT_EQ(p.state.counters.escalations_up, 1u);
  EXPECT_TRUE(p.state.dirty);
  EXPECT_TRUE(process_info(t).full);
  // Full for 600 s, growing or not.
  p.memory[pid] = {200 * kMiB, 10 * kMiB};
  p.overhead.tick(609);
  EXPECT_TRUE(p.tracer.procs.at(pid).heap);
  p.overhead.tick(610);
  EXPECT_FALSE(t.full());
  EXPECT_FALSE(t.info.heap_attached);
  EXPECT_FALSE(p.tracer.procs.at(pid).heap);
  EXPECT_EQ(p.state.counters.escalations_down, 1u);
  // Cooldown until 1210: growth does not escalate.
  for (double now = 620; now < 1210; now += 10) {
    p.memory[pid].data += kMiB * 5;
    p.overhead.tick(now);
  }
  EXPECT_EQ(p.state.counters.escalations_up, 1u);
  p.memory[pid].data += kMiB * 5;
  p.overhead.tick(1210);
  EXPECT_EQ(p.state.counters.escalations_up, 2u);
  EXPECT_TRUE(p.tracer.procs.at(pid).heap);
  // Heap probes attached twice, detached once, in that order.
  ASSERT_EQ(p.tracer.heap_calls.size(), 3u);
  EXPECT_EQ(p.tracer.heap_calls[0], std::make_pair(pid, true));
  EXPECT_EQ(p.tracer.heap_calls[1], std::make_pair(pid, false));
  EXPECT_EQ(p.tracer.heap_calls[2], std::make_pair(pid, true));
}

// Decision tensor-tier: a tensor leak the tier names keeps the process
// light, and the tier suspended by its governor (its records leave the
// explained bytes at once) is not read as growth.
TEST(DaemonOverhead, TensorGrowthStaysLightAndATierSuspensionIsNotGrowth) {
  Parts p(std::string(kSleepAuto) + "governor: {max_tensor_hits_per_second: 1000}\n");
  Child sleeper;
  const pid_t pid = p.track(sleeper);
  FakeTracer::Proc& proc = p.tracer.procs.at(pid);
  const TrackedProcess& t = p.state.tracked.at(pid);
  uint64_t kept = 0;
  double now = 0;
  for (; now <= 200; now += 10, kept += 2 * kMiB) {
    proc.explained = kept;
    p.memory[pid] = {100 * kMiB + kept + kept / 4, 10 * kMiB + kept + kept / 4};
    p.overhead.tick(now);
  }
  EXPECT_FALSE(t.full());
  EXPECT_EQ(p.state.counters.escalations_up, 0u);
  // Over the tier's budget: suspended, its 40 MiB leave the explained bytes.
  proc.tensor_hits = 1000000;
  p.overhead.tick(now);
  ASSERT_FALSE(proc.tensors);
  for (double end = now + 30; now <= end; now += 10) p.overhead.tick(now);
  EXPECT_FALSE(t.full());
  // Growth after the suspension is the heap tier's again (before the 60 s
  // backoff is over: the resume rebases too).
  p.memory[pid].data += 5 * kMiB;  // kSleepAuto: growth_bytes 4 MiB
  p.overhead.tick(now);
  EXPECT_TRUE(t.full());
  EXPECT_EQ(p.state.counters.escalations_up, 1u);
}

TEST(DaemonOverhead, FullModeIsNeverReadOrSteppedDown) {
  Parts p(kSleepFull);
  Child sleeper;
  p.discovery.consider(sleeper.pid(), 0);
  p.memory[sleeper.pid()] = {100 * kMiB, 0};
  for (double now = 0; now < 2000; now += 10) p.overhead.tick(now);
  EXPECT_TRUE(p.tracer.procs.at(sleeper.pid()).heap);
  EXPECT_TRUE(p.tracer.heap_calls.empty());
  EXPECT_EQ(p.state.counters.escalations_down, 0u);
}

TEST(DaemonOverhead, GovernorSuspendsOverBudgetAndResumesAfterTheBackoff) {
  Parts p(std::string(kSleepFull) +
          "governor: {max_hits_per_second: 1000, backoff_initial_seconds: 60, over_budget: suspend}\n");
  Child sleeper;
  const pid_t pid = p.track(sleeper);
  p.overhead.tick(0);  // first hit count: no rate yet
  p.tracer.procs.at(pid).hits = 5000;
  p.overhead.tick(1);  // 5000 hits/s
  const TrackedProcess& t = p.state.tracked.at(pid);
  EXPECT_TRUE(t.governor.suspended());
  EXPECT_FALSE(t.info.heap_attached);
  EXPECT_FALSE(p.tracer.procs.at(pid).heap);
  EXPECT_EQ(p.state.counters.governor_suspensions, 1u);
  EXPECT_TRUE(process_info(t).tracing_suspended);
  p.overhead.tick(60);
  EXPECT_TRUE(t.governor.suspended());
  p.overhead.tick(61);  // 60 s backoff over
  EXPECT_FALSE(t.governor.suspended());
  EXPECT_TRUE(t.info.heap_attached);
  EXPECT_TRUE(p.tracer.procs.at(pid).heap);
  // Rate-limited to one tick a second: a call 0.5 s later does nothing.
  p.tracer.procs.at(pid).hits = 100000;
  p.overhead.tick(61.5);
  EXPECT_FALSE(t.governor.suspended());
}

// Tracks `child` and has it make 5,000 probe hits in its first second
// (over a budget of 1,000): the governor's answer comes at tick 1.
pid_t track_over_budget(Parts& p, const Child& child) {
  const pid_t pid = p.track(child);
  p.overhead.tick(0);
  p.tracer.procs.at(pid).hits = 5000;
  p.overhead.tick(1);
  return pid;
}

// Kernels before 6.14 (uprobe hits serialize across a process's threads):
// the budget is divided by min(threads, CPUs): 4 threads on 2 CPUs halve it.
TEST(DaemonOverhead, WhereUprobeHitsSerializeTheBudgetCountsThreads) {
  for (const bool serialize : {true, false}) {
    Parts p(std::string(kSleepFull) + "governor: {max_hits_per_second: 1000}\n");
    p.tracer.serialize = serialize;
    p.overhead.set_thread_source([](pid_t) { return uint64_t{4}; }, 2);
    Child sleeper;
    const pid_t pid = p.track(sleeper);
    p.overhead.tick(0);
    p.tracer.procs.at(pid).hits = 700;  // under 1,000 a second, over 500
    p.overhead.tick(1);
    const TrackedProcess& t = p.state.tracked.at(pid);
    EXPECT_EQ(process_info(t).hit_budget, serialize ? 500u : 1000u);
    EXPECT_EQ(t.bursts.active(), serialize);
  }
}

// Decision busy-processes: over budget, the default is bursts, not a
// suspension: the allocating probes on for burst_seconds in each period,
// the free side in between, until a burst runs within the budget.
TEST(DaemonOverhead, GovernorPutsAProcessOverBudgetInBurstsByDefault) {
  Parts p(std::string(kSleepFull) +
          "governor: {max_hits_per_second: 1000, burst_seconds: 2, burst_period_seconds: 10}\n");
  Child sleeper;
  const pid_t pid = track_over_budget(p, sleeper);
  FakeTracer::Proc& fp = p.tracer.procs.at(pid);
  const TrackedProcess& t = p.state.tracked.at(pid);
  EXPECT_FALSE(t.governor.suspended());
  EXPECT_TRUE(t.info.heap_attached);
  EXPECT_TRUE(t.bursts.active());
  EXPECT_DOUBLE_EQ(fp.fraction, 0.2);
  EXPECT_TRUE(fp.drain);  // starts between two bursts
  EXPECT_EQ(p.state.counters.governor_bursts, 1u);
  EXPECT_EQ(p.state.counters.governor_suspensions, 0u);
  ProcessInfo info = process_info(t);
  EXPECT_TRUE(info.bursts.active);
  EXPECT_EQ(info.bursts.period_seconds, 10u);
  // Ten periods at 0.1 s: about 20 s of bursts, the drains in between.
  double on = 0;
  for (double now = 1.1; now < 101; now += 0.1) {
    fp.hits += fp.drain ? 10 : 5000;  // busy in a burst, calm frees between
    if (!fp.drain) on += 0.1;
    p.overhead.tick(now);
  }
  EXPECT_TRUE(t.bursts.active());
  EXPECT_GE(t.bursts.bursts(), 8u);
  EXPECT_NEAR(on, 20, 6);
  // A calm burst: exact again.
  while (fp.drain) {
    fp.hits += 10;
    p.overhead.tick(t.bursts.since_s() + 1000);  // far ahead: the next burst is due
  }
  for (double now = 2000; now < 2010 && t.bursts.active(); now += 0.1) {
    fp.hits += 1;
    p.overhead.tick(now);
  }
  EXPECT_FALSE(t.bursts.active());
  EXPECT_DOUBLE_EQ(fp.fraction, 1);
  EXPECT_TRUE(t.info.heap_attached);
  EXPECT_FALSE(process_info(t).bursts.active);
}

// A free side over the budget between bursts: suspended within the drain's
// check time, and the next time over budget suspended at once. The first
// burst is drawn late in its period (54 s in): a random one fell within the
// drain's first 2 s in about 3% of runs (CI's ASan run, 2026-11-29), and the
// drain was then never judged.
TEST(DaemonOverhead, AFreeSideOverBudgetSuspendsAndIsRemembered) {
  Parts p(std::string(kSleepFull) +
          "governor: {max_hits_per_second: 1000, burst_seconds: 2, burst_period_seconds: 60, "
          "backoff_initial_seconds: 10}\n");
  p.overhead.set_offset_source([] { return 0.9; });
  Child sleeper;
  const pid_t pid = track_over_budget(p, sleeper);
  FakeTracer::Proc& fp = p.tracer.procs.at(pid);
  const TrackedProcess& t = p.state.tracked.at(pid);
  ASSERT_TRUE(t.bursts.active());
  for (double now = 1.1; now < 4 && t.bursts.active(); now += 0.1) {
    fp.hits += 500;  // 5,000 a second between bursts
    p.overhead.tick(now);
  }
  EXPECT_FALSE(t.bursts.active());
  EXPECT_TRUE(t.governor.suspended());
  EXPECT_FALSE(fp.heap);
  EXPECT_EQ(p.state.counters.governor_suspensions, 1u);
  // The backoff over, still over budget: no bursts this time.
  p.overhead.tick(20);
  ASSERT_TRUE(fp.heap);
  fp.hits += 5000;
  p.overhead.tick(21);
  fp.hits += 5000;
  p.overhead.tick(22);
  EXPECT_FALSE(t.bursts.active());
  EXPECT_TRUE(t.governor.suspended());
  EXPECT_EQ(p.state.counters.governor_bursts, 1u);
  EXPECT_EQ(p.state.counters.governor_suspensions, 2u);
}

// The same free side, on a heap that can be walked (glibc's): windows, not
// a suspension. After the drain's check time the free side is parked; the
// next burst unparks it (set_drain(false), which walks the heap first in
// the engine), and the burst's end is followed by a window of
// drain_window_seconds, then parked again.
TEST(DaemonOverhead, AFreeSideOverBudgetOnAWalkableHeapGetsWindows) {
  Parts p(std::string(kSleepFull) +
          "governor: {max_hits_per_second: 1000, burst_seconds: 2, burst_period_seconds: 60, "
          "drain_window_seconds: 3, backoff_initial_seconds: 10}\n");
  p.overhead.set_offset_source([] { return 0.9; });
  p.tracer.recorded_seconds = 1.75;
  Child sleeper;
  const pid_t pid = track_over_budget(p, sleeper);
  FakeTracer::Proc& fp = p.tracer.procs.at(pid);
  fp.walkable = true;
  const TrackedProcess& t = p.state.tracked.at(pid);
  ASSERT_TRUE(t.bursts.active());
  double now = 1.1;
  for (; now < 4 && !t.bursts.parked(); now += 0.1) {
    fp.hits += 500;  // 5,000 a second between bursts
    p.overhead.tick(now);
  }
  ASSERT_TRUE(t.bursts.parked());
  EXPECT_TRUE(t.bursts.windowed());
  EXPECT_FALSE(t.governor.suspended());
  EXPECT_TRUE(fp.heap);
  ASSERT_EQ(p.tracer.park_calls.size(), 1u);
  EXPECT_EQ(p.tracer.park_calls[0], std::make_pair(pid, true));
  // Parked: no hits, and the heap walked every 10 s meanwhile.
  const double parked_at = now;
  for (; now < 60 && !t.bursts.in_burst(); now += 0.1) p.overhead.tick(now);
  EXPECT_NEAR(static_cast<double>(p.tracer.parked_walks.size()), (now - parked_at) / kParkedWalkSeconds, 1.0);
  ASSERT_TRUE(t.bursts.in_burst());
  EXPECT_NEAR(now, 55, 0.3);  // 54 s into the period begun with the bursts (at 1 s)
  EXPECT_FALSE(fp.drain);  // the allocating side back (the engine walked first)
  for (; t.bursts.in_burst(); now += 0.1) {
    fp.hits += 5000;
    p.overhead.tick(now);
  }
  EXPECT_TRUE(fp.drain);
  // The burst closed before the drain: measured against its 2 s schedule.
  ASSERT_EQ(p.tracer.close_calls.size(), 1u);
  EXPECT_EQ(p.tracer.close_calls[0].first, pid);
  EXPECT_DOUBLE_EQ(p.tracer.close_calls[0].second, 2);
  const double window_from = now;
  for (; !t.bursts.parked() && now < 70; now += 0.1) {
    fp.hits += 500;
    p.overhead.tick(now);
  }
  EXPECT_TRUE(t.bursts.parked());
  EXPECT_NEAR(now - window_from, 3, 0.25);
  EXPECT_EQ(p.tracer.park_calls.size(), 2u);
  EXPECT_EQ(p.state.counters.governor_suspensions, 0u);
  const ProcessInfo info = process_info(t);
  EXPECT_TRUE(info.bursts.windows);
  EXPECT_TRUE(info.bursts.parked);
  EXPECT_EQ(info.bursts.window_seconds, 3u);
  EXPECT_DOUBLE_EQ(info.bursts.last_recorded_seconds, 1.75);
  EXPECT_DOUBLE_EQ(info.bursts.last_scheduled_seconds, 2);
}

TEST(DaemonOverhead, ABudgetShedSuspendsHeapTracingWithTheGovernorsBackoff) {
  Parts p(kSleepFull);
  Child sleeper;
  const pid_t pid = p.track(sleeper);
  p.overhead.apply_memory_budget(64 * kMiB);
  EXPECT_EQ(p.tracer.live_record_cap, live_record_cap(p.state.config.limits.max_daemon_memory_bytes, 64 * kMiB));
  p.tracer.sheds = {pid, 99999999};  // the second is no longer tracked
  p.state.dirty = false;
  p.overhead.handle_budget_sheds(100);
  const TrackedProcess& t = p.state.tracked.at(pid);
  EXPECT_EQ(p.state.counters.memory_budget_suspensions, 1u);
  EXPECT_TRUE(t.governor.suspended());
  EXPECT_FALSE(t.info.heap_attached);
  EXPECT_FALSE(p.tracer.procs.at(pid).heap);
  EXPECT_TRUE(p.state.dirty);
  ASSERT_EQ(p.tracer.heap_calls.size(), 2u);
  EXPECT_EQ(p.tracer.heap_calls[1], std::make_pair(pid_t{99999999}, false));
  // Resumed after the governor's initial backoff (60 s by default).
  p.overhead.tick(159);
  EXPECT_TRUE(t.governor.suspended());
  p.overhead.tick(160);
  EXPECT_TRUE(t.info.heap_attached);
}

TEST(DaemonOverhead, KillSwitchEngagesEverywhereAndReleasesToWhatIsWanted) {
  Parts p(std::string(kSleepFull) + R"(
  - name: lights
    match: {comm: "^lw_unit_tests$"}
    mode: light
)");
  Child full, light(false);
  p.discovery.consider(full.pid(), 0);
  p.discovery.consider(light.pid(), 0);
  ASSERT_EQ(p.state.tracked.size(), 2u);
  p.overhead.apply_kill_switch(true, "test");
  EXPECT_TRUE(p.state.counters.kill_switch_engaged);
  EXPECT_FALSE(p.tracer.raw_syscalls_allowed);
  EXPECT_EQ(p.tracer.teardowns, 1);
  for (const auto& [pid, proc] : p.tracer.procs) {
    EXPECT_FALSE(proc.accounting) << pid;
    EXPECT_FALSE(proc.all_probes) << pid;
    EXPECT_FALSE(proc.heap) << pid;
    EXPECT_FALSE(p.state.tracked.at(pid).info.heap_attached) << pid;
  }
  // Engaged: nothing new is attached, and the controls stand still.
  Child late;
  p.discovery.consider(late.pid(), 0);
  EXPECT_EQ(p.state.tracked.count(late.pid()), 0u);
  p.tracer.procs.at(full.pid()).hits = 1u << 30;
  p.overhead.tick(10);
  EXPECT_EQ(p.state.counters.governor_suspensions, 0u);
  p.overhead.apply_kill_switch(false, "test");
  EXPECT_FALSE(p.state.counters.kill_switch_engaged);
  EXPECT_TRUE(p.tracer.raw_syscalls_allowed);
  EXPECT_TRUE(p.tracer.procs.at(full.pid()).accounting);
  EXPECT_TRUE(p.tracer.procs.at(light.pid()).accounting);
  EXPECT_TRUE(p.state.tracked.at(full.pid()).info.heap_attached);
  EXPECT_FALSE(p.state.tracked.at(light.pid()).info.heap_attached);
  ASSERT_EQ(p.tracer.heap_calls.size(), 1u);  // only the full one's heap probes come back
  EXPECT_EQ(p.tracer.heap_calls[0], std::make_pair(full.pid(), true));
}

// ---- config reload ----

TEST(DaemonConfig, AReloadDropsProcessesOfChangedRemovedOrNoLongerMatchingTargets) {
  const std::string base = R"(
targets:
  - name: a
    match: {comm: "^sleep$"}
    mode: full
  - name: b
    match: {comm: "^lw_unit_tests$"}
    mode: light
    follow_forks: true
)";
  Parts p(base);
  Child sleeper, waiter(false), forked(false);
  p.discovery.consider(sleeper.pid(), 0);
  p.discovery.consider(waiter.pid(), 0);
  p.tracer.events.push_back({forked.pid(), waiter.pid(), false, 0});
  p.discovery.handle_events();
  ASSERT_EQ(p.state.tracked.size(), 3u);
  // Unchanged: nothing dropped.
  EXPECT_TRUE(processes_to_drop(p.state.config, parse(base), p.state.tracked).empty());
  // Target a's mode changed: its process goes.
  std::string changed = base;
  changed.replace(changed.find("mode: full"), 10, "mode: auto");
  EXPECT_EQ(processes_to_drop(p.state.config, parse(changed), p.state.tracked),
            std::vector<pid_t>{sleeper.pid()});
  // Target b removed: its process and the one forked from it go.
  const std::string removed = base.substr(0, base.find("  - name: b"));
  std::vector<pid_t> gone = processes_to_drop(p.state.config, parse(removed), p.state.tracked);
  std::sort(gone.begin(), gone.end());
  std::vector<pid_t> want{waiter.pid(), forked.pid()};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(gone, want);
  // Excluded now: the process matched itself goes, the forked one (which
  // never matched by itself) stays with its parent's unchanged target.
  const std::string excluded = base + "exclude:\n  - match: {comm: \"^lw_unit_tests$\"}\n";
  EXPECT_EQ(processes_to_drop(p.state.config, parse(excluded), p.state.tracked),
            std::vector<pid_t>{waiter.pid()});
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/lw-daemon-parts.XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  std::filesystem::rename(tmp, path);  // as an editor does
}

TEST(DaemonConfig, ABadFileIsCountedAndKeepsTheOldConfig) {
  TempDir dir;
  const std::string path = dir.file("leakwatch.yaml");
  write_file(path, "targets: [\n");
  Parts p(kSleepFull);
  ConfigWatcher watcher(path);
  EXPECT_FALSE(watcher.reload(p.state).has_value());
  EXPECT_EQ(p.state.counters.reloads_total, 1u);
  EXPECT_EQ(p.state.counters.reload_failures_total, 1u);
  EXPECT_FALSE(p.state.counters.last_reload_successful);
  EXPECT_EQ(p.state.config.targets.size(), 1u);
  write_file(path, kSleepAuto);
  EXPECT_TRUE(watcher.changed());
  EXPECT_FALSE(watcher.changed());
}

// The snapshot the daemon publishes for `pid`, or nullptr.
const ProcessEntry* entry_of(const DaemonSnapshot& s, pid_t pid) {
  for (const ProcessEntry& e : s.processes)
    if (e.snapshot.pid == pid) return &e;
  return nullptr;
}

// Waits up to 10 s for `pred` on the daemon's latest snapshot.
template <typename Pred>
bool wait_for(const Daemon& d, Pred pred) {
  for (int i = 0; i < 1000; ++i) {
    if (auto s = d.snapshot(); s && pred(*s)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(DaemonRun, AnEditedConfigIsReloadedAndDropsTheChangedTargetsProcess) {
  TempDir dir;
  const std::string path = dir.file("leakwatch.yaml");
  write_file(path, kSleepFull);
  Child sleeper;
  const pid_t pid = sleeper.pid();
  DaemonOptions options;
  options.config_path = path;
  auto fake = std::make_unique<FakeTracer>();
  FakeTracer* tracer = fake.get();
  Daemon d(options, parse(kSleepFull), std::move(fake));
  std::atomic<bool> ready{false};
  std::thread loop([&] { EXPECT_TRUE(d.run([&] { ready = true; })); });
  ASSERT_TRUE(wait_for(d, [&](const DaemonSnapshot& s) { return entry_of(s, pid) != nullptr; }));
  EXPECT_TRUE(ready.load());
  EXPECT_EQ(entry_of(*d.snapshot(), pid)->process.mode, TargetMode::kFull);
  // The target's definition changes (full -> light): its process is
  // detached, then matched again under the new definition.
  std::string light = kSleepFull;
  light.replace(light.find("mode: full"), 10, "mode: light");
  write_file(path, light);
  EXPECT_TRUE(wait_for(d, [&](const DaemonSnapshot& s) {
    const ProcessEntry* e = entry_of(s, pid);
    return s.counters.reloads_total == 1 && e && e->process.mode == TargetMode::kLight;
  }));
  // Now the target no longer matches it: dropped.
  std::string other = light;
  other.replace(other.find("^sleep$"), 7, "^nomatch$");
  write_file(path, other);
  EXPECT_TRUE(wait_for(d, [&](const DaemonSnapshot& s) {
    return s.counters.reloads_total == 2 && entry_of(s, pid) == nullptr;
  }));
  const auto s = d.snapshot();
  EXPECT_TRUE(s->counters.last_reload_successful);
  EXPECT_GE(s->counters.detached_total, 2u);
  d.request_stop();
  loop.join();
  EXPECT_EQ(tracer->procs.count(pid), 0u);
  EXPECT_GT(tracer->polls, 0);
}

TEST(DaemonRun, TheKillSwitchToggleIsPublishedAtOnce) {
  Child sleeper;
  auto fake = std::make_unique<FakeTracer>();
  Daemon d(DaemonOptions{}, parse(kSleepFull), std::move(fake));
  std::thread loop([&] { EXPECT_TRUE(d.run(nullptr)); });
  ASSERT_TRUE(wait_for(d, [&](const DaemonSnapshot& s) { return entry_of(s, sleeper.pid()); }));
  d.request_kill_switch_toggle();
  EXPECT_TRUE(wait_for(d, [&](const DaemonSnapshot& s) {
    const ProcessEntry* e = entry_of(s, sleeper.pid());
    return s.counters.kill_switch_engaged && e && !e->process.heap_attached;
  }));
  d.request_kill_switch_toggle();
  EXPECT_TRUE(wait_for(d, [&](const DaemonSnapshot& s) {
    const ProcessEntry* e = entry_of(s, sleeper.pid());
    return !s.counters.kill_switch_engaged && e && e->process.heap_attached;
  }));
  d.request_stop();
  loop.join();
}

// ---- publishing ----

TEST(DaemonPublisher, PublishesEveryTrackedProcessAndSwapsTheSnapshot) {
  Parts p(kSleepFull);
  Child a, b;
  p.discovery.consider(a.pid(), 0);
  p.discovery.consider(b.pid(), 0);
  EXPECT_EQ(p.publisher.latest(), nullptr);
  p.publisher.publish();
  std::shared_ptr<const DaemonSnapshot> first = p.publisher.latest();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->processes.size(), 2u);
  EXPECT_EQ(first->probes.size(), 2u);
  EXPECT_EQ(first->counters.attached_total, 2u);
  EXPECT_EQ(p.publisher.last_timing().processes, 2u);
  ASSERT_NE(entry_of(*first, a.pid()), nullptr);
  EXPECT_EQ(entry_of(*first, a.pid())->process.target, "sleepers");
  // A reader's snapshot stays as it was; the next publish is another object.
  p.discovery.detach(a.pid(), "test");
  p.publisher.publish();
  EXPECT_EQ(first->processes.size(), 2u);
  EXPECT_EQ(p.publisher.latest()->processes.size(), 1u);
  EXPECT_GT(p.state.tracked_memory, 0u);  // the trackers and analysis are counted
}

TEST(DaemonPublisher, ACostlyPublishSpacesTheDirtyOnesButNotTheOnceASecondOne) {
  // Cheap (a few processes): a change is published at once.
  EXPECT_TRUE(publish_due(true, 2, 0.4));
  EXPECT_FALSE(publish_due(false, 999, 0.4));
  EXPECT_TRUE(publish_due(false, 1000, 0.4));
  // 75 ms a publish (1,000 processes): a change waits 300 ms after the
  // last publish, so publishing takes at most a fifth of the consumer.
  EXPECT_FALSE(publish_due(true, 100, 75));
  EXPECT_FALSE(publish_due(true, 299, 75));
  EXPECT_TRUE(publish_due(true, 300, 75));
  // Whatever it costs, once a second.
  EXPECT_TRUE(publish_due(false, 1000, 400));
}

}  // namespace
}  // namespace lw
