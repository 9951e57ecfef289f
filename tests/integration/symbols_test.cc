// SPDX-License-Identifier: Apache-2.0
// Symbols for stripped binaries, end to end (docs/architecture.md,
// "Symbolization"): `leakwatch top --json` on the stripped copies of
// tests/targets/symbols_leaker.c, with its debug file under a build-id
// directory, served by a real debuginfod on loopback, with MiniDebugInfo,
// and with nothing; and a DEBUGINFOD_URLS in leakwatch's environment that
// must not be used.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "harness.h"

namespace lw::itest {
namespace {

namespace fs = std::filesystem;

const std::string kDebugFile = target_path("debug/symbols_leaker.debug");

class LeakwatchSymbols : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "not root";
  }
};

class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/lw_symbols_XXXXXX";
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string &path() const { return path_; }

 private:
  std::string path_;
};

std::string build_id_of(const std::string &path) {
  // readelf is in binutils, which the build needs anyway.
  Process readelf({"/usr/bin/readelf", "-n", path});
  std::string id;
  while (auto line = readelf.read_line(milliseconds(10000))) {
    size_t at = line->find("Build ID: ");
    if (at != std::string::npos) id = line->substr(at + 10);
  }
  readelf.wait_exit(milliseconds(10000));
  return id;
}

int marker_line(const std::string &marker) {
  std::ifstream in(std::string(LW_TARGETS_SOURCE_DIR) + "/symbols_leaker.c");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.find(marker) != std::string::npos) return n;
  ADD_FAILURE() << "no " << marker;
  return -1;
}

std::string write_config(const std::string &dir, const std::string &text) {
  const std::string path = dir + "/leakwatch.yaml";
  std::ofstream(path) << text;
  return path;
}

// The site whose frames include one with `function`, or null.
const Json *site_with(const Json &snapshot, const std::string &function) {
  for (const Json &site : snapshot.at("sites"))
    for (const Json &frame : site.at("frames"))
      if (frame.value("function", "") == function) return &site;
  return nullptr;
}

// The live sites' stack ids with their live bytes.
std::map<std::string, int64_t> live_stacks(const Json &snapshot) {
  std::map<std::string, int64_t> out;
  for (const Json &site : snapshot.at("sites"))
    if (site.at("live_bytes").get<int64_t>() > 0)
      out[site.at("stack_id").get<std::string>()] = site.at("live_bytes").get<int64_t>();
  return out;
}

uint16_t free_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) != 0) {
    throw std::runtime_error("no free port");
  }
  close(fd);
  return ntohs(a.sin_port);
}

// Debian's debuginfod on 127.0.0.1, serving the ELF/DWARF files of one
// directory. It logs every request on stderr ("GET /buildid/...").
class Debuginfod {
 public:
  Debuginfod(const std::string &serve_dir, const std::string &db, const std::string &build_id)
      : port_(free_port()),
        server_({"/usr/bin/debuginfod", "-F", serve_dir, "-p", std::to_string(port_), "-d", db}) {
    // Ready once it has scanned the directory and serves the file; that
    // probe is one request, and requests() counts from here.
    const std::string probe = "/buildid/" + build_id + "/debuginfo";
    for (int i = 0; i < 300; ++i) {
      Process curl({"/usr/bin/curl", "-s", "-o", "/dev/null", "-w", "%{http_code}\n", url() + probe});
      auto code = curl.read_line(milliseconds(10000));
      curl.wait_exit(milliseconds(10000));
      if (code && *code == "200") {
        baseline_ = buildid_requests();
        return;
      }
      std::this_thread::sleep_for(milliseconds(100));
    }
    throw std::runtime_error("debuginfod did not serve " + probe + ": " + server_.stderr_text());
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // /buildid requests since it became ready.
  int requests() const { return buildid_requests() - baseline_; }
  std::string log() const { return server_.stderr_text(); }

 private:
  int buildid_requests() const {
    const std::string log = server_.stderr_text();
    int n = 0;
    for (size_t at = 0; (at = log.find("GET /buildid/", at)) != std::string::npos; ++at) ++n;
    return n;
  }
  uint16_t port_;
  Process server_;
  int baseline_ = 0;
};

bool have_debuginfod() { return access("/usr/bin/debuginfod", X_OK) == 0 && access("/usr/bin/curl", X_OK) == 0; }

// The next snapshots until `done` holds for one (returned), at most `timeout`.
Json snapshot_when(TraceSession &session, const std::function<bool(const Json &)> &done,
                   milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  Json snapshot = session.snapshot();
  while (!done(snapshot) && std::chrono::steady_clock::now() < until)
    snapshot = session.next_snapshot(milliseconds(30000));
  return snapshot;
}

void expect_full_symbols(const Json &snapshot, const std::string &diagnostics) {
  const Json *named = site_with(snapshot, "leak_named");
  ASSERT_NE(named, nullptr) << describe_sites(snapshot) << diagnostics;
  const Json &leaf = named->at("frames").at(0);
  EXPECT_EQ(leaf.at("function"), "leak_named");
  EXPECT_TRUE(leaf.at("file").get<std::string>().ends_with("/symbols_leaker.c")) << leaf;
  EXPECT_EQ(leaf.at("line").get<int>(), marker_line("LW_LINE_NAMED_MALLOC")) << leaf;
  EXPECT_FALSE(leaf.at("inlined").get<bool>());
  EXPECT_EQ(named->at("live_bytes").get<int64_t>(), 16 * 4096);

  // One address, two frames: the inlined function, then the one it is in.
  const Json *inl = site_with(snapshot, "inlined_alloc");
  ASSERT_NE(inl, nullptr) << describe_sites(snapshot) << diagnostics;
  const Json &frames = inl->at("frames");
  ASSERT_GE(frames.size(), 2u);
  EXPECT_EQ(frames[0].at("function"), "inlined_alloc");
  EXPECT_TRUE(frames[0].at("inlined").get<bool>());
  EXPECT_EQ(frames[0].at("line").get<int>(), marker_line("LW_LINE_INLINED_MALLOC"));
  EXPECT_EQ(frames[1].at("function"), "leak_through_inline");
  EXPECT_FALSE(frames[1].at("inlined").get<bool>());
  EXPECT_EQ(frames[1].at("line").get<int>(), marker_line("LW_LINE_INLINE_CALL"));
  EXPECT_EQ(frames[0].at("offset"), frames[1].at("offset"));
  EXPECT_EQ(inl->at("live_bytes").get<int64_t>(), 8 * 8192);
  EXPECT_FALSE(inl->at("symbols_pending").get<bool>());
}

// The frames in the stripped executable, unnamed, show module+offset.
void expect_module_plus_offset(const Json &snapshot) {
  const std::regex shown("symbols_leaker\\+0x[0-9a-f]+");
  int leaves = 0;
  for (const Json &site : snapshot.at("sites")) {
    if (site.at("live_bytes").get<int64_t>() == 0) continue;
    const Json &leaf = site.at("frames").at(0);
    EXPECT_EQ(leaf.at("function"), "") << leaf;
    EXPECT_TRUE(std::regex_match(leaf.at("display_name").get<std::string>(), shown)) << leaf;
    EXPECT_EQ(leaf.at("display_name").get<std::string>().find('?'), std::string::npos);
    ++leaves;
  }
  EXPECT_EQ(leaves, 2) << describe_sites(snapshot);
}

TEST_F(LeakwatchSymbols, StrippedBinaryGetsNamesFromABuildIdDirectory) {
  TempDir dir;
  const std::string id = build_id_of(target_path("stripped/symbols_leaker"));
  ASSERT_EQ(id.size(), 40u);
  const std::string debug_dir = dir.path() + "/debug";
  fs::create_directories(debug_dir + "/.build-id/" + id.substr(0, 2));
  fs::copy_file(kDebugFile, debug_dir + "/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug");
  const std::string config = write_config(dir.path(), "symbols:\n  debug_dirs: [" + debug_dir + "]\n");
  TraceSession with_debug({.target = "stripped/symbols_leaker", .leakwatch_args = {"--config", config}});
  expect_matches_truth(with_debug, {"symbols_leaker"});
  expect_full_symbols(with_debug.snapshot(), with_debug.diagnostics());

  // The same binary with no debug information anywhere: module+offset, and
  // the very same stack ids (they hash build-id and offsets, never names).
  const std::string bare_config = write_config(dir.path(), "symbols:\n  debug_dirs: []\n");
  TraceSession bare({.target = "stripped/symbols_leaker", .leakwatch_args = {"--config", bare_config}});
  expect_module_plus_offset(bare.snapshot());
  EXPECT_EQ(live_stacks(bare.snapshot()), live_stacks(with_debug.snapshot()))
      << describe_sites(bare.snapshot()) << describe_sites(with_debug.snapshot());
}

TEST_F(LeakwatchSymbols, MiniDebugInfoGivesFunctionNames) {
  TraceSession session({.target = "mini/symbols_leaker"});
  const Json *named = site_with(session.snapshot(), "leak_named");
  ASSERT_NE(named, nullptr) << describe_sites(session.snapshot()) << session.diagnostics();
  EXPECT_EQ(named->at("frames").at(0).at("function"), "leak_named");
  EXPECT_EQ(named->at("frames").at(0).at("file"), "");  // names only: no DWARF in it
  EXPECT_EQ(named->at("live_bytes").get<int64_t>(), 16 * 4096);
  // No DWARF, no inline chain: the physical function is the leaf.
  EXPECT_NE(site_with(session.snapshot(), "leak_through_inline"), nullptr);
}

TEST_F(LeakwatchSymbols, DebuginfodServesTheDebugFile) {
  if (!have_debuginfod()) GTEST_SKIP() << "no /usr/bin/debuginfod (install-deps.sh --with-test-tools)";
  TempDir dir;
  const std::string id = build_id_of(target_path("stripped/symbols_leaker"));
  fs::create_directories(dir.path() + "/serve");
  fs::copy_file(kDebugFile, dir.path() + "/serve/symbols_leaker.debug");
  Debuginfod server(dir.path() + "/serve", dir.path() + "/db.sqlite", id);
  const std::string config = write_config(
      dir.path(), "symbols:\n  debug_dirs: []\n  debuginfod_urls: [\"" + server.url() + "\"]\n" +
                      "  cache_dir: " + dir.path() + "/cache\n  timeout_seconds: 20\n");
  TraceSession session({.target = "stripped/symbols_leaker", .leakwatch_args = {"--config", config}});
  // The first frames may predate the fetch; the names follow in a later snapshot.
  Json snapshot = snapshot_when(
      session, [](const Json &s) { return site_with(s, "leak_named") && !symbols_pending(s); },
      milliseconds(40000));
  expect_full_symbols(snapshot, session.diagnostics() + "\ndebuginfod:\n" + server.log());
  const Json &counters = snapshot.at("counters");
  EXPECT_GE(counters.at("debuginfod_fetches").get<int>(), 1);  // libc's and ld.so's are asked too
  EXPECT_EQ(counters.at("debuginfod_hits").get<int>(), 1);
  EXPECT_EQ(counters.at("debuginfod_bytes").get<uint64_t>(), fs::file_size(kDebugFile));
  EXPECT_TRUE(fs::exists(dir.path() + "/cache/" + id + "/debuginfo"));
  EXPECT_NE(server.log().find("GET /buildid/" + id + "/debuginfo"), std::string::npos);
}

// DEBUGINFOD_URLS in leakwatch's environment, pointing at a server that has
// the file, and no `symbols.debuginfod_urls`: nothing may be fetched (libdw
// would ask that server on its own with its standard callbacks).
TEST_F(LeakwatchSymbols, DebuginfodUrlsInTheEnvironmentAreIgnored) {
  if (!have_debuginfod()) GTEST_SKIP() << "no /usr/bin/debuginfod (install-deps.sh --with-test-tools)";
  TempDir dir;
  const std::string id = build_id_of(target_path("stripped/symbols_leaker"));
  fs::create_directories(dir.path() + "/serve");
  fs::copy_file(kDebugFile, dir.path() + "/serve/symbols_leaker.debug");
  Debuginfod server(dir.path() + "/serve", dir.path() + "/db.sqlite", id);
  const std::vector<std::string> env = {"DEBUGINFOD_URLS=" + server.url(),
                                        "DEBUGINFOD_CACHE_PATH=" + dir.path() + "/client-cache"};
  TraceSession session({.target = "stripped/symbols_leaker", .leakwatch_env = env});
  // A few more snapshots: time for any fetch to have happened.
  Json snapshot = snapshot_when(session, [](const Json &) { return false; }, milliseconds(2000));
  expect_module_plus_offset(snapshot);
  EXPECT_EQ(snapshot.at("counters").at("debuginfod_fetches").get<int>(), 0);
  EXPECT_EQ(server.requests(), 0) << server.log();
  EXPECT_FALSE(fs::exists(dir.path() + "/client-cache"));

  // Control: the same environment does reach the server from a client
  // that honours it.
  Process find({"/usr/bin/debuginfod-find", "debuginfo", id}, Process::Options{false, env});
  auto status = find.wait_exit(milliseconds(30000));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 0) << find.stderr_text();
  EXPECT_EQ(server.requests(), 1) << server.log();
}

}  // namespace
}  // namespace lw::itest
