// SPDX-License-Identifier: Apache-2.0
// Nothing lost silently, per process (decision unrecorded-per-kind):
// the daemon with a 64-entry live map under holder's 1,000 blocks reports
// the process's unrecorded allocations, bytes and coverage in the API (the
// processes list and the sites view) and the metrics.
#include <unistd.h>

#include <chrono>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "daemon_harness.h"

namespace lw::itest {
namespace {

using namespace std::chrono_literals;

TEST(LeakwatchDaemonUnrecorded, LiveMapFullShowsInApiAndMetrics) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  TempDir bin;
  const std::string holder_bin = private_target_copy(bin.path(), "holder");
  DaemonProcess daemon({.config_body = "limits:\n  live_map_entries: 64\n  fair_share_percent: 100\nsampling:\n  automatic: false\ntargets:\n  - name: holders\n    match: " +
                                       comm_selector(file_name_of(holder_bin)) + "\n    mode: full\n"});
  daemon.wait_notify("READY=1", kReadyTimeout);
  Process holder({holder_bin, "1000"});
  ASSERT_EQ(read_ready(holder), holder.pid());
  daemon.wait_for_process(holder.pid(), kApiTimeout);
  daemon.wait_for_status([](const Json &s) { return !attached_probes(s).empty(); }, kApiTimeout, "probes attached");
  const Json truth = go_and_read_truth(holder);
  const int64_t truth_bytes = truth.at("total_live").get<int64_t>();

  const Json sites = daemon.sites_at_or_after(holder.pid(), unix_now(), kApiTimeout);
  const Json &u = sites.at("unrecorded");
  EXPECT_GE(u.at("allocations").at("map_full").get<int64_t>(), 1000 - 64) << u.dump();
  EXPECT_GT(u.at("bytes").at("map_full").get<int64_t>(), 0) << u.dump();
  EXPECT_LT(u.at("coverage").get<double>(), 1.0) << u.dump();
  EXPECT_TRUE(u.at("verdicts_incomplete").get<bool>()) << u.dump();
  EXPECT_TRUE(u.at("kinds").at("heap").at("verdicts_incomplete").get<bool>()) << u.dump();
  EXPECT_LE(sites.at("live_bytes").get<int64_t>(), truth_bytes) << u.dump();  // no phantom bytes

  const std::optional<Json> entry = daemon.find_process(holder.pid());
  ASSERT_TRUE(entry);
  EXPECT_GE(entry->at("unrecorded").at("allocations").at("map_full").get<int64_t>(), 1000 - 64) << entry->dump();
  EXPECT_LT(entry->at("unrecorded").at("coverage").get<double>(), 1.0) << entry->dump();

  const std::string metrics = daemon.get("/metrics").body;
  std::smatch m;
  const std::string pid = std::to_string(holder.pid());
  ASSERT_TRUE(std::regex_search(metrics, m,
                                std::regex("leakwatch_process_unrecorded_allocations_total\\{[^}]*pid=\"" + pid +
                                           "\"[^}]*kind=\"heap\",reason=\"map_full\"\\} ([0-9.e+]+)")))
      << metrics.substr(0, 4000);
  EXPECT_GE(std::stod(m[1].str()), 1000 - 64);
  ASSERT_TRUE(std::regex_search(metrics, m,
                                std::regex("leakwatch_process_recorded_coverage_ratio\\{[^}]*pid=\"" + pid +
                                           "\"[^}]*\\} ([0-9.e+-]+)")))
      << metrics.substr(0, 4000);
  EXPECT_LT(std::stod(m[1].str()), 1.0);
  holder.write_line("exit");
}

}  // namespace
}  // namespace lw::itest
