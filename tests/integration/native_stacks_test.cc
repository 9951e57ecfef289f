// SPDX-License-Identifier: Apache-2.0
// Native stacks on code built the way users build it (tests/targets/native:
// -O2, no frame pointers): leakwatch's frames must be the ones glibc's own
// unwinder finds at each site, every frame found through call-frame
// information, the bytes per site exact; a region without CFI ends its
// stack as "no_cfi" with no invented frames; the same holds for a program
// and library run from overlayfs (a container's root).
//
// What is compared, per site S (the truth's "sites" and "backtraces"):
// - A stack belongs to S if S is one of its functions; k is the first frame
//   in S. For a site that calls the allocator itself, k must be 0: the leaf
//   is the allocator's caller (leakwatch skips the frames inside the probed
//   operator new and mmap wrapper). Frames below k are code S called that
//   allocated for it (libstdc++'s basic_string members, vector's
//   _M_realloc_insert).
// - The target called backtrace() inside S, so its first return address is
//   in S at that call, not at the allocation: frame k is compared by
//   function only. Every frame above k must equal the backtrace's frames
//   from its second on, one for one, by module file name and file offset
//   (both are return addresses, except the frame a signal interrupted,
//   which both report as its exact pc), to the end (_start), in number too.
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <gtest/gtest.h>

#include "harness.h"

namespace lw::itest {
namespace {

std::string file_name(const std::string &path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "module+0xOFFSET", the form of the truth's backtraces.
std::string frame_key(const Json &frame) {
  char offset[32];
  snprintf(offset, sizeof offset, "+0x%" PRIx64, frame.value("offset", uint64_t{0}));
  return file_name(frame.value("module", "")) + offset;
}

std::string describe_frames(const Json &frames) {
  std::ostringstream out;
  for (const Json &f : frames) {
    out << "    " << frame_key(f) << " " << f.value("function", "?") << " [" << f.value("unwound", "?") << "]\n";
  }
  return out.str();
}

std::string describe_keys(const std::vector<std::string> &keys, size_t from) {
  std::ostringstream out;
  for (size_t i = from; i < keys.size(); ++i) out << "    " << keys[i] << "\n";
  return out.str();
}

// The truth's backtraces by site.
std::map<std::string, std::vector<std::vector<std::string>>> backtraces_of(const Json &truth) {
  std::map<std::string, std::vector<std::vector<std::string>>> out;
  for (const Json &bt : truth.value("backtraces", Json::array())) {
    out[bt.at("site").get<std::string>()].push_back(bt.at("frames").get<std::vector<std::string>>());
  }
  return out;
}

// A stack of the snapshot that belongs to a truth site.
// Its frames are the physical ones: a function symbolization found inlined
// into the next frame (same module and offset) is dropped, as backtrace()
// has one entry per return address.
struct OwnedStack {
  std::string site;
  size_t k = 0;  // the first frame in the site's function
  const Json *json = nullptr;
  Json frames;
};

Json physical_frames(const Json &frames) {
  Json out = Json::array();
  for (const Json &f : frames) {
    if (!f.value("inlined", false)) out.push_back(f);
  }
  return out;
}

std::vector<OwnedStack> owned_stacks(const Json &snapshot, const Json &truth) {
  std::vector<OwnedStack> out;
  for (const Json &site : snapshot.at("sites")) {
    Json frames = physical_frames(site.at("frames"));
    for (size_t k = 0; k < frames.size(); ++k) {
      const std::string function = frames[k].value("function", "");
      if (truth.at("sites").contains(function)) {
        out.push_back({function, k, &site, std::move(frames)});
        break;
      }
    }
  }
  return out;
}

const std::set<std::string> kTargetModules = {"native_stacks", "libnative_dl.so"};

// Sites whose leaf is the allocator's caller: the site function itself.
const std::set<std::string> kDirectSites = {"new_array_site", "nothrow_new_site", "aligned_nothrow_new_site",
                                            "qsort_compare_site", "signal_site",
                                            "async_signal_site", "native_dl_site",   "mmap_site",
                                            "nocfi_call_malloc"};

// Exact bytes per site (summed over the site's stacks), kinds, nothing
// left to other frames of the target's modules, and total_live.
// `not_sites`: functions of the target that may hold bytes without being
// sites of the truth (heap left by a trim under a churning caller, named
// since issue 35's item 7 in light mode).
void expect_exact_bytes(const Json &snapshot, const Json &truth, const std::set<std::string> &sites_checked,
                        const std::set<std::string> &target_modules, const std::string &context,
                        const std::set<std::string> &not_sites = {}) {
  std::map<std::string, int64_t> live;
  std::map<std::string, std::set<std::string>> kinds;
  for (const OwnedStack &s : owned_stacks(snapshot, truth)) {
    live[s.site] += s.json->at("live_bytes").get<int64_t>();
    if (s.json->at("live_bytes").get<int64_t>() > 0) kinds[s.site].insert(s.json->at("kind").get<std::string>());
  }
  const auto mmap_sites = truth.at("mmap_sites").get<std::set<std::string>>();
  for (const std::string &site : sites_checked) {
    ASSERT_TRUE(truth.at("sites").contains(site)) << site << " not in the truth" << context;
    EXPECT_EQ(live[site], truth.at("sites").at(site).get<int64_t>()) << "live bytes of " << site << context;
    EXPECT_EQ(kinds[site], std::set<std::string>{mmap_sites.count(site) ? "mmap" : "heap"})
        << "kind of " << site << context;
  }
  // A stack in none of the sites, with its leaf in the target: bytes lost
  // to a broken stack.
  for (const Json &site : snapshot.at("sites")) {
    const Json &frames = site.at("frames");
    bool owned = false;
    for (const Json &f : frames) owned = owned || truth.at("sites").contains(f.value("function", ""));
    if (owned || frames.empty() || not_sites.count(frames[0].value("function", ""))) continue;
    if (target_modules.count(file_name(frames[0].value("module", "")))) {
      EXPECT_EQ(site.at("live_bytes").get<int64_t>(), 0)
          << "bytes at a stack of no site:\n" << describe_frames(frames) << context;
    }
  }
}

// The frames of every stack of `site` against the truth's backtraces, and
// how each frame was found.
void expect_frames_match_backtrace(const Json &snapshot, const Json &truth, const std::string &site,
                                   const std::string &context) {
  const auto backtraces = backtraces_of(truth);
  ASSERT_TRUE(backtraces.count(site)) << "the target recorded no backtrace at " << site << context;
  const auto &expected = backtraces.at(site);
  std::vector<bool> seen(expected.size(), false);
  int stacks = 0;
  for (const OwnedStack &s : owned_stacks(snapshot, truth)) {
    if (s.site != site || s.json->at("live_bytes").get<int64_t>() == 0) continue;
    ++stacks;
    const Json &frames = s.frames;
    const std::string where = "\nleakwatch's stack of " + site + " (truncated " +
                              s.json->value("truncated", Json()).dump() + "):\n" + describe_frames(frames);
    if (kDirectSites.count(site)) {
      EXPECT_EQ(s.k, 0u) << "the leaf must be the allocator's caller, " << site << where << context;
    }
    EXPECT_TRUE(s.json->at("truncated").is_null()) << "a complete stack" << where << context;
    // Found through the tables, not the frame-pointer fallback: frame 0 is
    // the probe's own pc (leaf), operator new's caller (hint), or a return
    // address found by CFI once the allocator's frames were skipped.
    for (size_t i = 0; i < frames.size(); ++i) {
      const std::string how = frames[i].value("unwound", "");
      if (i == 0) {
        EXPECT_TRUE(how == "leaf" || how == "hint" || how == "cfi") << "frame 0 unwound " << how << where << context;
      } else {
        EXPECT_EQ(how, "cfi") << "frame " << i << where << context;
      }
      // The target's modules have symbols (libc's internals need libc6-dbg).
      if (kTargetModules.count(file_name(frames[i].value("module", "")))) {
        EXPECT_FALSE(frames[i].value("function", "").empty()) << "frame " << i << " unsymbolized" << where << context;
      }
    }
    std::vector<std::string> tail;
    for (size_t i = s.k + 1; i < frames.size(); ++i) tail.push_back(frame_key(frames[i]));
    bool matched = false;
    for (size_t b = 0; b < expected.size(); ++b) {
      if (std::vector<std::string>(expected[b].begin() + 1, expected[b].end()) == tail) {
        seen[b] = matched = true;
      }
    }
    if (!matched) {
      std::ostringstream bts;
      for (const auto &bt : expected) bts << "  backtrace() at " << site << ", from the 2nd frame on:\n" << describe_keys(bt, 1);
      ADD_FAILURE() << "frames above " << site << " differ from glibc's backtrace()" << where << bts.str() << context;
    }
  }
  EXPECT_GT(stacks, 0) << "no stack of " << site << " with live bytes" << context;
  for (size_t b = 0; b < expected.size(); ++b) {
    EXPECT_TRUE(seen[b]) << "no leakwatch stack for this backtrace() at " << site << ":\n"
                         << describe_keys(expected[b], 0) << context;
  }
}

// One traced run of every site, shared by the tests below (each run costs
// an attach: the whole file stays well under a minute).
TraceSession &all_sites_session() {
  static std::unique_ptr<TraceSession> session;
  if (!session) session = std::make_unique<TraceSession>(TraceOptions{.target = "native_stacks"});
  return *session;
}

class NativeStacks : public ::testing::Test {
 protected:
  void SetUp() override {
    // BPF needs root here; as root these tests must run, never skip.
    if (geteuid() != 0) GTEST_SKIP() << "not root";
  }
  static std::string context(TraceSession &session) {
    return "\n" + describe_sites(session.snapshot()) + session.diagnostics();
  }
  static void check_site(const std::string &site) {
    TraceSession &session = all_sites_session();
    expect_frames_match_backtrace(session.snapshot(), session.truth(), site, context(session));
  }
};

TEST_F(NativeStacks, ExactBytesPerSite) {
  TraceSession &session = all_sites_session();
  std::set<std::string> sites;
  for (const auto &[site, bytes] : session.truth().at("sites").items()) sites.insert(site);
  expect_exact_bytes(session.snapshot(), session.truth(), sites, kTargetModules, context(session));
  EXPECT_EQ(session.snapshot().at("live_bytes").get<int64_t>(), session.truth().at("total_live").get<int64_t>())
      << context(session);
}

// new[] four calls below main: libstdc++'s operator new[] -> new -> malloc.
TEST_F(NativeStacks, NewArrayChainMatchesBacktrace) { check_site("new_array_site"); }

// nothrow new[]: the outer operator new calls the inner one, so its frame
// is on the stack; the leaf is still the caller, seen once.
TEST_F(NativeStacks, NothrowNewChainMatchesBacktrace) {
  check_site("nothrow_new_site");
  check_site("aligned_nothrow_new_site");
}

// std::string storage allocated inside libstdc++ (assign -> _M_replace_aux
// -> _M_mutate -> _M_create -> operator new): the leaf is a basic_string
// member in libstdc++, and the unwinder goes from there back into the
// program. Debian's libstdc++ 12 _M_create jumps to operator new (a tail
// call), so its frame is gone by then: the leaf is _M_mutate, as it is
// for any unwinder.
TEST_F(NativeStacks, StringStorageInsideLibstdcxxMatchesBacktrace) {
  check_site("string_site");
  TraceSession &session = all_sites_session();
  for (const OwnedStack &s : owned_stacks(session.snapshot(), session.truth())) {
    if (s.site != "string_site" || s.json->at("live_bytes").get<int64_t>() == 0) continue;
    const std::string where = "\n" + describe_frames(s.frames) + context(session);
    EXPECT_GE(s.k, 1u) << where;
    for (size_t i = 0; i < s.k; ++i) {
      const Json &frame = s.frames.at(i);
      EXPECT_EQ(file_name(frame.value("module", "")).rfind("libstdc++", 0), 0u) << where;
      EXPECT_NE(frame.value("function", "").find("basic_string"), std::string::npos) << where;
    }
  }
}

// Container growth: operator new called from the container code that the
// program instantiated (vector's _M_realloc_insert, the hashtable inlined).
TEST_F(NativeStacks, VectorGrowthMatchesBacktrace) { check_site("vector_growth_site"); }
TEST_F(NativeStacks, UnorderedMapGrowthMatchesBacktrace) { check_site("map_growth_site"); }

// malloc in a qsort callback: the stack goes back through libc's sort.
TEST_F(NativeStacks, QsortCallbackThroughLibcMatchesBacktrace) {
  check_site("qsort_compare_site");
  TraceSession &session = all_sites_session();
  for (const OwnedStack &s : owned_stacks(session.snapshot(), session.truth())) {
    if (s.site != "qsort_compare_site" || s.json->at("live_bytes").get<int64_t>() == 0) continue;
    ASSERT_GE(s.frames.size(), 2u) << context(session);
    EXPECT_EQ(file_name(s.frames[1].value("module", "")), "libc.so.6") << context(session);
  }
}

// malloc in a signal handler: through the kernel's signal frame
// (__restore_rt) into raise() and the code that called it. The frame above
// the signal frame is the interrupted instruction itself, for both.
TEST_F(NativeStacks, SignalHandlerThroughSignalFrameMatchesBacktrace) {
  check_site("signal_site");
  // With libc's symbols (libc6-dbg: __restore_rt is not a dynamic symbol),
  // the handler returns into __restore_rt, which begins right after
  // padding: named although offset-1 lies in no function.
  TraceSession &session = all_sites_session();
  for (const OwnedStack &s : owned_stacks(session.snapshot(), session.truth())) {
    if (s.site != "signal_site" || s.json->at("live_bytes").get<int64_t>() == 0) continue;
    const Json &frames = s.frames;
    bool libc_symbols = false;
    for (const Json &f : frames) libc_symbols = libc_symbols || f.value("function", "") == "__libc_start_call_main";
    if (!libc_symbols) continue;
    bool restore_rt = false;
    for (size_t i = 1; i < frames.size(); ++i) {
      if (frames[i].value("function", "") == "__restore_rt") {
        restore_rt = true;
        EXPECT_EQ(frames[i - 1].value("function", ""), "on_sigusr1") << describe_frames(frames);
      }
    }
    EXPECT_TRUE(restore_rt) << describe_frames(frames) << context(session);
  }
}

// malloc in the handler of a CPU-time timer signal that lands anywhere in a
// spinning -O2 loop (a prologue, an epilogue, the loop): the frame above
// the signal frame is the interrupted pc itself, not a return address.
TEST_F(NativeStacks, TimerSignalAnywhereInLoopMatchesBacktrace) {
  check_site("async_signal_site");
  TraceSession &session = all_sites_session();
  for (const OwnedStack &s : owned_stacks(session.snapshot(), session.truth())) {
    if (s.site != "async_signal_site" || s.json->at("live_bytes").get<int64_t>() == 0) continue;
    const Json &frames = s.frames;
    bool spinning = false;
    for (const Json &f : frames) {
      const std::string function = f.value("function", "");
      spinning = spinning || function == "spin_step" || function == "spin_chain_2";
    }
    EXPECT_TRUE(spinning) << "the signal interrupted the spin loop\n" << describe_frames(frames) << context(session);
    std::cout << "[ info ] the timer signal interrupted:";
    for (size_t i = 0; i < frames.size(); ++i)
      if (i > 0 && frames[i - 1].value("function", "") == "on_sigprof") {
        for (size_t j = i; j < std::min(frames.size(), i + 3); ++j) std::cout << " " << frame_key(frames[j]) << " " << frames[j].value("function", "");
      }
    std::cout << "\n";
  }
}

// A dlopen()ed -O2 library, back into the program that called it.
TEST_F(NativeStacks, DlopenedLibraryMatchesBacktrace) { check_site("native_dl_site"); }

// mmap through glibc's wrapper: the wrapper's frame is skipped, the leaf is
// the -O2 function that called it.
TEST_F(NativeStacks, MmapThroughGlibcWrapperMatchesBacktrace) { check_site("mmap_site"); }

// malloc called from code that no FDE describes: the stack stops there,
// says why, and has no invented frames: whatever it holds above the leaf
// must be the real callers (nocfi_chain_2, then its backtrace()).
TEST_F(NativeStacks, NoCfiRegionEndsTheStackWithoutGarbage) {
  TraceSession &session = all_sites_session();
  const auto backtraces = backtraces_of(session.truth());
  ASSERT_TRUE(backtraces.count("nocfi_chain_2")) << context(session);
  const auto &callers = backtraces.at("nocfi_chain_2").at(0);
  int stacks = 0;
  for (const OwnedStack &s : owned_stacks(session.snapshot(), session.truth())) {
    if (s.site != "nocfi_call_malloc" || s.json->at("live_bytes").get<int64_t>() == 0) continue;
    ++stacks;
    const Json &frames = s.frames;
    const std::string where = "\nleakwatch's stack:\n" + describe_frames(frames) + "callers (backtrace()):\n" +
                              describe_keys(callers, 0) + context(session);
    EXPECT_EQ(s.k, 0u) << where;
    EXPECT_EQ(s.json->value("truncated", Json()), Json("no_cfi")) << where;
    for (size_t i = 1; i < frames.size(); ++i) {
      if (i == 1) {
        EXPECT_EQ(frames[i].value("function", ""), "nocfi_chain_2") << where;
      } else {
        ASSERT_LT(i - 1, callers.size()) << where;
        EXPECT_EQ(frame_key(frames[i]), callers[i - 1]) << "frame " << i << where;
      }
    }
    std::cout << "[ info ] the no-CFI stack holds " << frames.size() << " frame(s), truncated "
              << s.json->value("truncated", Json()).dump() << "\n";
  }
  EXPECT_EQ(stacks, 1) << context(session);
}

// Light mode (no heap probes, mmap through the wrapper probes): the mmap
// site's caller and the frames above it as in full mode.
TEST_F(NativeStacks, LightModeMmapSiteHasItsCaller) {
  TraceSession session({.target = "native_stacks", .target_args = {"mmap"}, .leakwatch_args = {"--mode", "light"}});
  const std::string ctx = context(session);
  expect_exact_bytes(session.snapshot(), session.truth(), {"mmap_site"}, {"native_stacks"}, ctx);
  expect_frames_match_backtrace(session.snapshot(), session.truth(), "mmap_site", ctx);
}

// Light mode on a process already running, its heap grown before the
// attach: the brk probe sits past glibc's store of the new break, so the
// break before the first call after the attach is the one read from
// glibc's __curbrk when the probe was attached (decision brk-emulated-probe).
// The growth after the attach is exact, nothing before it is counted, and no
// call went without a previous break.
TEST_F(NativeStacks, LightModeBrkGrowthAfterAttachIsExact) {
  TraceSession session({.target = "leaker", .leakwatch_args = {"--mode", "light"}});
  const std::string ctx = context(session);
  expect_exact_bytes(session.snapshot(), session.truth(), {"leak_sbrk", "leak_mmap"}, {"leaker"}, ctx);
  EXPECT_EQ(session.snapshot().at("counters").at("brk_unknown").get<int64_t>(), 0) << ctx;
}

// Issue 35, item 7: in light mode the brk and mmap glibc's malloc makes are
// named after malloc's caller, not after __default_morecore or sysmalloc
// (or libc.so.6+0x... where libc has no symbols): no mmap site's leaf frame
// is in libc. Fails on the names the light tier gave before.
TEST_F(NativeStacks, LightModeSitesAreTheAllocatorsCallerNotGlibc) {
  TraceSession session({.target = "leaker", .leakwatch_args = {"--mode", "light"}});
  const std::string ctx = context(session);
  size_t checked = 0;
  std::string in_libc;
  for (const Json &s : session.snapshot().at("sites")) {
    const Json &frames = s.at("frames");
    if (s.at("kind").get<std::string>() != "mmap" || frames.size() < 2) continue;
    ++checked;
    const std::string module = frames[0].value("module", "");
    if (module.find("/libc.so") != std::string::npos)
      in_libc += " " + frames[0].value("function", "?") + "@" + module;
  }
  EXPECT_GT(checked, 0u) << ctx;
  EXPECT_EQ(in_libc, "") << "mmap sites whose leaf is glibc's:" << in_libc << "\n" << ctx;
}

// Walk reuse (decision walk-reuse) never hands one call chain's frames to
// another: via_a and via_b call common() with the same frame layout, so every
// walk from its malloc starts at the same pc and stack pointer; only the return
// address in common()'s frame differs. Each chain keeps its own bytes, and the
// walks were reused (else this tests nothing).
TEST_F(NativeStacks, WalkReuseKeepsTwoChainsFromOneStartApart) {
  TraceSession session({.target = "walk_chains"});
  const std::string ctx = context(session);
  expect_exact_bytes(session.snapshot(), session.truth(), {"via_a", "via_b"}, {"walk_chains"}, ctx);
  EXPECT_GT(session.snapshot().at("counters").at("walks_reused").get<int64_t>(), 100) << ctx;
}

// User reads through the per-CPU window (decision user-read-window) give the
// stacks that direct reads give: every site with a backtrace() still matches it
// with the window at its default (4 KB), at 64 bytes (most frames straddle
// blocks and are read directly, the rest copy a block each) and off. The
// default run did copy blocks, and the run with the window off copied none.
TEST_F(NativeStacks, WindowedReadsGiveTheStacksOfDirectReads) {
  std::set<std::string> sites;
  for (const auto &[site, bytes] : all_sites_session().truth().at("sites").items()) sites.insert(site);
  EXPECT_GT(all_sites_session().snapshot().at("counters").at("stack_window_fills").get<int64_t>(), 0)
      << context(all_sites_session());
  for (const char *size : {"64", "0"}) {
    SCOPED_TRACE(std::string("LW_BENCH_STACK_WINDOW=") + size);
    TraceSession session({.target = "native_stacks",
                          .leakwatch_env = {std::string("LW_BENCH_STACK_WINDOW=") + size}});
    const std::string ctx = context(session);
    // nocfi_chain_2's backtrace() holds the callers of a stack that ends
    // at code without CFI (NoCfiRegionEndsTheStackWithoutGarbage).
    for (const auto &[site, bts] : backtraces_of(session.truth()))
      if (site != "nocfi_chain_2") expect_frames_match_backtrace(session.snapshot(), session.truth(), site, ctx);
    expect_exact_bytes(session.snapshot(), session.truth(), sites, kTargetModules, ctx);
    const int64_t fills = session.snapshot().at("counters").at("stack_window_fills").get<int64_t>();
    if (std::string(size) == "0")
      EXPECT_EQ(fills, 0) << ctx;
    else
      EXPECT_GT(fills, 0) << ctx;
  }
}

// A heap that moves up and down (glibc trims its top on every iteration of
// a loop that allocates and frees a large block, as PyTorch's inference
// loop does): the re-growth below the highest break is recorded without a
// stack walk, at one site that says so, but for at most one walk per
// 100 ms; growth to a new high has its full stack
// (decision brk-emulated-probe).
TEST_F(NativeStacks, LightModeHeapRegrowthIsRecordedWithoutAWalk) {
  TraceSession session({.target = "brk_regrow", .leakwatch_args = {"--mode", "light"}});
  const std::string ctx = context(session);
  // Growth to a new high: its own stack, exact. cycle's first growth (a new
  // high, walked) leaves what the trim could not give back (a page): under
  // cycle, glibc's frames dropped (issue 35, item 7).
  expect_exact_bytes(session.snapshot(), session.truth(), {"regrow_high"}, {"brk_regrow"}, ctx, {"cycle"});
  int64_t not_walked = 0, regrown_walked = 0, total = 0;
  for (const Json &site : session.snapshot().at("sites")) {
    const Json &frames = site.at("frames");
    const int64_t live = site.at("live_bytes").get<int64_t>();
    total += live;
    if (frames.size() == 1 &&
        frames[0].value("function", "") == "[heap re-grown below its high-water mark: stack not walked]") {
      not_walked += live;
      EXPECT_EQ(site.at("truncated"), "not_walked") << ctx;
      EXPECT_EQ(site.at("kind"), "mmap") << ctx;
      continue;
    }
    for (const Json &f : frames)
      if (f.value("function", "") == "keep_regrown") regrown_walked += live;
  }
  // The two kept blocks lie in re-grown heap: at most one growth walked.
  const int64_t kept = session.truth().at("facts").at("kept_bytes").get<int64_t>();
  EXPECT_GT(not_walked, 0) << ctx;
  // Recorded whether walked or not: the kept blocks, less what the trimmed
  // top still held (below the trim threshold, 128 KiB), page-rounded.
  EXPECT_GE(not_walked + regrown_walked, kept - (128 << 10)) << ctx;
  EXPECT_LE(not_walked + regrown_walked, kept + 2 * 4096) << ctx;
  EXPECT_EQ(total, session.snapshot().at("kernel_live_bytes").get<int64_t>()) << ctx;
  EXPECT_EQ(session.snapshot().at("counters").at("brk_unknown").get<int64_t>(), 0) << ctx;
}

// A directory mounted as overlayfs, as a container runtime mounts an
// image: lower/ holds copies of the target program and its library, the
// program runs from merged/. Unmounted and removed at the end.
class OverlayDir {
 public:
  OverlayDir() {
    char tmpl[] = "/tmp/lw-overlay-XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error(std::string("mkdtemp: ") + strerror(errno));
    dir_ = tmpl;
    for (const char *sub : {"lower", "upper", "work", "merged"}) std::filesystem::create_directory(dir_ + "/" + sub);
    for (const char *file : {"native_stacks", "libnative_dl.so"}) {
      std::filesystem::copy_file(target_path(file), dir_ + "/lower/" + file);
    }
    const std::string options = "lowerdir=" + dir_ + "/lower,upperdir=" + dir_ + "/upper,workdir=" + dir_ + "/work";
    if (mount("overlay", merged().c_str(), "overlay", 0, options.c_str()) != 0) {
      error_ = std::string("mount -t overlay: ") + strerror(errno);
    } else {
      mounted_ = true;
    }
  }
  ~OverlayDir() {
    if (mounted_) umount2(merged().c_str(), MNT_DETACH);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string merged() const { return dir_ + "/merged"; }
  std::string lower() const { return dir_ + "/lower"; }
  const std::string &error() const { return error_; }  // "" once mounted

 private:
  std::string dir_;
  std::string error_;
  bool mounted_ = false;
};

// What each side calls the overlay's files: /proc/PID/maps, stat() of the
// merged and the layer file (the BPF side reads vma->vm_file->f_inode, the
// layer file, on kernels with backing files).
std::string overlay_identities(pid_t pid, const OverlayDir &overlay) {
  std::ostringstream out;
  out << "/proc/" << pid << "/maps (overlay files):\n";
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(overlay.merged()) != std::string::npos) out << "  " << line << "\n";
  for (const std::string &path : {overlay.merged() + "/native_stacks", overlay.lower() + "/native_stacks",
                                   overlay.merged() + "/libnative_dl.so", overlay.lower() + "/libnative_dl.so"}) {
    struct stat st {};
    if (stat(path.c_str(), &st) == 0)
      out << "  stat " << path << ": dev " << major(st.st_dev) << ":" << minor(st.st_dev) << " ino " << st.st_ino
          << "\n";
  }
  return out.str();
}

// The program and its library run from overlayfs (a container's root): the
// kernel maps the layer files, /proc/PID/maps names the overlay's, and
// leakwatch must still tie frames to modules and tables (both identities
// registered, engine/unwind_tables.cc; core/symbols/overlay.h).
TEST_F(NativeStacks, OverlayfsProgramAndLibraryResolve) {
  OverlayDir overlay;
  if (!overlay.error().empty()) GTEST_SKIP() << "no overlayfs here: " << overlay.error();
  TraceSession session({.target = overlay.merged() + "/native_stacks", .target_args = {"new_array", "string", "dl"}});
  const std::string ctx = context(session) + overlay_identities(session.target_pid(), overlay);
  const std::set<std::string> sites = {"new_array_site", "string_site", "native_dl_site"};
  expect_exact_bytes(session.snapshot(), session.truth(), sites, kTargetModules, ctx);
  for (const std::string &site : sites) expect_frames_match_backtrace(session.snapshot(), session.truth(), site, ctx);
  // The modules are the overlay's paths, as the process sees them.
  int overlay_frames = 0;
  for (const Json &site : session.snapshot().at("sites")) {
    for (const Json &frame : site.at("frames")) {
      const std::string module = frame.value("module", "");
      if (kTargetModules.count(file_name(module))) {
        EXPECT_EQ(module.rfind(overlay.merged() + "/", 0), 0u) << module << ctx;
        ++overlay_frames;
      }
    }
  }
  EXPECT_GT(overlay_frames, 0) << ctx;
}

}  // namespace
}  // namespace lw::itest
