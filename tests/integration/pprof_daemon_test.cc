// SPDX-License-Identifier: Apache-2.0
// `go tool pprof http://HOST:PORT/debug/pprof/heap` against the daemon, as
// the issue ran it: without `pid` (it got 400), every traced process comes
// in one profile, told apart by labels.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>

#include "daemon_harness.h"

namespace lw::itest {
namespace {

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  while (p && fgets(buf, sizeof(buf), p)) out += buf;
  if (p) pclose(p);
  return out;
}

TEST(LeakwatchPprof, GoToolPprofReadsEveryProcessWithoutPid) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  if (access("/usr/bin/go", X_OK) != 0)
    GTEST_SKIP() << "go not installed: run scripts/install-deps.sh --with-test-tools";
  TempDir bin;
  const std::string leaker_bin = private_target_copy(bin.path(), "leaker");
  const std::string comm = file_name_of(leaker_bin);
  DaemonProcess daemon({.config_body = "targets:\n  - name: leakers\n    match: " + comm_selector(comm) +
                                       "\n    mode: full\n"});
  daemon.wait_notify("READY=1", kReadyTimeout);
  Process leaker({leaker_bin});
  daemon.wait_for_process(leaker.pid(), kApiTimeout);
  ASSERT_EQ(read_ready(leaker), leaker.pid());
  go_and_read_truth(leaker);
  daemon.sites_at_or_after(leaker.pid(), unix_now() + 0.5, kApiTimeout);

  const std::string env = "HOME=" + bin.path() + " GOCACHE=" + bin.path() + "/gocache PPROF_TMPDIR=" + bin.path();
  const std::string url = "http://127.0.0.1:" + std::to_string(daemon.port()) + "/debug/pprof/heap";
  std::string raw = run_capture(env + " go tool pprof -raw " + url + " 2>&1");
  EXPECT_NE(raw.find("inuse_objects/count inuse_space/bytes[dflt] alloc_objects/count alloc_space/bytes"),
            std::string::npos)
      << raw;
  EXPECT_NE(raw.find("leak_malloc"), std::string::npos) << raw << "\n" << daemon.get("/api/v1/processes/" + std::to_string(leaker.pid()) + "/sites").body.substr(0, 3000);
  EXPECT_NE(raw.find("comm:[" + comm + "]"), std::string::npos) << raw;
  EXPECT_NE(raw.find("pid:[" + std::to_string(leaker.pid()) + "]"), std::string::npos) << raw;
  // One process picked out by its label, as the docs say.
  std::string top = run_capture(env + " go tool pprof -top -nodefraction=0 -sample_index=inuse_space -tagfocus pid=" +
                                std::to_string(leaker.pid()) + " " + url + " 2>&1");
  EXPECT_NE(top.find("leak_malloc"), std::string::npos) << top;
  // seconds is refused, not ignored.
  std::string delta = run_capture(env + " go tool pprof -raw -seconds 1 " + url + " 2>&1");
  EXPECT_NE(delta.find("400"), std::string::npos) << delta;
  leaker.write_line("exit");
}

}  // namespace
}  // namespace lw::itest
