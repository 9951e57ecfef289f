// SPDX-License-Identifier: Apache-2.0
// The stack map's collection in the daemon (decision stack-map-gc (stack
// GC)): limits.stack_gc_grace_seconds reaches the engine, and what the
// passes did is exported. stack_churn's rounds of 48 new stacks each
// against a 64-entry map: stacks are collected and none goes unstored.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "daemon_harness.h"

namespace lw::itest {
namespace {

using namespace std::chrono_literals;

void command(Process &target, const std::string &line) {
  target.write_line(line);
  auto reply = target.read_line(10s);
  ASSERT_TRUE(reply && *reply == "ok") << line << ": " << reply.value_or("EOF") << target.stderr_text();
}

TEST(LeakwatchDaemonStackGc, CollectsAndExports) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  TempDir bin;
  const std::string churn_bin = private_target_copy(bin.path(), "stack_churn");
  DaemonProcess daemon({.config_body = "limits:\n  stack_map_entries: 64\n  stack_gc_grace_seconds: 1\n  fair_share_percent: 100\n"
                                       "targets:\n  - name: churn\n    match: " +
                                       comm_selector(file_name_of(churn_bin)) + "\n    mode: full\n"});
  daemon.wait_notify("READY=1", kReadyTimeout);
  Process churn({churn_bin});
  ASSERT_EQ(read_ready(churn), churn.pid());
  daemon.wait_for_process(churn.pid(), kApiTimeout);
  daemon.wait_for_status([](const Json &s) { return !attached_probes(s).empty(); }, kApiTimeout, "probes attached");
  command(churn, "go");
  double collected = 0;
  for (unsigned round = 0; round < 3; ++round) {
    command(churn, "round " + std::to_string(round) + " 48");
    const double before = collected;
    // A pass every 250 ms; the round's stacks go 1 s after their last use.
    ASSERT_TRUE(wait_until(10s, [&] {
      collected = metric(daemon.get("/metrics").body, "leakwatch_stack_map_collected_total");
      return collected > before;
    })) << "round " << round << ": collected " << collected;
  }
  const std::string metrics = daemon.get("/metrics").body;
  EXPECT_EQ(metric(metrics, "leakwatch_bpf_failures_total{reason=\"stack_map_full\"}"), 0) << daemon.diagnostics();
  const double stored = metric(metrics, "leakwatch_kernel_map_entries{map=\"stacks\"}");
  EXPECT_GE(stored, 1);  // keep_block's, live all along
  EXPECT_LE(stored, 64);
  EXPECT_EQ(metric(metrics, "leakwatch_kernel_map_capacity{map=\"stacks\"}"), 64);
  EXPECT_TRUE(std::isfinite(metric(metrics, "leakwatch_stack_map_restored_total")));
  std::printf("[ measure  ] daemon, 3 rounds of 48 stacks, 64-entry map: collected %.0f, stored %.0f\n",
              metric(metrics, "leakwatch_stack_map_collected_total"), stored);
  churn.write_line("exit");
}

}  // namespace
}  // namespace lw::itest
