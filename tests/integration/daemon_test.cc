// SPDX-License-Identifier: Apache-2.0
// `leakwatch run` (the system-wide daemon) against the target programs of
// tests/targets: discovery by selector of processes started after it,
// follow_forks, hot reload, another mount namespace with its own libc,
// limits, clean shutdown, and `check-config`.
//
// The daemon watches the whole machine, and other test runs may start
// targets of the same names meanwhile. Selectors therefore name private
// copies of the targets (a comm unique to this test run, see
// private_target_copy) or this build's binaries, and assertions look at the
// pids this test started and the daemon's log lines for them.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <gtest/gtest.h>

#include <thread>

#include "daemon_harness.h"

namespace lw::itest {
namespace {

using std::chrono::steady_clock;
using namespace std::chrono_literals;


// Enough room that no leaker site is cut from the sites document.
constexpr const char *kCommon = "top_sites_per_process: 200\n";

class LeakwatchDaemon : public ::testing::Test {
 protected:
  void SetUp() override {
    // BPF needs root here; as root these tests must run, never skip.
    if (geteuid() != 0) GTEST_SKIP() << "not root";
  }
};

bool exited_zero(const std::optional<int> &status) {
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
}

std::string describe_status(const std::optional<int> &status) {
  if (!status) return "still running";
  if (WIFEXITED(*status)) return "exit " + std::to_string(WEXITSTATUS(*status));
  if (WIFSIGNALED(*status)) return "signal " + std::to_string(WTERMSIG(*status));
  return "wait status " + std::to_string(*status);
}

// Tells the target to exit and expects it to do so cleanly.
void finish_target(Process &target, const std::string &what) {
  target.write_line("exit");
  auto status = target.wait_exit(10s);
  EXPECT_TRUE(exited_zero(status)) << what << ": " << describe_status(status) << "; stderr: " << target.stderr_text();
}

int64_t sum_of(const Json &sites, const char *field) {
  int64_t total = 0;
  for (const Json &site : sites.at("sites")) total += site.at(field).get<int64_t>();
  return total;
}

// The daemon's log line for `pid` with `verb` ("attached", "detached").
bool log_mentions(const std::string &log, const std::string &verb, pid_t pid) {
  return log.find(verb + " pid " + std::to_string(pid) + " ") != std::string::npos;
}

// The selector of a target on exactly this comm.

// Ground truth as the daemon sees it. The daemon attaches at exec, before
// "ready", so it also counts what the dynamic loader mapped before main
// (libc's zero-fill segment, the loader's own minimal malloc), while the
// target's truth covers what it allocated after "ready". Sites are checked
// as they are; total_live becomes the baseline (a settled snapshot taken
// at "ready") plus the truth's.
Json truth_over_baseline(const Json &truth, const Json &baseline) {
  Json adjusted = truth;
  if (adjusted.contains("total_live")) {
    adjusted["total_live"] = truth.at("total_live").get<int64_t>() + baseline.at("live_bytes").get<int64_t>();
  }
  return adjusted;
}

// The time (unix seconds) of the first daemon log line containing
// `needle`; its lines start with an ISO-8601 UTC time with milliseconds.
std::optional<double> log_time_of(const std::string &log, const std::string &needle) {
  const size_t at = log.find(needle);
  if (at == std::string::npos) return std::nullopt;
  const size_t line_start = log.rfind('\n', at) == std::string::npos ? 0 : log.rfind('\n', at) + 1;
  std::tm tm{};
  int millis = 0;
  if (sscanf(log.c_str() + line_start, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
             &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &millis) != 7) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<double>(timegm(&tm)) + millis / 1000.0;
}

// 1. A comm selector picks up a process started after the daemon, within a
// second, with exact per-site bytes; a process it does not select is not
// probed at all (no breakpoint in its copy of libc).
TEST_F(LeakwatchDaemon, CommSelectorAttachesNewProcessWithinOneSecondAndNothingElse) {
  TempDir bin;
  const std::string leaker_bin = private_target_copy(bin.path(), "leaker");
  const std::string comm = file_name_of(leaker_bin);
  // Reconciliation far away: only the exec event can find the process in
  // time. A short watchdog interval, to see the pings too.
  DaemonProcess daemon({.config_body = std::string(kCommon) + R"(
reconcile_interval_seconds: 3600
targets:
  - name: leakers
    match: )" + comm_selector(comm) + R"(
    mode: full
)",
                        .env = {"WATCHDOG_USEC=400000"}});
  daemon.wait_notify("READY=1", kReadyTimeout);
  // READY promises the API is up.
  EXPECT_EQ(daemon.get("/healthz").status, 200) << daemon.diagnostics();

  const auto started = steady_clock::now();
  const double started_unix = unix_now();
  Process leaker({leaker_bin});
  Process control({target_path("realloc_edge")});
  const Json entry = daemon.wait_for_process(leaker.pid(), kApiTimeout);
  const auto latency = std::chrono::duration_cast<milliseconds>(steady_clock::now() - started);
  const auto attached_at = log_time_of(daemon.diagnostics(), "attached pid " + std::to_string(leaker.pid()) + " ");
  std::printf("[ metric   ] process start -> 'attached' log line: %s ms; -> listed in /api/v1/processes: %lld ms\n",
              attached_at ? std::to_string(std::lround((*attached_at - started_unix) * 1000)).c_str() : "?",
              static_cast<long long>(latency.count()));
  RecordProperty("attach_latency_ms", std::to_string(latency.count()));
  EXPECT_LE(latency.count(), 1000) << daemon.diagnostics();

  EXPECT_EQ(entry.at("comm"), comm);
  EXPECT_EQ(entry.at("exe"), leaker_bin);
  EXPECT_EQ(entry.at("target"), "leakers");
  EXPECT_EQ(entry.at("mode"), "full");
  EXPECT_FALSE(entry.contains("forked_from"));
  ASSERT_EQ(read_ready(leaker), leaker.pid());
  ASSERT_EQ(read_ready(control), control.pid());
  const Json baseline = daemon.sites_at_or_after(leaker.pid(), unix_now() + 0.3, kApiTimeout);

  // The control was started at the same moment and maps the same libc: it
  // must be neither listed nor carry a single breakpoint.
  const Json status = daemon.get_json("/api/v1/status");
  const std::vector<ProbeLocation> probes = attached_probes(status);
  ASSERT_FALSE(probes.empty()) << status.dump() << daemon.diagnostics();
  const BreakpointScan traced = scan_breakpoints(leaker.pid(), probes);
  EXPECT_GT(traced.mapped, 0) << traced.detail;
  EXPECT_EQ(traced.breakpoints, traced.mapped) << "every probe must be armed in the leaker\n" << traced.detail;
  const BreakpointScan untouched = scan_breakpoints(control.pid(), probes);
  EXPECT_EQ(untouched.mapped, traced.mapped) << "the control maps the same libc\n" << untouched.detail;
  EXPECT_EQ(untouched.breakpoints, 0) << "the control must not be probed\n" << untouched.detail;
  EXPECT_FALSE(daemon.find_process(control.pid()).has_value()) << daemon.diagnostics();

  const Json truth = go_and_read_truth(leaker);
  const Json sites = daemon.sites_at_or_after(leaker.pid(), unix_now() + 0.5, kApiTimeout);
  EXPECT_EQ(sites.at("process").at("pid").get<pid_t>(), leaker.pid());
  expect_matches_truth(sites, truth_over_baseline(truth, baseline), {comm}, daemon.diagnostics());

  // The control runs its own work untraced and unharmed.
  const Json control_truth = go_and_read_truth(control);
  EXPECT_EQ(control_truth.at("facts").at("move_moved"), 1);
  EXPECT_FALSE(daemon.find_process(control.pid()).has_value());
  EXPECT_FALSE(log_mentions(daemon.diagnostics(), "attached", control.pid())) << daemon.diagnostics();

  daemon.wait_notify("WATCHDOG=1", 2s);
  finish_target(leaker, "leaker");
  finish_target(control, "realloc_edge");
}

// 2. A worker pool: follow_forks makes each forked worker a process of its
// own, attributed to the parent's target, with exactly its own leak.
TEST_F(LeakwatchDaemon, ForkedWorkersTrackedAsTheirOwnProcesses) {
  TempDir bin;
  const std::string pool_bin = private_target_copy(bin.path(), "forkpool");
  const std::string comm = file_name_of(pool_bin);
  DaemonProcess daemon({.config_body = std::string(kCommon) + R"(
targets:
  - name: pool
    match: )" + comm_selector(comm) + R"(
    mode: full
    follow_forks: true
)"});
  daemon.wait_notify("READY=1", kReadyTimeout);

  Process parent({pool_bin});
  daemon.wait_for_process(parent.pid(), kApiTimeout);
  ASSERT_EQ(read_ready(parent), parent.pid());
  const Json baseline = daemon.sites_at_or_after(parent.pid(), unix_now() + 0.3, kApiTimeout);
  parent.write_line("go");
  auto forked = parent.read_line(10s);
  ASSERT_TRUE(forked && forked->rfind("forked ", 0) == 0) << forked.value_or("<EOF>") << parent.stderr_text();
  std::vector<pid_t> workers;
  {
    std::istringstream in(forked->substr(7));
    for (pid_t pid; in >> pid;) workers.push_back(pid);
  }
  ASSERT_EQ(workers.size(), 3u) << *forked;

  // Each worker must be attached before it allocates (the target waits for
  // "leak"): a child starts unprobed until the daemon has seen its fork.
  for (pid_t worker : workers) {
    const Json entry = daemon.wait_for_process(worker, kApiTimeout);
    EXPECT_EQ(entry.value("forked_from", 0), parent.pid()) << entry.dump();
    EXPECT_EQ(entry.at("target"), "pool") << entry.dump();
    EXPECT_EQ(entry.at("mode"), "full") << entry.dump();
  }

  parent.write_line("leak");
  Json truth;
  for (;;) {
    auto line = parent.read_line(10s);
    ASSERT_TRUE(line.has_value()) << parent.stderr_text();
    if (line->rfind("done ", 0) == 0) {
      truth = Json::parse(line->substr(5));
      break;
    }
  }
  const double settled = unix_now() + 0.5;

  for (size_t i = 0; i < workers.size(); ++i) {
    const std::string n = std::to_string(i);
    ASSERT_EQ(truth.at("facts").at("worker" + n + "_pid").get<pid_t>(), workers[i]);
    const int64_t expected = truth.at("facts").at("worker" + n + "_bytes").get<int64_t>();
    const Json sites = daemon.sites_at_or_after(workers[i], settled, kApiTimeout);
    const auto leaves = live_by_leaf(sites);
    const std::string context = "worker " + n + " (pid " + std::to_string(workers[i]) + ")\n" +
                                describe_sites(sites) + daemon.diagnostics();
    ASSERT_TRUE(leaves.count("forkpool_worker_leak")) << context;
    EXPECT_EQ(leaves.at("forkpool_worker_leak").live_bytes, expected) << context;
    EXPECT_EQ(leaves.at("forkpool_worker_leak").kinds, std::set<std::string>{"heap"}) << context;
    EXPECT_EQ(leaves.count("forkpool_parent_leak") ? leaves.at("forkpool_parent_leak").live_bytes : 0, 0)
        << context;
    // After the attach a worker allocates nothing else.
    EXPECT_EQ(sites.at("live_bytes").get<int64_t>(), expected) << context;
  }
  const Json parent_sites = daemon.sites_at_or_after(parent.pid(), settled, kApiTimeout);
  expect_matches_truth(parent_sites, truth_over_baseline(truth, baseline), {comm}, daemon.diagnostics());

  finish_target(parent, "forkpool");
}

// 3. Hot reload by file write and by SIGHUP: a target added picks up its
// already running process, one whose definition is unchanged keeps its
// state, one removed lets go of its process; a bad file changes nothing.
TEST_F(LeakwatchDaemon, ReloadAddsRemovesAndRejectsWithoutRestart) {
  TempDir bin;
  const std::string leaker_bin = private_target_copy(bin.path(), "leaker");
  const std::string exiter_bin = private_target_copy(bin.path(), "exiter");
  const std::string target_a = R"(
  - name: a
    match: )" + comm_selector(file_name_of(leaker_bin)) + R"(
    mode: full
)";
  const std::string target_b = R"(
  - name: b
    match: )" + comm_selector(file_name_of(exiter_bin)) + R"(
    mode: full
)";
  const std::string head = std::string(kCommon) + "targets:";
  DaemonProcess daemon({.config_body = head + target_a});
  daemon.wait_notify("READY=1", kReadyTimeout);
  const pid_t daemon_pid = daemon.pid();

  Process leaker({leaker_bin});
  daemon.wait_for_process(leaker.pid(), kApiTimeout);
  ASSERT_EQ(read_ready(leaker), leaker.pid());
  const Json baseline = daemon.sites_at_or_after(leaker.pid(), unix_now() + 0.3, kApiTimeout);
  const Json truth = truth_over_baseline(go_and_read_truth(leaker), baseline);
  const Json before = daemon.sites_at_or_after(leaker.pid(), unix_now() + 0.5, kApiTimeout);
  expect_matches_truth(before, truth, {file_name_of(leaker_bin)}, daemon.diagnostics());
  const int64_t allocated_before = sum_of(before, "allocated_bytes");
  ASSERT_GT(allocated_before, 0);
  const std::vector<ProbeLocation> probes = attached_probes(daemon.get_json("/api/v1/status"));

  // B's process exists before B does: only the reload can pick it up.
  Process exiter({exiter_bin});
  ASSERT_EQ(read_ready(exiter), exiter.pid());
  const double exiter_seen_by = unix_now() + 0.5;
  Json status = daemon.wait_for_status(
      [&](const Json &s) { return s.at("timestamp").get<double>() >= exiter_seen_by; }, kApiTimeout,
      "a snapshot after the exiter started");
  ASSERT_FALSE(daemon.find_process(exiter.pid()).has_value()) << "no target selects it yet";
  uint64_t reloads = status.at("reloads_total").get<uint64_t>();
  uint64_t failures = status.at("reload_failures_total").get<uint64_t>();

  // Add B.
  daemon.write_config(head + target_a + target_b);
  status = daemon.wait_for_status([&](const Json &s) { return s.at("reloads_total").get<uint64_t>() >= reloads + 1; }, kApiTimeout,
                                  "the reload adding B");
  EXPECT_EQ(status.at("reloads_total").get<uint64_t>(), reloads + 1) << "one write, one reload";
  EXPECT_TRUE(status.at("last_reload_successful").get<bool>());
  reloads = status.at("reloads_total").get<uint64_t>();
  const Json exiter_entry = daemon.wait_for_process(exiter.pid(), kApiTimeout);
  EXPECT_EQ(exiter_entry.at("target"), "b");
  // A's process kept its tracing: not detached, counters not reset.
  const Json after = daemon.sites_at_or_after(leaker.pid(), unix_now(), kApiTimeout);
  EXPECT_GE(sum_of(after, "allocated_bytes"), allocated_before) << describe_sites(after);
  EXPECT_EQ(after.at("live_bytes").get<int64_t>(), truth.at("total_live").get<int64_t>()) << describe_sites(after);
  EXPECT_FALSE(log_mentions(daemon.diagnostics(), "detached", leaker.pid())) << daemon.diagnostics();

  // Remove A: its process is let go, probes and all.
  daemon.write_config(head + target_b);
  EXPECT_TRUE(wait_until(kApiTimeout, [&] { return !daemon.find_process(leaker.pid()).has_value(); }))
      << "A's process still listed" << daemon.diagnostics();
  EXPECT_TRUE(log_mentions(daemon.diagnostics(), "detached", leaker.pid())) << daemon.diagnostics();
  const BreakpointScan released = scan_breakpoints(leaker.pid(), probes);
  EXPECT_GT(released.mapped, 0) << released.detail;
  EXPECT_EQ(released.breakpoints, 0) << "a detached process keeps no probe\n" << released.detail;
  status = daemon.wait_for_status([&](const Json &s) { return s.at("reloads_total").get<uint64_t>() >= reloads + 1; }, kApiTimeout,
                                  "the reload removing A");
  reloads = status.at("reloads_total").get<uint64_t>();
  ASSERT_TRUE(daemon.find_process(exiter.pid()).has_value());

  // An unknown key: rejected, the running configuration stays.
  daemon.write_config(head + target_b + "no_such_key: 1\n");
  status = daemon.wait_for_status(
      [&](const Json &s) { return s.at("reload_failures_total").get<uint64_t>() >= failures + 1; }, kApiTimeout,
      "the failed reload");
  EXPECT_EQ(status.at("reload_failures_total").get<uint64_t>(), failures + 1);
  EXPECT_FALSE(status.at("last_reload_successful").get<bool>());
  EXPECT_EQ(status.at("reloads_total").get<uint64_t>(), reloads + 1);
  reloads = status.at("reloads_total").get<uint64_t>();
  EXPECT_TRUE(daemon.running()) << daemon.diagnostics();
  EXPECT_EQ(daemon.get("/healthz").status, 200);
  EXPECT_TRUE(daemon.find_process(exiter.pid()).has_value()) << "B's process must stay tracked";
  EXPECT_NE(daemon.diagnostics().find("no_such_key"), std::string::npos) << "the error names the key";

  // Valid again.
  daemon.write_config(head + target_b);
  status = daemon.wait_for_status([&](const Json &s) { return s.at("reloads_total").get<uint64_t>() >= reloads + 1; }, kApiTimeout,
                                  "the reload of the repaired file");
  EXPECT_TRUE(status.at("last_reload_successful").get<bool>());
  reloads = status.at("reloads_total").get<uint64_t>();

  // SIGHUP reloads too.
  ASSERT_EQ(kill(daemon_pid, SIGHUP), 0);
  status = daemon.wait_for_status([&](const Json &s) { return s.at("reloads_total").get<uint64_t>() >= reloads + 1; }, kApiTimeout,
                                  "the reload on SIGHUP");
  EXPECT_EQ(status.at("reloads_total").get<uint64_t>(), reloads + 1);
  EXPECT_TRUE(status.at("last_reload_successful").get<bool>());
  EXPECT_TRUE(daemon.find_process(exiter.pid()).has_value());

  // B traces its process from the reload on: exact bytes. (Attached after
  // its "ready", so no loader mappings to discount.)
  const Json exiter_truth = go_and_read_truth(exiter);
  const Json exiter_sites = daemon.sites_at_or_after(exiter.pid(), unix_now() + 0.5, kApiTimeout);
  expect_matches_truth(exiter_sites, exiter_truth, {file_name_of(exiter_bin)}, daemon.diagnostics());

  // Never restarted: the same process served all of it.
  EXPECT_TRUE(daemon.running());
  EXPECT_EQ(daemon.pid(), daemon_pid);
  finish_target(exiter, "exiter");
  finish_target(leaker, "leaker");
}

// The absolute paths in `ldd PROGRAM`'s output: the libraries it loads and
// the dynamic loader.
std::vector<std::string> ldd_paths(const std::string &program) {
  Process ldd({"/usr/bin/ldd", program});
  std::vector<std::string> paths;
  while (auto line = ldd.read_line(10s)) {
    std::istringstream in(*line);
    for (std::string word; in >> word;) {
      if (word.front() == '/') paths.push_back(word);
    }
  }
  auto status = ldd.wait_exit(10s);
  if (!exited_zero(status)) throw std::runtime_error("ldd " + program + ": " + describe_status(status));
  return paths;
}

// The path and inode of the libc mapped by `pid`, from /proc/PID/maps.
std::pair<std::string, ino_t> mapped_libc(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, path;
    unsigned long long inode = 0;
    in >> range >> perms >> offset >> dev >> inode;
    std::getline(in >> std::ws, path);
    const std::string base = std::filesystem::path(path).filename();
    if (base.rfind("libc.so", 0) == 0) return {path, static_cast<ino_t>(inode)};
  }
  return {};
}

// 4. A process in its own mount namespace and root, with its own copy of
// libc: the daemon must probe that copy (the file the process runs), not
// the host's libc of the same name.
TEST_F(LeakwatchDaemon, OwnMountNamespaceAndLibcCopyProbedThroughItsLibc) {
  TempDir root;
  const std::string program = target_path("leaker");
  // In the root under a private name (see private_target_copy).
  const std::string name = file_name_of(private_target_copy(root.path(), "leaker"));
  // leaker maps /proc/self/exe: the root needs a /proc.
  std::filesystem::create_directory(root.path() + "/proc");
  std::string host_libc;
  for (const std::string &library : ldd_paths(program)) {
    const std::filesystem::path copy = root.path() + library;
    std::filesystem::create_directories(copy.parent_path());
    std::filesystem::copy_file(library, copy);  // the file's content, even through symlinks
    if (copy.filename().string().rfind("libc.so", 0) == 0) host_libc = library;
  }
  ASSERT_FALSE(host_libc.empty()) << "ldd lists no libc";
  struct stat host{}, copied{};
  ASSERT_EQ(stat(host_libc.c_str(), &host), 0);
  ASSERT_EQ(stat((root.path() + host_libc).c_str(), &copied), 0);
  ASSERT_NE(host.st_ino, copied.st_ino) << "the copy must be another file";

  DaemonProcess daemon({.config_body = std::string(kCommon) + R"(
targets:
  - name: contained
    match: )" + comm_selector(name) + R"(
    mode: full
)"});
  daemon.wait_notify("READY=1", kReadyTimeout);

  // A private mount namespace (which also holds the root's /proc mount, so
  // nothing is left mounted on the host), then chroot.
  Process wrapper({"/usr/bin/unshare", "--mount", "--fork", "--mount-proc=" + root.path() + "/proc",
                   "/usr/sbin/chroot", root.path(), "/" + name});
  const pid_t pid = read_ready(wrapper);
  ASSERT_NE(pid, wrapper.pid());
  daemon.wait_for_process(pid, kApiTimeout);
  const Json baseline = daemon.sites_at_or_after(pid, unix_now() + 0.3, kApiTimeout);
  char own_ns[64] = {}, its_ns[64] = {};
  ASSERT_GT(readlink("/proc/self/ns/mnt", own_ns, sizeof own_ns - 1), 0);
  ASSERT_GT(readlink(("/proc/" + std::to_string(pid) + "/ns/mnt").c_str(), its_ns, sizeof its_ns - 1), 0);
  EXPECT_STRNE(own_ns, its_ns) << "the target must run in its own mount namespace";

  // The libc it runs is the copy...
  const auto [libc_path, libc_inode] = mapped_libc(pid);
  ASSERT_FALSE(libc_path.empty());
  EXPECT_EQ(libc_inode, copied.st_ino) << libc_path;
  // As this (the daemon's) mount namespace names it: the copy in the root.
  EXPECT_EQ(libc_path, root.path() + host_libc);
  // ...and the probes are on that file, attached.
  const Json status = daemon.get_json("/api/v1/status");
  std::vector<ProbeLocation> probes_on_copy;
  bool moved_memalign = false;
  for (const Json &p : status.at("probes")) {
    if (p.at("object") != libc_path) continue;
    EXPECT_TRUE(p.at("attached").get<bool>()) << p.dump();
    // glibc 2.36's posix_memalign starts with a single-stepped cmpb: both
    // its probes move to the push after it (decision return-probe-placement),
    // and the breakpoint scan below finds them there.
    if (p.at("symbols").get<std::string>().rfind("posix_memalign", 0) == 0) {
      moved_memalign = true;
      EXPECT_EQ(p.at("placement").get<std::string>().rfind("after cmp", 0), 0u) << p.dump();
    }
    probes_on_copy.push_back({libc_path, p.at("file_offset").get<uint64_t>(), p.at("symbols").get<std::string>()});
  }
  EXPECT_TRUE(moved_memalign) << "no posix_memalign probe on " << libc_path;
  ASSERT_FALSE(probes_on_copy.empty()) << "no probe on " << libc_path << "; status: " << status.dump()
                                       << daemon.diagnostics();
  const BreakpointScan scan = scan_breakpoints(pid, probes_on_copy);
  EXPECT_EQ(scan.mapped, static_cast<int>(probes_on_copy.size())) << scan.detail;
  EXPECT_EQ(scan.breakpoints, scan.mapped) << scan.detail;

  const Json truth = go_and_read_truth(wrapper);
  const Json sites = daemon.sites_at_or_after(pid, unix_now() + 0.5, kApiTimeout);
  expect_matches_truth(sites, truth_over_baseline(truth, baseline), {name}, daemon.diagnostics());
  finish_target(wrapper, "unshare/chroot leaker");
}

// 5. limits.max_processes: with 20 matching processes, 2 are tracked, the
// others refused and counted, and the daemon stays healthy.
TEST_F(LeakwatchDaemon, MaxProcessesCapsTrackingAndStaysHealthy) {
  // The exe condition keeps other test runs' exiters out of the count.
  DaemonProcess daemon({.config_body = std::string(kCommon) + R"(
limits:
  max_processes: 2
targets:
  - name: capped
    match: {comm: "^exiter$", exe: ")" + target_path("exiter") + R"("}
    mode: light
)"});
  daemon.wait_notify("READY=1", kReadyTimeout);

  constexpr int kProcesses = 20;
  std::vector<std::unique_ptr<Process>> exiters;
  for (int i = 0; i < kProcesses; ++i) exiters.push_back(std::make_unique<Process>(std::vector{target_path("exiter")}));
  for (auto &exiter : exiters) ASSERT_EQ(read_ready(*exiter), exiter->pid());

  Json status = daemon.wait_for_status(
      [&](const Json &s) { return s.at("refused_max_processes").get<uint64_t>() >= kProcesses - 2; }, kApiTimeout,
      "refused_max_processes >= 18");
  EXPECT_EQ(status.at("tracked_processes").get<int>(), 2) << status.dump();
  const Json processes = daemon.get_json("/api/v1/processes");
  int listed = 0;
  for (const Json &p : processes.at("processes")) {
    EXPECT_EQ(p.at("target"), "capped") << p.dump();
    ++listed;
  }
  EXPECT_EQ(listed, 2) << processes.dump() << "\nstatus: " << status.dump() << daemon.diagnostics();

  // The processes work on, traced or not; the daemon stays up and healthy.
  for (auto &exiter : exiters) go_and_read_truth(*exiter);
  for (auto &exiter : exiters) finish_target(*exiter, "exiter");
  EXPECT_TRUE(daemon.running()) << daemon.diagnostics();
  EXPECT_EQ(daemon.get("/healthz").status, 200) << daemon.diagnostics();
}

// 6. SIGTERM: the daemon exits 0 within a second and takes every uprobe
// with it; the traced process carries on unharmed.
TEST_F(LeakwatchDaemon, SigtermExitsPromptlyAndRemovesEveryProbe) {
  TempDir bin;
  const std::string leaker_bin = private_target_copy(bin.path(), "leaker");
  DaemonProcess daemon({.config_body = std::string(kCommon) + R"(
targets:
  - name: leakers
    match: )" + comm_selector(file_name_of(leaker_bin)) + R"(
    mode: full
)"});
  daemon.wait_notify("READY=1", kReadyTimeout);
  Process leaker({leaker_bin});
  daemon.wait_for_process(leaker.pid(), kApiTimeout);
  ASSERT_EQ(read_ready(leaker), leaker.pid());
  // Caught at exec, the process is listed before the loader has mapped
  // libc; its probes appear once the daemon has seen that mapping.
  std::vector<ProbeLocation> probes;
  for (auto until = steady_clock::now() + kApiTimeout; probes.empty() && steady_clock::now() < until;) {
    probes = attached_probes(daemon.get_json("/api/v1/status"));
    if (probes.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const BreakpointScan armed = scan_breakpoints(leaker.pid(), probes);
  ASSERT_GT(armed.mapped, 0) << armed.detail;
  ASSERT_EQ(armed.breakpoints, armed.mapped) << armed.detail;

  const auto signalled = steady_clock::now();
  const auto status = daemon.signal_and_wait(SIGTERM, 5s);
  const auto took = std::chrono::duration_cast<milliseconds>(steady_clock::now() - signalled);
  std::printf("[ metric   ] SIGTERM -> exit: %lld ms\n", static_cast<long long>(took.count()));
  ASSERT_TRUE(status.has_value()) << "still running 5 s after SIGTERM" << daemon.diagnostics();
  EXPECT_LT(took.count(), 1000) << daemon.diagnostics();
  EXPECT_TRUE(exited_zero(status)) << describe_status(status) << daemon.diagnostics();

  const BreakpointScan disarmed = scan_breakpoints(leaker.pid(), probes);
  EXPECT_EQ(disarmed.mapped, armed.mapped) << disarmed.detail;
  EXPECT_EQ(disarmed.breakpoints, 0) << "uprobes left behind\n" << disarmed.detail;

  const Json truth = go_and_read_truth(leaker);
  EXPECT_GT(truth.at("total_live").get<int64_t>(), 0);
  finish_target(leaker, "leaker");
}

// 7. check-config: the shipped example is valid; an error is reported as
// FILE:LINE:COLUMN and fails with exit 1.
TEST_F(LeakwatchDaemon, CheckConfigAcceptsExampleAndLocatesErrors) {
  {
    Process check({LW_LEAKWATCH_BIN, "check-config", LW_EXAMPLE_CONFIG});
    auto status = check.wait_exit(10s);
    EXPECT_TRUE(exited_zero(status)) << describe_status(status) << ": " << check.stderr_text();
  }
  TempDir dir;
  const std::string bad = dir.path() + "/bad.yaml";
  {
    std::ofstream out(bad);
    // The misspelt key is on line 5, column 5.
    out << "listen: \"127.0.0.1:9478\"\n"
           "targets:\n"
           "  - name: web\n"
           "    match: {comm: \"^nginx$\"}\n"
           "    mdoe: full\n";
  }
  Process check({LW_LEAKWATCH_BIN, "check-config", bad});
  auto status = check.wait_exit(10s);
  const std::string err = check.stderr_text();
  EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << describe_status(status) << ": " << err;
  EXPECT_NE(err.find(bad + ":5:5:"), std::string::npos) << err;
  EXPECT_NE(err.find("mdoe"), std::string::npos) << err;
}

}  // namespace
}  // namespace lw::itest

namespace lw::itest {
namespace {

// Over limits.max_daemon_memory_bytes the daemon keeps what it tracks and
// attaches nothing new: counted, logged once, never an OOM or a crash.
TEST_F(LeakwatchDaemon, MemoryBudgetRefusesNewProcessesAndKeepsOld) {
  DaemonProcess daemon({.config_body = std::string(kCommon) + R"(
limits:
  max_daemon_memory_bytes: 1
targets:
  - name: budget
    match: {comm: "^exiter$", exe: ")" + target_path("exiter") + R"("}
    mode: full
)"});
  daemon.wait_notify("READY=1", kReadyTimeout);
  Process first({target_path("exiter")});
  ASSERT_EQ(read_ready(first), first.pid());
  daemon.wait_for_process(first.pid(), kApiTimeout);
  // The first process's state now exceeds a 1-byte budget (measured at the
  // next publish, within a second).
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  Process second({target_path("exiter")});
  ASSERT_EQ(read_ready(second), second.pid());
  Json status = daemon.wait_for_status(
      [&](const Json &s) { return s.at("refused_memory_budget").get<uint64_t>() >= 1; }, kApiTimeout,
      "refused_memory_budget >= 1");
  EXPECT_EQ(status.at("tracked_processes").get<int>(), 1) << status.dump();
  std::string metrics = daemon.get("/metrics").body;
  EXPECT_NE(metrics.find("leakwatch_processes_refused_total{reason=\"memory_budget\"} "), std::string::npos);
  go_and_read_truth(first);
  go_and_read_truth(second);
  finish_target(first, "exiter");
  finish_target(second, "exiter");
  EXPECT_TRUE(daemon.running()) << daemon.diagnostics();
}

}  // namespace
}  // namespace lw::itest
