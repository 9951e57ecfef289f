// SPDX-License-Identifier: Apache-2.0
#include "core/analysis/rss_breakdown.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <thread>

namespace lw {
namespace {

constexpr const char* kRollup =
    "55d0c0000000-7ffd00000000 ---p 00000000 00:00 0                          [rollup]\n"
    "Rss:               10240 kB\n"
    "Pss:                9000 kB\n"
    "Anonymous:          8192 kB\n"
    "Swap:                  4 kB\n";

TEST(RssBreakdown, ParsesRollup) {
  auto r = parse_smaps_rollup(kRollup);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rss, 10240u << 10);
  EXPECT_EQ(r->anonymous, 8192u << 10);
  EXPECT_EQ(r->swap, 4u << 10);
}

TEST(RssBreakdown, RollupRejectsMalformed) {
  EXPECT_FALSE(parse_smaps_rollup(""));
  EXPECT_FALSE(parse_smaps_rollup("Rss: 12 kB\n"));                  // no Anonymous
  EXPECT_FALSE(parse_smaps_rollup("Rss: 12 MB\nAnonymous: 1 kB\n"));  // unit
  EXPECT_FALSE(parse_smaps_rollup("Rss: 99999999999999999999999 kB\nAnonymous: 1 kB\n"));
  EXPECT_FALSE(parse_smaps_rollup("Rss: 18014398509481984 kB\nAnonymous: 1 kB\n"));  // << 10 overflows
  EXPECT_FALSE(parse_smaps_rollup("Rss: -5 kB\nAnonymous: 1 kB\n"));
  // The first value wins; a repeated key cannot override it.
  auto r = parse_smaps_rollup("Rss: 8 kB\nAnonymous: 4 kB\nRss: 999 kB\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rss, 8u << 10);
}

constexpr const char* kSmaps =
    "55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]\n"
    "Size:                132 kB\n"
    "Rss:                 100 kB\n"
    "Anonymous:           100 kB\n"
    "VmFlags: rd wr mr mw me ac sd\n"
    "7f0000000000-7f0000400000 rw-p 00000000 00:00 0 \n"
    "Rss:                1024 kB\n"
    "Anonymous:          1024 kB\n"
    "THPeligible:    0\n"
    "7f0004200000-7f0004400000 rw-p 00000000 00:00 0 \n"
    "Rss:                  40 kB\n"
    "Anonymous:            40 kB\n"
    "7f1000000000-7f1000010000 r-xp 00000000 08:01 1234                       /usr/lib/libc.so.6\n"
    "Rss:                  64 kB\n"
    "Anonymous:             0 kB\n"
    "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n"
    "Rss:                  16 kB\n"
    "Anonymous:            16 kB\n";

TEST(RssBreakdown, ParsesSmapsAndClassifies) {
  ParsedSmaps s = parse_smaps(kSmaps);
  EXPECT_EQ(s.malformed_lines, 0u);
  ASSERT_EQ(s.mappings.size(), 5u);
  EXPECT_EQ(s.mappings[0].anonymous, 100u << 10);
  EXPECT_TRUE(is_heap_region(s.mappings[0].map));
  EXPECT_TRUE(is_heap_region(s.mappings[1].map));   // 64 MiB aligned: an arena
  EXPECT_FALSE(is_heap_region(s.mappings[2].map));  // not aligned
  EXPECT_FALSE(is_heap_region(s.mappings[3].map));  // file
  SmapsRollup rollup;
  rollup.rss = 2000u << 10;
  rollup.anonymous = 1300u << 10;
  // 0x7f0004200100 lies in the third mapping: a thread's stack.
  RssRegions r = classify_smaps(rollup, s, {0x7f0004200100, 0x1234});
  EXPECT_EQ(r.anon_total, 1300u << 10);
  EXPECT_EQ(r.file_rss, 700u << 10);
  EXPECT_EQ(r.heap_regions, 1124u << 10);
  EXPECT_EQ(r.stacks, 56u << 10);
  EXPECT_EQ(r.stacks_located, 2u);
}

TEST(RssBreakdown, SmapsSurvivesHostileInput) {
  const std::string junk =
      "zzzz\n"
      "Rss: 4 kB\n"                                             // before any header
      "7f0000400000-7f0000300000 rw-p 00000000 00:00 0 \n"      // start > end
      "Rss: 5 kB\n"                                             // not attributed
      "7f0000400000-7f0000401000 rw-p 00000000 00:00 0 \n"
      "Rss: 999999 kB\n"                                        // more than the mapping
      "Anonymous: 999999 kB\n"
      "7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n"      // out of order
      "Anonymous: 4 kB\n"
      "\n\n:\n-\n0x-0x\n" + std::string(10000, 'A') + "\n";
  ParsedSmaps s = parse_smaps(junk);
  ASSERT_EQ(s.mappings.size(), 1u);
  EXPECT_EQ(s.mappings[0].rss, 4096u);  // clamped to the mapping's size
  EXPECT_EQ(s.mappings[0].anonymous, 4096u);
  EXPECT_GE(s.malformed_lines, 3u);
  // Every prefix of a valid file parses without harm.
  const std::string ok = kSmaps;
  for (size_t i = 0; i < ok.size(); ++i) parse_smaps(std::string_view(ok).substr(0, i));
}

TEST(RssBreakdown, ParsesSyscallStackPointer) {
  EXPECT_EQ(parse_syscall_sp("270 0xfb 0x7ffe88f31480 0x0 0x0 0x7ffe88f31390 0x7ffe88f313a0 "
                             "0x7ffe88f31360 0x7fb6603dcaec\n"),
            0x7ffe88f31360u);
  EXPECT_EQ(parse_syscall_sp("-1 0x7ffe0000 0x401000\n"), 0x7ffe0000u);
  EXPECT_FALSE(parse_syscall_sp("running\n"));
  EXPECT_FALSE(parse_syscall_sp(""));
  EXPECT_FALSE(parse_syscall_sp("1 2 3 4"));
  EXPECT_FALSE(parse_syscall_sp("-1 7ffe0000 0x401000"));  // no 0x
  EXPECT_FALSE(parse_syscall_sp("-1 0xzz 0x401000"));
  EXPECT_FALSE(parse_syscall_sp("-1 0x0 0x401000"));
  EXPECT_FALSE(parse_syscall_sp("-1 0x11111111111111111111 0x1"));  // overflow
  EXPECT_FALSE(parse_syscall_sp(std::string(4096, '1')));
}

TEST(RssBreakdown, GlibcChunkBytes) {
  TrackedBytes t;
  t.live_heap_requested = 64;
  t.live_heap_allocations = 1;
  t.glibc = true;
  EXPECT_EQ(heap_chunk_bytes(t), 80u);  // glibc's 64 B request is an 80 B chunk
  t.glibc = false;
  EXPECT_EQ(heap_chunk_bytes(t), 64u);
  t.glibc = true;
  t.live_heap_allocations = UINT64_MAX;
  EXPECT_EQ(heap_chunk_bytes(t), UINT64_MAX);  // saturates
}

uint64_t sum(const RssBreakdown& b) {
  return b.live_heap + b.held_or_retained + b.tracked_mmap + b.stacks + b.untracked;
}

TEST(RssBreakdown, ArithmeticAddsUp) {
  RssRegions r;
  r.anon_total = 1000;
  r.heap_regions = 700;
  r.stacks = 50;
  r.file_rss = 300;
  TrackedBytes t;
  t.live_heap_requested = 400;
  t.live_mmap = 100;
  RssBreakdown b = compute_rss_breakdown(r, t);
  EXPECT_TRUE(b.valid);
  EXPECT_EQ(b.live_heap, 400u);
  EXPECT_EQ(b.tracked_mmap, 100u);
  EXPECT_EQ(b.stacks, 50u);
  EXPECT_EQ(b.held_or_retained, 300u);   // heap regions beyond the live heap
  EXPECT_EQ(b.untracked, 150u);  // the rest
  EXPECT_EQ(b.file_rss, 300u);
  EXPECT_EQ(sum(b), 1000u);
  EXPECT_EQ(b.unattributed_tracked, 0u);
}

TEST(RssBreakdown, ArithmeticClampsTrackedAboveResident) {
  RssRegions r;
  r.anon_total = 100;
  r.heap_regions = 90;
  r.stacks = 500;  // more than everything: clamped
  TrackedBytes t;
  t.live_heap_requested = 1000;
  t.live_mmap = 10;
  RssBreakdown b = compute_rss_breakdown(r, t);
  EXPECT_EQ(b.stacks, 100u);
  EXPECT_EQ(b.live_heap, 0u);
  EXPECT_EQ(sum(b), 100u);
  EXPECT_EQ(b.unattributed_tracked, 1010u);

  r.stacks = 0;
  b = compute_rss_breakdown(r, t);
  EXPECT_EQ(b.live_heap, 100u);
  EXPECT_EQ(b.held_or_retained, 0u);
  EXPECT_EQ(b.untracked, 0u);
  EXPECT_EQ(sum(b), 100u);
  EXPECT_EQ(b.unattributed_tracked, 910u);
}

TEST(RssBreakdown, SamplerReadsItselfAndBoundsTheRate) {
  RssSampler s(15);
  TrackedBytes t;
  RssBreakdown b = s.sample(getpid(), 1000, t);
  ASSERT_TRUE(b.valid);
  EXPECT_GT(b.anon_total, 0u);
  EXPECT_EQ(sum(b), b.anon_total);
  EXPECT_GE(b.stacks_located, 1u);  // at least [stack]
  EXPECT_EQ(s.reads(), 1u);
  s.sample(getpid(), 1010, t);
  EXPECT_EQ(s.reads(), 1u);  // within the interval: the cached regions
  s.sample(getpid(), 1016, t);
  EXPECT_EQ(s.reads(), 2u);
  s.retain({});
  s.sample(getpid(), 1017, t);
  EXPECT_EQ(s.reads(), 3u);  // forgotten: read again
  EXPECT_FALSE(s.sample(-5, 1017, t).valid);
}

// Threads other than main have no [stack] label: their stacks are found
// by the stack pointer in task/TID/syscall (a thread blocked in read()).
TEST(RssBreakdown, FindsAnotherThreadsStack) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::thread blocked([&] {
    char c;
    (void)!read(fds[0], &c, 1);
  });
  usleep(100000);
  std::optional<RssRegions> r = read_rss_regions(getpid());
  (void)!write(fds[1], "x", 1);
  blocked.join();
  close(fds[0]);
  close(fds[1]);
  ASSERT_TRUE(r);
  EXPECT_GE(r->threads, 2u);
  EXPECT_GE(r->stacks_located, 2u);  // [stack] and the blocked thread's
}

}  // namespace
}  // namespace lw
