// SPDX-License-Identifier: Apache-2.0
// Many processes in mode light (issue 17): LW_MANY_PROCESSES (default 200)
// idle tests/targets/mp_idle copies are started (100 a second) under one
// real `leakwatch run`, then for LW_MANY_CHURN_SECONDS (default 5) short
// lived copies (`mp_idle live 300`) are started LW_MANY_CHURN_RATE (default
// 50) a second. Past 16 processes on the host's libc the wrapper probes
// share one link (decision shared-wrapper-links); a later process's kept mmap
// is seen through it, once. Checks: every idle process is listed under its own
// pid and comm, nothing failed to attach but children gone before their turn,
// and the p99 of the daemon's exec->attached histogram (bucket bound) is at
// most LW_MANY_P99_MS (default 500). The figure is 100 ms
// (`LW_MANY_P99_MS=100`): 7-34 ms measured on the reference VM
// (bench/README.md, "Facts measured on these machines"), but 0.05-0.5 s on a VM
// whose traps and system calls cost 8x that (pti=on, 2026-11-28;
// bench/README.md), so CI, which may run on such a VM, checks 500 ms: an attach
// path gone to seconds still fails. The long run (1,000 processes, 100 a
// second) is in bench/README.md.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
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

long env_or(const char *name, long fallback) {
  const char *v = std::getenv(name);
  return v && *v ? std::strtol(v, nullptr, 10) : fallback;
}

// The value of the sample line `name` (with its labels) in /metrics text.
double metric_value(const std::string &text, const std::string &name) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, name.size() + 1, name + " ") == 0) return std::stod(line.substr(name.size() + 1));
  return 0;
}

// The upper bound (seconds) of the histogram bucket holding quantile q.
double quantile_bound(const std::string &text, const std::string &name, double q) {
  const double count = metric_value(text, name + "_count");
  if (!(count > 0)) return 0;
  std::istringstream in(text);
  const std::string prefix = name + "_bucket{le=\"";
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string le = line.substr(prefix.size(), line.find('"', prefix.size()) - prefix.size());
    const double n = std::stod(line.substr(line.rfind(' ') + 1));
    if (n >= q * count) return le == "+Inf" ? 1e9 : std::stod(le);
  }
  return 1e9;
}

// The p99 figure is measured twice when the first is over (one slow spell
// of a shared VM is not a regression); both must be over to fail, and every
// other check holds in each attempt.
void attach_under_churn(bool last, bool &p99_over) {
  const long n = env_or("LW_MANY_PROCESSES", 200);
  const long churn_s = env_or("LW_MANY_CHURN_SECONDS", 5);
  const long churn_rate = env_or("LW_MANY_CHURN_RATE", 50);
  const double p99_limit = static_cast<double>(env_or("LW_MANY_P99_MS", 500)) / 1000;
  const std::string bin = target_path("mp_idle");
  DaemonProcess daemon({"targets:\n"
                        "  - name: many\n"
                        "    match: {comm: \"^mp_idle$\"}\n"
                        "    mode: light\n"
                        "limits:\n"
                        "  max_processes: " + std::to_string(n + 4 * churn_rate + 16) + "\n"});
  daemon.wait_notify("READY=1", 30s);

  // One of the first 16: its own link, and the shared one made later must
  // not count its calls again.
  Process early_keeper({bin, "keep", "256"});
  std::vector<std::unique_ptr<Process>> idle;
  auto next = steady_clock::now();
  for (long i = 0; i < n; ++i) {
    idle.push_back(std::make_unique<Process>(std::vector<std::string>{bin}));
    next += 10ms;
    std::this_thread::sleep_until(next);
  }
  ASSERT_TRUE(wait_until(60s, [&] {
    return metric_value(daemon.get("/metrics").body, "leakwatch_tracked_processes") >= static_cast<double>(n);
  }, 200ms)) << "not every idle process attached\n" << daemon.diagnostics();

  // Past 16 processes the wrappers are probed through the shared link: its
  // mmap is still seen, and only once (decision shared-wrapper-links).
  Process keeper({bin, "keep", "256"});
  for (Process *k : {&early_keeper, &keeper}) {
    double kept = 0;
    EXPECT_TRUE(wait_until(15s, [&] {
      std::optional<Json> p = daemon.find_process(k->pid());
      kept = p ? p->at("live_bytes").get<double>() : 0;
      return kept >= 262144;
    }, 200ms)) << "pid " << k->pid() << ": the 256 KiB mmap not seen: live_bytes " << kept;
    EXPECT_LT(kept, 2 * 262144) << "pid " << k->pid() << ": its mmap counted twice?";
  }

  std::vector<std::unique_ptr<Process>> churn;
  const auto churn0 = steady_clock::now();
  next = churn0;
  while (steady_clock::now() - churn0 < std::chrono::seconds(churn_s)) {
    churn.push_back(std::make_unique<Process>(std::vector<std::string>{bin, "live", "300"}));
    next += std::chrono::microseconds(1000000 / churn_rate);
    std::this_thread::sleep_until(next);
  }
  for (auto &c : churn) (void)c->wait_exit(5s);
  const std::string metrics = daemon.get("/metrics").body;

  // Every idle process under its own identity.
  std::set<pid_t> listed;
  const Json all = daemon.get_json("/api/v1/processes");
  for (const Json &p : all.at("processes"))
    if (p.at("comm").get<std::string>() == "mp_idle") listed.insert(p.at("pid").get<pid_t>());
  size_t missing = 0;
  for (const auto &p : idle) missing += !listed.count(p->pid());
  EXPECT_EQ(missing, 0u) << "idle processes not listed under their own pid and comm (" << listed.size()
                         << " mp_idle entries listed; first idle pid " << idle.front()->pid() << ", first listed "
                         << (listed.empty() ? 0 : *listed.begin()) << ")";

  const std::string H = "leakwatch_attach_latency_seconds";
  const double p99 = quantile_bound(metrics, H, 0.99), p50 = quantile_bound(metrics, H, 0.5);
  const double count = metric_value(metrics, H + "_count");
  double errors = 0;
  for (const char *reason : {"permission_denied", "no_allocator_found", "file_changed", "kernel_map_full",
                             "invalid", "other"})
    errors += metric_value(metrics, "leakwatch_attach_errors_total{reason=\"" + std::string(reason) + "\"}");
  std::printf("[ metric   ] %ld idle + %zu churned (%ld/s for %ld s): %.0f attaches measured, p50 <= %.4g s, "
              "p99 <= %.4g s; attach errors %.0f (no_such_process %.0f)\n",
              n, churn.size(), churn_rate, churn_s, count, p50, p99, errors,
              metric_value(metrics, "leakwatch_attach_errors_total{reason=\"no_such_process\"}"));
  ::testing::Test::RecordProperty("attach_latency_p99", std::to_string(p99));
  EXPECT_GT(count, static_cast<double>(n) / 2);
  EXPECT_EQ(errors, 0) << daemon.diagnostics();
  if (!last && p99 > p99_limit)
    p99_over = true;
  else
    EXPECT_LE(p99, p99_limit) << "exec->attached p99 bucket bound over the limit";
}

TEST(LeakwatchManyProcesses, LightProcessesAttachFastUnderChurn) {
  measure_again_if_over(attach_under_churn);
}

}  // namespace
}  // namespace lw::itest
