// SPDX-License-Identifier: Apache-2.0
// The built binary's CLI against the security and first-contact issues:
// `check-config` checks the web config `run` would load, and the files
// `snapshot -o` and `top --record-events` write are never reached through
// a symlink, never another user's file, and a failed write is an error exit.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "daemon_harness.h"
#include "http_client.h"

namespace lw::itest {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class LeakwatchCliFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "not root";
  }
};

int exit_code(const std::optional<int>& status) {
  return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The issue: check-config said "valid" for a config whose web config was
// invalid, and `run` then exited 1: a unit's ExecStartPre passed and its
// ExecStart failed.
TEST_F(LeakwatchCliFiles, CheckConfigChecksTheWebConfig) {
  TempDir dir;
  const std::string web = dir.path() + "/web.yml";
  const std::string config = dir.path() + "/leakwatch.yaml";
  std::ofstream(web) << "basic_auth_users:\n  alice: plaintext-password\n";
  std::ofstream(config) << "listen: \"127.0.0.1:" << free_loopback_port() << "\"\nweb_config_file: " << web << "\n";
  Process check({LW_LEAKWATCH_BIN, "check-config", config});
  EXPECT_EQ(exit_code(check.wait_exit(10s)), 1) << check.stderr_text();
  EXPECT_NE(check.stderr_text().find(web + ":2:10: the password of user 'alice' must be a bcrypt hash"),
            std::string::npos)
      << check.stderr_text();
  EXPECT_EQ(check.stderr_text().find("plaintext-password"), std::string::npos) << "a password in the output";
  // And run agrees.
  Process run({LW_LEAKWATCH_BIN, "run", "--config", config});
  EXPECT_EQ(exit_code(run.wait_exit(20s)), 1) << run.stderr_text();

  // The flag, as `run` takes it, overrides the config's key.
  const std::string good = dir.path() + "/good.yml";
  std::ofstream(good) << "basic_auth_users:\n  alice: " << bcrypt_hash("pw") << "\n";
  Process flagged({LW_LEAKWATCH_BIN, "check-config", config, "--web.config.file", good});
  EXPECT_EQ(exit_code(flagged.wait_exit(10s)), 0) << flagged.stderr_text();
  Process missing({LW_LEAKWATCH_BIN, "check-config", config, "--web.config.file=" + dir.path() + "/nope.yml"});
  EXPECT_EQ(exit_code(missing.wait_exit(10s)), 1);
  EXPECT_NE(missing.stderr_text().find("nope.yml"), std::string::npos) << missing.stderr_text();
}

// A target to profile, and the leakwatch command writing somewhere.
struct Profiled {
  Process target{{target_path("leaker")}};
  Profiled() { read_ready(target); }
  ~Profiled() { target.write_line("exit"); }
};

TEST_F(LeakwatchCliFiles, SnapshotThroughASymlinkedParentDirectoryIsRefused) {
  // Another user's symlink in place of a directory, pointing into a
  // root-only directory: root's snapshot must not overwrite the file there.
  TempDir dir;
  fs::create_directory(dir.path() + "/private");
  chmod((dir.path() + "/private").c_str(), 0700);
  std::ofstream(dir.path() + "/private/precious") << "root's file";
  fs::create_directory_symlink(dir.path() + "/private", dir.path() + "/shared");
  lchown((dir.path() + "/shared").c_str(), 65534, 65534);
  Profiled p;
  Process snap({LW_LEAKWATCH_BIN, "snapshot", "-p", std::to_string(p.target.pid()), "--duration", "0", "-o",
                dir.path() + "/shared/precious"});
  EXPECT_EQ(exit_code(snap.wait_exit(30s)), 1) << snap.stderr_text();
  EXPECT_NE(snap.stderr_text().find("symlink"), std::string::npos) << snap.stderr_text();
  EXPECT_EQ(slurp(dir.path() + "/private/precious"), "root's file");
}

TEST_F(LeakwatchCliFiles, PreCreatedOutputFilesAreNotReused) {
  // A world-writable sticky directory, as /tmp is.
  TempDir dir;
  chmod(dir.path().c_str(), 01777);
  Profiled p;
  // Another user's 0666 file: refused, untouched.
  const std::string theirs = dir.path() + "/heap.pb.gz";
  std::ofstream(theirs) << "theirs";
  chmod(theirs.c_str(), 0666);
  chown(theirs.c_str(), 65534, 65534);
  Process refused({LW_LEAKWATCH_BIN, "snapshot", "-p", std::to_string(p.target.pid()), "--duration", "0", "-o",
                   theirs});
  EXPECT_EQ(exit_code(refused.wait_exit(30s)), 1) << refused.stderr_text();
  EXPECT_NE(refused.stderr_text().find("belongs to uid 65534"), std::string::npos) << refused.stderr_text();
  EXPECT_EQ(slurp(theirs), "theirs");
  // Our own pre-created 0666 file: replaced by a new 0600 inode, so an fd
  // someone opened on the old one sees none of the profile.
  const std::string ours = dir.path() + "/ours.pb.gz";
  std::ofstream(ours) << "old";
  chmod(ours.c_str(), 0666);
  struct stat before;
  stat(ours.c_str(), &before);
  Process written({LW_LEAKWATCH_BIN, "snapshot", "-p", std::to_string(p.target.pid()), "--duration", "0", "-o",
                   ours});
  EXPECT_EQ(exit_code(written.wait_exit(30s)), 0) << written.stderr_text();
  struct stat after;
  ASSERT_EQ(stat(ours.c_str(), &after), 0);
  EXPECT_NE(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_mode & 0777, 0600u);
  EXPECT_EQ(after.st_uid, 0u);
}

TEST_F(LeakwatchCliFiles, TopRecordEventsToProcSelfMemIsAnError) {
  // The issue: every write failed and top exited 0.
  Profiled p;
  Process top({LW_LEAKWATCH_BIN, "top", "-p", std::to_string(p.target.pid()), "--count", "1", "--interval", "0.2",
               "--record-events", "/proc/self/mem"});
  EXPECT_EQ(exit_code(top.wait_exit(30s)), 1) << top.stderr_text();
  EXPECT_NE(top.stderr_text().find("symlink"), std::string::npos) << top.stderr_text();
}

TEST_F(LeakwatchCliFiles, TopRecordEventsFailedWriteIsAnErrorExit) {
  // A full file system (a 64 KiB tmpfs, filled, in a private mount
  // namespace) makes the writes fail with ENOSPC, as a full disk would:
  // top must say so and exit 1.
  TempDir dir;
  Profiled p;
  const std::string full = dir.path() + "/full";
  fs::create_directory(full);
  const std::string cmd = "mount -t tmpfs -o size=64k tmpfs " + full + " && (cat /dev/zero > " + full +
                          "/filler 2>/dev/null; true) && exec " + std::string(LW_LEAKWATCH_BIN) + " top -p " +
                          std::to_string(p.target.pid()) + " --count 10 --interval 0.3 --record-events " + full +
                          "/events.bin";
  Process top({"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c", cmd});
  // Events to record: the target's allocations, once top is attached.
  ASSERT_TRUE(top.read_line(20s).has_value()) << top.stderr_text();
  p.target.write_line("go");
  std::optional<int> status = top.wait_exit(30s);
  EXPECT_EQ(exit_code(status), 1) << "wait status " << (status ? *status : -1) << ": " << top.stderr_text();
  EXPECT_NE(top.stderr_text().find("--record-events " + full + "/events.bin"), std::string::npos)
      << top.stderr_text();
  EXPECT_NE(top.stderr_text().find("No space left on device"), std::string::npos) << top.stderr_text();
}

}  // namespace
}  // namespace lw::itest
