// SPDX-License-Identifier: Apache-2.0
// Started as root, `leakwatch run` switches to `sandbox_user` (nobody by
// default; decision unprivileged-uid):
//  - the kernel shows every uid and gid of the daemon non-zero, no
//    supplementary group and only the documented capabilities; with those
//    credentials a root-owned 0644 file cannot be opened for writing, nor a
//    file created in a root-only directory;
//  - it still traces another user's leak exactly (bytes and site), and the
//    directories it writes are the user's;
//  - signals from the account's other processes are not obeyed;
//  - a missing user, or a directory of another user's that it could not
//    write, stops the start with an error naming the key.
#include <grp.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/capability.h>

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "daemon_harness.h"

namespace lw::itest {
namespace {

using namespace std::chrono_literals;

class LeakwatchUidSwitch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "not root: the switch is from root";
    const passwd* pw = getpwnam("nobody");
    if (pw == nullptr) GTEST_SKIP() << "no user 'nobody' on this host (the default sandbox_user)";
    nobody_uid_ = pw->pw_uid;
    nobody_gid_ = pw->pw_gid;
  }
  uid_t nobody_uid_ = 0;
  gid_t nobody_gid_ = 0;
};

// CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH,
// CAP_CHECKPOINT_RESTORE (README, "Capabilities").
constexpr uint64_t kDocumented = (1ull << 39) | (1ull << 38) | (1ull << 19) | (1ull << 2) | (1ull << 40);

std::map<std::string, std::string> status_of(pid_t pid) {
  std::map<std::string, std::string> out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    size_t start = line.find_first_not_of(" \t", colon + 1);
    out[line.substr(0, colon)] = start == std::string::npos ? "" : line.substr(start);
  }
  return out;
}

// The four ids of a Uid:/Gid: line (real, effective, saved, file system).
std::vector<unsigned long> ids(const std::string& line) {
  std::istringstream in(line);
  std::vector<unsigned long> out;
  for (unsigned long v; in >> v;) out.push_back(v);
  return out;
}

// What the kernel answers a process with exactly these credentials (uids,
// gids, no groups, `caps` permitted and effective) that opens `path` with
// `flags`: 0, or the errno. Run in a child, set up as the daemon's own
// switch does, so the answer is the kernel's permission check on the
// daemon's credentials as /proc shows them.
int open_as(uid_t uid, gid_t gid, uint64_t caps, const std::string& path, int flags) {
  pid_t child = fork();
  if (child == 0) {
    prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0);
    if (setgroups(0, nullptr) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0) _exit(200);
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    for (int w = 0; w < 2; ++w)
      data[w].permitted = data[w].effective = static_cast<uint32_t>(caps >> (32 * w));
    if (syscall(SYS_capset, &header, data) != 0) _exit(201);
    int fd = open(path.c_str(), flags | O_CLOEXEC, 0644);
    _exit(fd >= 0 ? 0 : errno);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// kill(pid, sig) from a child running as `uid`: 0, or the errno.
int signal_as(uid_t uid, pid_t pid, int sig) {
  pid_t child = fork();
  if (child == 0) {
    if (setgroups(0, nullptr) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) _exit(200);
    _exit(kill(pid, sig) == 0 ? 0 : errno);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(LeakwatchUidSwitch, StartedAsRootItRunsAsNobodyWritesNoRootFileAndStillTracesAnotherUsersLeak) {
  TempDir bin, state;
  ASSERT_EQ(chmod(bin.path().c_str(), 0755), 0);
  const std::string leaker_bin = private_target_copy(bin.path(), "leaker");
  ASSERT_EQ(chmod(leaker_bin.c_str(), 0755), 0);
  const std::string comm = file_name_of(leaker_bin);
  // A file of root's, 0644, in a directory only root may write.
  const std::string root_only = state.path() + "/root-only";
  ASSERT_EQ(mkdir(root_only.c_str(), 0700), 0);
  const std::string roots_file = root_only + "/roots-file";
  std::ofstream(roots_file) << "root's\n";
  ASSERT_EQ(chmod(roots_file.c_str(), 0644), 0);
  const std::string oom_dir = state.path() + "/oom", unwind_dir = state.path() + "/unwind";
  DaemonProcess daemon({.config_body = "top_sites_per_process: 200\noom: {report_dir: " + oom_dir +
                                       "}\nunwind: {cache_dir: " + unwind_dir +
                                       "}\ntargets:\n  - name: leakers\n    match: " + comm_selector(comm) +
                                       "\n    mode: full\n",
                        .args = {"--log-level", "info"}});
  daemon.wait_notify("READY=1", kReadyTimeout);

  // The kernel's view: every id the user's, no group, the five capabilities.
  auto st = status_of(daemon.pid());
  const std::vector<unsigned long> nobody4(4, nobody_uid_), nogroup4(4, nobody_gid_);
  EXPECT_EQ(ids(st["Uid"]), nobody4) << st["Uid"];
  EXPECT_EQ(ids(st["Gid"]), nogroup4) << st["Gid"];
  EXPECT_EQ(st["Groups"], "");
  EXPECT_EQ(std::strtoull(st["CapEff"].c_str(), nullptr, 16), kDocumented) << st["CapEff"];
  EXPECT_EQ(std::strtoull(st["CapPrm"].c_str(), nullptr, 16), kDocumented) << st["CapPrm"];
  EXPECT_EQ(std::strtoull(st["CapBnd"].c_str(), nullptr, 16), kDocumented) << st["CapBnd"];
  // With those credentials: root's files are not writable, its own are.
  const uid_t uid = static_cast<uid_t>(ids(st["Uid"]).at(1));
  const gid_t gid = static_cast<gid_t>(ids(st["Gid"]).at(1));
  const uint64_t caps = std::strtoull(st["CapEff"].c_str(), nullptr, 16);
  EXPECT_EQ(open_as(uid, gid, caps, roots_file, O_WRONLY), EACCES);
  EXPECT_EQ(open_as(uid, gid, caps, root_only + "/new", O_WRONLY | O_CREAT), EACCES);
  EXPECT_EQ(open_as(uid, gid, caps, roots_file, O_RDONLY), 0);  // CAP_DAC_READ_SEARCH
  EXPECT_EQ(open_as(uid, gid, caps, oom_dir + "/probe", O_WRONLY | O_CREAT), 0);
  for (const std::string& dir : {oom_dir, unwind_dir}) {
    struct stat ds {};
    ASSERT_EQ(stat(dir.c_str(), &ds), 0) << dir;
    EXPECT_EQ(ds.st_uid, nobody_uid_) << dir;
  }
  const Json status = daemon.get_json("/api/v1/status");
  EXPECT_EQ(status.at("sandbox").at("uid"), nobody_uid_) << status.at("sandbox").dump();
  EXPECT_EQ(status.at("sandbox").at("gid"), nobody_gid_) << status.at("sandbox").dump();
  EXPECT_EQ(status.at("sandbox").at("user"), "nobody") << status.at("sandbox").dump();
  const std::string log = daemon.diagnostics();
  EXPECT_NE(log.find("sandbox: uid " + std::to_string(nobody_uid_) + " (nobody), gid " +
                     std::to_string(nobody_gid_) + "; capabilities kept: "),
            std::string::npos)
      << log;

  // Another user's leak, exactly: its bytes and its site.
  Process leaker({leaker_bin}, {.as_uid = 65533});
  daemon.wait_for_process(leaker.pid(), kApiTimeout);
  ASSERT_EQ(read_ready(leaker), leaker.pid());
  const Json baseline = daemon.sites_at_or_after(leaker.pid(), unix_now() + 0.3, kApiTimeout);
  Json truth = go_and_read_truth(leaker);
  truth["total_live"] = truth.at("total_live").get<int64_t>() + baseline.at("live_bytes").get<int64_t>();
  const Json sites = daemon.sites_at_or_after(leaker.pid(), unix_now() + 0.5, kApiTimeout);
  expect_matches_truth(sites, truth, {comm}, daemon.diagnostics());
  printf("[ figures  ] daemon Uid %s, Gid %s, CapEff %s; uid 65533's leaker: %lld live bytes matched\n",
         st["Uid"].c_str(), st["Gid"].c_str(), st["CapEff"].c_str(),
         static_cast<long long>(truth.at("total_live").get<int64_t>()));
  // Other processes of nobody's may not stop it or toggle its kill switch.
  EXPECT_EQ(signal_as(65534, daemon.pid(), SIGUSR2), 0);
  EXPECT_EQ(signal_as(65534, daemon.pid(), SIGTERM), 0);
  const Json after = daemon.wait_for_status(
      [](const Json& s) { return s.at("sandbox").at("signals_refused").get<int>() >= 2; }, kApiTimeout,
      "2 signals refused");
  EXPECT_EQ(after.at("sandbox").at("signals_refused"), 2);
  EXPECT_FALSE(after.at("kill_switch_engaged").get<bool>());
  EXPECT_TRUE(daemon.running());
  leaker.write_line("exit");
  leaker.wait_exit(10s);
  std::optional<int> exit = daemon.signal_and_wait(SIGTERM, 20s);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0) << *exit << daemon.diagnostics();
}

// The start fails, naming the key, before anything is loaded.
void expect_start_fails(DaemonProcess& daemon, const std::string& wanted) {
  std::optional<int> exit = daemon.process().wait_exit(kReadyTimeout);
  ASSERT_TRUE(exit.has_value()) << "still running: " << daemon.diagnostics();
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) != 0) << *exit;
  EXPECT_NE(daemon.diagnostics().find(wanted), std::string::npos) << daemon.diagnostics();
}

TEST_F(LeakwatchUidSwitch, AMissingUserOrADirectoryItCouldNotWriteStopsTheStartNamingTheKey) {
  {
    DaemonProcess daemon({.config_body = "sandbox_user: lw-no-such-user\n", .args = {}});
    expect_start_fails(daemon, "config: sandbox_user: no user 'lw-no-such-user' on this host");
  }
  TempDir state;
  const std::string theirs = state.path() + "/theirs";
  ASSERT_EQ(mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(chown(theirs.c_str(), 65533, 65533), 0);
  DaemonProcess daemon({.config_body = "oom: {report_dir: " + theirs + "}\n", .args = {}});
  expect_start_fails(daemon, "config: oom.report_dir: " + theirs + " belongs to uid 65533");
}

}  // namespace
}  // namespace lw::itest
