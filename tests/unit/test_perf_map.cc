// SPDX-License-Identifier: Apache-2.0
// The perf-map parser (core/symbols/perf_map.h): JIT frames' names from
// /tmp/perf-PID.map, untrusted input written by the traced process.
#include "core/symbols/perf_map.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace lw {
namespace {

std::string name_at(const PerfMap& m, uint64_t addr) {
  auto s = m.lookup(addr);
  return s ? std::string(s->name) : "";
}

TEST(PerfMap, NodeLinesAreNamedByRange) {
  PerfMap m;
  m.feed("7f691c023400 378 JS:~keepBuffers /tmp/h2keep.js:2:21\n"
         "0x7f691c025500 0x1b8 JS:^keepBuffers /tmp/h2keep.js:2:21\n");
  EXPECT_EQ(m.entries(), 2u);
  EXPECT_EQ(name_at(m, 0x7f691c023400), "JS:~keepBuffers /tmp/h2keep.js:2:21");
  EXPECT_EQ(name_at(m, 0x7f691c023400 + 0x377), "JS:~keepBuffers /tmp/h2keep.js:2:21");
  EXPECT_EQ(name_at(m, 0x7f691c023400 + 0x378), "");  // one past the end
  EXPECT_EQ(name_at(m, 0x7f691c0233ff), "");
  EXPECT_EQ(name_at(m, 0x7f691c025600), "JS:^keepBuffers /tmp/h2keep.js:2:21");
  auto s = m.lookup(0x7f691c025600);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->start, 0x7f691c025500u);
  EXPECT_EQ(s->size, 0x1b8u);
}

TEST(PerfMap, ALineSplitBetweenReadsIsJoined) {
  PerfMap m;
  m.feed("1000 10 Lcom/examp");
  EXPECT_EQ(m.entries(), 0u);  // not complete yet
  m.feed("le/Leak;::keep\n20");
  m.feed("00 8 other\n");
  EXPECT_EQ(name_at(m, 0x1005), "Lcom/example/Leak;::keep");
  EXPECT_EQ(name_at(m, 0x2007), "other");
  EXPECT_EQ(m.stats().lines, 2u);
}

TEST(PerfMap, ALaterEntryWinsOverEveryOverlappingOne) {
  PerfMap m;
  m.feed("1000 100 old_a\n1100 100 old_b\n1300 10 untouched\n");
  m.feed("10f0 20 moved\n");  // overlaps the end of old_a and the start of old_b
  EXPECT_EQ(name_at(m, 0x1000), "");  // old_a is gone whole: its code was replaced
  EXPECT_EQ(name_at(m, 0x10f5), "moved");
  EXPECT_EQ(name_at(m, 0x1150), "");
  EXPECT_EQ(name_at(m, 0x1305), "untouched");
  EXPECT_EQ(m.stats().entries_replaced, 2u);
  m.feed("1300 10 recompiled\n");
  EXPECT_EQ(name_at(m, 0x1305), "recompiled");
  EXPECT_EQ(m.entries(), 2u);
}

TEST(PerfMap, MalformedLinesAreSkippedAndCounted) {
  PerfMap m;
  m.feed("zz 10 bad_start\n"
         "1000 0 zero_size\n"
         "1000 10\n"                          // no name
         "ffffffffffffffff 10 wraps\n"
         "12345678901234567 10 too_many_digits\n"
         "\n"
         "2000 10 good name with spaces \r\n");
  EXPECT_EQ(m.stats().bad_lines, 6u);
  EXPECT_EQ(m.entries(), 1u);
  EXPECT_EQ(name_at(m, 0x2000), "good name with spaces");
}

TEST(PerfMap, LongLinesAndNamesAreBounded) {
  PerfMapLimits limits;
  limits.max_line_bytes = 64;
  limits.max_name_bytes = 8;
  PerfMap m(limits);
  m.feed("1000 10 " + std::string(100, 'x'));  // over the line cap, across reads
  m.feed(std::string(100, 'y') + "\n2000 10 abcdefghijkl\n");
  EXPECT_EQ(m.stats().long_lines, 1u);
  EXPECT_EQ(name_at(m, 0x1000), "");
  EXPECT_EQ(name_at(m, 0x2000), "abcdefgh");
  EXPECT_EQ(m.stats().names_cut, 1u);
}

TEST(PerfMap, MemoryIsBoundedAndRefusalsCounted) {
  PerfMapLimits limits;
  limits.max_memory_bytes = 10 * (kPerfMapEntryOverhead + 4);
  PerfMap m(limits);
  std::string text;
  char line[64];
  for (int i = 0; i < 100; ++i) {
    snprintf(line, sizeof(line), "%x 10 f%03d\n", 0x1000 + i * 0x10, i);
    text += line;
  }
  m.feed(text);
  EXPECT_EQ(m.entries(), 10u);
  EXPECT_EQ(m.stats().entries_refused, 90u);
  EXPECT_LE(m.memory_bytes(), limits.max_memory_bytes);
  m.clear();
  EXPECT_EQ(m.entries(), 0u);
  EXPECT_EQ(m.memory_bytes(), 0u);
}

TEST(PerfMap, NspidIsTheInnermostNamespacesPid) {
  EXPECT_EQ(last_nspid("Name:\tnode\nTgid:\t4242\nNSpid:\t4242\t7\nNSpgid:\t1\n"), 7);
  EXPECT_EQ(last_nspid("NSpid:\t4242\n"), 4242);
  EXPECT_EQ(last_nspid("Name:\tx\n"), 0);
  EXPECT_EQ(last_nspid("NSpid:\t42x\n"), 0);
  EXPECT_EQ(last_nspid("NSpid:\t99999999999\n"), 0);
}

// The file reader against this process's own map: appends are read from
// the last offset, a replaced file is read anew, the file cap holds.
TEST(PerfMapFile, ReadsAppendsAndStartsOverWhenReplaced) {
  const std::string path = "/tmp/perf-" + std::to_string(getpid()) + ".map";
  unlink(path.c_str());
  PerfMapLimits limits;
  limits.max_file_bytes = 64;
  PerfMapFile f(getpid(), limits);
  EXPECT_FALSE(f.refresh());  // no map yet
  EXPECT_EQ(f.path(), path);  // outside a container, NSpid is the pid
  FILE* out = fopen(path.c_str(), "w");
  ASSERT_NE(out, nullptr);
  fputs("1000 10 first\n", out);
  fflush(out);
  EXPECT_TRUE(f.refresh());
  EXPECT_EQ(name_at(f.map(), 0x1000), "first");
  fputs("2000 10 second\n", out);
  fclose(out);
  EXPECT_TRUE(f.refresh());
  EXPECT_EQ(name_at(f.map(), 0x2000), "second");
  EXPECT_EQ(f.map().stats().bytes_read, 29u);  // each byte read once
  EXPECT_FALSE(f.refresh());

  // Replaced (a new inode, as jcmd Compiler.perfmap writes it).
  const std::string tmp = path + ".new";
  out = fopen(tmp.c_str(), "w");
  ASSERT_NE(out, nullptr);
  fputs("3000 10 third\n" "4000 10 over_the_file_cap_of_sixty_four_bytes\n", out);
  fclose(out);
  ASSERT_EQ(rename(tmp.c_str(), path.c_str()), 0);
  EXPECT_TRUE(f.refresh());
  EXPECT_EQ(f.map().stats().restarts, 1u);
  EXPECT_EQ(name_at(f.map(), 0x1000), "");
  EXPECT_EQ(name_at(f.map(), 0x3000), "third");
  EXPECT_EQ(name_at(f.map(), 0x4000), "");  // past max_file_bytes
  EXPECT_TRUE(f.map().stats().file_capped);
  unlink(path.c_str());
}

// jcmd Compiler.perfmap truncates the file and writes it anew, in place:
// the same inode, possibly longer than what was read.
TEST(PerfMapFile, AMapRewrittenInPlaceIsReadAnew) {
  const std::string path = "/tmp/perf-" + std::to_string(getpid()) + ".map";
  unlink(path.c_str());
  FILE* out = fopen(path.c_str(), "w");
  ASSERT_NE(out, nullptr);
  fputs("0x1000 0x10 Interpreter\n0x2000 0x10 LOld;::gone\n", out);
  fclose(out);
  PerfMapFile f(getpid());
  EXPECT_TRUE(f.refresh());
  EXPECT_EQ(name_at(f.map(), 0x2000), "LOld;::gone");
  out = fopen(path.c_str(), "w");  // truncates: the same inode
  ASSERT_NE(out, nullptr);
  fputs("0x1000 0x10 Interpreter\n0x3000 0x10 LNew;::compiledLater\n0x4000 0x10 LNew;::more\n", out);
  fclose(out);
  EXPECT_TRUE(f.refresh());
  EXPECT_EQ(f.map().stats().restarts, 1u);
  EXPECT_EQ(name_at(f.map(), 0x2000), "");
  EXPECT_EQ(name_at(f.map(), 0x3000), "LNew;::compiledLater");
  EXPECT_EQ(name_at(f.map(), 0x4000), "LNew;::more");
  EXPECT_EQ(name_at(f.map(), 0x1000), "Interpreter");
  unlink(path.c_str());
}

TEST(PerfMapFile, AFifoInPlaceOfTheMapIsNotOpened) {
  const std::string path = "/tmp/perf-" + std::to_string(getpid()) + ".map";
  unlink(path.c_str());
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  PerfMapFile f(getpid());
  EXPECT_FALSE(f.refresh());  // returns at once: a FIFO would block an open for reading
  EXPECT_EQ(f.map().entries(), 0u);
  unlink(path.c_str());
}

}  // namespace
}  // namespace lw
