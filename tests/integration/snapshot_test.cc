// SPDX-License-Identifier: Apache-2.0
// `leakwatch snapshot`: a pprof profile of a running process, read back by
// the real pprof tool (Debian golang-go).
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "harness.h"

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

TEST(LeakwatchSnapshot, WritesAProfileThatGoToolPprofReads) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  if (access("/usr/bin/go", X_OK) != 0)
    GTEST_SKIP() << "go not installed: run scripts/install-deps.sh --with-test-tools";
  char dir[] = "/tmp/lw_snapshot_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string out = std::string(dir) + "/heap.pb.gz";

  Process target({target_path("leaker")});
  auto ready = target.read_line(std::chrono::seconds(10));
  ASSERT_TRUE(ready && ready->rfind("ready ", 0) == 0);
  Process snap({LW_LEAKWATCH_BIN, "snapshot", "-p", std::to_string(target.pid()), "--duration",
                "3", "-o", out});
  // The profile covers what is allocated after attach: wait for it.
  for (int i = 0; i < 200 && snap.stderr_text().find("attached to") == std::string::npos; ++i)
    usleep(50 * 1000);
  ASSERT_NE(snap.stderr_text().find("leakwatch snapshot: attached to " + std::to_string(target.pid())),
            std::string::npos)
      << snap.stderr_text();
  target.write_line("go");
  auto done = target.read_line(std::chrono::seconds(10));
  ASSERT_TRUE(done && done->rfind("done ", 0) == 0);
  auto status = snap.wait_exit(std::chrono::seconds(20));
  ASSERT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << snap.stderr_text();
  target.write_line("exit");

  std::string env = std::string("HOME=") + dir + " GOCACHE=" + dir + "/gocache PPROF_TMPDIR=" + dir;
  std::string top = run_capture(env + " go tool pprof -top -nodefraction=0 -unit=B -sample_index=inuse_space " +
                                out + " 2>&1");
  // The profile's total is the target's own ground truth, to the byte, and
  // each leaking site shows with its bytes (leak_malloc: 3 x 1000 B).
  Json truth = Json::parse(done->substr(5));
  EXPECT_NE(top.find("Type: inuse_space"), std::string::npos) << top;
  EXPECT_NE(top.find("Total samples = " + std::to_string(truth.at("total_live").get<uint64_t>()) + "B"),
            std::string::npos)
      << truth.dump() << "\n" << top;
  EXPECT_NE(top.find("3000B"), std::string::npos) << top;
  EXPECT_NE(top.find("leak_malloc"), std::string::npos) << top;
  std::string raw = run_capture(env + " go tool pprof -raw " + out + " 2>&1");
  EXPECT_NE(raw.find("inuse_objects/count inuse_space/bytes[dflt] alloc_objects/count alloc_space/bytes"),
            std::string::npos)
      << raw;
  EXPECT_NE(raw.find("kind:[heap]"), std::string::npos) << raw;
  run_capture(std::string("rm -rf ") + dir);
}

}  // namespace
}  // namespace lw::itest
