// SPDX-License-Identifier: Apache-2.0
// Probed allocator calls left without returning (issue 8): longjmp out of
// an allocator's hook, nesting past the kernel's uretprobe depth (64), C++
// exceptions caught far up, threads that exit with such a call behind them
// (tests/targets/orphans.cc). The target exits 0, the bytes allocated
// after every abnormal exit are exact, the abandoned entry contexts are
// counted exactly (ctx_orphaned) and none is left in the kernel's context
// map, and the calls the kernel gives no return probe are counted
// (ret_probe_omitted). Decision 25 in docs/architecture.md.
#include <bpf/bpf.h>
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness.h"
#include "leakwatch_abi.h"

namespace lw::itest {
namespace {

struct CtxEntry {
  uint32_t tid;
  uint32_t cls;
  uint32_t flags;
};

// The entries of leakwatch's entry-context map ("ctxs"), found through the
// map ids in the fdinfo of the leakwatch process (several leakwatch
// instances may run on this host: only this one's map is read).
std::vector<CtxEntry> ctx_entries(pid_t leakwatch_pid, std::string *error) {
  std::vector<CtxEntry> out;
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
        info.key_size == sizeof(lw_ctx_key) && info.value_size == sizeof(lw_ctx_val)) {
      found = true;
      lw_ctx_key key{}, next{};
      lw_ctx_key *prev = nullptr;
      while (bpf_map_get_next_key(fd, prev, &next) == 0) {
        lw_ctx_val val{};
        if (bpf_map_lookup_elem(fd, &next, &val) == 0) out.push_back({next.tid, next.cls, val.flags});
        key = next;
        prev = &key;
      }
    }
    close(fd);
    if (found) break;
  }
  closedir(d);
  if (!found) *error = "no ctxs map among leakwatch's fds";
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

  // The executable's own mi_malloc is probed (a mimalloc name, decision 21).
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

  // Reclaimed: nothing stored for the exited threads, and no allocator
  // call in flight for the main thread (it waits in read()).
  std::string error;
  const std::vector<CtxEntry> entries = ctx_entries(session.leakwatch().pid(), &error);
  ASSERT_TRUE(error.empty()) << error;
  std::string left;
  for (const CtxEntry &e : entries) {
    bool exited = false;
    for (int i = 0; i <= 2; i++)
      if (e.tid == facts.at("tid" + std::to_string(i)).get<uint32_t>()) exited = true;
    if (exited || (e.tid == static_cast<uint32_t>(session.target_pid()) && e.cls == LW_CTX_ALLOC))
      left += "tid " + std::to_string(e.tid) + " class " + std::to_string(e.cls) + "; ";
  }
  std::printf("[ metric   ] unwinding: %zu entries in the context map after the run\n", entries.size());
  EXPECT_TRUE(left.empty()) << "contexts left: " << left;

  session.target().write_line("exit");
  auto status = session.target().wait_exit(std::chrono::seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "status " << *status << why;
}

}  // namespace
}  // namespace lw::itest
