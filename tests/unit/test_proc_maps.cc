// SPDX-License-Identifier: Apache-2.0
#include "core/proc/proc_maps.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <fstream>
#include <string>

namespace lw {
namespace {

TEST(ProcMaps, ParsesFileBackedLine) {
  ParsedMaps m = parse_proc_maps(
      "7f12a000-7f12c000 r-xp 00001000 08:01 1234                       "
      "/usr/lib/x86_64-linux-gnu/libc.so.6\n");
  ASSERT_EQ(m.entries.size(), 1u);
  EXPECT_EQ(m.malformed_lines, 0u);
  const MapEntry& e = m.entries[0];
  EXPECT_EQ(e.start, 0x7f12a000u);
  EXPECT_EQ(e.end, 0x7f12c000u);
  EXPECT_EQ(e.offset, 0x1000u);
  EXPECT_EQ(e.dev_major, 8u);
  EXPECT_EQ(e.dev_minor, 1u);
  EXPECT_EQ(e.inode, 1234u);
  EXPECT_TRUE(e.readable);
  EXPECT_FALSE(e.writable);
  EXPECT_TRUE(e.executable);
  EXPECT_TRUE(e.is_private);
  EXPECT_EQ(e.path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
  EXPECT_FALSE(e.deleted);
  EXPECT_TRUE(e.is_file());
}

TEST(ProcMaps, DeletedSuffixIsStripped) {
  ParsedMaps m = parse_proc_maps("1000-2000 r--s 00000000 fd:02 99 /tmp/x.so (deleted)\n");
  ASSERT_EQ(m.entries.size(), 1u);
  EXPECT_EQ(m.entries[0].path, "/tmp/x.so");
  EXPECT_TRUE(m.entries[0].deleted);
  EXPECT_FALSE(m.entries[0].is_private);
  EXPECT_EQ(m.entries[0].dev_major, 0xfdu);
}

TEST(ProcMaps, PathWithSpacesIsKeptWhole) {
  ParsedMaps m = parse_proc_maps("1000-2000 r-xp 00000000 08:01 5   /opt/my app/lib  x.so\n");
  ASSERT_EQ(m.entries.size(), 1u);
  EXPECT_EQ(m.entries[0].path, "/opt/my app/lib  x.so");
}

TEST(ProcMaps, AnonymousAndSpecialMappings) {
  ParsedMaps m = parse_proc_maps(
      "1000-2000 rw-p 00000000 00:00 0 \n"
      "2000-3000 rw-p 00000000 00:00 0\n"
      "3000-4000 rw-p 00000000 00:00 0                          [heap]\n"
      "7ffd0000-7ffd1000 r-xp 00000000 00:00 0                  [vdso]\n"
      "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0  [vsyscall]\n");
  ASSERT_EQ(m.entries.size(), 5u);
  EXPECT_EQ(m.malformed_lines, 0u);
  EXPECT_EQ(m.entries[0].path, "");
  EXPECT_EQ(m.entries[1].path, "");
  EXPECT_EQ(m.entries[2].path, "[heap]");
  EXPECT_EQ(m.entries[3].path, "[vdso]");
  EXPECT_EQ(m.entries[4].start, 0xffffffffff600000u);
  EXPECT_FALSE(m.entries[4].readable);
  for (const MapEntry& e : m.entries) EXPECT_FALSE(e.is_file()) << e.path;
}

TEST(ProcMaps, MalformedLinesAreSkippedAndCounted) {
  const std::string good = "1000-2000 r-xp 00000000 08:01 7 /lib/a.so\n";
  const char* bad[] = {
      "garbage\n",
      "1000-2000\n",
      "1000 2000 r-xp 00000000 08:01 7 /lib/a.so\n",
      "zz00-2000 r-xp 00000000 08:01 7 /lib/a.so\n",
      "1000-2000 rwzp 00000000 08:01 7 /lib/a.so\n",
      "1000-2000 r-xp 0000000g 08:01 7 /lib/a.so\n",
      "1000-2000 r-xp 00000000 0801 7 /lib/a.so\n",
      "1000-2000 r-xp 00000000 08:01 /lib/a.so\n",
      "1000-2000 r-xp 00000000 08:01 7abc /lib/a.so\n",
      "2000-1000 r-xp 00000000 08:01 7 /lib/a.so\n",                // end before start
      "10000000000000000-10000000000000001 r-xp 0 08:01 7 /x\n",    // 17 hex digits
      "1000-2000 r-xp 00000000 08:01 99999999999999999999999 /x\n",  // inode overflow
      "1000-2000 r-xp 00000000 123456789:01 7 /x\n",                 // device overflow
      "1000-2000 r-x\n",
  };
  const std::string good2 = "3000-4000 r-xp 00000000 08:01 7 /lib/a.so\n";
  std::string text = good;
  for (const char* b : bad) text += b;
  text += good2;
  ParsedMaps m = parse_proc_maps(text);
  EXPECT_EQ(m.entries.size(), 2u);
  EXPECT_EQ(m.malformed_lines, std::size(bad));

  // A cut last line (no newline) is parsed if complete, counted if not.
  EXPECT_EQ(parse_proc_maps(good + "2000-3000 r-xp 0 08:01 7 /lib/b.so").entries.size(), 2u);
  EXPECT_EQ(parse_proc_maps(good + "1000-2000 r-xp 0 08:").malformed_lines, 1u);
}

TEST(ProcMaps, OverlongPathIsSkipped) {
  const std::string prefix = "1000-2000 r-xp 00000000 08:01 7 /";
  ParsedMaps ok = parse_proc_maps(prefix + std::string(4095, 'a') + "\n");
  ASSERT_EQ(ok.entries.size(), 1u);
  EXPECT_EQ(ok.entries[0].path.size(), 4096u);

  ParsedMaps too_long = parse_proc_maps(prefix + std::string(4096, 'a') + "\n" +
                                        prefix + std::string(10 << 20, 'b') + "\n");
  EXPECT_TRUE(too_long.entries.empty());
  EXPECT_EQ(too_long.malformed_lines, 2u);
}

TEST(ProcMaps, BinaryGarbageNeverCrashes) {
  std::string text;
  uint32_t x = 12345;
  for (int i = 0; i < 1 << 16; ++i) {
    x = x * 1103515245 + 12345;
    text += static_cast<char>(x >> 16);
  }
  ParsedMaps m = parse_proc_maps(text);
  EXPECT_GT(m.malformed_lines, 0u);
  EXPECT_TRUE(parse_proc_maps("").entries.empty());
  EXPECT_TRUE(parse_proc_maps("\n\n\n").entries.empty());
  EXPECT_EQ(parse_proc_maps("\n\n\n").malformed_lines, 0u);
}

TEST(ProcMaps, FindMappingBinarySearch) {
  ParsedMaps m = parse_proc_maps(
      "1000-2000 r-xp 00000000 08:01 7 /a\n"
      "2000-3000 rw-p 00001000 08:01 7 /a\n"
      "5000-6000 r-xp 00000000 08:01 8 /b\n");
  EXPECT_EQ(find_mapping(m, 0xfff), nullptr);
  EXPECT_EQ(find_mapping(m, 0x1000), &m.entries[0]);
  EXPECT_EQ(find_mapping(m, 0x1fff), &m.entries[0]);
  EXPECT_EQ(find_mapping(m, 0x2000), &m.entries[1]);
  EXPECT_EQ(find_mapping(m, 0x3000), nullptr);
  EXPECT_EQ(find_mapping(m, 0x5800), &m.entries[2]);
  EXPECT_EQ(find_mapping(m, 0x6000), nullptr);
  EXPECT_EQ(find_mapping(ParsedMaps{}, 0x1000), nullptr);
}

// Code of this test binary, to look up in our own maps.
__attribute__((noinline)) void maps_anchor() { asm volatile(""); }

std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

TEST(ProcMaps, ReadsOwnMaps) {
  auto maps = read_proc_maps(getpid());
  ASSERT_TRUE(maps.ok()) << maps.error().message;
  EXPECT_EQ(maps->malformed_lines, 0u);

  const MapEntry* self =
      find_mapping(*maps, reinterpret_cast<uint64_t>(&maps_anchor));
  ASSERT_NE(self, nullptr);
  EXPECT_EQ(self->path, self_exe());
  EXPECT_TRUE(self->executable);
  struct stat st;
  ASSERT_EQ(stat(self_exe().c_str(), &st), 0);
  EXPECT_EQ(self->inode, st.st_ino);

  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(libc, nullptr);
  void* malloc_addr = dlsym(libc, "malloc");
  dlclose(libc);
  const MapEntry* m = find_mapping(*maps, reinterpret_cast<uint64_t>(malloc_addr));
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->path.ends_with("/libc.so.6")) << m->path;
  EXPECT_TRUE(m->executable);
  EXPECT_TRUE(m->is_file());
}

TEST(ProcMaps, MissingProcessIsNotFound) {
  // No pid can exceed pid_max, so this one cannot exist.
  long pid_max = 4194304;
  std::ifstream("/proc/sys/kernel/pid_max") >> pid_max;
  const pid_t pid = static_cast<pid_t>(pid_max + 1);
  auto maps = read_proc_maps(pid);
  ASSERT_FALSE(maps.ok());
  EXPECT_EQ(maps.error().code, ENOENT);
  EXPECT_EQ(maps.error().message, "process " + std::to_string(pid) + " not found");
}

}  // namespace
}  // namespace lw

TEST(ProcMaps, OutOfOrderAndOverlappingLinesAreMalformed) {
  // find_mapping() needs ascending, disjoint entries; the kernel never
  // writes anything else, so a line that breaks the order is malformed.
  const char* text =
      "2000-3000 r-xp 00000000 08:01 1 /a\n"
      "1000-2000 r-xp 00000000 08:01 2 /b\n"   // before the previous one
      "2800-3800 r-xp 00000000 08:01 3 /c\n"   // overlaps /a
      "3000-4000 r-xp 00000000 08:01 4 /d\n";  // adjacent: fine
  lw::ParsedMaps maps = lw::parse_proc_maps(text);
  ASSERT_EQ(maps.entries.size(), 2u);
  EXPECT_EQ(maps.entries[0].path, "/a");
  EXPECT_EQ(maps.entries[1].path, "/d");
  EXPECT_EQ(maps.malformed_lines, 2u);
  EXPECT_EQ(lw::find_mapping(maps, 0x1500), nullptr);
  EXPECT_EQ(lw::find_mapping(maps, 0x3500), &maps.entries[1]);
}
