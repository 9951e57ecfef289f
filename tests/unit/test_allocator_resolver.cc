// SPDX-License-Identifier: Apache-2.0
// The per-process allocator decision (core/probes/allocator_resolver.h):
// preload parsing from hostile input, the dynamic linker's search order,
// and which object's functions get the probes, on this machine's real
// libraries.
#include "core/probes/allocator_resolver.h"

#include <unistd.h>

#include <algorithm>
#include <string>

#include <gtest/gtest.h>

namespace lw {
namespace {

using namespace std::string_literals;

constexpr const char* kLibDir = "/usr/lib/x86_64-linux-gnu/";

TEST(LdPreload, ParsesTheFirstLdPreloadOfTheEnvironment) {
  std::string env = "A=1\0LD_PRELOAD=/opt/libtc.so:libfoo.so  libbar.so\0LD_PRELOAD=x.so\0B=2\0"s;
  EXPECT_EQ(parse_ld_preload_environ(env),
            (std::vector<std::string>{"/opt/libtc.so", "libfoo.so", "libbar.so"}));
  EXPECT_TRUE(parse_ld_preload_environ("PATH=/bin\0HOME=/\0"s).empty());
  EXPECT_TRUE(parse_ld_preload_environ("").empty());
  EXPECT_TRUE(parse_ld_preload_environ("XLD_PRELOAD=a.so"s).empty());
}

TEST(LdPreload, HostileEnvironmentIsBounded) {
  // No terminator, a huge entry, and thousands of entries.
  std::string env = "LD_PRELOAD=" + std::string(10000, 'a') + ":" ;
  for (int i = 0; i < 5000; ++i) env += "l" + std::to_string(i) + ".so:";
  auto names = parse_ld_preload_environ(env, 64);
  EXPECT_EQ(names.size(), 64u);
  EXPECT_EQ(names[0], "l0.so");  // the 10000-byte name is dropped
  EXPECT_TRUE(parse_ld_preload_environ("LD_PRELOAD=::: \0"s).empty());
}

TEST(LdPreload, ParsesEtcLdSoPreload) {
  EXPECT_EQ(parse_ld_so_preload("# comment\n/usr/lib/libjemalloc.so.2  libx.so\n\tliby.so # z\n"),
            (std::vector<std::string>{"/usr/lib/libjemalloc.so.2", "libx.so", "liby.so"}));
  EXPECT_TRUE(parse_ld_so_preload("").empty());
  EXPECT_TRUE(parse_ld_so_preload("#only\n\n").empty());
}

LoadedObject load(const std::string& path) {
  auto elf = ElfFile::open_path(path);
  EXPECT_TRUE(elf.ok()) << path;
  return {path, elf ? *elf : nullptr};
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// This test binary: DT_NEEDED libstdc++, libm, libgcc_s, libc (and gtest's
// shared libs). Objects are given in "address order" with libc first, so
// the search order must come from DT_NEEDED, not from the list.
std::vector<LoadedObject> this_process() {
  return {load(std::string(kLibDir) + "libc.so.6"), load(self_exe()),
          load(std::string(kLibDir) + "libstdc++.so.6"), load(std::string(kLibDir) + "libm.so.6")};
}

TEST(SearchOrder, ExecutableThenNeededBreadthFirst) {
  auto objects = this_process();
  SearchOrder s = global_search_order(objects, 1, {});
  ASSERT_EQ(s.order.size(), 4u);
  EXPECT_EQ(s.order[0], 1u);
  // libstdc++ comes before libc: the executable names it first.
  auto pos = [&](size_t i) { return std::find(s.order.begin(), s.order.end(), i) - s.order.begin(); };
  EXPECT_LT(pos(2), pos(0));
  EXPECT_TRUE(s.missing_preload.empty());
}

TEST(SearchOrder, PreloadsComeRightAfterTheExecutable) {
  auto objects = this_process();
  SearchOrder s = global_search_order(objects, 1, {{"libm.so.6", "/nonexistent/libq.so"}});
  ASSERT_GE(s.order.size(), 2u);
  EXPECT_EQ(s.order[1], 3u);
  EXPECT_EQ(s.missing_preload, std::vector<std::string>{"/nonexistent/libq.so"});
}

const PlannedProbe* find_probe(const AllocatorPlan& plan, const std::string& symbol) {
  for (const PlannedProbe& p : plan.probes) {
    if (p.spec.symbol == symbol) return &p;
    if (std::find(p.aliases.begin(), p.aliases.end(), symbol) != p.aliases.end()) return &p;
  }
  return nullptr;
}

TEST(AllocatorPlan, GlibcProcessProbesLibcAndLibstdcxxNewEntryOnly) {
  auto objects = this_process();
  AllocatorPlan plan = plan_allocator_probes(objects, 1, {}, probe_roles());
  ASSERT_EQ(plan.support, Support::kFull) << plan.reason;
  ASSERT_TRUE(plan.allocator.has_value());
  EXPECT_EQ(*plan.allocator, 0u);
  EXPECT_EQ(plan.family, "glibc");
  const PlannedProbe* malloc_probe = find_probe(plan, "malloc");
  ASSERT_NE(malloc_probe, nullptr);
  EXPECT_EQ(malloc_probe->object, 0u);
  const PlannedProbe* new_probe = find_probe(plan, "_Znwm");
  ASSERT_NE(new_probe, nullptr);
  EXPECT_EQ(new_probe->object, 2u);
  EXPECT_EQ(new_probe->spec.func, static_cast<uint32_t>(LW_FUNC_NEW));
  EXPECT_FALSE(new_probe->spec.needs_return);
  EXPECT_EQ(find_probe(plan, "_ZdlPv"), nullptr);  // tail-calls free
  // aligned_alloc and memalign are one function in glibc: one probe.
  const PlannedProbe* aligned = find_probe(plan, "aligned_alloc");
  ASSERT_NE(aligned, nullptr);
  EXPECT_EQ(aligned, find_probe(plan, "memalign"));
}

TEST(AllocatorPlan, PreloadedJemallocWinsEverythingAndLibcIsNotProbed) {
  const std::string je = std::string(kLibDir) + "libjemalloc.so.2";
  if (access(je.c_str(), R_OK) != 0)
    GTEST_SKIP() << "libjemalloc2 not installed: run scripts/install-deps.sh --with-test-tools";
  auto objects = this_process();
  objects.push_back(load(je));
  AllocatorPlan plan = plan_allocator_probes(objects, 1, {{je}}, probe_roles());
  ASSERT_EQ(plan.support, Support::kFull) << plan.reason;
  EXPECT_EQ(plan.family, "jemalloc");
  EXPECT_EQ(*plan.allocator, 4u);
  // What jemalloc exports is probed there only; libc keeps what jemalloc
  // lacks (reallocarray, sbrk), which reach jemalloc through the PLT.
  for (const char* s : {"malloc", "free", "calloc", "realloc", "posix_memalign", "aligned_alloc",
                        "memalign", "valloc"}) {
    ASSERT_NE(find_probe(plan, s), nullptr) << s;
    EXPECT_EQ(find_probe(plan, s)->object, 4u) << s;
  }
  const PlannedProbe* new_probe = find_probe(plan, "_Znwm");
  ASSERT_NE(new_probe, nullptr);
  EXPECT_EQ(new_probe->object, 4u);
  EXPECT_TRUE(new_probe->spec.needs_return);  // jemalloc's new does not call malloc
  ASSERT_NE(find_probe(plan, "_ZdlPv"), nullptr);
  for (const char* s : {"mallocx", "rallocx", "xallocx", "sdallocx", "dallocx"})
    EXPECT_NE(find_probe(plan, s), nullptr) << s;
  EXPECT_EQ(find_probe(plan, "xallocx")->spec.func, static_cast<uint32_t>(LW_FUNC_XALLOCX));
  // Without the preload, the same mapping is a dlopen'd library: libc wins.
  AllocatorPlan plain = plan_allocator_probes(objects, 1, {}, probe_roles());
  EXPECT_EQ(*plain.allocator, 0u);
  EXPECT_EQ(find_probe(plain, "malloc")->object, 0u);
}

TEST(AllocatorPlan, OneProbePerAddress) {
  const std::string tc = std::string(kLibDir) + "libtcmalloc.so.4";
  if (access(tc.c_str(), R_OK) != 0)
    GTEST_SKIP() << "libgoogle-perftools4 not installed: run scripts/install-deps.sh --with-test-tools";
  auto objects = this_process();
  objects.push_back(load(tc));
  AllocatorPlan plan = plan_allocator_probes(objects, 1, {{tc}}, probe_roles());
  ASSERT_EQ(plan.support, Support::kFull) << plan.reason;
  EXPECT_EQ(plan.family, "tcmalloc");
  // tc_malloc is malloc (an alias): one probe, both names.
  EXPECT_EQ(find_probe(plan, "tc_malloc"), find_probe(plan, "malloc"));
  for (size_t i = 0; i < plan.probes.size(); ++i)
    for (size_t j = i + 1; j < plan.probes.size(); ++j)
      EXPECT_FALSE(plan.probes[i].object == plan.probes[j].object &&
                   plan.probes[i].symbol.vaddr == plan.probes[j].symbol.vaddr)
          << plan.probes[i].spec.symbol << " and " << plan.probes[j].spec.symbol;
}

TEST(AllocatorPlan, LoaderNotDoneIsPending) {
  // Only the executable is mapped: its DT_NEEDED are missing, no malloc.
  std::vector<LoadedObject> objects = {load(self_exe())};
  AllocatorPlan plan = plan_allocator_probes(objects, 0, {}, probe_roles());
  EXPECT_EQ(plan.support, Support::kPending) << plan.reason;
  EXPECT_TRUE(plan.probes.empty());
}

TEST(AllocatorPlan, RegisteredRoleIsPlanned) {
  // The hook the GPU work uses: a role found by symbol in every object.
  ProbeRole role;
  role.name = "test_role";
  role.scope = RoleScope::kEveryObject;
  role.probes.push_back({"_ZNSt6vectorIiSaIiEE_not_there", LW_FUNC_MALLOC, true, false, false});
  role.probes.push_back({"__libc_calloc", LW_FUNC_CALLOC, true, false, false});
  std::vector<ProbeRole> roles = probe_roles();
  roles.push_back(role);
  auto objects = this_process();
  AllocatorPlan plan = plan_allocator_probes(objects, 1, {}, roles);
  const PlannedProbe* p = find_probe(plan, "__libc_calloc");
  // glibc's __libc_calloc is calloc itself: the same address, one probe.
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p, find_probe(plan, "calloc"));
}

}  // namespace
}  // namespace lw
