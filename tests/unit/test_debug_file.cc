// SPDX-License-Identifier: Apache-2.0
// Debug-file lookup (core/symbols/debug_file.h), symbolization of stripped objects
// and inline chains (core/symbols/symbolizer.h), the symbol thread
// (core/symbols/symbol_service.h) and module+offset rendering. The objects are the
// copies of tests/targets/symbols_leaker.c that tests/targets/CMakeLists.txt
// makes (symbol_variants.sh): stripped/, debug/, mini/.
#include "core/symbols/debug_file.h"

#include <capstone/capstone.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <lzma.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/symbols/debuginfod.h"
#include "core/symbols/elf_file.h"
#include "core/symbols/stack_id.h"
#include "core/symbols/symbol_service.h"
#include "core/symbols/symbolizer.h"

namespace lw {
namespace {

namespace fs = std::filesystem;

const std::string kTargets = LW_TARGETS_DIR;
const std::string kFull = kTargets + "/symbols_leaker";
const std::string kStripped = kTargets + "/stripped/symbols_leaker";
const std::string kDebug = kTargets + "/debug/symbols_leaker.debug";
const std::string kMini = kTargets + "/mini/symbols_leaker";

std::shared_ptr<const ElfFile> open_elf(const std::string& path) {
  auto elf = ElfFile::open_path(path);
  EXPECT_TRUE(elf.ok()) << path;
  return elf.ok() ? *elf : nullptr;
}

// The line of the source line holding `marker` (symbols_leaker.c).
int marker_line(const std::string& marker) {
  std::ifstream in(std::string(LW_TARGETS_SOURCE_DIR) + "/symbols_leaker.c");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.find(marker) != std::string::npos) return n;
  ADD_FAILURE() << "no " << marker;
  return -1;
}

// The file offset of the return address of the first call in `function`
// of the unstripped binary (the same code as in every copy), as a stack
// walker would see it.
uint64_t return_offset(const std::string& function) {
  auto elf = open_elf(kFull);
  if (!elf) return 0;
  std::optional<ElfSymbol> sym = elf->find_function(function);
  EXPECT_TRUE(sym.has_value()) << function;
  if (!sym) return 0;
  std::vector<uint8_t> code = elf->read_at_vaddr(sym->vaddr, static_cast<size_t>(sym->size));
  csh handle;
  EXPECT_EQ(cs_open(CS_ARCH_X86, CS_MODE_64, &handle), CS_ERR_OK);
  cs_insn* insn = nullptr;
  size_t n = cs_disasm(handle, code.data(), code.size(), sym->vaddr, 0, &insn);
  uint64_t after_call = 0;
  for (size_t i = 0; i < n && after_call == 0; ++i)
    if (insn[i].id == X86_INS_CALL) after_call = insn[i].address + insn[i].size;
  cs_free(insn, n);
  cs_close(&handle);
  EXPECT_NE(after_call, 0u) << function;
  return elf->vaddr_to_offset(after_call).value_or(0);
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = testing::TempDir() + "lw_debug_file_XXXXXX";
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void copy_to(const std::string& from, const std::string& to) {
  fs::create_directories(fs::path(to).parent_path());
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

std::string build_id_path(const std::string& dir, const std::string& build_id) {
  return dir + "/.build-id/" + build_id.substr(0, 2) + "/" + build_id.substr(2) + ".debug";
}

ModuleRef ref_of(const std::string& path, const std::string& build_id = "") {
  ModuleRef r;
  r.path = path;
  r.open_path = path;
  r.build_id = build_id;
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    r.inode = st.st_ino;
    r.dev = st.st_dev;
  }
  return r;
}

TEST(DebugFile, CandidatesInSearchOrder) {
  std::vector<DebugCandidate> c =
      debug_file_candidates("/usr/bin/python3.11", "571d98e01096d5c1c32420d229a6731a0a50d2a0",
                            "python3.11.debug", {"/usr/lib/debug", "/opt/debug"});
  std::vector<std::string> paths;
  for (const DebugCandidate& x : c) paths.push_back(x.path);
  EXPECT_EQ(paths, (std::vector<std::string>{
                       "/usr/lib/debug/.build-id/57/1d98e01096d5c1c32420d229a6731a0a50d2a0.debug",
                       "/opt/debug/.build-id/57/1d98e01096d5c1c32420d229a6731a0a50d2a0.debug",
                       "/usr/bin/python3.11.debug",
                       "/usr/bin/.debug/python3.11.debug",
                       "/usr/lib/debug/usr/bin/python3.11.debug",
                       "/opt/debug/usr/bin/python3.11.debug",
                   }));
  EXPECT_EQ(c[0].source, DebugSource::kBuildIdDir);
  EXPECT_EQ(c[2].source, DebugSource::kDebugLink);
}

TEST(DebugFile, HostileNamesGiveNoCandidates) {
  // A link name that would leave the directories, a build-id that is not hex.
  for (const char* link : {"../../etc/shadow", "a/b.debug", "..", ".", ""}) {
    EXPECT_TRUE(debug_file_candidates("/usr/bin/x", "", link, {"/usr/lib/debug"}).empty()) << link;
  }
  EXPECT_TRUE(debug_file_candidates("/usr/bin/x", "../../etc", "", {"/usr/lib/debug"}).empty());
  EXPECT_TRUE(debug_file_candidates("/usr/bin/x", "AB12", "", {"/usr/lib/debug"}).empty());
}

TEST(DebugFile, VariantsAreWhatTheTestsNeed) {
  auto stripped = open_elf(kStripped);
  auto debug = open_elf(kDebug);
  auto mini = open_elf(kMini);
  ASSERT_TRUE(stripped && debug && mini);
  EXPECT_FALSE(stripped->build_id().empty());
  EXPECT_EQ(stripped->build_id(), debug->build_id());
  EXPECT_FALSE(stripped->debug_links().has_symtab);
  EXPECT_FALSE(stripped->debug_links().has_debug_info);
  EXPECT_EQ(stripped->debug_links().debuglink, "symbols_leaker.debug");
  EXPECT_TRUE(debug->debug_links().has_symtab);
  EXPECT_TRUE(debug->debug_links().has_debug_info);
  EXPECT_GT(mini->debug_links().debugdata_size, 0u);
  EXPECT_FALSE(mini->debug_links().has_symtab);
}

TEST(DebugFile, FoundByBuildIdInADebugDir) {
  auto stripped = open_elf(kStripped);
  ASSERT_TRUE(stripped);
  TempDir dir;
  copy_to(kDebug, build_id_path(dir.path(), stripped->build_id()));
  DebugSearchOptions options;
  options.debug_dirs = {dir.path()};
  DebugFileQuery q;
  q.object_path = "/nonexistent/symbols_leaker";  // no debug link next to it
  q.build_id = stripped->build_id();
  DebugLookupStats stats;
  std::optional<DebugFile> f = find_debug_file(q, options, &stats);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->source, DebugSource::kBuildIdDir);
  EXPECT_EQ(f->elf->build_id(), stripped->build_id());
  EXPECT_EQ(stats.rejected_build_id, 0u);
}

TEST(DebugFile, WrongBuildIdIsRefused) {
  auto stripped = open_elf(kStripped);
  ASSERT_TRUE(stripped);
  TempDir dir;
  // Another ELF file placed where this build-id's debug file should be
  // (not one of the copies: they all share the build-id).
  copy_to("/proc/self/exe", build_id_path(dir.path(), stripped->build_id()));
  DebugSearchOptions options;
  options.debug_dirs = {dir.path()};
  DebugFileQuery q;
  q.object_path = "/nonexistent/symbols_leaker";
  q.build_id = stripped->build_id();
  DebugLookupStats stats;
  EXPECT_FALSE(find_debug_file(q, options, &stats).has_value());
  EXPECT_EQ(stats.rejected_build_id, 1u);
}

TEST(DebugFile, DebugLinkNextToTheObjectWithItsCrc) {
  auto stripped = open_elf(kStripped);
  ASSERT_TRUE(stripped);
  TempDir dir;
  const std::string object = dir.path() + "/bin/symbols_leaker";
  copy_to(kStripped, object);
  copy_to(kDebug, dir.path() + "/bin/.debug/symbols_leaker.debug");
  DebugSearchOptions options;
  options.debug_dirs = {};
  DebugFileQuery q;
  q.object_path = object;
  q.build_id = stripped->build_id();
  q.debuglink = stripped->debug_links().debuglink;
  q.debuglink_crc = stripped->debug_links().debuglink_crc;
  DebugLookupStats stats;
  std::optional<DebugFile> f = find_debug_file(q, options, &stats);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->source, DebugSource::kDebugLink);
  EXPECT_EQ(f->path, dir.path() + "/bin/.debug/symbols_leaker.debug");

  // The CRC is the link's word: another CRC, no file.
  q.debuglink_crc ^= 1;
  EXPECT_FALSE(find_debug_file(q, options, &stats).has_value());
  EXPECT_EQ(stats.rejected_crc, 1u);

  // Without a build-id (an object built without one) the CRC alone decides.
  q.debuglink_crc ^= 1;
  q.build_id.clear();
  EXPECT_TRUE(find_debug_file(q, options, nullptr).has_value());
}

TEST(DebugFile, SearchedInTheTargetsRootWithoutEscaping) {
  auto stripped = open_elf(kStripped);
  ASSERT_TRUE(stripped);
  TempDir root;
  DebugSearchOptions options;  // /usr/lib/debug, as the target sees it
  DebugFileQuery q;
  q.object_path = "/usr/bin/symbols_leaker";
  q.build_id = stripped->build_id();
  q.target_root = root.path();
  const std::string in_root = root.path() + build_id_path("/usr/lib/debug", q.build_id);

  // A symlink to the right file outside the root resolves inside the root
  // (to nothing): a container cannot point the daemon at host files.
  fs::create_directories(fs::path(in_root).parent_path());
  fs::create_symlink(kDebug, in_root);
  EXPECT_FALSE(find_debug_file(q, options, nullptr).has_value());

  fs::remove(in_root);
  copy_to(kDebug, in_root);
  std::optional<DebugFile> f = find_debug_file(q, options, nullptr);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->source, DebugSource::kBuildIdDir);
  EXPECT_EQ(f->path, in_root);
}

// Issue 32, item 4: a debug link is a path in the target's mount namespace.
// For a process in another root, the file it names on the host (here the
// right debug file, CRC and all) is not the daemon's to open.
TEST(DebugFile, ADebugLinkOfAnotherRootIsNotLookedUpOnTheHost) {
  auto stripped = open_elf(kStripped);
  ASSERT_TRUE(stripped);
  TempDir host, root;
  const std::string object = host.path() + "/bin/symbols_leaker";
  copy_to(kStripped, object);
  copy_to(kDebug, host.path() + "/bin/.debug/symbols_leaker.debug");
  DebugSearchOptions options;
  options.debug_dirs = {};
  DebugFileQuery q;
  q.object_path = object;
  q.build_id = stripped->build_id();
  q.debuglink = stripped->debug_links().debuglink;
  q.debuglink_crc = stripped->debug_links().debuglink_crc;
  ASSERT_TRUE(find_debug_file(q, options, nullptr).has_value());  // the daemon's own root
  q.target_root = root.path();
  EXPECT_FALSE(find_debug_file(q, options, nullptr).has_value());
  // In the target's root it is found.
  copy_to(kDebug, root.path() + host.path() + "/bin/.debug/symbols_leaker.debug");
  std::optional<DebugFile> f = find_debug_file(q, options, nullptr);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->path, root.path() + host.path() + "/bin/.debug/symbols_leaker.debug");
}

TEST(DebugFile, DebuginfodCacheLayout) {
  auto stripped = open_elf(kStripped);
  ASSERT_TRUE(stripped);
  TempDir cache;
  DebugSearchOptions options;
  options.debug_dirs = {};
  options.debuginfod_cache_dir = cache.path();
  DebugFileQuery q;
  q.object_path = "/nonexistent/symbols_leaker";
  q.build_id = stripped->build_id();
  // libdebuginfod's negative-cache entry: an empty file. Not a refusal.
  const std::string entry = cache.path() + "/" + q.build_id + "/debuginfo";
  fs::create_directories(fs::path(entry).parent_path());
  std::ofstream(entry).close();
  DebugLookupStats stats;
  EXPECT_FALSE(find_debug_file(q, options, &stats).has_value());
  EXPECT_EQ(stats.rejected_file, 0u);
  copy_to(kDebug, entry);
  std::optional<DebugFile> f = find_debug_file(q, options, &stats);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->source, DebugSource::kDebuginfod);
}

TEST(DebugFile, MiniDebugInfoIsExtractedWithABound) {
  auto mini = open_elf(kMini);
  ASSERT_TRUE(mini);
  DebugSearchOptions options;
  DebugLookupStats stats;
  std::optional<DebugFile> f = extract_debugdata(*mini, options, &stats);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->source, DebugSource::kDebugData);
  EXPECT_TRUE(f->elf->debug_links().has_symtab);

  options.max_debugdata_bytes = 1024;  // smaller than what it decompresses to
  EXPECT_FALSE(extract_debugdata(*mini, options, &stats).has_value());
  EXPECT_EQ(stats.rejected_debugdata, 1u);
}

std::vector<uint8_t> xz(const std::string& data) {
  std::vector<uint8_t> out(lzma_stream_buffer_bound(data.size()));
  size_t pos = 0;
  EXPECT_EQ(lzma_easy_buffer_encode(6, LZMA_CHECK_CRC64, nullptr,
                                    reinterpret_cast<const uint8_t*>(data.data()), data.size(),
                                    out.data(), &pos, out.size()),
            LZMA_OK);
  out.resize(pos);
  return out;
}

TEST(DebugFile, XzBombAndCorruptDataAreRefused) {
  const std::string zeros(64u << 20, '\0');  // 64 MiB in about 10 KiB of xz
  const std::vector<uint8_t> bomb = xz(zeros);
  ASSERT_LT(bomb.size(), 64u << 10);
  Result<std::string> big = xz_decompress(bomb, 1u << 20);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().code, EFBIG);

  const std::vector<uint8_t> small = xz("hello, minidebuginfo");
  Result<std::string> ok = xz_decompress(small, 1u << 20);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "hello, minidebuginfo");
  Result<std::string> exact = xz_decompress(small, 20);
  EXPECT_TRUE(exact.ok());

  std::vector<uint8_t> corrupt = small;
  corrupt[corrupt.size() / 2] ^= 0xff;
  EXPECT_FALSE(xz_decompress(corrupt, 1u << 20).ok());
  std::vector<uint8_t> truncated(small.begin(), small.begin() + static_cast<long>(small.size() / 2));
  EXPECT_FALSE(xz_decompress(truncated, 1u << 20).ok());
}

// ---- the symbolizer on the stripped copies ----

TEST(SymbolizeStripped, BuildIdDirGivesNamesAndLines) {
  auto stripped = open_elf(kStripped);
  ASSERT_TRUE(stripped);
  TempDir dir;
  copy_to(kDebug, build_id_path(dir.path(), stripped->build_id()));
  DebugSearchOptions search;
  search.debug_dirs = {dir.path()};
  Symbolizer s({}, search);
  const ModuleRef ref = ref_of(kStripped, stripped->build_id());
  Frame f = s.symbolize(ref, return_offset("leak_named"));
  EXPECT_EQ(f.function, "leak_named");
  EXPECT_TRUE(f.file.ends_with("/symbols_leaker.c")) << f.file;
  EXPECT_EQ(f.line, marker_line("LW_LINE_NAMED_MALLOC"));
  EXPECT_FALSE(f.inlined);
  EXPECT_EQ(s.module_info(ref).source, DebugSource::kBuildIdDir);
  EXPECT_EQ(s.errors(), 0u);
}

TEST(SymbolizeStripped, InlineChainExpanded) {
  auto stripped = open_elf(kStripped);
  ASSERT_TRUE(stripped);
  TempDir dir;
  copy_to(kDebug, build_id_path(dir.path(), stripped->build_id()));
  DebugSearchOptions search;
  search.debug_dirs = {dir.path()};
  Symbolizer s({}, search);
  const uint64_t offset = return_offset("leak_through_inline");
  std::vector<Frame> frames = s.symbolize_inline(ref_of(kStripped, stripped->build_id()), offset);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].function, "inlined_alloc");
  EXPECT_TRUE(frames[0].inlined);
  EXPECT_EQ(frames[0].line, marker_line("LW_LINE_INLINED_MALLOC"));
  EXPECT_EQ(frames[1].function, "leak_through_inline");
  EXPECT_FALSE(frames[1].inlined);
  EXPECT_EQ(frames[1].line, marker_line("LW_LINE_INLINE_CALL"));
  for (const Frame& f : frames) {
    EXPECT_EQ(f.offset, offset);
    EXPECT_EQ(f.build_id, stripped->build_id());
    EXPECT_TRUE(f.file.ends_with("/symbols_leaker.c")) << f.file;
  }
  // The physical frame alone is what symbolize() gives.
  EXPECT_EQ(s.symbolize(ref_of(kStripped, stripped->build_id()), offset).function,
            "leak_through_inline");
}

TEST(SymbolizeStripped, NoDebugInfoGivesModulePlusOffset) {
  Symbolizer s({}, DebugSearchOptions{.debug_dirs = {}});
  const uint64_t offset = return_offset("leak_named");
  Frame f = s.symbolize(ref_of(kStripped), offset);
  EXPECT_EQ(f.function, "");  // a static function: in no .dynsym
  char expected[64];
  snprintf(expected, sizeof(expected), "symbols_leaker+0x%" PRIx64, offset);
  EXPECT_EQ(frame_display_name(f), expected);
  EXPECT_EQ(s.errors(), 0u);
}

TEST(SymbolizeStripped, MiniDebugInfoGivesNamesWithoutLines) {
  Symbolizer s({}, DebugSearchOptions{.debug_dirs = {}});
  const ModuleRef ref = ref_of(kMini);
  Frame f = s.symbolize(ref, return_offset("leak_named"));
  EXPECT_EQ(f.function, "leak_named");
  EXPECT_EQ(f.file, "");
  EXPECT_EQ(f.line, 0);
  Symbolizer::ModuleInfo info = s.module_info(ref);
  EXPECT_EQ(info.source, DebugSource::kDebugData);
  EXPECT_TRUE(info.wants_debug_file);  // a debuginfod file would add lines
}

// ---- rendering and stack ids ----

TEST(FrameDisplay, ModulePlusOffsetNeverAQuestionMark) {
  Frame f;
  f.module = "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0";
  f.offset = 0x1a2b3c;
  EXPECT_EQ(frame_display_name(f), "libpython3.11.so.1.0+0x1a2b3c");
  f.function = "PyByteArray_Resize";
  EXPECT_EQ(frame_display_name(f), "PyByteArray_Resize");
  Frame unknown;
  unknown.offset = 0x7f0000001000;
  EXPECT_EQ(frame_display_name(unknown), "[unknown]+0x7f0000001000");
}

TEST(StackId, SameWithInlinedFramesAndBeforeSymbols) {
  Frame leaf;
  leaf.module = "/app/bin";
  leaf.build_id = "abcd";
  leaf.offset = 0x1200;
  Frame caller = leaf;
  caller.offset = 0x1500;
  const uint64_t bare = stable_stack_id({leaf, caller});

  Frame named = leaf;
  named.function = "leak_through_inline";
  named.file = "/src/leak.c";
  named.line = 30;
  Frame inlined = named;
  inlined.function = "inlined_alloc";
  inlined.inlined = true;
  EXPECT_EQ(stable_stack_id({inlined, named, caller}), bare);
  EXPECT_EQ(stable_stack_id({named, caller}), bare);
}

// ---- the symbol thread ----

TEST(SymbolService, PendingThenResolvedAndGenerationMoves) {
  auto stripped = open_elf(kStripped);
  ASSERT_TRUE(stripped);
  TempDir dir;
  copy_to(kDebug, build_id_path(dir.path(), stripped->build_id()));
  SymbolServiceOptions o;
  o.search.debug_dirs = {dir.path()};
  SymbolService service(o);
  const ModuleRef ref = ref_of(kStripped, stripped->build_id());
  const uint64_t offset = return_offset("leak_through_inline");
  const uint64_t g0 = service.generation();
  // The first look never blocks on the file: it queues the address.
  EXPECT_EQ(service.lookup(ref, offset).frames, nullptr);
  ASSERT_TRUE(service.wait_idle(std::chrono::seconds(30)));
  EXPECT_NE(service.generation(), g0);
  SymbolService::Lookup found = service.lookup(ref, offset);
  EXPECT_FALSE(found.provisional);
  SymbolService::Frames frames = found.frames;
  ASSERT_NE(frames, nullptr);
  ASSERT_EQ(frames->size(), 2u);
  EXPECT_EQ((*frames)[0].function, "inlined_alloc");
  EXPECT_EQ((*frames)[1].function, "leak_through_inline");
  SymbolCounters c = service.counters();
  EXPECT_EQ(c.requests, 1u);
  EXPECT_EQ(c.resolved, 1u);
  EXPECT_EQ(c.symbolizer.modules_build_id_dir, 1u);
  EXPECT_EQ(c.debuginfod.fetches, 0u);  // off by default
}

TEST(SymbolService, BoundedQueueAndResults) {
  SymbolServiceOptions o;
  o.max_queue = 1;
  o.max_results = 2;
  SymbolService service(o);
  const ModuleRef ref = ref_of(kStripped);
  // However fast the thread takes the first, the queue holds one: of many
  // distinct requests at once, some are dropped, counted, and asked again.
  uint64_t nulls = 0;
  for (uint64_t off = 0x1000; off < 0x1000 + 64; ++off) nulls += service.lookup(ref, off).frames == nullptr;
  EXPECT_EQ(nulls, 64u);
  ASSERT_TRUE(service.wait_idle(std::chrono::seconds(30)));
  SymbolCounters c = service.counters();
  EXPECT_GT(c.requests_dropped, 0u);
  EXPECT_EQ(c.requests + c.requests_dropped, 64u);
  EXPECT_LE(c.cached_results, 2u);
  EXPECT_EQ(c.results_evicted, c.resolved - c.cached_results);
}

TEST(SymbolService, UnreadableModuleResolvesToModulePlusOffset) {
  SymbolService service(SymbolServiceOptions{});
  ModuleRef ref{"/usr/lib/libgone.so", "/nonexistent/lw/libgone.so", 7, ""};
  EXPECT_EQ(service.lookup(ref, 0x42).frames, nullptr);
  ASSERT_TRUE(service.wait_idle(std::chrono::seconds(30)));
  SymbolService::Frames frames = service.lookup(ref, 0x42).frames;
  ASSERT_NE(frames, nullptr);  // resolved: nothing more will come
  ASSERT_EQ(frames->size(), 1u);
  EXPECT_EQ(frame_display_name(frames->front()), "libgone.so+0x42");
  EXPECT_EQ(service.counters().symbolizer.module_errors, 1u);
  // And says why, for good (issue 35): not pending, not silently unnamed.
  EXPECT_STREQ(service.lookup(ref, 0x42).missing, kSymbolsFileGone);
  EXPECT_FALSE(service.lookup(ref, 0x42).provisional);
}

// ---- the debuginfod cache bound ----

TEST(DebuginfodCache, LeastRecentlyUsedGoFirst) {
  TempDir cache;
  auto entry = [&](const std::string& id, size_t bytes, time_t when) {
    const std::string file = cache.path() + "/" + id + "/debuginfo";
    fs::create_directories(fs::path(file).parent_path());
    std::ofstream(file) << std::string(bytes, 'x');
    struct timeval times[2] = {{when, 0}, {when, 0}};
    utimes(file.c_str(), times);
  };
  const time_t now = time(nullptr);
  entry("aa01", 4000, now - 300);
  entry("aa02", 4000, now - 200);
  entry("aa03", 4000, now - 100);
  std::ofstream(cache.path() + "/cache_clean_interval_s") << "86400";  // libdebuginfod's own
  EXPECT_EQ(trim_debuginfod_cache(cache.path(), 9000), 1u);
  EXPECT_FALSE(fs::exists(cache.path() + "/aa01"));
  EXPECT_TRUE(fs::exists(cache.path() + "/aa02/debuginfo"));
  EXPECT_TRUE(fs::exists(cache.path() + "/aa03/debuginfo"));
  EXPECT_TRUE(fs::exists(cache.path() + "/cache_clean_interval_s"));
  EXPECT_EQ(trim_debuginfod_cache(cache.path(), 100000), 0u);
}

TEST(Debuginfod, OffMeansNothingIsStarted) {
  DebuginfodFetcher fetcher(DebuginfodOptions{});
  EXPECT_FALSE(fetcher.enabled());
  EXPECT_FALSE(fetcher.want("571d98e01096d5c1c32420d229a6731a0a50d2a0"));
  EXPECT_TRUE(fetcher.poll().empty());
  EXPECT_EQ(fetcher.counters().fetches, 0u);
}

TEST(Debuginfod, HelperFailureIsCountedAndNotRetriedAtOnce) {
  DebuginfodOptions o;
  o.urls = {"http://127.0.0.1:9"};
  TempDir cache;
  o.cache_dir = cache.path() + "/cache";
  o.helper = "/bin/false";  // exits 1 without a word
  DebuginfodFetcher fetcher(o);
  ASSERT_TRUE(fetcher.want("aabbccdd"));
  for (int i = 0; i < 200 && (fetcher.busy() > 0 || fetcher.counters().fetches == 0); ++i) {
    fetcher.poll();
    usleep(10000);
  }
  EXPECT_EQ(fetcher.counters().fetches, 1u);
  EXPECT_EQ(fetcher.counters().failures, 1u);
  EXPECT_EQ(fetcher.counters().hits, 0u);
  EXPECT_FALSE(fetcher.want("aabbccdd"));  // within retry_after
  EXPECT_TRUE(fs::is_directory(o.cache_dir));
}

// The whole fetch path without a server: a stand-in for
// `leakwatch debuginfod-fetch` that copies the debug file where
// libdebuginfod would put it and records the environment it was given.
TEST(Debuginfod, FetchedFileReplacesWhatTheModuleHad) {
  auto stripped = open_elf(kStripped);
  ASSERT_TRUE(stripped);
  TempDir dir;
  const std::string helper = dir.path() + "/fetch.sh";
  {
    std::ofstream out(helper);
    out << "#!/bin/sh\n"
        << "# argv: debuginfod-fetch BUILD_ID TIMEOUT_SECONDS\n"
        << "/usr/bin/env > " << dir.path() << "/env.txt\n"
        << "/bin/mkdir -p \"$DEBUGINFOD_CACHE_PATH/$2\" || exit 1\n"
        << "/bin/cp " << kDebug << " \"$DEBUGINFOD_CACHE_PATH/$2/debuginfo\" || exit 1\n"
        << "echo \"ok $(/usr/bin/stat -c %s " << kDebug << ") $DEBUGINFOD_CACHE_PATH/$2/debuginfo\"\n";
  }
  ASSERT_EQ(chmod(helper.c_str(), 0755), 0);
  setenv("DEBUGINFOD_URLS", "http://192.0.2.1:1", 1);  // the process's own: must not leak through
  SymbolServiceOptions o;
  o.search.debug_dirs = {};
  o.debuginfod.urls = {"http://127.0.0.1:9", "https://example.invalid"};
  o.debuginfod.cache_dir = dir.path() + "/cache";
  o.debuginfod.timeout_seconds = 7;
  o.debuginfod.helper = helper;
  SymbolService service(o);
  unsetenv("DEBUGINFOD_URLS");
  const ModuleRef ref = ref_of(kStripped, stripped->build_id());
  const uint64_t offset = return_offset("leak_named");
  EXPECT_EQ(service.lookup(ref, offset).frames, nullptr);
  ASSERT_TRUE(service.wait_idle(std::chrono::seconds(30)));
  SymbolService::Lookup found = service.lookup(ref, offset);
  ASSERT_NE(found.frames, nullptr);
  EXPECT_FALSE(found.provisional);
  EXPECT_EQ(found.frames->back().function, "leak_named");
  EXPECT_EQ(found.frames->back().line, marker_line("LW_LINE_NAMED_MALLOC"));
  SymbolCounters c = service.counters();
  EXPECT_EQ(c.debuginfod.fetches, 1u);
  EXPECT_EQ(c.debuginfod.hits, 1u);
  EXPECT_EQ(c.debuginfod.bytes, fs::file_size(kDebug));
  EXPECT_EQ(c.symbolizer.modules_debuginfod, 1u);

  std::ifstream env_in(dir.path() + "/env.txt");
  std::vector<std::string> env;
  for (std::string line; std::getline(env_in, line);)
    if (line.rfind("PWD=", 0) != 0 && line.rfind("SHLVL=", 0) != 0 && line.rfind("_=", 0) != 0)
      env.push_back(line);  // the shell's own
  std::sort(env.begin(), env.end());
  EXPECT_EQ(env, (std::vector<std::string>{
                     "DEBUGINFOD_CACHE_PATH=" + dir.path() + "/cache",
                     "DEBUGINFOD_MAXSIZE=1073741824",
                     "DEBUGINFOD_MAXTIME=7",
                     "DEBUGINFOD_TIMEOUT=7",
                     "DEBUGINFOD_URLS=http://127.0.0.1:9 https://example.invalid",
                 }));
}

}  // namespace
}  // namespace lw
