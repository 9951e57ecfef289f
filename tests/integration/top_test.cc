// SPDX-License-Identifier: Apache-2.0
// `leakwatch top -p PID --json` against the target programs of
// tests/targets: the bytes it reports live per call site must equal each
// target's ground truth exactly.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include <gtest/gtest.h>

#include "harness.h"

namespace lw::itest {
namespace {

class LeakwatchTop : public ::testing::Test {
 protected:
  void SetUp() override {
    // BPF needs root here; as root these tests must run, never skip.
    if (geteuid() != 0) GTEST_SKIP() << "not root";
  }
};

// Runs leakwatch with the given arguments to its end; returns its wait
// status and stderr.
struct Outcome {
  int status;
  std::string stderr_text;
};
Outcome run_leakwatch(const std::vector<std::string> &args, Process::Options options = {}) {
  std::vector<std::string> argv{LW_LEAKWATCH_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  Process leakwatch(argv, options);
  auto status = leakwatch.wait_exit(milliseconds(30000));
  if (!status) throw std::runtime_error("leakwatch did not exit; stderr: " + leakwatch.stderr_text());
  return {*status, leakwatch.stderr_text()};
}

// Sum of live bytes, and the kinds, of every site with `function` anywhere
// on its stack (not only as the leaf).
std::pair<int64_t, std::set<std::string>> live_through(const Json &snapshot, const std::string &function) {
  int64_t live = 0;
  std::set<std::string> kinds;
  for (const Json &site : snapshot.at("sites")) {
    for (const Json &frame : site.at("frames")) {
      if (frame.value("function", "") == function) {
        live += site.at("live_bytes").get<int64_t>();
        kinds.insert(site.at("kind").get<std::string>());
        break;
      }
    }
  }
  return {live, kinds};
}

TEST_F(LeakwatchTop, FirstLineNamesTheTarget) {
  TraceSession session({.target = "leaker"});
  EXPECT_EQ(session.attach_snapshot().at("pid").get<pid_t>(), session.target_pid());
  EXPECT_EQ(session.attach_snapshot().at("comm").get<std::string>(), "leaker");
  EXPECT_FALSE(session.attach_snapshot().at("final").get<bool>());
  EXPECT_EQ(session.snapshot().at("pid").get<pid_t>(), session.target_pid());
}

TEST_F(LeakwatchTop, EveryCAllocatorExactPerSite) {
  TraceSession session({.target = "leaker"});
  expect_matches_truth(session, {"leaker"});
}

TEST_F(LeakwatchTop, EveryOperatorNewExactPerSite) {
  TraceSession session({.target = "leaker_cpp"});
  expect_matches_truth(session, {"leaker_cpp"});
}

// glibc serves malloc(2 MiB) with its own mmap: one heap block, not also an
// mmap region, wherever on the stack the site appears.
TEST_F(LeakwatchTop, BigMallocCountedOnceAsHeap) {
  TraceSession session({.target = "leaker"});
  auto [live, kinds] = live_through(session.snapshot(), "leak_big_malloc");
  EXPECT_EQ(live, session.truth().at("sites").at("leak_big_malloc").get<int64_t>())
      << describe_sites(session.snapshot());
  EXPECT_EQ(kinds, std::set<std::string>{"heap"}) << describe_sites(session.snapshot());
}

TEST_F(LeakwatchTop, BigOperatorNewCountedOnceAsHeap) {
  TraceSession session({.target = "leaker_cpp"});
  auto [live, kinds] = live_through(session.snapshot(), "leak_new_big");
  EXPECT_EQ(live, session.truth().at("sites").at("leak_new_big").get<int64_t>())
      << describe_sites(session.snapshot());
  EXPECT_EQ(kinds, std::set<std::string>{"heap"}) << describe_sites(session.snapshot());
}

// libstdc++ fails operator new by throwing bad_alloc out of it, also inside
// the nothrow variants: the target must survive tracing (catch it) and
// nothing may be counted.
TEST_F(LeakwatchTop, FailedNothrowNewNotCounted) {
  TraceSession session({.target = "new_fail", .target_args = {"--nothrow"}});
  expect_matches_truth(session, {"new_fail"});
}

TEST_F(LeakwatchTop, FailedThrowingNewNotCountedAndStillCatchable) {
  TraceSession session({.target = "new_fail", .target_args = {"--throw"}});
  expect_matches_truth(session, {"new_fail"});
}

TEST_F(LeakwatchTop, ChurnWithoutLeakReturnsToBaseline) {
  TraceSession session({.target = "churn"});
  expect_matches_truth(session, {"churn"});
}

TEST_F(LeakwatchTop, ReallocEdgeCases) {
  TraceSession session({.target = "realloc_edge"});
  // The cases are what their names say only if glibc did what they expect.
  EXPECT_EQ(session.truth().at("facts").at("shrink_moved"), 0);
  EXPECT_EQ(session.truth().at("facts").at("move_moved"), 1);
  expect_matches_truth(session, {"realloc_edge"});
}

TEST_F(LeakwatchTop, SixtyFourThreadsFreeingEachOthersBlocks) {
  TraceSession session({.target = "threads"});
  expect_matches_truth(session, {"threads"});
}

TEST_F(LeakwatchTop, ForkedChildNotAttributedToParent) {
  TraceSession session({.target = "forker"});
  const pid_t child = session.truth().at("facts").at("child_pid").get<pid_t>();
  ASSERT_EQ(kill(child, 0), 0) << "the child must still be alive";
  EXPECT_EQ(session.snapshot().at("pid").get<pid_t>(), session.target_pid());
  expect_matches_truth(session, {"forker"});
}

TEST_F(LeakwatchTop, FollowsPidThroughExec) {
  TraceSession session({.target = "execer"});
  EXPECT_EQ(session.snapshot().at("pid").get<pid_t>(), session.target_pid());
  expect_matches_truth(session, {"execer"});
}

// The target exits with blocks live: leakwatch prints a final snapshot with
// them, then exits 0.
void expect_final_snapshot_at_exit(const std::vector<std::string> &target_args) {
  TraceSession session({.target = "exiter", .target_args = target_args});
  expect_matches_truth(session, {"exiter"});
  session.target().write_line("exit");

  Json final_snapshot;
  do {
    final_snapshot = session.next_snapshot(milliseconds(30000));
  } while (!final_snapshot.at("final").get<bool>());
  const int64_t live_at_exit = session.truth().at("facts").at("live_at_exit").get<int64_t>();
  const auto leaves = live_by_leaf(final_snapshot);
  const int64_t live = leaves.count("exiter_leak") ? leaves.at("exiter_leak").live_bytes : 0;
  EXPECT_EQ(live, live_at_exit) << describe_sites(final_snapshot) << session.diagnostics();
  EXPECT_EQ(final_snapshot.at("live_bytes").get<int64_t>(), live_at_exit)
      << describe_sites(final_snapshot) << session.diagnostics();

  auto leakwatch_status = session.leakwatch().wait_exit(milliseconds(10000));
  ASSERT_TRUE(leakwatch_status.has_value()) << "leakwatch still running after the final snapshot";
  EXPECT_TRUE(WIFEXITED(*leakwatch_status) && WEXITSTATUS(*leakwatch_status) == 0)
      << "leakwatch wait status " << *leakwatch_status << session.diagnostics();
  auto target_status = session.target().wait_exit(milliseconds(10000));
  ASSERT_TRUE(target_status.has_value());
  EXPECT_TRUE(WIFEXITED(*target_status) && WEXITSTATUS(*target_status) == 0);
}

TEST_F(LeakwatchTop, ExitWithLiveBlocksPrintsFinalSnapshot) { expect_final_snapshot_at_exit({}); }

TEST_F(LeakwatchTop, ExitAfterFreeingAllPrintsEmptyFinalSnapshot) {
  expect_final_snapshot_at_exit({"--free-before-exit"});
}

// Libraries dlopen()ed after attach, one of them bringing libstdc++ into
// the process for the first time: leaks attributed inside the libraries.
TEST_F(LeakwatchTop, DlopenAfterAttach) {
  TraceSession session({.target = "dlopener"});
  expect_matches_truth(session, {"dlopener", "libdltarget.so", "libdltarget_cpp.so"});
  const auto leaves = live_by_leaf(session.snapshot());
  for (const auto &[function, module] : {std::pair{"dltarget_leak_site", "libdltarget.so"},
                                         std::pair{"dltarget_cpp_leak_site", "libdltarget_cpp.so"}}) {
    ASSERT_TRUE(leaves.count(function)) << function << " missing\n" << describe_sites(session.snapshot());
    EXPECT_EQ(leaves.at(function).modules, std::set<std::string>{module})
        << describe_sites(session.snapshot());
  }
}

// A 4 KiB ring buffer and a consumer stalled for 2 s under a burst of 40,000
// allocations: events are dropped, every one is accounted for, and after the
// resync from the kernel's map there are no phantom (or missing) bytes.
TEST_F(LeakwatchTop, RingBufferOverflowResyncsExactly) {
  TraceSession session({.target = "burst",
                        .leakwatch_args = {"--ringbuf-bytes", "4096", "--debug-stall-consumer-ms", "2000"},
                        .settle_after_attach_s = 2.5});
  const Json &snapshot = session.snapshot();
  const Json &events = snapshot.at("events");
  const std::string context = describe_sites(snapshot) + session.diagnostics();
  EXPECT_EQ(events.at("seen").get<int64_t>(),
            events.at("delivered").get<int64_t>() + events.at("dropped").get<int64_t>())
      << context;
  EXPECT_GT(events.at("dropped").get<int64_t>(), 0) << context;
  const int64_t truth = session.truth().at("total_live").get<int64_t>();
  EXPECT_EQ(snapshot.at("live_bytes").get<int64_t>(), truth) << context;
  EXPECT_EQ(snapshot.at("kernel_live_bytes").get<int64_t>(), truth) << context;
  expect_matches_truth(session, {"burst"});
}

// A child that allocates and frees without pause, from before the attach.
pid_t start_busy_allocator() {
  pid_t child = fork();
  if (child == 0) {
    for (;;) {
      void *volatile p = malloc(64);
      free(p);
    }
  }
  return child;
}

void stop_child(pid_t child) {
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

// The first output waits for the unwind tables (here made slow, as a cold
// 120 MB library is): events are read meanwhile, so a running process's
// events are applied, not dropped. A 1 MiB ring (16,384 records) against a
// process making hundreds of thousands of events a second: a consumer that
// waited without reading would deliver at most one ring's worth.
TEST_F(LeakwatchTop, EventsAreReadWhileTablesLoad) {
  pid_t child = start_busy_allocator();
  ASSERT_GT(child, 0);
  Process leakwatch({LW_LEAKWATCH_BIN, "top", "-p", std::to_string(child), "--json", "--interval", "0.2",
                     "--ringbuf-bytes", "1048576", "--debug-slow-tables-ms", "400"});
  std::optional<std::string> line = leakwatch.read_line(milliseconds(60000));
  stop_child(child);
  ASSERT_TRUE(line.has_value()) << leakwatch.stderr_text();
  Json first = Json::parse(*line);
  const Json &events = first.at("events");
  const int64_t delivered = events.at("delivered").get<int64_t>();
  EXPECT_GT(delivered, 4 * 16384) << "dropped " << events.at("dropped").get<int64_t>() << "\n"
                                  << leakwatch.stderr_text();
  // Read while the child runs, one per-CPU counter after the other: the
  // sum may be off, either way, by the events made between the reads (a
  // reader preempted for a few ms on a loaded machine misses thousands).
  const int64_t skew =
      events.at("seen").get<int64_t>() - delivered - events.at("dropped").get<int64_t>();
  EXPECT_LE(std::llabs(skew), std::max<int64_t>(64, delivered / 100));
}

// SIGINT while the tables load (before the first output) ends top at once
// with its last word and exit 0, also when it was started with SIGINT ignored, as a
// shell script's `&` job is.
TEST_F(LeakwatchTop, SigintWhileTablesLoadEndsAtOnce) {
  pid_t child = start_busy_allocator();
  ASSERT_GT(child, 0);
  signal(SIGINT, SIG_IGN);  // inherited by leakwatch through fork and exec
  Process leakwatch({LW_LEAKWATCH_BIN, "top", "-p", std::to_string(child), "--json", "--interval", "0.2",
                     "--debug-slow-tables-ms", "3000"});
  signal(SIGINT, SIG_DFL);
  EXPECT_FALSE(leakwatch.line_ready(milliseconds(1500))) << "printed before the tables were loaded";
  kill(leakwatch.pid(), SIGINT);
  auto status = leakwatch.wait_exit(milliseconds(10000));
  stop_child(child);
  ASSERT_TRUE(status.has_value()) << "leakwatch still running 10 s after SIGINT\n" << leakwatch.stderr_text();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << "wait status " << *status << "\n" << leakwatch.stderr_text();
  // Its last word: a snapshot of the process (alive, so not `final`).
  std::optional<Json> last;
  while (std::optional<std::string> line = leakwatch.read_line(milliseconds(1000))) last = Json::parse(*line);
  ASSERT_TRUE(last.has_value()) << "no snapshot printed\n" << leakwatch.stderr_text();
  EXPECT_EQ(last->at("pid").get<pid_t>(), child);
  EXPECT_FALSE(last->at("final").get<bool>());
}

// Issue 35, item 5: a process that leaks from its first moments, without
// frame pointers, while its unwind tables are built (made slow here, as a
// cold library's are): the stacks taken meanwhile end `table_pending` at
// leak_early, those taken after are whole. The cut site is folded into the
// whole one: one site holds every byte, with one verdict (it was two, the
// cut one kept for the whole session).
TEST_F(LeakwatchTop, CutStacksFoldIntoTheirFullSite) {
  Process target({target_path("pending_leaker")});
  const std::optional<std::string> ready = target.read_line(milliseconds(10000));
  ASSERT_TRUE(ready && ready->rfind("ready ", 0) == 0) << ready.value_or("EOF") << target.stderr_text();
  // No disk cache: a table cached by an earlier run would skip nothing
  // (each load waits too), but nothing need be written.
  Process leakwatch({LW_LEAKWATCH_BIN, "top", "-p", std::to_string(target.pid()), "--json", "--interval", "0.25",
                     "--debug-slow-tables-ms", "1000", "--unwind-cache-dir", ""});
  std::optional<Json> last;
  // The first snapshot comes once the tables are in; then a second of
  // whole stacks, and the symbols.
  for (int i = 0; i < 40; ++i) {
    const std::optional<std::string> line = leakwatch.read_line(milliseconds(60000));
    ASSERT_TRUE(line.has_value()) << leakwatch.stderr_text();
    last = Json::parse(*line);
    if (i < 6) continue;
    bool named = true;
    for (const Json &site : last->at("sites")) named = named && !site.at("symbols_pending").get<bool>();
    if (named) break;
  }
  target.write_line("exit");
  const std::string context = describe_sites(*last) + leakwatch.stderr_text();
  // The precondition: stacks were cut while the tables were built.
  ASSERT_GT(last->at("counters").at("stack_end_table_pending").get<int64_t>(), 0) << context;
  std::vector<const Json *> leak_sites;
  for (const Json &site : last->at("sites")) {
    const Json &frames = site.at("frames");
    if (!frames.empty() && frames.at(0).value("function", "") == "leak_early") leak_sites.push_back(&site);
  }
  ASSERT_EQ(leak_sites.size(), 1u) << "one call path, one site\n" << context;
  const Json &site = *leak_sites[0];
  EXPECT_TRUE(site.at("truncated").is_null()) << context;
  EXPECT_GT(site.at("frames").size(), 2u) << context;
  // Every heap byte since attach is leak_early's.
  EXPECT_EQ(site.at("live_bytes").get<int64_t>(), last->at("kinds").at("heap").at("live_bytes").get<int64_t>())
      << context;
}

TEST_F(LeakwatchTop, NoSuchPidExits3) {
  // A pid that just existed and was reaped: nothing else has it now.
  pid_t gone = fork();
  ASSERT_GE(gone, 0);
  if (gone == 0) _exit(0);
  ASSERT_EQ(waitpid(gone, nullptr, 0), gone);

  Outcome outcome = run_leakwatch({"top", "-p", std::to_string(gone), "--json", "--interval", "0.2"});
  EXPECT_TRUE(WIFEXITED(outcome.status) && WEXITSTATUS(outcome.status) == 3)
      << "wait status " << outcome.status << ", stderr: " << outcome.stderr_text;
  EXPECT_FALSE(outcome.stderr_text.empty());
}

TEST_F(LeakwatchTop, UsageErrorsExit2) {
  const std::string self = std::to_string(getpid());
  const std::vector<std::vector<std::string>> misuses = {
      {"top", "-p", self, "--json", "--interval", "soon"},
      {"top", "-p", "not-a-pid", "--json", "--interval", "0.2"},
      {"top", "-p", self, "--json", "--interval", "0.2", "--ringbuf-bytes", "5000"},
      {"top", "-p", self, "--json", "--interval", "0.2", "--no-such-flag"},
      {"top", "-p", self, "--json", "--interval", "0.2", "--bursts", "3/4"},
      {"top", "-p", self, "--json", "--interval", "0.2", "--bursts", "1/2", "--mode", "light"},
  };
  for (const auto &args : misuses) {
    Outcome outcome = run_leakwatch(args);
    std::string command;
    for (const auto &arg : args) command += " " + arg;
    EXPECT_TRUE(WIFEXITED(outcome.status) && WEXITSTATUS(outcome.status) == 2)
        << "leakwatch" << command << ": wait status " << outcome.status << ", stderr: " << outcome.stderr_text;
    EXPECT_FALSE(outcome.stderr_text.empty()) << "leakwatch" << command;
  }
}

// As nobody, without CAP_BPF, on a root process.
TEST_F(LeakwatchTop, PermissionDeniedExits4) {
  Process target({target_path("leaker")});
  ASSERT_EQ(target.read_line(milliseconds(10000)), "ready " + std::to_string(target.pid()));
  Outcome outcome = run_leakwatch({"top", "-p", std::to_string(target.pid()), "--json", "--interval", "0.2"},
                                  {.as_nobody = true});
  EXPECT_TRUE(WIFEXITED(outcome.status) && WEXITSTATUS(outcome.status) == 4)
      << "wait status " << outcome.status << ", stderr: " << outcome.stderr_text;
  EXPECT_FALSE(outcome.stderr_text.empty());
}

}  // namespace
}  // namespace lw::itest
