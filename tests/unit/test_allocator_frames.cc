// SPDX-License-Identifier: Apache-2.0
// Light-tier sites are named after the allocator's caller, not glibc's
// internals (core/symbols/stack_frames.h allocator_leaf_frames; issue 35,
// item 7).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/symbols/stack_frames.h"

namespace lw {
namespace {

Frame native(const std::string& function, const std::string& module, bool inlined = false) {
  Frame f;
  f.function = function;
  f.module = module;
  f.inlined = inlined;
  return f;
}

const std::string kLibc = "/usr/lib/x86_64-linux-gnu/libc.so.6";

TEST(AllocatorFrames, GlibcsMallocUnderABrkIsDroppedDownToItsCaller) {
  // What the brk wrapper's probe saw under a malloc, issue 35's example.
  std::vector<Frame> frames = {native("__default_morecore@GLIBC_2.2.5", kLibc), native("sysmalloc", kLibc),
                               native("_int_malloc", kLibc),        native("malloc", kLibc),
                               native("make_entry", "/usr/bin/app"), native("main", "/usr/bin/app")};
  EXPECT_EQ(allocator_leaf_frames(frames), 4u);
  // A thread's first arena, made from free: the same.
  frames = {native("alloc_new_heap", kLibc), native("_int_new_arena", kLibc), native("arena_get2.part.0", kLibc),
            native("tcache_init.part.0", kLibc), native("free", kLibc), native("worker", "/usr/bin/app")};
  EXPECT_EQ(allocator_leaf_frames(frames), 5u);
}

TEST(AllocatorFrames, InlinedHelpersGoWithTheirFrame) {
  std::vector<Frame> frames = {native("checked_request2size", kLibc, true), native("_int_malloc", kLibc),
                               native("tcache_get", kLibc, true), native("__libc_malloc", kLibc),
                               native("caller", "/usr/bin/app")};
  EXPECT_EQ(allocator_leaf_frames(frames), 4u);
}

TEST(AllocatorFrames, OnlyGlibcsAllocatorAndNeverTheWholeStack) {
  // The caller is a libc function that is not the allocator: it stays.
  std::vector<Frame> frames = {native("sysmalloc", kLibc), native("malloc", kLibc), native("strdup", kLibc),
                               native("main", "/usr/bin/app")};
  EXPECT_EQ(allocator_leaf_frames(frames), 2u);
  // A program's own function called malloc: not libc's, kept.
  frames = {native("malloc", "/usr/bin/app"), native("main", "/usr/bin/app")};
  EXPECT_EQ(allocator_leaf_frames(frames), 0u);
  // libc without symbols (Debian's, without libc6-dbg): its frames at the
  // leaf go, the caller is named.
  frames = {native("", kLibc), native("", kLibc), native("main", "/usr/bin/app")};
  EXPECT_EQ(allocator_leaf_frames(frames), 2u);
  // A libc function that is not the allocator stays (a thread's stack).
  frames = {native("allocate_stack", kLibc), native("pthread_create@@GLIBC_2.34", kLibc),
            native("main", "/usr/bin/app")};
  EXPECT_EQ(allocator_leaf_frames(frames), 0u);
  // All allocator: the last stays.
  frames = {native("sysmalloc", kLibc), native("malloc", kLibc)};
  EXPECT_EQ(allocator_leaf_frames(frames), 1u);
  EXPECT_EQ(allocator_leaf_frames({}), 0u);
}

}  // namespace
}  // namespace lw
