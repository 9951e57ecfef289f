// SPDX-License-Identifier: Apache-2.0
// `leakwatch snapshot`: a pprof profile of a running process, read back by
// the real pprof tool (Debian golang-go).
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
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


// The flat bytes of the line naming `function` in `go tool pprof -top`'s
// output, or -1.
long long flat_bytes(const std::string& top, const std::string& function) {
  size_t at = top.find(function);
  if (at == std::string::npos) return -1;
  size_t line = top.rfind('\n', at);
  line = line == std::string::npos ? 0 : line + 1;
  return std::atoll(top.c_str() + top.find_first_not_of(' ', line));
}

// --count: profiles from one attach, each cumulative, so the later one holds
// the earlier one's leak plus what leaked between (issue 35: two separate
// snapshots each covered only their own window, and their diff was
// meaningless).
TEST(LeakwatchSnapshot, ASeriesFromOneAttachIsCumulative) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  if (access("/usr/bin/go", X_OK) != 0)
    GTEST_SKIP() << "go not installed: run scripts/install-deps.sh --with-test-tools";
  char dir[] = "/tmp/lw_snapshot_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  Process target({target_path("steady_leaker")});
  auto ready = target.read_line(std::chrono::seconds(10));
  ASSERT_TRUE(ready && ready->rfind("ready ", 0) == 0);
  Process snap({LW_LEAKWATCH_BIN, "snapshot", "-p", std::to_string(target.pid()), "--duration", "2",
                "--count", "2", "-o", std::string(dir) + "/heap-%n.pb.gz"});
  for (int i = 0; i < 200 && snap.stderr_text().find("attached to") == std::string::npos; ++i)
    usleep(50 * 1000);
  target.write_line("go");
  auto status = snap.wait_exit(std::chrono::seconds(30));
  ASSERT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << snap.stderr_text();
  target.write_line("exit");
  std::string env = std::string("HOME=") + dir + " GOCACHE=" + dir + "/gocache PPROF_TMPDIR=" + dir;
  auto top = [&](const std::string& file) {
    return run_capture(env + " go tool pprof -top -nodefraction=0 -unit=B -sample_index=inuse_space " + dir +
                       "/" + file + " 2>&1");
  };
  const std::string first = top("heap-1.pb.gz");
  const std::string second = top("heap-2.pb.gz");
  const long long a = flat_bytes(first, "leak_steadily");
  const long long b = flat_bytes(second, "leak_steadily");
  EXPECT_GE(a, 32768) << first;  // one 32 KiB block every 1.875 s after "go"
  EXPECT_GE(b - a, 32768) << first << "\n" << second;
  run_capture(std::string("rm -rf ") + dir);
}

}  // namespace
}  // namespace lw::itest
