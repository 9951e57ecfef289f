// SPDX-License-Identifier: Apache-2.0
// Probed allocator calls left without returning (issue 8): longjmp out of
// an allocator's hook, nesting past the kernel's uretprobe depth (64), C++
// exceptions caught far up, threads that exit with such a call behind them
// (tests/targets/orphans.cc). The target exits 0, the bytes allocated
// after every abnormal exit are exact, the abandoned entry contexts are
// counted exactly (ctx_orphaned) and none is left in the kernel's context
// map (task storage), and the calls the kernel gives no return probe are counted
// (ret_probe_omitted). Decision orphaned-calls.
#include <bpf/bpf.h>
#include <dirent.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness.h"
#include "leakwatch_abi.h"

namespace lw::itest {
namespace {

// The contexts stored for thread `tid` in leakwatch's entry-context map
// ("ctxs", task storage, decision fewer-map-operations), found through the map
// ids in the fdinfo of the leakwatch process (several leakwatch instances may
// run on this host: only this one's map is read) and read with a pidfd of the
// thread. Returns the classes whose slot is valid; `gone` is set when the
// thread no longer exists (its storage went with it).
std::vector<uint32_t> ctx_classes(pid_t leakwatch_pid, pid_t tid, bool *gone, std::string *error) {
  std::vector<uint32_t> out;
  *gone = false;
  const std::string dir = "/proc/" + std::to_string(leakwatch_pid) + "/fdinfo";
  DIR *d = opendir(dir.c_str());
  if (d == nullptr) {
    *error = "cannot open " + dir;
    return out;
  }
  bool found = false;
  while (dirent *e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(dir + "/" + e->d_name);
    std::string line;
    long map_id = -1;
    while (std::getline(in, line))
      if (line.rfind("map_id:", 0) == 0) map_id = std::stol(line.substr(7));
    if (map_id < 0) continue;
    int fd = bpf_map_get_fd_by_id(static_cast<uint32_t>(map_id));
    if (fd < 0) continue;
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && std::string(info.name) == "ctxs" &&
        info.type == BPF_MAP_TYPE_TASK_STORAGE && info.value_size == sizeof(lw_task_ctxs)) {
      found = true;
      int pidfd = static_cast<int>(syscall(SYS_pidfd_open, tid, 0));
      if (pidfd < 0) {
        *gone = errno == ESRCH;
        if (!*gone) *error = "pidfd_open(" + std::to_string(tid) + ") failed";
      } else {
        lw_task_ctxs val{};
        if (bpf_map_lookup_elem(fd, &pidfd, &val) == 0) {
          for (uint32_t cls = 0; cls < LW_CTX_MAX; cls++)
            if (val.c[cls].flags & LW_CTXF_VALID) out.push_back(cls);
        } else if (errno != ENOENT) {
          *error = "looking up thread " + std::to_string(tid) + " in ctxs failed";
        }
        close(pidfd);
      }
    }
    close(fd);
    if (found) break;
  }
  closedir(d);
  if (!found) *error = "no ctxs task-storage map among leakwatch's fds";
  return out;
}

int64_t counter(const Json &snapshot, const char *name) { return snapshot.at("counters").at(name).get<int64_t>(); }

TEST(LeakwatchUnwinding, LongjmpAndExceptionsLeaveExactBytesAndCountedReclaimedOrphans) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  TraceSession session({.target = "orphans"});
  const Json &snapshot = session.snapshot();
  const Json &truth = session.truth();
  const Json &facts = truth.at("facts");
  const std::string why = "\ncounters: " + snapshot.at("counters").dump() + session.diagnostics();

  // The executable's own mi_malloc is probed (a mimalloc name,
  // decision allocator-per-process).
  bool probed = false;
  for (const Json &f : session.attach_snapshot().at("allocator").at("functions"))
    if (f.get<std::string>().find("mi_malloc") != std::string::npos) probed = true;
  ASSERT_TRUE(probed) << session.attach_snapshot().at("allocator").dump();

  EXPECT_EQ(facts.at("caught").get<int>(), 10);
  expect_matches_truth(session, {"orphans"});

  const int64_t orphaned = counter(snapshot, "ctx_orphaned");
  const int64_t omitted = counter(snapshot, "ret_probe_omitted");
  const int64_t blind_calls = facts.at("blind_calls").get<int64_t>();
  std::printf("[ metric   ] unwinding: ctx_orphaned %lld (target: %lld), ret_probe_omitted %lld "
              "(blind thread's own calls: %lld), ctx_stale %lld, nested_skipped %lld, return_no_ctx %lld\n",
              static_cast<long long>(orphaned), static_cast<long long>(facts.at("orphans").get<int64_t>()),
              static_cast<long long>(omitted), static_cast<long long>(blind_calls),
              static_cast<long long>(counter(snapshot, "ctx_stale")),
              static_cast<long long>(counter(snapshot, "nested_skipped")),
              static_cast<long long>(counter(snapshot, "return_no_ctx")));
  EXPECT_EQ(orphaned, facts.at("orphans").get<int64_t>()) << why;
  // Every outermost allocator call of the blinded thread after its longjmp
  // is counted; glibc may make a few of its own on the way out of a thread.
  EXPECT_GE(omitted, blind_calls) << why;
  EXPECT_LE(omitted, blind_calls + 8) << why;
  EXPECT_EQ(counter(snapshot, "ctx_stale"), 0) << why;

  // Reclaimed: the exited threads are gone, and with them their task
  // storage (pidfd_open fails with ESRCH); the main thread, waiting in
  // read(), has no allocator call in flight.
  std::string error;
  for (int i = 0; i <= 2; i++) {
    bool gone = false;
    const pid_t tid = facts.at("tid" + std::to_string(i)).get<pid_t>();
    (void)ctx_classes(session.leakwatch().pid(), tid, &gone, &error);
    ASSERT_TRUE(error.empty()) << error;
    EXPECT_TRUE(gone) << "thread " << tid << " still exists";
  }
  bool gone = false;
  const std::vector<uint32_t> main_classes =
      ctx_classes(session.leakwatch().pid(), session.target_pid(), &gone, &error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_FALSE(gone);
  for (uint32_t cls : main_classes) EXPECT_NE(cls, static_cast<uint32_t>(LW_CTX_ALLOC)) << "allocator context left";
  std::printf("[ metric   ] unwinding: %zu valid context slots left for the main thread\n", main_classes.size());

  session.target().write_line("exit");
  auto status = session.target().wait_exit(std::chrono::seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "status " << *status << why;
}

}  // namespace
}  // namespace lw::itest
