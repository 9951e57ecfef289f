#include "daemon/core/probe_placement.h"

#include <gtest/gtest.h>

#include "daemon/core/stack_id.h"

namespace lw {
namespace {

TEST(ProbePlacement, GlibcFreeMovesPastNullCheck) {
  // glibc 2.36 free: test %rdi,%rdi; je rel32; push %rbp
  const uint8_t code[] = {0x48, 0x85, 0xff, 0x0f, 0x84, 0xbf, 0x00, 0x00, 0x00, 0x55, 0x48};
  ProbePlacement p = place_entry_only_probe_bytes(code, sizeof(code), 0x1000);
  EXPECT_EQ(p.vaddr, 0x1009u);
  EXPECT_TRUE(p.emulated);
}

TEST(ProbePlacement, EndbrAndShortJe) {
  const uint8_t code[] = {0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x85, 0xff, 0x74, 0x10, 0x41, 0x54};
  ProbePlacement p = place_entry_only_probe_bytes(code, sizeof(code), 0x2000);
  EXPECT_EQ(p.vaddr, 0x2000u + 9);
  EXPECT_TRUE(p.emulated);
}

TEST(ProbePlacement, PushAtEntryStays) {
  const uint8_t code[] = {0x41, 0x54, 0x55};
  ProbePlacement p = place_entry_only_probe_bytes(code, sizeof(code), 0x3000);
  EXPECT_EQ(p.vaddr, 0x3000u);
  EXPECT_EQ(p.skipped, 0u);
}

TEST(ProbePlacement, UnknownPrologueFallsBackToEntry) {
  // test %rsi,%rsi (another register): skipping it would change meaning.
  const uint8_t other_reg[] = {0x48, 0x85, 0xf6, 0x74, 0x10, 0x55};
  EXPECT_EQ(place_entry_only_probe_bytes(other_reg, sizeof(other_reg), 0x10).vaddr, 0x10u);
  // jne instead of je: the NULL path is the fall-through, not skippable.
  const uint8_t jne[] = {0x48, 0x85, 0xff, 0x75, 0x10, 0x55};
  EXPECT_EQ(place_entry_only_probe_bytes(jne, sizeof(jne), 0x10).vaddr, 0x10u);
  // Landing instruction not emulated (mov): stay at entry.
  const uint8_t mov_after[] = {0x48, 0x85, 0xff, 0x74, 0x10, 0x48, 0x89, 0xfb};
  EXPECT_EQ(place_entry_only_probe_bytes(mov_after, sizeof(mov_after), 0x10).vaddr, 0x10u);
  // Truncated code.
  const uint8_t short_code[] = {0x48, 0x85};
  EXPECT_EQ(place_entry_only_probe_bytes(short_code, sizeof(short_code), 0x10).vaddr, 0x10u);
}

TEST(StackId, StableAndSensitiveToEveryField) {
  Frame a;
  a.module = "/usr/lib/libc.so.6";
  a.build_id = "abcd";
  a.offset = 0x1234;
  Frame b = a;
  b.offset = 0x5678;
  uint64_t id = stable_stack_id({a, b});
  EXPECT_EQ(id, stable_stack_id({a, b}));
  EXPECT_NE(id, stable_stack_id({b, a}));
  Frame c = a;
  c.build_id = "abce";
  EXPECT_NE(id, stable_stack_id({c, b}));
  // Function names and paths do not matter when the build-id is known: the
  // same binary installed elsewhere gives the same id.
  Frame d = a;
  d.module = "/opt/other/libc.so.6";
  d.function = "x";
  EXPECT_EQ(id, stable_stack_id({d, b}));
  EXPECT_EQ(stack_id_hex(0x1a).size(), 16u);
  // Pinned value: the id is a contract across versions and hosts.
  EXPECT_EQ(stack_id_hex(stable_stack_id({})), "cbf29ce484222325");
}

}  // namespace
}  // namespace lw
