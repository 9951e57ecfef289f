// SPDX-License-Identifier: Apache-2.0
#include "core/symbols/symbolizer.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/symbols/elf_file.h"
#include "core/proc/proc_maps.h"

namespace {

// Return addresses captured inside the functions below, as a stack walker
// would see them.
void* volatile g_return_address = nullptr;
volatile int g_sink = 0;

__attribute__((noinline, noclone)) void record_return_address() {
  g_return_address = __builtin_return_address(0);
  asm volatile("" ::: "memory");
}

}  // namespace

// noclone: a .constprop/.isra clone would carry a different symbol name.
constexpr int kFreeFunctionBegin = __LINE__;
extern "C" __attribute__((noinline, noclone)) int lw_symbolizer_test_function(int x) {
  g_sink = x;
  record_return_address();  // kFreeFunctionCallLine
  return g_sink * 3;
}
constexpr int kFreeFunctionCallLine = kFreeFunctionBegin + 3;
constexpr int kFreeFunctionEnd = __LINE__;

namespace lwtest {
class Widget {
 public:
  int method(int x);
};
__attribute__((noinline, noclone)) int Widget::method(int x) {
  g_sink = x;
  record_return_address();
  return g_sink + 7;
}
}  // namespace lwtest

namespace lw {
namespace {

struct Located {
  ModuleRef ref;
  uint64_t offset = 0;
};

// The module and file offset of a runtime address in this process.
Located locate(const void* addr) {
  Located out;
  auto maps = read_proc_maps(getpid());
  EXPECT_TRUE(maps.ok());
  if (!maps.ok()) return out;
  const MapEntry* m = find_mapping(*maps, reinterpret_cast<uint64_t>(addr));
  EXPECT_NE(m, nullptr);
  if (m == nullptr) return out;
  out.ref = ModuleRef{m->path, m->path, m->inode, ""};
  out.offset = reinterpret_cast<uint64_t>(addr) - m->start + m->offset;
  return out;
}

Located free_function_return() {
  volatile int arg = 5;
  lw_symbolizer_test_function(arg);
  return locate(g_return_address);
}

Located method_return() {
  lwtest::Widget w;
  volatile int arg = 5;
  w.method(arg);
  return locate(g_return_address);
}

Located libc_malloc_entry() {
  void* h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  void* p = h ? dlsym(h, "malloc") : nullptr;
  if (h) dlclose(h);
  EXPECT_NE(p, nullptr);
  // As if malloc's first instruction were a return address' call site.
  Located l = locate(p);
  l.offset += 1;
  return l;
}

TEST(Symbolizer, FreeFunctionInTestBinary) {
  Symbolizer s;
  Located l = free_function_return();
  Frame f = s.symbolize(l.ref, l.offset);
  EXPECT_EQ(f.function, "lw_symbolizer_test_function");
  EXPECT_TRUE(f.file.ends_with("/test_symbolizer.cc")) << f.file;
  EXPECT_GE(f.line, kFreeFunctionBegin);
  EXPECT_LE(f.line, kFreeFunctionEnd);
  // offset-1 lands in the call, not in the statement after it.
  EXPECT_EQ(f.line, kFreeFunctionCallLine);
  EXPECT_EQ(f.offset, l.offset);
  EXPECT_EQ(f.module, l.ref.path);
  auto elf = ElfFile::open_path(l.ref.path);
  ASSERT_TRUE(elf.ok());
  EXPECT_FALSE(f.build_id.empty());
  EXPECT_EQ(f.build_id, elf.value()->build_id());
  EXPECT_EQ(s.errors(), 0u);
}

TEST(Symbolizer, MethodNameIsDemangled) {
  Symbolizer s;
  Located l = method_return();
  Frame f = s.symbolize(l.ref, l.offset);
  EXPECT_EQ(f.function, "lwtest::Widget::method(int)");
  EXPECT_TRUE(f.file.ends_with("/test_symbolizer.cc")) << f.file;
  EXPECT_GT(f.line, kFreeFunctionEnd);
}

TEST(Symbolizer, LibcMalloc) {
  Symbolizer s;
  Located l = libc_malloc_entry();
  Frame f = s.symbolize(l.ref, l.offset);
  EXPECT_TRUE(f.function == "malloc" || f.function == "__libc_malloc") << f.function;
  EXPECT_EQ(f.offset, l.offset);
  auto elf = ElfFile::open_path(l.ref.path);
  ASSERT_TRUE(elf.ok());
  EXPECT_EQ(f.build_id, elf.value()->build_id());
  // Further inside malloc still names it.
  Frame inner = s.symbolize(l.ref, l.offset + 8);
  EXPECT_EQ(inner.function, f.function);
  EXPECT_EQ(s.errors(), 0u);
}

TEST(Symbolizer, UnknownModuleCountsOneError) {
  Symbolizer s;
  ModuleRef ref{"/usr/lib/libnothere.so", "/nonexistent/lw/libnothere.so", 42, ""};
  Frame f = s.symbolize(ref, 0x1234);
  EXPECT_EQ(f.function, "");
  EXPECT_EQ(f.file, "");
  EXPECT_EQ(f.line, 0);
  EXPECT_EQ(f.module, "/usr/lib/libnothere.so");
  EXPECT_EQ(f.offset, 0x1234u);
  EXPECT_EQ(s.errors(), 1u);
  // The failure is remembered, not retried (and recounted) per frame.
  (void)s.symbolize(ref, 0x5678);
  EXPECT_EQ(s.errors(), 1u);
}

TEST(Symbolizer, OffsetOutsideAnySegmentIsUnknown) {
  Symbolizer s;
  Located l = free_function_return();
  Frame f = s.symbolize(l.ref, 1ull << 40);
  EXPECT_EQ(f.function, "");
  EXPECT_FALSE(f.build_id.empty());
  EXPECT_EQ(s.errors(), 0u);
}

TEST(Symbolizer, BuildIdMismatchIsRejected) {
  Symbolizer s;
  Located l = free_function_return();
  l.ref.build_id = "00112233";
  Frame f = s.symbolize(l.ref, l.offset);
  EXPECT_EQ(f.function, "");
  EXPECT_EQ(f.build_id, "00112233");
  EXPECT_EQ(s.errors(), 1u);
}

TEST(Symbolizer, ModulesAreSharedByBuildId) {
  Symbolizer s;
  Located l = free_function_return();
  auto elf = ElfFile::open_path(l.ref.path);
  ASSERT_TRUE(elf.ok());
  l.ref.build_id = elf.value()->build_id();
  ASSERT_EQ(s.symbolize(l.ref, l.offset).function, "lw_symbolizer_test_function");
  // Another process mapping the same object: different open path (here one
  // that no longer opens), same build-id. The loaded module is reused.
  ModuleRef other = l.ref;
  other.open_path = "/nonexistent/lw/exited-process";
  EXPECT_EQ(s.symbolize(other, l.offset).function, "lw_symbolizer_test_function");
  EXPECT_EQ(s.errors(), 0u);
}

// Another file that claims the build-id (issue 32, item 3; decision
// file-identity: anyone can link a copy of it into their own binary) is
// another module: the loaded one is not reused for it, and its own file is
// what names its frames.
TEST(Symbolizer, ModulesAreNotSharedAcrossFilesWithOneBuildId) {
  Symbolizer s;
  Located l = free_function_return();
  auto elf = ElfFile::open_path(l.ref.path);
  ASSERT_TRUE(elf.ok());
  l.ref.build_id = elf.value()->build_id();
  ASSERT_EQ(s.symbolize(l.ref, l.offset).function, "lw_symbolizer_test_function");
  ModuleRef claimant = l.ref;
  claimant.open_path = "/nonexistent/lw/another-users-file";
  claimant.inode = l.ref.inode + 1;
  EXPECT_NE(shared_module_key(claimant), shared_module_key(l.ref));
  EXPECT_EQ(s.symbolize(claimant, l.offset).function, "");
  EXPECT_STREQ(s.module_info(claimant).failure, kSymbolsFileReplaced);
  ModuleRef other_device = l.ref;
  other_device.dev = l.ref.dev + 1;
  EXPECT_NE(shared_module_key(other_device), shared_module_key(l.ref));
  // The first file's module is still its own.
  EXPECT_EQ(s.symbolize(l.ref, l.offset).function, "lw_symbolizer_test_function");
}

// A process that exited (issue 35, item 2): its map_files and root are
// gone, so the file at the mapping's path is opened, and trusted only when
// it is provably the object the process mapped.
TEST(Symbolizer, ExitedProcessNamedFromTheFileWithItsBuildId) {
  Symbolizer s;
  Located l = free_function_return();
  auto elf = ElfFile::open_path(l.ref.path);
  ASSERT_TRUE(elf.ok());
  struct stat st;
  ASSERT_EQ(stat(l.ref.path.c_str(), &st), 0);
  ModuleRef gone = l.ref;
  gone.open_path = "/nonexistent/lw/map_files/1000-2000";
  gone.root = "/nonexistent/lw/root";
  gone.build_id = elf.value()->build_id();
  gone.inode = st.st_ino;
  gone.dev = st.st_dev;
  EXPECT_EQ(s.symbolize(gone, l.offset).function, "lw_symbolizer_test_function");
  EXPECT_STREQ(s.module_info(gone).failure, "");

  // The build-id is not enough: a file at that path with it is another
  // file unless it is the device and inode the process mapped (decision
  // file-identity).
  Symbolizer claimed;
  ModuleRef elsewhere = gone;
  elsewhere.inode = st.st_ino + 1;
  EXPECT_EQ(claimed.symbolize(elsewhere, l.offset).function, "");
  EXPECT_STREQ(claimed.module_info(elsewhere).failure, kSymbolsFileReplaced);

  Symbolizer other;
  gone.build_id = "00112233";  // the file on disk is not the one mapped
  EXPECT_EQ(other.symbolize(gone, l.offset).function, "");
  Symbolizer::ModuleInfo info = other.module_info(gone);
  EXPECT_FALSE(info.opened);
  EXPECT_STREQ(info.failure, kSymbolsFileReplaced);
}

// Without a build-id, the device and inode must match.
TEST(Symbolizer, ExitedProcessWithoutBuildIdNeedsTheSameInode) {
  Located l = free_function_return();
  struct stat st;
  ASSERT_EQ(stat(l.ref.path.c_str(), &st), 0);
  ModuleRef gone = l.ref;
  gone.open_path = "/nonexistent/lw/map_files/1000-2000";
  gone.build_id.clear();
  gone.inode = st.st_ino;
  gone.dev = st.st_dev;
  Symbolizer s;
  EXPECT_EQ(s.symbolize(gone, l.offset).function, "lw_symbolizer_test_function");

  Symbolizer other;
  gone.inode = st.st_ino + 1;  // replaced on disk
  EXPECT_EQ(other.symbolize(gone, l.offset).function, "");
  EXPECT_STREQ(other.module_info(gone).failure, kSymbolsFileReplaced);

  Symbolizer third;
  gone.path = "/nonexistent/lw/deleted.so";
  EXPECT_EQ(third.symbolize(gone, l.offset).function, "");
  EXPECT_STREQ(third.module_info(gone).failure, kSymbolsFileGone);
}

TEST(Symbolizer, LruEvictionAndAddressCacheCapKeepResultsRight) {
  SymbolizerLimits limits;
  limits.max_modules = 1;
  limits.max_cached_addresses_per_module = 1;
  Symbolizer s(limits);
  Located fn = free_function_return();
  Located method = method_return();
  Located libc = libc_malloc_entry();
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(s.symbolize(fn.ref, fn.offset).function, "lw_symbolizer_test_function");
    EXPECT_EQ(s.symbolize(method.ref, method.offset).function, "lwtest::Widget::method(int)");
    std::string m = s.symbolize(libc.ref, libc.offset).function;
    EXPECT_TRUE(m == "malloc" || m == "__libc_malloc") << m;
  }
  EXPECT_EQ(s.errors(), 0u);
}

TEST(Symbolizer, LargeFilesGetSymbolNamesOnly) {
  SymbolizerLimits limits;
  limits.max_file_bytes = 0;
  Symbolizer s(limits);
  Located l = free_function_return();
  Frame f = s.symbolize(l.ref, l.offset);
  EXPECT_EQ(f.function, "lw_symbolizer_test_function");
  EXPECT_EQ(f.file, "");
  EXPECT_EQ(f.line, 0);
}

TEST(Symbolizer, HostileFilesNeverCrash) {
  Located libc = libc_malloc_entry();
  std::ifstream in(libc.ref.path, std::ios::binary);
  const std::vector<char> bytes(std::istreambuf_iterator<char>(in), {});
  ASSERT_GT(bytes.size(), 4096u);
  const std::string path =
      testing::TempDir() + "lw_symbolizer_hostile_" + std::to_string(getpid());
  std::mt19937 rng(77);
  for (int iter = 0; iter < 60; ++iter) {
    SCOPED_TRACE(iter);
    std::vector<char> copy = bytes;
    if (iter % 2 == 0) {
      copy.resize(rng() % copy.size());
    } else {
      for (int k = 0; k < 8; ++k) copy[rng() % 4096] = static_cast<char>(rng());
    }
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(copy.data(), static_cast<std::streamsize>(copy.size()));
    }
    // A fresh Symbolizer each time: the module cache must not reuse results.
    Symbolizer s;
    ModuleRef ref{path, path, static_cast<uint64_t>(iter) + 1, ""};
    Frame f = s.symbolize(ref, libc.offset);
    EXPECT_EQ(f.module, path);
    EXPECT_EQ(f.offset, libc.offset);
  }
  unlink(path.c_str());
}

TEST(Demangle, OnlyItaniumSymbolNames) {
  EXPECT_EQ(demangle("_ZN6lwtest6Widget6methodEi"), "lwtest::Widget::method(int)");
  EXPECT_EQ(demangle("malloc"), "malloc");
  EXPECT_EQ(demangle("i"), "i");  // a bare type encoding, not a symbol
  EXPECT_EQ(demangle("_Z"), "_Z");
  EXPECT_EQ(demangle("_Zgarbage!"), "_Zgarbage!");
  EXPECT_EQ(demangle(""), "");
  const std::string huge = "_Z" + std::string(1 << 16, 'P') + "v";
  EXPECT_EQ(demangle(huge), huge);
}

}  // namespace
}  // namespace lw
