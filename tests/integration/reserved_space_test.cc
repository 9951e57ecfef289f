// SPDX-License-Identifier: Apache-2.0
// Reserved address space is not live memory (decision reserved-address-space),
// against tests/targets/native/arena_threads (-O2, no frame pointers):
// glibc's per-thread arenas and thread stacks are reservations whose
// untouched pages are reserved, and a reservation committed with mprotect
// and touched shows those bytes live.
#include <unistd.h>

#include <cstdio>

#include <gtest/gtest.h>

#include "tests/integration/harness.h"

namespace lw::itest {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kMiB = 1 << 20;

class ReservedSpace : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "not root";
  }
};

// The settled snapshot comes 3 s after "done": smaps is read at once for a
// process's first reservation, then at most every 2 s.
TraceSession trace(std::vector<std::string> args, const char *mode) {
  TraceOptions o;
  o.target = "arena_threads";
  o.target_args = std::move(args);
  o.leakwatch_args = {"--mode", mode};
  o.settle_after_done_s = 3.0;
  return TraceSession(o);
}

int64_t reserved_of(const Json &snap, const char *kind) {
  const Json &kinds = snap.at("kinds");
  return kinds.contains(kind) ? kinds.at(kind).at("reserved_bytes").get<int64_t>() : 0;
}

// 8 threads each malloc and free 2,000 bytes: no site holds more than
// 1 MiB live; the arenas' and stacks' address space is reserved.
void expect_arenas_not_live(const char *mode, int64_t min_reserved) {
  TraceSession s = trace({"arena"}, mode);
  const Json &snap = s.snapshot();
  const std::string ctx = std::string("mode ") + mode + "\n" + describe_sites(snap) + s.diagnostics();
  ASSERT_FALSE(snap.at("sites").empty()) << ctx;
  const Json &top = snap.at("sites").at(0);
  printf("arena_threads, mode %s: process live %lld, reserved %lld; top site %s %lld live, %lld reserved\n",
         mode, (long long)snap.at("live_bytes").get<int64_t>(), (long long)snap.at("reserved_bytes").get<int64_t>(),
         top.at("frames").empty() ? "?" : top.at("frames").at(0).at("function").get<std::string>().c_str(),
         (long long)top.at("live_bytes").get<int64_t>(), (long long)top.at("reserved_bytes").get<int64_t>());
  for (const Json &site : snap.at("sites")) EXPECT_LE(site.at("live_bytes").get<int64_t>(), kMiB) << ctx;
  EXPECT_LE(snap.at("live_bytes").get<int64_t>(), 2 * kMiB) << ctx;
  EXPECT_GE(reserved_of(snap, "mmap"), min_reserved) << ctx;
  EXPECT_EQ(snap.at("reserved_bytes").get<int64_t>(), reserved_of(snap, "mmap")) << ctx;
  EXPECT_GT(snap.at("counters").at("mapping_reads").get<int64_t>(), 0) << ctx;
  EXPECT_EQ(snap.at("counters").at("mapping_read_errors").get<int64_t>(), 0) << ctx;
  s.target().write_line("exit");
}

// full: the arenas are mapped inside malloc (the heap's); the 8 thread
// stacks (8 MiB each, a few pages touched) are reservations.
TEST_F(ReservedSpace, ArenaThreadsFull) { expect_arenas_not_live("full", 8 * 7 * kMiB); }

// light: every arena's 64 MiB reservation is kind mmap too.
TEST_F(ReservedSpace, ArenaThreadsLight) { expect_arenas_not_live("light", 8 * 7 * kMiB + 8 * 60 * kMiB); }

// The site's live bytes and the process's reserved bytes in a snapshot.
struct CommitFigures {
  int64_t live = -1;
  int64_t reserved = -1;
};
CommitFigures commit_figures(const Json &snap) {
  CommitFigures f;
  f.reserved = snap.at("reserved_bytes").get<int64_t>();
  for (const auto &[leaf, t] : live_by_leaf(snap))
    if (leaf == "reserve_space") f.live = t.live_bytes;
  return f;
}

// A 64 MiB PROT_NONE reservation with 8 MiB committed by mprotect and
// touched: 8 MiB live within 1%, 56 MiB reserved. Then unmapped in two
// calls, the first starting inside it: back to zero, live and reserved.
void expect_commit_counts(const char *mode) {
  TraceSession s = trace({"commit", "8"}, mode);
  const Json &snap = s.snapshot();
  const std::string ctx = std::string("mode ") + mode + "\n" + describe_sites(snap) + s.diagnostics();
  const CommitFigures f = commit_figures(snap);
  printf("commit 8 of 64 MiB, mode %s: reserve_space live %lld, process reserved %lld\n", mode,
         (long long)f.live, (long long)f.reserved);
  EXPECT_NEAR(static_cast<double>(f.live), 8.0 * kMiB, 0.01 * 8 * kMiB) << ctx;
  EXPECT_NEAR(static_cast<double>(reserved_of(snap, "mmap")), 56.0 * kMiB, 0.01 * 56 * kMiB) << ctx;
  s.target().write_line("unmap");
  ASSERT_EQ(s.target().read_line(10s), std::optional<std::string>("unmapped")) << ctx;
  CommitFigures after;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    after = commit_figures(s.next_snapshot(5s));
    if (after.live <= 0 && after.reserved == 0) break;
  }
  printf("after unmap, mode %s: reserve_space live %lld, process reserved %lld\n", mode, (long long)after.live,
         (long long)after.reserved);
  EXPECT_LE(after.live, 0) << ctx;
  EXPECT_EQ(after.reserved, 0) << ctx;
  s.target().write_line("exit");
}

TEST_F(ReservedSpace, CommittedReservationIsLiveFull) { expect_commit_counts("full"); }
TEST_F(ReservedSpace, CommittedReservationIsLiveLight) { expect_commit_counts("light"); }

}  // namespace
}  // namespace lw::itest
