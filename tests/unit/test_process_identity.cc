// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/proc/process_identity.h"

namespace lw {
namespace {

constexpr char kUid[] = "0b8b1bd4-8f2c-4e1f-9a3e-1a2b3c4d5e6f";
constexpr char kHex[] = "4f1c2a9e8d7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a19";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string fixture(const std::string& name) {
  std::string text = read_file(std::string(LW_TEST_DATA_DIR) + "/cgroup/" + name);
  EXPECT_FALSE(text.empty()) << "missing fixture " << name;
  return text;
}

// --- /proc/PID/cgroup fixtures, end to end ---

struct CgroupCase {
  const char* file;
  std::optional<std::string> path;
  std::optional<std::string> unit;
  std::optional<std::string> pod_uid;
  std::optional<std::string> container_id;
};

std::ostream& operator<<(std::ostream& os, const CgroupCase& c) { return os << c.file; }

class CgroupFixture : public ::testing::TestWithParam<CgroupCase> {};

TEST_P(CgroupFixture, ParsesPathAndIdentity) {
  const CgroupCase& c = GetParam();
  std::optional<std::string> path = parse_proc_cgroup(fixture(c.file));
  EXPECT_EQ(path, c.path);
  if (!path) return;
  CgroupIdentity id = parse_cgroup_path(*path);
  EXPECT_EQ(id.unit, c.unit);
  EXPECT_EQ(id.pod_uid, c.pod_uid);
  EXPECT_EQ(id.container_id, c.container_id);
}

const std::string kUidUnderscores = "0b8b1bd4_8f2c_4e1f_9a3e_1a2b3c4d5e6f";
const std::string kContainerd = std::string("containerd://") + kHex;
const std::string kCrio = std::string("cri-o://") + kHex;
const std::string kDocker = std::string("docker://") + kHex;
const std::string kBurstablePodSlice =
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidUnderscores + ".slice";

INSTANTIATE_TEST_SUITE_P(
    Formats, CgroupFixture,
    ::testing::Values(
        // This machine: hybrid, v2 line at the root, memory controller deeper.
        CgroupCase{"hybrid_host.txt", "/process_api/bb0fb26540c44dcfb68d3cf0a562f83e", {}, {}, {}},
        CgroupCase{"hybrid_systemd_service.txt",
                   "/system.slice/model-server.service",
                   "model-server.service",
                   {},
                   {}},
        CgroupCase{"v2_systemd_service.txt",
                   "/system.slice/model-server.service",
                   "model-server.service",
                   {},
                   {}},
        CgroupCase{"v2_user_session.txt",
                   "/user.slice/user-1000.slice/session-3.scope",
                   "session-3.scope",
                   {},
                   {}},
        CgroupCase{"v2_user_manager_app.txt",
                   "/user.slice/user-1000.slice/user@1000.service/app.slice/"
                   "app-gnome-firefox-4242.scope",
                   "app-gnome-firefox-4242.scope",
                   {},
                   {}},
        CgroupCase{"v2_escaped_unit.txt", "/system.slice/_cpu.service", "cpu.service", {}, {}},
        CgroupCase{"k8s_systemd_containerd_burstable.txt",
                   kBurstablePodSlice + "/cri-containerd-" + kHex + ".scope",
                   std::string("cri-containerd-") + kHex + ".scope", kUid, kContainerd},
        CgroupCase{"k8s_systemd_containerd_guaranteed.txt",
                   "/kubepods.slice/kubepods-pod" + kUidUnderscores + ".slice/cri-containerd-" +
                       kHex + ".scope",
                   std::string("cri-containerd-") + kHex + ".scope", kUid, kContainerd},
        CgroupCase{"k8s_cgroupfs_besteffort.txt",
                   std::string("/kubepods/besteffort/pod") + kUid + "/" + kHex,
                   {},
                   kUid,
                   kContainerd},
        CgroupCase{"k8s_cgroupfs_guaranteed_v2.txt",
                   std::string("/kubepods/pod") + kUid + "/" + kHex,
                   {},
                   kUid,
                   kContainerd},
        CgroupCase{"k8s_systemd_crio_besteffort.txt",
                   "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" +
                       kUidUnderscores + ".slice/crio-" + kHex + ".scope",
                   std::string("crio-") + kHex + ".scope", kUid, kCrio},
        // conmon runs beside the container, not in it: pod yes, container no.
        CgroupCase{"k8s_systemd_crio_conmon.txt",
                   kBurstablePodSlice + "/crio-conmon-" + kHex + ".scope",
                   std::string("crio-conmon-") + kHex + ".scope",
                   kUid,
                   {}},
        CgroupCase{"k8s_cgroupfs_crio.txt",
                   std::string("/kubepods/burstable/pod") + kUid + "/crio-" + kHex,
                   {},
                   kUid,
                   kCrio},
        CgroupCase{"k8s_systemd_docker.txt", kBurstablePodSlice + "/docker-" + kHex + ".scope",
                   std::string("docker-") + kHex + ".scope", kUid, kDocker},
        CgroupCase{"docker_systemd.txt",
                   std::string("/system.slice/docker-") + kHex + ".scope",
                   std::string("docker-") + kHex + ".scope",
                   {},
                   kDocker},
        CgroupCase{"docker_cgroupfs_v1.txt", std::string("/docker/") + kHex, {}, {}, kDocker},
        // Read from inside another cgroup namespace.
        CgroupCase{"k8s_other_cgroupns.txt",
                   "/../../kubepods-burstable-pod" + kUidUnderscores + ".slice/cri-containerd-" +
                       kHex + ".scope",
                   std::string("cri-containerd-") + kHex + ".scope", kUid, kContainerd},
        CgroupCase{"v2_deleted.txt", kBurstablePodSlice + "/cri-containerd-" + kHex + ".scope",
                   std::string("cri-containerd-") + kHex + ".scope", kUid, kContainerd},
        CgroupCase{"root_v2.txt", "/", {}, {}, {}},
        CgroupCase{"init_v2.txt", "/init.scope", "init.scope", {}, {}},
        CgroupCase{"garbage.txt", {}, {}, {}, {}}));

TEST(ParseProcCgroup, EmptyTextHasNoPath) { EXPECT_EQ(parse_proc_cgroup(""), std::nullopt); }

TEST(ParseProcCgroup, V2WinsOverV1WhenBothAreDeep) {
  EXPECT_EQ(parse_proc_cgroup("4:memory:/a\n1:name=systemd:/b\n0::/c\n"), "/c");
}

TEST(ParseProcCgroup, SystemdWinsOverMemory) {
  EXPECT_EQ(parse_proc_cgroup("4:memory:/a\n1:name=systemd:/b\n0::/\n"), "/b");
}

TEST(ParseProcCgroup, MemoryFoundInJoinedControllers) {
  EXPECT_EQ(parse_proc_cgroup("3:cpu,memory:/m\n"), "/m");
}

TEST(ParseProcCgroup, PathMayContainColons) {
  EXPECT_EQ(parse_proc_cgroup("0::/a:b/c\n"), "/a:b/c");
}

TEST(ParseProcCgroup, NoTrailingNewline) {
  EXPECT_EQ(parse_proc_cgroup("0::/x.service"), "/x.service");
}

// --- parse_cgroup_path details ---

TEST(ParseCgroupPath, BareIdRuntimeIsConfigurable) {
  CgroupIdentity id =
      parse_cgroup_path(std::string("/kubepods/burstable/pod") + kUid + "/" + kHex, "docker");
  EXPECT_EQ(id.container_id, kDocker);
}

TEST(ParseCgroupPath, BareIdOutsideKubepodsIsNoContainer) {
  EXPECT_EQ(parse_cgroup_path(std::string("/somewhere/") + kHex).container_id, std::nullopt);
}

TEST(ParseCgroupPath, PodDirectoryOutsideKubepodsIsIgnored) {
  EXPECT_EQ(parse_cgroup_path(std::string("/mine/pod") + kUid).pod_uid, std::nullopt);
  EXPECT_EQ(parse_cgroup_path(std::string("/kubepods/other/pod") + kUid).pod_uid, std::nullopt);
}

TEST(ParseCgroupPath, StaticPodHashUid) {
  const std::string hash = "5d6a07a3b3c9f7e1e0a2c5b8d4f6e9a1";
  EXPECT_EQ(parse_cgroup_path("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
                              hash + ".slice")
                .pod_uid,
            hash);
  EXPECT_EQ(parse_cgroup_path("/kubepods/pod" + hash).pod_uid, hash);
}

TEST(ParseCgroupPath, MalformedIdsAreRejected) {
  // Short container ID, non-hex, misplaced dashes in the UID.
  CgroupIdentity a =
      parse_cgroup_path("/kubepods/besteffort/pod0b8b1bd4-8f2c-4e1f-9a3e-1a2b3c4d5e6/abc");
  EXPECT_EQ(a.pod_uid, std::nullopt);
  EXPECT_EQ(a.container_id, std::nullopt);
  CgroupIdentity b = parse_cgroup_path(
      "/kubepods.slice/kubepods-podzzzzzzzz_8f2c_4e1f_9a3e_1a2b3c4d5e6f.slice/"
      "cri-containerd-xyz.scope");
  EXPECT_EQ(b.pod_uid, std::nullopt);
  EXPECT_EQ(b.container_id, std::nullopt);
  EXPECT_EQ(parse_cgroup_path("/kubepods/pod0b8b1bd48-f2c-4e1f-9a3e-1a2b3c4d5e6f").pod_uid,
            std::nullopt);
}

TEST(ParseCgroupPath, DelegatedSubgroupKeepsUnit) {
  EXPECT_EQ(parse_cgroup_path("/system.slice/app.service/worker").unit, "app.service");
}

TEST(ParseCgroupPath, SlicesAndBareSuffixesAreNotUnits) {
  EXPECT_EQ(parse_cgroup_path("/system.slice").unit, std::nullopt);
  EXPECT_EQ(parse_cgroup_path("/.service").unit, std::nullopt);
  EXPECT_EQ(parse_cgroup_path("").unit, std::nullopt);
}

// --- /proc/PID/stat ---

TEST(ParseProcStat, CommWithSpacesAndParens) {
  // Fields 3..22 after a hostile comm; field 22 (starttime) is 777.
  Result<StatFields> st = parse_proc_stat(
      "42 (a) b) (c ) R 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 777 1000 1\n");
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(st->state, 'R');
  EXPECT_EQ(st->flags, 4194560u);
  EXPECT_EQ(st->start_time, 777u);
}

TEST(ParseProcStat, StartTimeAsLastField) {
  Result<StatFields> st =
      parse_proc_stat("1 (x) S 0 1 1 0 -1 2097152 0 0 0 0 0 0 0 0 20 0 1 0 18446744073709551615\n");
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(st->start_time, UINT64_MAX);
}

TEST(ParseProcStat, RejectsMalformed) {
  EXPECT_FALSE(parse_proc_stat("").ok());
  EXPECT_FALSE(parse_proc_stat("42 no-parens R 1").ok());
  EXPECT_FALSE(parse_proc_stat("42 (x) R 1 2 3").ok());
  EXPECT_FALSE(parse_proc_stat("42 (x) RR 1 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777").ok());
  EXPECT_FALSE(parse_proc_stat("42 (x) R 1 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77x").ok());
  EXPECT_FALSE(parse_proc_stat("42 (x) R 1 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 -7").ok());
}

// --- pod log directory names ---

TEST(ParsePodLogDirName, ValidName) {
  std::optional<PodLogDir> d =
      parse_pod_log_dir_name(std::string("ml-serving_model-server-7d9f8-abcde_") + kUid);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->pod.pod_namespace, "ml-serving");
  EXPECT_EQ(d->pod.pod_name, "model-server-7d9f8-abcde");
  EXPECT_EQ(d->uid, kUid);
}

TEST(ParsePodLogDirName, StaticPodHashUidAndDottedPodName) {
  std::optional<PodLogDir> d =
      parse_pod_log_dir_name("kube-system_etcd-node1.example.com_5d6a07a3b3c9f7e1e0a2c5b8d4f6e9a1");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->pod.pod_name, "etcd-node1.example.com");
}

TEST(ParsePodLogDirName, RejectsMalformed) {
  const std::string uid = kUid;
  const std::vector<std::string> bad_names = {"",
                                              ".",
                                              "..",
                                              "ns_pod",
                                              "ns_pod_x_" + uid,
                                              "_pod_" + uid,
                                              "ns__" + uid,
                                              "ns_pod_",
                                              "NS_pod_" + uid,
                                              "ns_po d_" + uid,
                                              "n.s_pod_" + uid,
                                              "ns_pod_" + uid.substr(1),
                                              std::string(64, 'a') + "_pod_" + uid,
                                              "ns_" + std::string(254, 'p') + "_" + uid};
  for (const std::string& bad : bad_names) {
    EXPECT_EQ(parse_pod_log_dir_name(bad), std::nullopt) << bad;
  }
}

// --- PodDirectory over a temporary root ---

class PodDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "lw-pods-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  void add(const std::string& name) { std::filesystem::create_directory(root_ / name); }
  PodDirectoryOptions options() const {
    PodDirectoryOptions o;
    o.root = root_.string();
    o.max_age = std::chrono::seconds(60);
    o.min_rescan_interval = std::chrono::seconds(1);
    return o;
  }

  std::filesystem::path root_;
};

const std::string kUid2 = "11111111-2222-3333-4444-555555555555";
const std::string kUid3 = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

TEST_F(PodDirectoryTest, FindsPodsAndIgnoresMalformedNames) {
  add(std::string("ml_trainer-0_") + kUid);
  add("default_web-1_" + kUid2);
  add("not-a-pod");
  add("a_b_c_d");
  std::ofstream(root_ / "stray-file");
  PodDirectory pods(options());
  ASSERT_TRUE(pods.refresh().ok());
  EXPECT_EQ(pods.size(), 2u);
  std::optional<PodRef> p = pods.lookup(kUid);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->pod_namespace, "ml");
  EXPECT_EQ(p->pod_name, "trainer-0");
  EXPECT_EQ(pods.lookup(kUid2)->pod_name, "web-1");
  EXPECT_EQ(pods.lookup("not-a-pod"), std::nullopt);
}

TEST_F(PodDirectoryTest, MissRescansButRateLimited) {
  using namespace std::chrono_literals;
  PodDirectory pods(options());
  const auto t0 = PodDirectory::Clock::now();
  EXPECT_EQ(pods.lookup(kUid2, t0), std::nullopt);  // first scan: empty
  add("default_web-1_" + kUid2);
  // Within min_rescan_interval of the last scan: no rescan yet.
  EXPECT_EQ(pods.lookup(kUid2, t0 + 500ms), std::nullopt);
  // Later, the miss triggers a rescan that finds the new pod.
  ASSERT_TRUE(pods.lookup(kUid2, t0 + 1500ms));
}

TEST_F(PodDirectoryTest, DeletedPodsAgeOut) {
  using namespace std::chrono_literals;
  add("default_web-1_" + kUid2);
  add("default_web-2_" + kUid3);
  PodDirectory pods(options());
  const auto t0 = PodDirectory::Clock::now();
  ASSERT_TRUE(pods.lookup(kUid2, t0));
  std::filesystem::remove(root_ / ("default_web-1_" + kUid2));
  // A hit does not rescan before max_age...
  EXPECT_TRUE(pods.lookup(kUid2, t0 + 30s));
  // ...after it, the stale entry is gone.
  EXPECT_TRUE(pods.lookup(kUid3, t0 + 61s));
  EXPECT_EQ(pods.size(), 1u);
}

TEST_F(PodDirectoryTest, EntriesAreBounded) {
  PodDirectoryOptions o = options();
  o.max_entries = 2;
  for (int i = 0; i < 5; ++i)
    add("ns_pod-" + std::to_string(i) + "_" + kUid2.substr(0, 35) + char('0' + i));
  PodDirectory pods(o);
  ASSERT_TRUE(pods.refresh().ok());
  EXPECT_EQ(pods.size(), 2u);
}

TEST_F(PodDirectoryTest, MissingRootIsAnErrorAndKeepsOldData) {
  add("default_web-1_" + kUid2);
  PodDirectory pods(options());
  ASSERT_TRUE(pods.refresh().ok());
  std::filesystem::remove_all(root_);
  Status s = pods.refresh();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ENOENT);
  EXPECT_NE(s.error().message.find(root_.string()), std::string::npos);
  EXPECT_TRUE(pods.lookup(kUid2));
}

// --- a live process ---

// /proc/self/stat parsed here independently of parse_proc_stat.
struct SelfStat {
  std::string comm;
  unsigned long long start_time = 0;
};

SelfStat read_self_stat() {
  std::string text = read_file("/proc/self/stat");
  SelfStat s;
  const size_t open = text.find('(');
  const size_t close = text.rfind(')');
  s.comm = text.substr(open + 1, close - open - 1);
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) rest >> field;
  s.start_time = std::stoull(field);
  return s;
}

TEST(ReadProcessIdentity, Self) {
  Result<ProcessIdentity> id = read_process_identity(getpid(), nullptr);
  ASSERT_TRUE(id.ok()) << id.error().message;
  const SelfStat expect = read_self_stat();
  EXPECT_EQ(id->pid, getpid());
  EXPECT_EQ(id->comm, expect.comm);
  EXPECT_EQ(id->start_time, expect.start_time);
  EXPECT_GT(id->start_time, 0u);

  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  ASSERT_GT(n, 0);
  EXPECT_EQ(id->exe, std::string(exe, static_cast<size_t>(n)));
  EXPECT_FALSE(id->exe_deleted);

  EXPECT_EQ(id->cgroup, parse_proc_cgroup(read_file("/proc/self/cgroup")));
  EXPECT_TRUE(id->cgroup);
  EXPECT_EQ(id->pod_namespace, std::nullopt);
}

TEST(ReadProcessIdentity, KernelThreadHasNoExe) {
  // kthreadd is pid 2 on Linux; skip where the pid namespace hides it.
  Result<ProcessIdentity> id = read_process_identity(2, nullptr);
  if (!id.ok() || id->comm != "kthreadd") GTEST_SKIP() << "no kthreadd visible";
  EXPECT_EQ(id->exe, "");
}

TEST(ReadProcessIdentity, ExitedProcessIsEsrch) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  // Unreaped, it turns into a zombie, which counts as exited.
  Result<ProcessIdentity> zombie = read_process_identity(child, nullptr);
  for (int i = 0; i < 2000 && zombie.ok(); ++i) {
    usleep(1000);
    zombie = read_process_identity(child, nullptr);
  }
  ASSERT_FALSE(zombie.ok());
  EXPECT_EQ(zombie.error().code, ESRCH) << zombie.error().message;
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  // Reaped: gone.
  Result<ProcessIdentity> gone = read_process_identity(child, nullptr);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, ESRCH);
}

TEST(ReadProcessIdentity, DeletedExecutableIsFlagged) {
  // Run a copy of sleep(1), then delete the copy while it runs.
  std::string tmpl = (std::filesystem::temp_directory_path() / "lw-exe-XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const std::filesystem::path dir = tmpl;
  const std::filesystem::path copy = dir / "sleeper";
  std::filesystem::copy_file("/bin/sleep", copy);
  std::filesystem::permissions(copy, std::filesystem::perms::owner_all);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    execl(copy.c_str(), "sleeper", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until the exec happened (comm changes from ours to "sleeper").
  Result<ProcessIdentity> id = Error{};
  for (int i = 0; i < 2000; ++i) {
    id = read_process_identity(child, nullptr);
    if (id.ok() && id->comm == "sleeper") break;
    usleep(1000);
  }
  std::filesystem::remove(copy);
  id = read_process_identity(child, nullptr);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(id.ok()) << id.error().message;
  EXPECT_EQ(id->comm, "sleeper");
  EXPECT_EQ(id->exe, copy.string());
  EXPECT_TRUE(id->exe_deleted);
}

}  // namespace
}  // namespace lw
