// SPDX-License-Identifier: Apache-2.0
#include "core/probes/probe_placement.h"

#include <unistd.h>

#include <cstdio>

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "core/symbols/elf_file.h"
#include "core/symbols/stack_id.h"

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

// glibc 2.36 posix_memalign, whole (0x78 bytes): cmpb $0,disp32(%rip);
// push %r12; ... two ret; a slow path that jumps back to +0x16.
const uint8_t kPosixMemalign[] = {
    0x80, 0x3d, 0x01, 0x02, 0x14, 0x00, 0x00, 0x41, 0x54, 0x49, 0x89, 0xd4, 0x55, 0x48, 0x89,
    0xfd, 0x53, 0x48, 0x89, 0xf3, 0x74, 0x5a, 0x48, 0x89, 0xda, 0x48, 0xc1, 0xea, 0x03, 0x48,
    0x8d, 0x42, 0xff, 0x48, 0x21, 0xd0, 0x48, 0x89, 0xda, 0x83, 0xe2, 0x07, 0x48, 0x09, 0xd0,
    0x75, 0x31, 0x48, 0x85, 0xdb, 0x74, 0x2c, 0x4c, 0x89, 0xe6, 0x48, 0x89, 0xdf, 0xe8, 0x91,
    0xe9, 0xff, 0xff, 0x48, 0x89, 0xc2, 0xb8, 0x0c, 0x00, 0x00, 0x00, 0x48, 0x85, 0xd2, 0x74,
    0x06, 0x48, 0x89, 0x55, 0x00, 0x31, 0xc0, 0x5b, 0x5d, 0x41, 0x5c, 0xc3, 0x66, 0x0f, 0x1f,
    0x84, 0x00, 0x00, 0x00, 0x00, 0x00, 0x5b, 0xb8, 0x16, 0x00, 0x00, 0x00, 0x5d, 0x41, 0x5c,
    0xc3, 0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0xe8, 0xfb, 0xaf, 0xff, 0xff, 0xeb, 0x9f, 0x66,
    0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00};

TEST(ReturnProbePlacement, PosixMemalignMovesPastCmpbToPush) {
  static_assert(sizeof(kPosixMemalign) == 0x80);
  ProbePlacement p = place_return_probe_bytes(kPosixMemalign, sizeof(kPosixMemalign), 0x9a280);
  EXPECT_EQ(p.vaddr, 0x9a287u) << p.reason;
  EXPECT_EQ(p.skipped, 7u);
  EXPECT_TRUE(p.emulated);
  EXPECT_NE(p.reason.find("after cmp"), std::string::npos) << p.reason;
}

TEST(ReturnProbePlacement, MemalignLandsOnJe) {
  // cmpb $0,disp32(%rip); je +7; jmp rel32 (tail call); xchg; slow path:
  // call rel32; jmp back to the je's fall-through (+9, outside the range).
  const uint8_t code[] = {0x80, 0x3d, 0x71, 0x0e, 0x14, 0x00, 0x00, 0x74, 0x07, 0xe9, 0x32,
                          0xf6, 0xff, 0xff, 0x66, 0x90, 0xe8, 0x00, 0x00, 0x00, 0x00, 0xeb,
                          0xf2};
  ProbePlacement p = place_return_probe_bytes(code, sizeof(code), 0x1000);
  EXPECT_EQ(p.vaddr, 0x1007u) << p.reason;
  EXPECT_TRUE(p.emulated);
}

TEST(ReturnProbePlacement, BranchIntoTheSkippedRangeKeepsTheEntry) {
  // Same, but the slow path jumps back to the je itself (+7): the probe
  // would run twice for one call.
  const uint8_t code[] = {0x80, 0x3d, 0x71, 0x0e, 0x14, 0x00, 0x00, 0x74, 0x07, 0xe9, 0x32,
                          0xf6, 0xff, 0xff, 0x66, 0x90, 0xe8, 0x00, 0x00, 0x00, 0x00, 0xeb,
                          0xf0};
  ProbePlacement p = place_return_probe_bytes(code, sizeof(code), 0x1000);
  EXPECT_EQ(p.vaddr, 0x1000u);
  EXPECT_EQ(p.reason, "entry: a branch in the function targets the skipped range");
  // A call to the function's own first instruction is a new call: allowed?
  // No: it re-enters through the skipped range as well, and is refused too.
  const uint8_t self_call[] = {0x80, 0x3d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x53,
                               0xe8, 0xf3, 0xff, 0xff, 0xff, 0x5b, 0xc3};
  EXPECT_EQ(place_return_probe_bytes(self_call, sizeof(self_call), 0x2000).vaddr, 0x2000u);
}

TEST(ReturnProbePlacement, RefusesWhatTheRuleDoesNotCover) {
  // An indirect jump (jump table) anywhere in the function.
  const uint8_t indirect[] = {0x80, 0x3d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x53, 0xff, 0xe0, 0x5b, 0xc3};
  EXPECT_EQ(place_return_probe_bytes(indirect, sizeof(indirect), 0x10).reason,
            "entry: indirect jump in the function");
  // A skipped instruction that writes an argument register (mov %rax,%rdi;
  // mov %eax,%esi; lea 8(%rax),%rdx): not skippable.
  const uint8_t writes[] = {0x48, 0x89, 0xc7, 0x53, 0x5b, 0xc3};
  EXPECT_EQ(place_return_probe_bytes(writes, sizeof(writes), 0x10).vaddr, 0x10u);
  const uint8_t writes_esi[] = {0x89, 0xc6, 0x53, 0x5b, 0xc3};
  EXPECT_EQ(place_return_probe_bytes(writes_esi, sizeof(writes_esi), 0x10).vaddr, 0x10u);
  const uint8_t lea_rdx[] = {0x48, 0x8d, 0x50, 0x08, 0x53, 0x5b, 0xc3};
  EXPECT_EQ(place_return_probe_bytes(lea_rdx, sizeof(lea_rdx), 0x10).vaddr, 0x10u);
  // One that writes memory (mov %rdi,(%rax)): not skippable.
  const uint8_t stores[] = {0x48, 0x89, 0x38, 0x53, 0x5b, 0xc3};
  EXPECT_EQ(place_return_probe_bytes(stores, sizeof(stores), 0x10).vaddr, 0x10u);
  // One that loads from the stack (mov (%rsp),%rax): not skippable.
  const uint8_t stack_load[] = {0x48, 0x8b, 0x04, 0x24, 0x53, 0x5b, 0xc3};
  EXPECT_EQ(place_return_probe_bytes(stack_load, sizeof(stack_load), 0x10).vaddr, 0x10u);
  // cmp involving %rsp: not skippable.
  const uint8_t rsp_cmp[] = {0x48, 0x39, 0xe7, 0x53, 0x5b, 0xc3};
  EXPECT_EQ(place_return_probe_bytes(rsp_cmp, sizeof(rsp_cmp), 0x10).vaddr, 0x10u);
  // Landing on an instruction the kernel single-steps (mov).
  const uint8_t mov_land[] = {0x80, 0x3d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x48, 0x89, 0xfb, 0xc3};
  EXPECT_EQ(place_return_probe_bytes(mov_land, sizeof(mov_land), 0x10).reason,
            "entry: instruction after the skipped ones is not emulated");
  // Bytes that do not decode to the end (a truncated instruction).
  const uint8_t truncated[] = {0x80, 0x3d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x53, 0x48, 0x89};
  EXPECT_EQ(place_return_probe_bytes(truncated, sizeof(truncated), 0x10).reason,
            "entry: function does not decode whole");
  // Already emulated at the symbol (glibc malloc: push %r12): stays, no decode.
  const uint8_t push[] = {0x41, 0x54, 0x55, 0xc3};
  ProbePlacement p = place_return_probe_bytes(push, sizeof(push), 0x10);
  EXPECT_EQ(p.vaddr, 0x10u);
  EXPECT_TRUE(p.emulated);
  // Eleven skippable instructions (endbr64, ten tests): only ten may be
  // skipped, and the eleventh is not emulated.
  std::vector<uint8_t> eleven = {0xf3, 0x0f, 0x1e, 0xfa};
  for (int i = 0; i < 10; ++i) eleven.insert(eleven.end(), {0x48, 0x85, 0xff});
  eleven.insert(eleven.end(), {0x53, 0xc3});
  EXPECT_EQ(place_return_probe_bytes(eleven.data(), eleven.size(), 0x10).vaddr, 0x10u);
  // Ten: the push after them is where it lands.
  eleven.erase(eleven.begin() + 4, eleven.begin() + 7);
  EXPECT_EQ(place_return_probe_bytes(eleven.data(), eleven.size(), 0x10).vaddr, 0x10u + 4 + 27);
}

TEST(ReturnProbePlacement, TcmallocPrologueLandsOnItsJne) {
  // libtcmalloc 2.10's malloc: mov 0x0(%rip),%rax; mov %rdi,%r8;
  // test %rax,%rax; jne +2; xor %eax,%eax; ret; ret. %rax and %r8 are not
  // read by the programs; the jne is emulated.
  const uint8_t code[] = {0x48, 0x8b, 0x05, 0x00, 0x00, 0x00, 0x00, 0x49, 0x89, 0xf8, 0x48,
                          0x85, 0xc0, 0x75, 0x03, 0x31, 0xc0, 0xc3, 0xc3};
  ProbePlacement p = place_return_probe_bytes(code, sizeof(code), 0x1000);
  EXPECT_EQ(p.vaddr, 0x100du) << p.reason;
  EXPECT_TRUE(p.emulated);
  EXPECT_EQ(p.reason, "after test (%rsp, [sp] and the argument registers unchanged)");
}

// jemalloc 5.3's free: nine instructions computing its thread cache's slot
// (loads, ALU steps, one of them into %rdx) before the first branch. free's
// program reads only %rdi, so its probe moves to the jne; a function whose
// program reads %rdx as well stays at its entry.
TEST(ReturnProbePlacement, JemallocFreeMovesPastItsSlotArithmetic) {
  const uint8_t code[] = {
      0x48, 0x89, 0xf8,                                      // mov %rdi,%rax
      0x48, 0x8b, 0x15, 0x10, 0x00, 0x00, 0x00,              // mov 0x10(%rip),%rdx
      0x48, 0x89, 0xf9,                                      // mov %rdi,%rcx
      0x48, 0xc1, 0xe8, 0x1a,                                // shr $0x1a,%rax
      0x25, 0xf0, 0x00, 0x00, 0x00,                          // and $0xf0,%eax
      0x64, 0x48, 0x03, 0x04, 0x25, 0x00, 0x00, 0x00, 0x00,  // add %fs:0x0,%rax
      0x48, 0x01, 0xd0,                                      // add %rdx,%rax
      0x48, 0x3b, 0x88, 0xb0, 0x01, 0x00, 0x00,              // cmp 0x1b0(%rax),%rcx
      0x75, 0x01,                                            // jne +1
      0xc3, 0xc3};                                           // ret; ret
  ProbePlacement one = place_return_probe_bytes(code, sizeof(code), 0x2000, 1);
  EXPECT_EQ(one.vaddr, 0x2029u) << one.reason;
  EXPECT_TRUE(one.emulated);
  ProbePlacement three = place_return_probe_bytes(code, sizeof(code), 0x2000, 3);
  EXPECT_EQ(three.vaddr, 0x2000u) << three.reason;
  // An ALU step that writes %rdi keeps the probe at the entry even for free.
  uint8_t clobber[sizeof(code)];
  std::memcpy(clobber, code, sizeof(code));
  clobber[15] = 0xef;  // shr $0x1a,%rax -> shr $0x1a,%rdi
  ProbePlacement kept = place_return_probe_bytes(clobber, sizeof(clobber), 0x2000, 1);
  EXPECT_EQ(kept.vaddr, 0x2000u) << kept.reason;
}

// The other allocators' malloc and free on this machine, where installed
// (scripts/install-deps.sh --with-test-tools): wherever a probe moves it
// lands on an emulated instruction; tcmalloc's both move.
TEST(ReturnProbePlacement, ThisMachinesOtherAllocators) {
  const std::string dir = "/usr/lib/x86_64-linux-gnu/";
  for (const char *lib : {"libtcmalloc.so.4", "libjemalloc.so.2", "libmimalloc.so.2"}) {
    if (access((dir + lib).c_str(), R_OK) != 0) {
      std::printf("[ skipped  ] %s not installed (scripts/install-deps.sh --with-test-tools)\n", lib);
      continue;
    }
    auto elf = ElfFile::open_path(dir + lib);
    ASSERT_TRUE(elf.ok()) << elf.error().message;
    auto malloc_sym = (*elf)->find_function("malloc");
    auto free_sym = (*elf)->find_function("free");
    ASSERT_TRUE(malloc_sym && free_sym) << lib;
    const ProbePlacement m = place_return_probe(**elf, *malloc_sym);
    const ProbePlacement f = place_entry_only_probe(**elf, *free_sym, 1);
    for (const ProbePlacement *p : {&m, &f}) {
      std::vector<uint8_t> at = (*elf)->read_at_vaddr(p->vaddr, 16);
      if (p->skipped > 0) {
        EXPECT_TRUE(kernel_emulates(at.data(), at.size())) << lib << ": " << p->reason;
      }
    }
    RecordProperty(std::string(lib) + " malloc", m.reason);
    RecordProperty(std::string(lib) + " free", f.reason);
    if (std::string(lib) == "libjemalloc.so.2") {
      EXPECT_TRUE(f.emulated) << f.reason;  // 5.3: past nine steps
    }
    if (std::string(lib) == "libtcmalloc.so.4") {
      EXPECT_TRUE(m.emulated) << m.reason;
      EXPECT_TRUE(f.emulated) << f.reason;
    }
  }
}

// The libc on this machine: the memalign family moves, and everything that
// moves lands on an emulated instruction with the range free of branches.
TEST(ReturnProbePlacement, ThisMachinesLibc) {
  auto elf = ElfFile::open_path("/lib/x86_64-linux-gnu/libc.so.6");
  ASSERT_TRUE(elf.ok()) << elf.error().message;
  for (const char* name : {"malloc", "calloc", "realloc", "posix_memalign", "aligned_alloc",
                           "memalign", "valloc", "pvalloc", "reallocarray"}) {
    auto sym = (*elf)->find_function(name);
    ASSERT_TRUE(sym) << name;
    ProbePlacement p = place_return_probe(**elf, *sym);
    std::vector<uint8_t> at = (*elf)->read_at_vaddr(p.vaddr, 16);
    EXPECT_TRUE(kernel_emulates(at.data(), at.size()) || p.vaddr == sym->vaddr)
        << name << ": " << p.reason;
    EXPECT_LE(p.skipped, 16u) << name;
    RecordProperty(name, p.reason);
  }
  // glibc 2.36 (Debian 12): the three that begin with cmpb move.
  for (const char* name : {"posix_memalign", "aligned_alloc", "memalign"}) {
    ProbePlacement p = place_return_probe(**elf, *(*elf)->find_function(name));
    EXPECT_EQ(p.skipped, 7u) << name << ": " << p.reason;
    EXPECT_TRUE(p.emulated) << name;
  }
}

// libstdc++ and, where installed, libcudart: whatever the decision, a
// moved probe lands on an emulated instruction inside the function.
TEST(ReturnProbePlacement, ThisMachinesLibstdcxxAndLibcudart) {
  struct Lib {
    const char* path;
    std::vector<const char*> names;
  };
  const Lib libs[] = {
      {"/usr/lib/x86_64-linux-gnu/libstdc++.so.6", {"_Znwm", "_Znam", "_ZnwmSt11align_val_t"}},
      {"/usr/local/cuda/lib64/libcudart.so.13",
       {"cudaMalloc", "cudaMallocHost", "cudaHostAlloc", "cudaMallocManaged", "cudaMallocPitch"}},
  };
  int checked = 0;
  for (const Lib& lib : libs) {
    if (access(lib.path, R_OK) != 0) {
      std::printf("  %s: not installed on this machine, not checked\n", lib.path);
      continue;
    }
    auto elf = ElfFile::open_path(lib.path);
    ASSERT_TRUE(elf.ok()) << elf.error().message;
    for (const char* name : lib.names) {
      auto sym = (*elf)->find_function(name);
      if (!sym) continue;
      ProbePlacement p = place_return_probe(**elf, *sym);
      std::printf("  %s %s: %s\n", lib.path, name, p.reason.c_str());
      if (p.vaddr != sym->vaddr) {
        std::vector<uint8_t> at = (*elf)->read_at_vaddr(p.vaddr, 16);
        EXPECT_TRUE(kernel_emulates(at.data(), at.size())) << name;
        EXPECT_LT(p.vaddr, sym->vaddr + sym->size) << name;
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 3);  // libstdc++ is always there
}

// ---- system-call wrapper sites (decision libc-syscall-wrappers) ----

TEST(SyscallSites, MunmapLandsOnTheResultCheck) {
  // glibc 2.36 munmap: mov $0xb,%eax; syscall; cmp $-4095,%rax; jae err; ret;
  // err: neg %eax ... ret.
  const uint8_t code[] = {0xb8, 0x0b, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48, 0x3d, 0x01, 0xf0,
                          0xff, 0xff, 0x73, 0x01, 0xc3, 0xf7, 0xd8, 0xc3};
  std::string why;
  std::vector<SyscallSite> sites = find_syscall_sites_bytes(code, sizeof(code), 0x1000, 11, &why);
  ASSERT_EQ(sites.size(), 1u) << why;
  EXPECT_EQ(sites[0].vaddr, 0x100du);  // the jae, after the flags-only cmp
  EXPECT_TRUE(sites[0].emulated);
  // Another system call number is not this wrapper's: no site.
  EXPECT_TRUE(find_syscall_sites_bytes(code, sizeof(code), 0x1000, 9, &why).empty());
  EXPECT_NE(why.find("no `mov $9, %eax; syscall`"), std::string::npos) << why;
}

TEST(SyscallSites, BrkMovesPastTheStoreToTheEmulatedCheck) {
  // glibc 2.36 brk: mov $0xc,%eax; syscall; mov __curbrk(%rip),%rdx;
  // mov %rax,(%rdx); cmp %rdi,%rax; jb err; xor %eax,%eax; ret; err: ret.
  // The instruction after syscall (a RIP-relative load) would be
  // single-stepped; the jb is emulated, past the store of the new break
  // (decision brk-emulated-probe).
  const uint8_t code[] = {0xb8, 0x0c, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48, 0x8b, 0x15, 0xe2,
                          0x51, 0x0d, 0x00, 0x48, 0x89, 0x02, 0x48, 0x39, 0xf8, 0x72, 0x03,
                          0x31, 0xc0, 0xc3, 0xc3};
  std::vector<SyscallSite> sites = find_syscall_sites_bytes(code, sizeof(code), 0x2000, 12);
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(sites[0].vaddr, 0x2014u);
  EXPECT_TRUE(sites[0].emulated);
  EXPECT_TRUE(sites[0].after_store);
  EXPECT_NE(sites[0].reason.find("past the store"), std::string::npos) << sites[0].reason;
}

TEST(SyscallSites, BrkStaysAfterTheSyscallWhenTheResultIsOverwritten) {
  // mov $0xc,%eax; syscall; mov __curbrk(%rip),%rdx; mov %rax,(%rdx);
  // xor %eax,%eax (the result gone); cmp %rdi,%rdx; jb; ret: no move past.
  const uint8_t code[] = {0xb8, 0x0c, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48, 0x8b, 0x15, 0xe2,
                          0x51, 0x0d, 0x00, 0x48, 0x89, 0x02, 0x31, 0xc0, 0x48, 0x39, 0xfa,
                          0x72, 0x01, 0xc3, 0xc3};
  std::vector<SyscallSite> sites = find_syscall_sites_bytes(code, sizeof(code), 0x2000, 12);
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(sites[0].vaddr, 0x2007u);
  EXPECT_FALSE(sites[0].emulated);
  EXPECT_FALSE(sites[0].after_store);
  EXPECT_NE(sites[0].reason.find("single-stepped"), std::string::npos) << sites[0].reason;
  // And a branch into the skipped instructions keeps it there too.
  const uint8_t into[] = {0xb8, 0x0c, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48, 0x8b, 0x15, 0xe2, 0x51,
                          0x0d, 0x00, 0x48, 0x89, 0x02, 0x48, 0x39, 0xf8, 0x72, 0x03, 0x31, 0xc0,
                          0xc3, 0xeb, 0xf6};
  sites = find_syscall_sites_bytes(into, sizeof(into), 0x2000, 12);
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(sites[0].vaddr, 0x2007u);
  EXPECT_FALSE(sites[0].after_store);
}

TEST(SyscallSites, RefusesWhatTheRuleDoesNotCover) {
  std::string why;
  // A branch to the instruction after the syscall (jmp back to the cmp):
  // the probe would fire without a call.
  const uint8_t into_site[] = {0xb8, 0x0b, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48, 0x85,
                               0xc0, 0x78, 0x01, 0xc3, 0xeb, 0xf8};
  EXPECT_TRUE(find_syscall_sites_bytes(into_site, sizeof(into_site), 0x10, 11, &why).empty());
  EXPECT_EQ(why, "a branch in the function targets the instruction after syscall");
  // The number is loaded elsewhere (mov %edi,%eax; syscall): not recognized.
  const uint8_t generic[] = {0x89, 0xf8, 0x0f, 0x05, 0xc3};
  EXPECT_TRUE(find_syscall_sites_bytes(generic, sizeof(generic), 0x10, 11).empty());
  // An indirect jump anywhere in the function.
  const uint8_t indirect[] = {0xb8, 0x0b, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xc3, 0xff, 0xe0};
  EXPECT_TRUE(find_syscall_sites_bytes(indirect, sizeof(indirect), 0x10, 11, &why).empty());
  EXPECT_EQ(why, "indirect jump in the function");
  // Truncated code, and no code.
  const uint8_t truncated[] = {0xb8, 0x0b, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48, 0x3d};
  EXPECT_TRUE(find_syscall_sites_bytes(truncated, sizeof(truncated), 0x10, 11, &why).empty());
  EXPECT_EQ(why, "function does not decode whole");
  EXPECT_TRUE(find_syscall_sites_bytes(nullptr, 0, 0x10, 11, &why).empty());
  // syscall as the last instruction: nothing after it to probe.
  const uint8_t last[] = {0xb8, 0x0b, 0x00, 0x00, 0x00, 0x0f, 0x05};
  EXPECT_TRUE(find_syscall_sites_bytes(last, sizeof(last), 0x10, 11).empty());
}

// The libc on this machine: every wrapper has exactly one site, on an
// emulated jcc (brk's past glibc's store of the new break); and __curbrk
// is found.
TEST(SyscallSites, ThisMachinesLibc) {
  auto elf = ElfFile::open_path("/lib/x86_64-linux-gnu/libc.so.6");
  ASSERT_TRUE(elf.ok()) << elf.error().message;
  struct {
    const char* name;
    int nr;
    bool emulated;
  } wrappers[] = {{"mmap", 9, true}, {"munmap", 11, true}, {"mremap", 25, true}, {"brk", 12, true}};
  for (const auto& w : wrappers) {
    auto sym = (*elf)->find_function(w.name);
    ASSERT_TRUE(sym) << w.name;
    std::vector<SyscallSite> sites = find_syscall_sites(**elf, *sym, w.nr);
    ASSERT_EQ(sites.size(), 1u) << w.name;
    EXPECT_EQ(sites[0].emulated, w.emulated) << w.name << ": " << sites[0].reason;
    EXPECT_GT(sites[0].vaddr, sym->vaddr);
    EXPECT_LT(sites[0].vaddr, sym->vaddr + sym->size);
    RecordProperty(w.name, sites[0].reason);
  }
  auto curbrk = (*elf)->find_data_object("__curbrk");
  ASSERT_TRUE(curbrk);
  EXPECT_NE(curbrk->vaddr, 0u);
  // Data objects not in the allowlist are not indexed.
  EXPECT_FALSE((*elf)->find_data_object("environ"));
  // And functions are not data objects.
  EXPECT_FALSE((*elf)->find_data_object("malloc"));
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
