// SPDX-License-Identifier: Apache-2.0
// The systemd notify protocol as deploy/systemd/leakwatch.service relies on
// it (Type=notify, WatchdogSec, ExecReload=SIGHUP), seen from the socket
// systemd would own: READY=1 once /metrics answers; WATCHDOG=1 from the
// consumer loop at WATCHDOG_USEC/2, never a gap systemd would kill for;
// RELOADING=1 (with MONOTONIC_USEC) ... READY=1 around every reload, a
// rejected file included; STOPPING=1 on SIGTERM.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "daemon_harness.h"

namespace lw::itest {
namespace {

using std::chrono::steady_clock;
using namespace std::chrono_literals;

// systemd restarts a service that sends no WATCHDOG=1 for this long.
constexpr milliseconds kWatchdog{1000};

// The assignments of one datagram ("A=1\nB=2").
std::vector<std::string> assignments(const std::string &message) {
  std::vector<std::string> out;
  std::istringstream lines(message);
  for (std::string line; std::getline(lines, line);) out.push_back(line);
  return out;
}

bool has(const std::string &message, const std::string &assignment) {
  for (const std::string &a : assignments(message))
    if (a == assignment) return true;
  return false;
}

std::string dump(const std::vector<DaemonProcess::Notification> &all) {
  std::string out;
  for (const auto &n : all) {
    std::string m = n.message;
    for (char &c : m)
      if (c == '\n') c = '|';
    out += "\n  " + m;
  }
  return out;
}

class LeakwatchSystemdNotify : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "not root";
  }
};

TEST_F(LeakwatchSystemdNotify, ReadyWatchdogReloadingStopping) {
  DaemonProcess daemon({.config_body = "targets: []\n",
                        .args = {"--log-level", "info"},
                        .env = {"WATCHDOG_USEC=" + std::to_string(kWatchdog.count() * 1000)}});
  daemon.wait_notify("READY=1", kReadyTimeout);
  EXPECT_EQ(daemon.get("/healthz").status, 200) << "READY=1 promises the API is up" << daemon.diagnostics();

  // Watchdog: 4 s of pings. Each gap (READY=1 to the first ping included)
  // must stay under WATCHDOG_USEC; the daemon aims at half of it.
  std::this_thread::sleep_for(4s);
  {
    const auto all = daemon.notifications();
    std::optional<steady_clock::time_point> last;
    int pings = 0;
    milliseconds max_gap{0};
    for (const auto &n : all) {
      if (has(n.message, "READY=1")) last = n.received;
      if (!has(n.message, "WATCHDOG=1")) continue;
      ++pings;
      if (last) max_gap = std::max(max_gap, std::chrono::duration_cast<milliseconds>(n.received - *last));
      last = n.received;
    }
    std::printf("[ metric   ] WATCHDOG_USEC %lld ms: %d pings in ~4 s, largest gap %lld ms\n",
                static_cast<long long>(kWatchdog.count()), pings, static_cast<long long>(max_gap.count()));
    EXPECT_GE(pings, 4) << dump(all);
    EXPECT_LT(max_gap, kWatchdog) << dump(all);
  }

  // SIGHUP (ExecReload): RELOADING=1 with MONOTONIC_USEC, then READY=1.
  size_t before = daemon.notifications().size();
  ASSERT_EQ(kill(daemon.pid(), SIGHUP), 0);
  auto reload_cycle = [&](const std::string &status_line) {
    ASSERT_TRUE(wait_until(5000ms, [&] {
      const auto all = daemon.notifications();
      for (size_t i = before; i < all.size(); ++i)
        if (has(all[i].message, "READY=1")) return true;
      return false;
    })) << "no READY=1 after the reload" << dump(daemon.notifications()) << daemon.diagnostics();
    const auto all = daemon.notifications();
    std::optional<size_t> reloading, ready;
    for (size_t i = before; i < all.size(); ++i) {
      if (!reloading && has(all[i].message, "RELOADING=1")) reloading = i;
      if (!ready && has(all[i].message, "READY=1")) ready = i;
    }
    ASSERT_TRUE(reloading.has_value()) << dump(all);
    ASSERT_TRUE(ready.has_value()) << dump(all);
    EXPECT_LT(*reloading, *ready) << "RELOADING=1 must come before READY=1" << dump(all);
    bool monotonic = false;
    for (const std::string &a : assignments(all[*reloading].message))
      if (a.rfind("MONOTONIC_USEC=", 0) == 0 && a.size() > 15) monotonic = true;
    EXPECT_TRUE(monotonic) << dump(all);
    EXPECT_TRUE(has(all[*ready].message, status_line)) << dump(all);
    before = all.size();
  };
  reload_cycle("STATUS=configuration reloaded");

  // A broken file (saved: the daemon reloads on the change): still a
  // complete reload cycle, the old configuration kept.
  daemon.write_raw_config("listen: \"127.0.0.1:" + std::to_string(daemon.port()) + "\"\ntargets: [\n");
  reload_cycle("STATUS=configuration reload failed: previous configuration kept");
  EXPECT_EQ(daemon.get("/healthz").status, 200) << daemon.diagnostics();

  // SIGTERM: STOPPING=1, then a clean exit.
  const auto status = daemon.signal_and_wait(SIGTERM, 5s);
  ASSERT_TRUE(status.has_value()) << daemon.diagnostics();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << daemon.diagnostics();
  const auto all = daemon.notifications();
  ASSERT_FALSE(all.empty());
  bool stopping = false;
  for (size_t i = before; i < all.size(); ++i) stopping = stopping || has(all[i].message, "STOPPING=1");
  EXPECT_TRUE(stopping) << dump(all);
}

}  // namespace
}  // namespace lw::itest
