// SPDX-License-Identifier: Apache-2.0
// `top -c PROG` on a program that exits before the first table (issue 35,
// item 2): the last word is taken after the exit, when /proc/PID/map_files
// and /proc/PID/root are gone, and must still name the frames from the
// files on disk, trusted by the build-id captured while the program lived.
// A file replaced on disk must not name them, and says so.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness.h"

namespace lw::itest {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr int64_t kLeaked = 3 * 4099;  // tests/targets/quick_exit.c

class LeakwatchExitedSymbols : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "not root";
  }
};

struct TopRun {
  std::vector<std::string> lines;
  std::string err;
  int status = -1;
};

// `leakwatch top ARGS -c COMMAND` to its end. The interval is long: the
// program is gone before the first table, so its sites are resolved for
// the first time in the last word.
TopRun run_top(const std::vector<std::string> &args, const std::vector<std::string> &command) {
  std::vector<std::string> argv{LW_LEAKWATCH_BIN, "top", "--interval", "30"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  Process top(argv, {.env = {"COLUMNS=200"}});
  TopRun run;
  while (auto line = top.read_line(60000ms)) run.lines.push_back(*line);
  auto status = top.wait_exit(10000ms);
  run.err = top.stderr_text();
  if (!status) throw std::runtime_error("leakwatch did not exit; stderr: " + run.err);
  run.status = *status;
  return run;
}

// The final JSON snapshot of a `top --json` run.
Json final_snapshot(const TopRun &run) {
  for (auto it = run.lines.rbegin(); it != run.lines.rend(); ++it) {
    Json j = Json::parse(*it);
    if (j.at("final").get<bool>()) return j;
  }
  throw std::runtime_error("no final snapshot; stderr: " + run.err);
}

// The sites of `snap` whose leaf is in the module named `module` (file name).
std::vector<Json> sites_in(const Json &snap, const std::string &module) {
  std::vector<Json> out;
  for (const Json &site : snap.at("sites")) {
    const Json &frames = site.at("frames");
    if (!frames.empty() && fs::path(frames[0].value("module", "")).filename() == module) out.push_back(site);
  }
  return out;
}

TEST_F(LeakwatchExitedSymbols, ProgramThatExitsAtOnceIsNamedFromItsFile) {
  const TopRun json = run_top({"--json"}, {target_path("quick_exit")});
  ASSERT_TRUE(WIFEXITED(json.status) && WEXITSTATUS(json.status) == 0) << json.err;
  const Json last = final_snapshot(json);
  const auto leaves = live_by_leaf(last);
  ASSERT_TRUE(leaves.count("quick_exit_leak")) << "no frame named quick_exit_leak\n" << describe_sites(last);
  EXPECT_EQ(leaves.at("quick_exit_leak").live_bytes, kLeaked) << describe_sites(last);
  for (const Json &site : sites_in(last, "quick_exit")) {
    EXPECT_FALSE(site.at("symbols_pending").get<bool>()) << site.dump();
    EXPECT_TRUE(site.at("symbols_missing").is_null()) << site.dump();
  }

  // The text view: the function, not quick_exit+0x....
  const TopRun text = run_top({}, {target_path("quick_exit")});
  std::string all;
  for (const std::string &l : text.lines) all += l + "\n";
  EXPECT_NE(all.find("quick_exit_leak"), std::string::npos) << all << text.err;
  EXPECT_EQ(all.find("quick_exit+0x"), std::string::npos) << all;
  EXPECT_EQ(all.find("(no names:"), std::string::npos) << all;
}

// The program renames another executable over its own file, then exits:
// the file at its path has another build-id, so its frames keep their
// offsets, and the site says why instead of claiming nothing is missing.
TEST_F(LeakwatchExitedSymbols, ReplacedFileIsNotUsedAndTheSiteSaysWhy) {
  char dir_template[] = "/tmp/lw-exited-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const fs::path dir = dir_template;
  const fs::path program = dir / "quick_exit";
  const fs::path other = dir / "other";
  fs::copy_file(target_path("quick_exit"), program);
  fs::copy_file("/bin/true", other);
  fs::permissions(program, fs::perms::owner_all);
  const TopRun run = run_top({"--json"}, {program.string(), other.string()});
  std::error_code ec;
  fs::remove_all(dir, ec);
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.err;
  EXPECT_NE(run.err.find("exited with status 0"), std::string::npos) << "the rename failed?\n" << run.err;
  const Json last = final_snapshot(run);
  const std::vector<Json> sites = sites_in(last, "quick_exit");
  ASSERT_FALSE(sites.empty()) << describe_sites(last);
  int64_t live = 0;
  for (const Json &site : sites) {
    live += site.at("live_bytes").get<int64_t>();
    EXPECT_EQ(site.at("frames")[0].value("function", "?"), "") << site.dump();
    EXPECT_FALSE(site.at("symbols_pending").get<bool>()) << site.dump();
    EXPECT_EQ(site.at("symbols_missing"), "file_replaced") << site.dump();
  }
  EXPECT_EQ(live, kLeaked) << describe_sites(last);
}

}  // namespace
}  // namespace lw::itest
