// SPDX-License-Identifier: Apache-2.0
// Process churn and pid reuse (issue #8): for LW_CHURN_SECONDS (default
// 60, what CI runs; the soak churns the same for 10 minutes), `spawner` fork+execs 100 short-lived processes a
// second matching a `full` selector (churn_child: each leaks a number of
// bytes that depends on its pid and start time, from churn_leak, once it
// sees the probes in itself) and 1,000 a second matching a `light` one
// (another copy of churn_child, not waiting for probes, which light mode
// does not place), under one real `leakwatch run`. While that runs:
//   - /api/v1/processes is sampled every 250 ms: every full child listed
//     must show none or exactly its own bytes, under its own
//     (pid, start_time), and every light child no heap bytes;
//   - clean long-lived probes of the `full` selector are started onto pids
//     that just-exited children held (clone3 with set_tid), alternately a
//     full child's (leaked bytes, heap probes) and a light one's (another
//     target's mode), and must show exactly their own bytes in full mode,
//     nothing of the previous owner's.
// Afterwards every per-process state the daemon exposes returns to the
// baseline. Prints the achieved spawn rates, pid wraps, attach latency
// (the daemon's leakwatch_attach_latency_seconds, and as the children saw
// it) and the daemon's CPU.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"
#include "harness.h"

namespace lw::itest {
namespace {

using std::chrono::steady_clock;
using namespace std::chrono_literals;

// The same function as in tests/targets/churn_child.c.
uint64_t churn_leak_bytes(long pid, uint64_t start_ticks) {
  return 16ull * (256ull + (static_cast<uint64_t>(pid) * 31ull + start_ticks) % 4096ull);
}
constexpr int64_t kProbeBytes = 10007 + 20011 + 30013;  // churn_child probe

struct ChildRecord {
  pid_t pid = 0;
  uint64_t start = 0;
  bool attached = false;
  long long latency_us = 0;
  uint64_t bytes = 0;
};

std::vector<ChildRecord> read_child_log(const std::string &path) {
  std::vector<ChildRecord> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    ChildRecord r;
    int attached = 0;
    unsigned long long start = 0, bytes = 0;
    if (sscanf(line.c_str(), "%d %llu %d %lld %llu", &r.pid, &start, &attached, &r.latency_us, &bytes) != 5)
      continue;  // a line being written right now
    r.start = start;
    r.bytes = bytes;
    r.attached = attached != 0;
    out.push_back(r);
  }
  return out;
}

int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}

long read_long_file(const std::string &path) {
  std::ifstream in(path);
  long v = -1;
  in >> v;
  return v;
}

// /proc/PID/stat fields after the comm: utime+stime (14, 15), starttime (22).
std::vector<unsigned long long> stat_fields(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<unsigned long long> fields;
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return fields;
  std::istringstream rest(stat.substr(close + 2));
  fields = {0, 0, 0};  // fields 1..2 (pid, comm) stand in front
  for (std::string f; rest >> f;) fields.push_back(strtoull(f.c_str(), nullptr, 10));
  return fields;  // fields[n] is field n
}
unsigned long long start_ticks(pid_t pid) {
  auto f = stat_fields(pid);
  return f.size() > 22 ? f[22] : 0;
}

// What the daemon's fds point at, for a failure message.
std::multiset<std::string> fd_targets(pid_t pid) {
  std::multiset<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    std::error_code rec;
    out.insert(std::filesystem::read_symlink(it->path(), rec).string());
  }
  return out;
}

std::string fd_difference(const std::multiset<std::string> &before, const std::multiset<std::string> &after) {
  std::vector<std::string> added;
  std::set_difference(after.begin(), after.end(), before.begin(), before.end(), std::back_inserter(added));
  std::string out;
  for (const std::string &a : added) out += "\n  + " + a;
  return out;
}

// Quantile q of a Prometheus histogram in /metrics text, as the upper bound
// of the bucket it falls in (what histogram_quantile would interpolate in).
std::string histogram_quantile_bound(const std::string &text, const std::string &name, double q) {
  const double count = metric(text, name + "_count");
  if (!(count > 0)) return "n/a";
  std::istringstream in(text);
  const std::string prefix = name + "_bucket{le=\"";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    const std::string le = line.substr(prefix.size(), line.find('"', prefix.size()) - prefix.size());
    if (std::stod(line.substr(line.rfind(' ') + 1)) >= std::ceil(q * count)) return "<= " + le + " s";
  }
  return "?";
}

double percentile(std::vector<long long> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1);
  return static_cast<double>(v[i]);
}

Json truth_over_baseline(const Json &truth, const Json &baseline) {
  Json adjusted = truth;
  adjusted["total_live"] = truth.at("total_live").get<int64_t>() + baseline.at("live_bytes").get<int64_t>();
  return adjusted;
}

int64_t heap_of(const Json &process, const char *field) {
  if (!process.contains("kinds") || !process.at("kinds").contains("heap")) return 0;
  return process.at("kinds").at("heap").at(field).get<int64_t>();
}

// The daemon's view lags behind the churn (seconds on a loaded 2-core
// machine): the previous owner of a pid may still be listed under it, with
// its own start time. So processes are looked up by pid and start time.
constexpr milliseconds kLagTimeout{30000};

Json wait_for_identity(DaemonProcess &daemon, pid_t pid, uint64_t start) {
  std::optional<Json> found;
  const bool ok = wait_until(kLagTimeout, [&] {
    found = daemon.find_process(pid);
    return found && found->at("start_time").get<uint64_t>() == start;
  }, 20ms);
  if (!ok) {
    throw std::runtime_error("pid " + std::to_string(pid) + " start " + std::to_string(start) +
                             " not listed; last: " + (found ? found->dump() : "none") + daemon.diagnostics());
  }
  return *found;
}

// /api/v1/processes/PID/sites?start_time=START from a snapshot at or after
// `unix_time`.
Json sites_of(DaemonProcess &daemon, pid_t pid, uint64_t start, double unix_time) {
  const std::string path = "/api/v1/processes/" + std::to_string(pid) + "/sites?start_time=" + std::to_string(start);
  Json sites;
  const bool ok = wait_until(kLagTimeout, [&] {
    HttpReply r = daemon.get(path);
    if (r.status != 200) return false;
    sites = Json::parse(r.body, nullptr, false);
    return sites.is_object() && sites.at("timestamp").get<double>() >= unix_time;
  });
  if (!ok) throw std::runtime_error("no snapshot of " + path + daemon.diagnostics());
  return sites;
}

// sites_of() once every site the truth names with bytes is there by name:
// symbolization runs on its own thread (decision symbol-thread) and, on a slow
// VM under this churn, was still two requests behind when the bytes were all in
// (2026-11-28). What the test checks is where the bytes land, not how soon
// names come; after kLagTimeout the last snapshot is returned as it is.
Json named_sites_of(DaemonProcess &daemon, pid_t pid, uint64_t start, double unix_time, const Json &truth) {
  Json sites;
  wait_until(kLagTimeout, [&] {
    sites = sites_of(daemon, pid, start, unix_time);
    const auto leaves = live_by_leaf(sites);
    for (const auto &[function, bytes] : truth.at("sites").items())
      if (bytes.get<int64_t>() > 0 && !leaves.count(function)) return false;
    return true;
  }, 100ms);
  return sites;
}

// A clean process of the `full` selector started onto the pid a leaky child
// held.
struct ProbeRun {
  std::unique_ptr<Process> process;
  pid_t pid = 0;
  uint64_t start = 0;
  uint64_t previous_owner_bytes = 0;
  bool onto_light = false;  // the previous owner was a light child
  double listed_after_ms = 0;
  double counted_after_ms = 0;  // from its "done" to its bytes in the API
};

TEST(LeakwatchChurn, PidReuseAttributesNothingToTheNewProcess) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  const int seconds = env_int("LW_CHURN_SECONDS", 60);
  const int full_rate = 100, light_rate = 1000;  // the issue's rates
  const int probes_wanted = std::max(1, std::min(6, seconds / 10));
  const long pid_max = read_long_file("/proc/sys/kernel/pid_max");
  // pid_max is not lowered: it is the host's (the daemon sees host pids),
  // shared with everything else running. Reuse is forced instead, exactly
  // where it hurts, with clone3(set_tid) onto just-freed pids; natural
  // wraps are counted and printed.
  std::printf("[ metric   ] %d s, pid_max %ld, spawn rates asked: full %d/s, light %d/s\n", seconds, pid_max,
              full_rate, light_rate);

  TempDir work;
  const std::string full_bin = private_target_copy(work.path(), "churn_child");
  const std::string light_bin = work.path() + "/lwlight-" + std::to_string(getpid());
  std::filesystem::copy_file(target_path("churn_child"), light_bin);
  const std::string full_comm = file_name_of(full_bin), light_comm = file_name_of(light_bin);
  const std::string child_log = work.path() + "/full.log", light_log = work.path() + "/light.log";

  DaemonProcess daemon({.config_body = R"(targets:
  - name: churn_full
    match: )" + comm_selector(full_comm) + R"(
    mode: full
  - name: churn_light
    match: )" + comm_selector(light_comm) + R"(
    mode: light
)",
                        .args = {"--log-level", getenv("LW_CHURN_LOG_LEVEL") ? getenv("LW_CHURN_LOG_LEVEL") : "warn"}});
  daemon.wait_notify("READY=1", kReadyTimeout);
  const std::string metrics0 = daemon.get("/metrics").body;
  const double tracked0 = metric(metrics0, "leakwatch_tracked_processes");
  const double live_entries0 = metric(metrics0, "leakwatch_kernel_map_entries{map=\"live\"}");
  const std::multiset<std::string> fd_targets0 = fd_targets(daemon.pid());
  ASSERT_FALSE(std::isnan(tracked0)) << metrics0;

  Process full_spawner({target_path("spawner"), std::to_string(full_rate), full_bin},
                       {.env = {"LW_CHURN_LOG=" + child_log}});
  Process light_spawner({target_path("spawner"), std::to_string(light_rate), light_bin},
                        {.env = {"LW_CHURN_LOG=" + light_log, "LW_CHURN_WAIT_MS=0", "LW_CHURN_HOLD_MS=0"}});
  read_ready(full_spawner);
  read_ready(light_spawner);
  const unsigned long long cpu0 = cpu_ticks(daemon.pid());
  const auto t0 = steady_clock::now();
  full_spawner.write_line("go");
  light_spawner.write_line("go");

  struct Seen {
    int64_t allocated = 0, live = 0;
    std::string target, mode;
  };
  std::map<std::pair<pid_t, uint64_t>, std::vector<Seen>> full_seen;  // (pid, start_time) -> samples
  std::vector<std::string> light_violations;
  size_t samples = 0, full_listings = 0, light_listings = 0;
  std::vector<ProbeRun> probes;
  std::set<pid_t> probe_pids;

  auto sample = [&] {
    Json all = daemon.get_json("/api/v1/processes");
    ++samples;
    for (const Json &p : all.at("processes")) {
      const pid_t pid = p.at("pid").get<pid_t>();
      const uint64_t start = p.at("start_time").get<uint64_t>();
      const std::string comm = p.at("comm").get<std::string>();
      if (comm == full_comm) {
        ++full_listings;
        full_seen[{pid, start}].push_back({heap_of(p, "allocated_bytes"), heap_of(p, "live_bytes"),
                                           p.at("target").get<std::string>(), p.at("mode").get<std::string>()});
      } else if (comm == light_comm) {
        ++light_listings;
        if (p.at("target") != "churn_light" || p.at("mode") != "light" || heap_of(p, "allocated_bytes") != 0)
          light_violations.push_back(p.dump());
      }
    }
  };

  // Starts a probe onto the pid of the most recent child that is gone (of
  // the full children, one that saw its probes); returns false if no such
  // pid could be taken.
  auto launch_probe = [&](bool onto_light) -> bool {
    std::vector<ChildRecord> log = read_child_log(onto_light ? light_log : child_log);
    int tries = 0;
    for (auto it = log.rbegin(); it != log.rend() && tries < 50; ++it) {
      if ((!onto_light && !it->attached) || probe_pids.count(it->pid)) continue;
      if (kill(it->pid, 0) == 0 || errno != ESRCH) continue;  // alive, or the pid already taken again
      ++tries;
      ProbeRun run;
      try {
        run.process = std::make_unique<Process>(std::vector<std::string>{full_bin, "probe"},
                                                Process::Options{.set_tid = getenv("LW_CHURN_PROBE_FRESH_PID") ? 0 : it->pid});
      } catch (const std::exception &) {
        continue;  // taken between the check and the clone (EEXIST)
      }
      const auto launched = steady_clock::now();
      run.pid = run.process->pid();
      EXPECT_EQ(run.pid, it->pid);
      EXPECT_EQ(read_ready(*run.process), it->pid);
      run.start = start_ticks(run.pid);
      run.previous_owner_bytes = onto_light ? 0 : it->bytes;
      run.onto_light = onto_light;
      const Json entry = wait_for_identity(daemon, run.pid, run.start);
      run.listed_after_ms = std::chrono::duration<double, std::milli>(steady_clock::now() - launched).count();
      // The entry is the probe's own: its identity, its selector, its mode.
      EXPECT_EQ(entry.at("start_time").get<uint64_t>(), run.start) << entry.dump();
      EXPECT_EQ(entry.at("target"), "churn_full") << entry.dump();
      EXPECT_EQ(entry.at("mode"), "full") << entry.dump();
      const Json baseline = sites_of(daemon, run.pid, run.start, unix_now() + 0.3);
      EXPECT_EQ(baseline.at("process").at("start_time").get<uint64_t>(), run.start);
      const Json truth = go_and_read_truth(*run.process);
      // The daemon consumes events behind the churn: wait until the probe's
      // allocations are in (at least as many bytes as it made), then the
      // figures must be exact. The wait is printed.
      const auto done = steady_clock::now();
      std::optional<Json> in;
      wait_until(kLagTimeout, [&] {
        in = daemon.find_process(run.pid);
        return in && in->at("start_time").get<uint64_t>() == run.start &&
               heap_of(*in, "allocated_bytes") >= kProbeBytes;
      }, 50ms);
      run.counted_after_ms = std::chrono::duration<double, std::milli>(steady_clock::now() - done).count();
      const Json expected = truth_over_baseline(truth, baseline);
      const Json sites = named_sites_of(daemon, run.pid, run.start, unix_now() + 0.3, expected);
      EXPECT_EQ(sites.at("process").at("start_time").get<uint64_t>(), run.start);
      expect_matches_truth(sites, expected, {full_comm},
                           "\nprobe on reused pid " + std::to_string(run.pid) + " (previous owner leaked " +
                               std::to_string(run.previous_owner_bytes) + " B, was " +
                               (onto_light ? "light" : "full") + ")" + daemon.diagnostics());
      std::optional<Json> listed = daemon.find_process(run.pid);
      EXPECT_TRUE(listed.has_value());
      if (listed) {
        EXPECT_EQ(heap_of(*listed, "live_bytes"), kProbeBytes) << listed->dump();
      }
      probe_pids.insert(run.pid);
      probes.push_back(std::move(run));
      return true;
    }
    return false;
  };

  int probe_failures = 0;
  const auto end = t0 + std::chrono::seconds(seconds);
  // The churn goes on past `end` until every probe is launched (each waits
  // seconds for its bytes: six in 60 s on a slow machine may not fit), at
  // most 60 s more.
  const auto churning = [&] {
    const auto now = steady_clock::now();
    return now < end || (static_cast<int>(probes.size()) < probes_wanted && now < end + 60s);
  };
  for (int k = 0; churning(); ++k) {
    ASSERT_TRUE(daemon.running()) << daemon.diagnostics();
    sample();
    const auto due = t0 + std::chrono::milliseconds(1000LL * seconds * (static_cast<long long>(probes.size()) + 1) /
                                                     (probes_wanted + 1));
    if (static_cast<int>(probes.size()) < probes_wanted && steady_clock::now() >= due) {
      if (!launch_probe(probes.size() % 2 == 1)) ++probe_failures;
    }
    std::this_thread::sleep_for(250ms);
  }
  const unsigned long long cpu1 = cpu_ticks(daemon.pid());
  const double churn_s = std::chrono::duration<double>(steady_clock::now() - t0).count();

  full_spawner.write_line("count");
  light_spawner.write_line("count");
  const std::string full_count = full_spawner.read_line(5000ms).value_or("?");
  const std::string light_count = light_spawner.read_line(5000ms).value_or("?");
  full_spawner.write_line("exit");
  light_spawner.write_line("exit");
  EXPECT_TRUE(full_spawner.wait_exit(5000ms).has_value());
  EXPECT_TRUE(light_spawner.wait_exit(5000ms).has_value());
  // The last children finish (each holds its leak 20 ms, waits for its
  // probes at most 1 s).
  std::this_thread::sleep_for(1500ms);
  sample();

  // The probes still hold exactly their own bytes: nothing of the churn on
  // other pids, nor of their pids' earlier owners, landed on them later.
  for (const ProbeRun &run : probes) {
    const Json sites = sites_of(daemon, run.pid, run.start, unix_now() + 0.3);
    EXPECT_EQ(sites.at("process").at("start_time").get<uint64_t>(), run.start);
    std::optional<Json> listed = daemon.find_process(run.pid);
    ASSERT_TRUE(listed.has_value()) << "probe " << run.pid << " no longer listed" << daemon.diagnostics();
    EXPECT_EQ(heap_of(*listed, "live_bytes"), kProbeBytes) << listed->dump();
    EXPECT_EQ(heap_of(*listed, "allocated_bytes"), kProbeBytes) << listed->dump();
  }
  const std::string metrics1 = daemon.get("/metrics").body;
  for (ProbeRun &run : probes) {
    run.process->write_line("exit");
    EXPECT_TRUE(run.process->wait_exit(5000ms).has_value());
  }

  // Back to the baseline: nothing tracked that the churn left behind, no
  // record in the live map, no fd held for a gone process. A missed exit
  // would be found by the reconciliation (every 10 s): allow 25 s, print
  // what it took.
  const auto settle0 = steady_clock::now();
  std::string last_metrics;
  const bool settled = wait_until(25000ms, [&] {
    last_metrics = daemon.get("/metrics").body;
    return metric(last_metrics, "leakwatch_tracked_processes") == tracked0 &&
           metric(last_metrics, "leakwatch_kernel_map_entries{map=\"live\"}") == live_entries0 &&
           daemon.get_json("/api/v1/processes").at("processes").empty();
  }, 200ms);
  const double settle_s = std::chrono::duration<double>(steady_clock::now() - settle0).count();
  EXPECT_TRUE(settled) << "tracked " << metric(last_metrics, "leakwatch_tracked_processes") << " (baseline "
                       << tracked0 << "), live map entries "
                       << metric(last_metrics, "leakwatch_kernel_map_entries{map=\"live\"}") << " (baseline "
                       << live_entries0 << ")\n"
                       << daemon.get_json("/api/v1/processes").dump() << daemon.diagnostics();
  // Per-process kernel resources (perf events, BPF links, anything not a
  // file) come back to the baseline; files (the symbolizer's module cache,
  // shared by build-id and bounded) may stay, and are printed. An HTTP
  // connection of ours may still be closing: 1 of slack.
  auto non_files = [](const std::multiset<std::string> &fds) {
    return std::count_if(fds.begin(), fds.end(), [](const std::string &t) { return t.empty() || t[0] != '/'; });
  };
  std::multiset<std::string> fd_targets1;
  wait_until(5000ms, [&] {
    fd_targets1 = fd_targets(daemon.pid());
    return non_files(fd_targets1) <= non_files(fd_targets0);
  });
  EXPECT_LE(non_files(fd_targets1), non_files(fd_targets0) + 1)
      << "daemon fds before the churn " << fd_targets0.size() << ", held now besides:"
      << fd_difference(fd_targets0, fd_targets1);
  const std::string files_kept = fd_difference(fd_targets0, fd_targets1);
  ASSERT_TRUE(daemon.running()) << daemon.diagnostics();

  // Every churn_child the daemon listed showed none or exactly its own
  // bytes, under its own identity.
  const std::vector<ChildRecord> log = read_child_log(child_log);
  std::map<std::pair<pid_t, uint64_t>, const ChildRecord *> by_identity;
  std::map<pid_t, int> uses;
  for (const ChildRecord &r : log) {
    by_identity[{r.pid, r.start}] = &r;
    ++uses[r.pid];
  }
  std::vector<std::string> full_violations;
  size_t with_bytes = 0;
  for (const auto &[key, seen] : full_seen) {
    const auto [pid, start] = key;
    const bool is_probe = std::any_of(probes.begin(), probes.end(),
                                      [&](const ProbeRun &r) { return r.pid == pid && r.start == start; });
    auto it = by_identity.find(key);
    if (!is_probe && it == by_identity.end()) {
      full_violations.push_back("pid " + std::to_string(pid) + " start " + std::to_string(start) +
                                ": listed, but no such churn_child ran");
      continue;
    }
    // The child logged what it leaked; it is a function of its identity.
    if (!is_probe) {
      EXPECT_EQ(it->second->bytes, churn_leak_bytes(pid, start));
    }
    const int64_t own = is_probe ? kProbeBytes : static_cast<int64_t>(churn_leak_bytes(pid, start));
    for (const Seen &s : seen) {
      if (s.target != "churn_full" || s.mode != "full" || (s.allocated != 0 && s.allocated != own) ||
          (s.live != 0 && s.live != own)) {
        full_violations.push_back("pid " + std::to_string(pid) + " start " + std::to_string(start) + ": target " +
                                  s.target + " mode " + s.mode + ", heap allocated " + std::to_string(s.allocated) +
                                  " live " + std::to_string(s.live) + ", its own " + std::to_string(own));
      }
      if (s.allocated != 0) ++with_bytes;
    }
  }
  EXPECT_TRUE(full_violations.empty()) << full_violations.size() << " wrong listings, first: "
                                       << full_violations.front();
  EXPECT_TRUE(light_violations.empty()) << light_violations.size() << " wrong light listings, first: "
                                        << light_violations.front();

  // Figures. Wraps: the pid sequence of the light children (the densest)
  // falling back by more than half of pid_max.
  size_t attached = 0, wraps = 0, reused = 0;
  std::vector<long long> child_latency;
  for (const ChildRecord &r : log) {
    if (r.attached) {
      ++attached;
      child_latency.push_back(r.latency_us);
    }
  }
  const std::vector<ChildRecord> light_log_records = read_child_log(light_log);
  for (size_t i = 1; i < light_log_records.size(); ++i)
    if (light_log_records[i].pid + pid_max / 2 < light_log_records[i - 1].pid) ++wraps;
  for (const ChildRecord &r : light_log_records) ++uses[r.pid];
  for (const auto &[pid, n] : uses) reused += n > 1;
  const size_t probes_onto_light = static_cast<size_t>(
      std::count_if(probes.begin(), probes.end(), [](const ProbeRun &r) { return r.onto_light; }));
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double cpu_pct = 100.0 * static_cast<double>(cpu1 - cpu0) / hz / churn_s;
  long long full_spawned = 0, light_spawned = 0, full_skipped = 0, light_skipped = 0;
  sscanf(full_count.c_str(), "spawned %lld skipped %lld", &full_spawned, &full_skipped);
  sscanf(light_count.c_str(), "spawned %lld skipped %lld", &light_spawned, &light_skipped);
  const std::string H = "leakwatch_attach_latency_seconds";
  const double lat_n = metric(metrics1, H + "_count"), lat_sum = metric(metrics1, H + "_sum");
  std::printf("[ metric   ] spawned: full %lld (%.0f/s, %lld skipped), light %lld (%.0f/s, %lld skipped) in %.0f s\n",
              full_spawned, full_spawned / churn_s, full_skipped, light_spawned, light_spawned / churn_s, light_skipped,
              churn_s);
  std::printf("[ metric   ] full children ran %zu, saw their probes %zu (%.1f%%); light children ran %zu; pid wraps "
              "%zu; pids used by more than one child %zu\n",
              log.size(), attached, log.empty() ? 0.0 : 100.0 * attached / log.size(), light_log_records.size(),
              wraps, reused);
  std::printf("[ metric   ] attach latency (daemon, exec event -> attached, %.0f attaches): mean %.2f ms, p50 %s, "
              "p99 %s\n",
              lat_n, lat_n > 0 ? 1000 * lat_sum / lat_n : 0.0, histogram_quantile_bound(metrics1, H, 0.5).c_str(),
              histogram_quantile_bound(metrics1, H, 0.99).c_str());
  std::printf("[ metric   ] attach latency (full children, main() -> int3 at malloc): p50 %.2f ms, p99 %.2f ms\n",
              percentile(child_latency, 0.5) / 1000, percentile(child_latency, 0.99) / 1000);
  std::printf("[ metric   ] daemon CPU %.1f%% of a core over the churn; attached_total %.0f, pid_reuse_detected %.0f, "
              "stale_exits %.0f, attach errors no_such_process %.0f other %.0f, ring buffer drops %.0f\n",
              cpu_pct, metric(metrics1, "leakwatch_attached_processes_total"),
              metric(metrics1, "leakwatch_pid_reuse_detected_total"), metric(metrics1, "leakwatch_stale_exits_total"),
              metric(metrics1, "leakwatch_attach_errors_total{reason=\"no_such_process\"}"),
              metric(metrics1, "leakwatch_attach_errors_total{reason=\"other\"}"),
              metric(metrics1, "leakwatch_events_dropped_total{reason=\"ringbuf_full\"}"));
  std::printf("[ metric   ] API samples %zu (full listings %zu, %zu with bytes; light listings %zu); probes on reused "
              "pids %zu (%zu of them a light child's; listed after",
              samples, full_listings, with_bytes, light_listings, probes.size(), probes_onto_light);
  for (const ProbeRun &r : probes) std::printf(" %.0f", r.listed_after_ms);
  std::printf(" ms; their bytes counted after");
  for (const ProbeRun &r : probes) std::printf(" %.0f", r.counted_after_ms);
  std::printf(" ms), %d launch rounds found no free pid; back to baseline %.1f s after the churn\n", probe_failures,
              settle_s);
  std::printf("[ metric   ] daemon fds %zu before, %zu after; files kept open (symbolizer cache):%s\n",
              fd_targets0.size(), fd_targets1.size(), files_kept.c_str());
  RecordProperty("daemon_cpu_percent", std::to_string(cpu_pct));
  RecordProperty("attach_latency_p99", histogram_quantile_bound(metrics1, H, 0.99));

  // What makes the run meaningful: leaky children were traced (stale state
  // existed to leak), probes landed on their pids, the daemon measured its
  // attaches.
  EXPECT_GT(attached, 0u) << "no churn_child ever saw its probes" << daemon.diagnostics();
  EXPECT_GT(with_bytes, 0u) << "no churn_child was ever listed with its leak";
  EXPECT_EQ(static_cast<int>(probes.size()), probes_wanted) << "probes started on reused pids";
  EXPECT_GT(lat_n, 0);
}

}  // namespace
}  // namespace lw::itest
