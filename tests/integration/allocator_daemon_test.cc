// SPDX-License-Identifier: Apache-2.0
// The daemon's side of the allocator decision: a process started with
// tcmalloc preloaded (caught at exec, before the loader mapped anything)
// and a stripped static binary, as the API and /metrics report them, and
// where the breakpoints really are.
#include <unistd.h>

#include <gtest/gtest.h>

#include "daemon_harness.h"

namespace lw::itest {
namespace {

using namespace std::chrono_literals;

// The /metrics line of leakwatch_process_allocator_info for `pid`, or "".
std::string allocator_info_line(const std::string &metrics, pid_t pid) {
  const std::string name = "leakwatch_process_allocator_info{";
  const std::string pid_label = "pid=\"" + std::to_string(pid) + "\"";
  size_t pos = 0;
  while ((pos = metrics.find(name, pos)) != std::string::npos) {
    size_t end = metrics.find('\n', pos);
    std::string line = metrics.substr(pos, end - pos);
    if (line.find(pid_label) != std::string::npos) return line;
    pos = end;
  }
  return "";
}

TEST(AllocatorDaemon, PreloadedTcmallocAndStrippedStaticReportedAndProbedAsDecided) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  const std::string tcmalloc = "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4";
  if (access(tcmalloc.c_str(), R_OK) != 0)
    GTEST_SKIP() << "libgoogle-perftools4 not installed: run scripts/install-deps.sh --with-test-tools";
  // Two directories: both private copies get the same 15-character name.
  TempDir tc_dir, stripped_dir;
  const std::string tc_bin = private_target_copy(tc_dir.path(), "alloc_leaker");
  const std::string stripped_bin =
      private_target_copy(stripped_dir.path(), "alloc_leaker_static_stripped");
  ASSERT_EQ(file_name_of(tc_bin), file_name_of(stripped_bin));
  DaemonProcess daemon({.config_body = "top_sites_per_process: 200\ntargets:\n"
                                       "  - name: alloc\n    match: {comm: \"^" +
                                       file_name_of(tc_bin) + "$\"}\n    mode: full\n"});
  daemon.wait_notify("READY=1", 20s);

  Process tc({tc_bin}, Process::Options{false, {"LD_PRELOAD=" + tcmalloc}});
  Process stripped({stripped_bin});
  ASSERT_EQ(read_ready(tc), tc.pid());
  ASSERT_EQ(read_ready(stripped), stripped.pid());
  daemon.wait_for_process(tc.pid(), 10s);
  daemon.wait_for_process(stripped.pid(), 10s);

  // The tcmalloc process was caught at exec: its allocator is resolved once
  // the loader has mapped the preload.
  Json tc_entry, stripped_entry;
  ASSERT_TRUE(wait_until(10s, [&] {
    auto e = daemon.find_process(tc.pid());
    auto s = daemon.find_process(stripped.pid());
    if (!e || !s) return false;
    tc_entry = *e;
    stripped_entry = *s;
    return tc_entry.at("allocator").at("support") == "full";
  })) << tc_entry.dump() << daemon.diagnostics();
  const Json &ta = tc_entry.at("allocator");
  EXPECT_EQ(ta.at("family"), "tcmalloc") << ta.dump();
  EXPECT_NE(ta.at("object").get<std::string>().find("libtcmalloc.so.4"), std::string::npos);
  const Json &sa = stripped_entry.at("allocator");
  EXPECT_EQ(sa.at("support"), "unsupported") << sa.dump();
  EXPECT_TRUE(sa.at("functions").empty()) << sa.dump();

  // The metric, exactly as the dashboards query it.
  std::string metrics;
  ASSERT_TRUE(wait_until(5s, [&] {
    metrics = daemon.get("/metrics").body;
    return !allocator_info_line(metrics, tc.pid()).empty() &&
           !allocator_info_line(metrics, stripped.pid()).empty();
  })) << metrics;
  const std::string tc_line = allocator_info_line(metrics, tc.pid());
  EXPECT_NE(tc_line.find("allocator=\"tcmalloc\""), std::string::npos) << tc_line;
  EXPECT_NE(tc_line.find("support=\"full\"} 1"), std::string::npos) << tc_line;
  EXPECT_NE(tc_line.find("object=\"/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"), std::string::npos)
      << tc_line;
  const std::string st_line = allocator_info_line(metrics, stripped.pid());
  EXPECT_NE(st_line.find("support=\"unsupported\"} 1"), std::string::npos) << st_line;

  // Breakpoints: tcmalloc's malloc is armed in the tcmalloc process; libc's
  // malloc is not probed at all; the stripped binary holds none.
  const std::vector<ProbeLocation> probes = attached_probes(daemon.get_json("/api/v1/status"));
  bool tc_malloc_probed = false;
  for (const ProbeLocation &p : probes) {
    const std::string names = "," + p.symbols + ",";
    if (names.find(",malloc,") == std::string::npos) continue;
    EXPECT_EQ(p.object.find("libc.so"), std::string::npos) << "libc's malloc probed: " << p.object;
    if (p.object.find("libtcmalloc") != std::string::npos) tc_malloc_probed = true;
  }
  EXPECT_TRUE(tc_malloc_probed);
  const BreakpointScan in_tc = scan_breakpoints(tc.pid(), probes);
  EXPECT_GT(in_tc.breakpoints, 0) << in_tc.detail;
  EXPECT_EQ(in_tc.breakpoints, in_tc.mapped) << in_tc.detail;
  const BreakpointScan in_stripped = scan_breakpoints(stripped.pid(), probes);
  EXPECT_EQ(in_stripped.breakpoints, 0) << in_stripped.detail;

  for (Process *p : {&tc, &stripped}) {
    go_and_read_truth(*p);
    p->write_line("exit");
    EXPECT_TRUE(p->wait_exit(10s).has_value());
  }
}

}  // namespace
}  // namespace lw::itest
