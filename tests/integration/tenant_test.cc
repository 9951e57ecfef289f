// SPDX-License-Identifier: Apache-2.0
// Hostile tenants (issue 32): what one local user does to the daemon must
// not cost another user's processes their tracing. Each attack runs as an
// unprivileged user.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "tests/integration/daemon_harness.h"
#include "tests/integration/harness.h"

namespace lw::itest {
namespace {

using namespace std::chrono_literals;
using std::chrono::steady_clock;

// A fork loop as nobody (limits.max_discoveries_per_second: 20 per user):
// most of its children are deferred, and die before they are looked at;
// another unprivileged user's process, started in the middle of it, is
// attached as if nothing were going on. Fails without the budget: every
// child is looked at (nothing deferred) and the daemon attaches hundreds.
TEST(HostileTenant, AForkLoopIsBudgetedAndAnotherUsersProcessIsStillAttached) {
  TempDir bin;
  ASSERT_EQ(chmod(bin.path().c_str(), 0755), 0);
  const std::string loop = private_target_copy(bin.path(), "fork_storm");
  const std::string idle = private_target_copy(bin.path(), "mp_idle");
  DaemonProcess daemon({.config_body = "targets:\n"
                                       "  - name: tenant\n"
                                       "    match: " + comm_selector(file_name_of(loop)) + "\n"
                                       "    mode: light\n"
                                       "  - name: bystander\n"
                                       "    match: " + comm_selector(file_name_of(idle)) + "\n"
                                       "    mode: light\n"
                                       "limits:\n"
                                       "  max_discoveries_per_second: 20\n",
                        .args = {}});
  daemon.wait_notify("READY=1", kReadyTimeout);
  const unsigned long long cpu0 = cpu_ticks(daemon.pid());
  const double storm_s = 6;
  Process storm({loop, "6"}, {.as_nobody = true});
  std::this_thread::sleep_for(2s);

  const auto t0 = steady_clock::now();
  Process bystander({idle}, {.as_uid = 65533});
  const bool attached = wait_until(5s, [&] { return daemon.find_process(bystander.pid()).has_value(); }, 20ms);
  const double attach_s = std::chrono::duration<double>(steady_clock::now() - t0).count();

  std::optional<std::string> line = storm.read_line(30s);
  ASSERT_TRUE(line.has_value()) << storm.stderr_text();
  const unsigned long long cpu1 = cpu_ticks(daemon.pid());
  const Json status = daemon.get_json("/api/v1/status");
  const uint64_t deferred = status.at("discoveries").at("deferred").get<uint64_t>();
  const uint64_t dropped = status.at("discoveries").at("dropped").get<uint64_t>();
  const uint64_t attached_total = status.at("attached_total").get<uint64_t>();
  std::printf("[ figures  ] %s in %.0f s as nobody: %llu events deferred, %llu dropped, %llu processes "
              "attached; daemon CPU %.1f%% of a core; another user's process attached in %.2f s\n",
              line->c_str(), storm_s, static_cast<unsigned long long>(deferred),
              static_cast<unsigned long long>(dropped), static_cast<unsigned long long>(attached_total),
              100.0 * static_cast<double>(cpu1 - cpu0) / static_cast<double>(sysconf(_SC_CLK_TCK)) / storm_s,
              attach_s);
  EXPECT_TRUE(attached) << "the bystander (uid 65533) was not attached within 5 s\n" << daemon.diagnostics();
  EXPECT_GT(deferred, 100u) << "the fork loop's events were not budgeted";
  // At most the budget's worth of the loop's processes were looked at: 40
  // at once, then 20 a second (the bystander and the loop itself besides).
  EXPECT_LE(attached_total, 40u + 20u * 8u + 2u);
}

}  // namespace
}  // namespace lw::itest
