// SPDX-License-Identifier: Apache-2.0
// `go tool pprof http://HOST:PORT/debug/pprof/heap` against the daemon, as
// the issue ran it: without `pid` (it got 400), every traced process comes
// in one profile, told apart by labels.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <optional>

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

// Issue 35: on a Python process some interpreter frames have no name, and
// pprof POSTed them to /debug/pprof/symbol, got 413 and gave no profile at
// all. The documented URL, no `pid`, a copy of Debian's python3.11 under a
// name of its own (so no other Python on the host is traced).
TEST(LeakwatchPprof, GoToolPprofReadsAPythonProcessWithoutPid) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  if (access("/usr/bin/go", X_OK) != 0)
    GTEST_SKIP() << "go not installed: run scripts/install-deps.sh --with-test-tools";
  if (access("/usr/bin/python3.11", X_OK) != 0)
    GTEST_SKIP() << "/usr/bin/python3.11 missing: scripts/install-deps.sh --with-test-tools";
  TempDir bin;
  const std::string pid_text = std::to_string(getpid());
  const std::string python = bin.path() + "/lwpy-" + pid_text;
  std::filesystem::copy_file("/usr/bin/python3.11", python);
  DaemonProcess daemon({.config_body = "targets:\n  - name: python\n    match: " +
                                       comm_selector(file_name_of(python)) + "\n    mode: full\n"});
  daemon.wait_notify("READY=1", kReadyTimeout);
  Process target({python, std::string(LW_SOURCE_DIR) + "/tests/targets/python/py_leaker.py", "two_deep"});
  const std::optional<std::string> ready = target.read_line(std::chrono::milliseconds(60000));
  ASSERT_EQ(ready.value_or("<EOF>"), "ready " + std::to_string(target.pid())) << target.stderr_text();
  daemon.wait_for_process(target.pid(), kApiTimeout);
  target.write_line("go");
  std::optional<std::string> done;
  do {
    done = target.read_line(std::chrono::milliseconds(60000));
    ASSERT_TRUE(done.has_value()) << target.stderr_text();
  } while (done->rfind("done ", 0) != 0);
  daemon.sites_at_or_after(target.pid(), unix_now() + 0.5, kApiTimeout);

  const std::string env = "HOME=" + bin.path() + " GOCACHE=" + bin.path() + "/gocache PPROF_TMPDIR=" + bin.path();
  const std::string url = "http://127.0.0.1:" + std::to_string(daemon.port()) + "/debug/pprof/heap";
  const std::string raw = run_capture(env + " go tool pprof -raw " + url + " 2>&1");
  EXPECT_EQ(raw.find("/debug/pprof/symbol"), std::string::npos) << raw;
  EXPECT_NE(raw.find("inuse_objects/count inuse_space/bytes[dflt]"), std::string::npos) << raw;
  EXPECT_NE(raw.find("pid:[" + std::to_string(target.pid()) + "]"), std::string::npos) << raw;
  // The Python function that keeps the bytes, by name, and the mapping of
  // the interpreter, marked as symbolized.
  const std::string top = run_capture(env + " go tool pprof -top -nodefraction=0 -sample_index=inuse_space " +
                                      url + " 2>&1");
  EXPECT_NE(top.find("remember"), std::string::npos) << top;
  EXPECT_NE(raw.find(python), std::string::npos) << raw;
  target.write_line("exit");
}

}  // namespace
}  // namespace lw::itest
