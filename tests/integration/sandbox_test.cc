// SPDX-License-Identifier: Apache-2.0
// The daemon's security against what it observes and who reaches it:
//  - `leakwatch run` keeps only its documented capabilities (main thread;
//    none in the HTTP threads), sets no_new_privs and runs under its
//    seccomp filter, and still traces exactly, reloads and stops cleanly;
//  - a process name holding a newline cannot forge a log line;
//  - a secret in LD_PRELOAD never appears in any HTTP response.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "daemon_harness.h"
#include "http_client.h"

namespace lw::itest {
namespace {

using namespace std::chrono_literals;

class LeakwatchSandbox : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "not root";
  }
};

// "Name:\tvalue" fields of a /proc status file.
std::map<std::string, std::string> status_fields(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    while (!value.empty() && (value[0] == '\t' || value[0] == ' ')) value.erase(0, 1);
    out[line.substr(0, colon)] = value;
  }
  return out;
}

uint64_t hex(const std::string& s) { return std::strtoull(s.c_str(), nullptr, 16); }

// CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH,
// CAP_CHECKPOINT_RESTORE (README, "Capabilities").
constexpr uint64_t kDocumented = (1ull << 39) | (1ull << 38) | (1ull << 19) | (1ull << 2) | (1ull << 40);

TEST_F(LeakwatchSandbox, DaemonKeepsOnlyItsCapabilitiesUnderSeccompAndStillTracesExactly) {
  TempDir bin;
  const std::string leaker_bin = private_target_copy(bin.path(), "leaker");
  const std::string comm = file_name_of(leaker_bin);
  const std::string body = "top_sites_per_process: 200\ntargets:\n  - name: leakers\n    match: " +
                           comm_selector(comm) + "\n    mode: full\n";
  DaemonProcess daemon({.config_body = body});
  daemon.wait_notify("READY=1", kReadyTimeout);

  const std::string proc = "/proc/" + std::to_string(daemon.pid());
  auto main = status_fields(proc + "/status");
  EXPECT_EQ(hex(main["CapEff"]), kDocumented) << main["CapEff"];
  EXPECT_EQ(hex(main["CapPrm"]), kDocumented) << main["CapPrm"];
  EXPECT_EQ(hex(main["CapBnd"]), kDocumented) << main["CapBnd"];
  EXPECT_EQ(hex(main["CapInh"]), 0u);
  EXPECT_EQ(hex(main["CapAmb"]), 0u);
  EXPECT_EQ(main["NoNewPrivs"], "1");
  EXPECT_EQ(main["Seccomp"], "2");  // filter mode
  EXPECT_EQ(main["Seccomp_filters"], "1");
  // Every thread is filtered; the HTTP front's threads hold no capability.
  int threads = 0, without = 0;
  for (const auto& task : std::filesystem::directory_iterator(proc + "/task")) {
    auto t = status_fields(task.path().string() + "/status");
    if (t.empty()) continue;  // exited meanwhile
    ++threads;
    EXPECT_EQ(t["Seccomp"], "2") << task.path();
    EXPECT_EQ(t["NoNewPrivs"], "1") << task.path();
    if (hex(t["CapEff"]) == 0) ++without;
    else EXPECT_EQ(hex(t["CapEff"]), kDocumented) << task.path();
  }
  EXPECT_GE(without, 4) << threads << " threads: the HTTP front's epoll, 2 workers, auth";
  printf("[ figures  ] daemon CapEff %s, %d threads (%d without capabilities), Seccomp %s\n",
         main["CapEff"].c_str(), threads, without, main["Seccomp"].c_str());

  // Its whole job under the filter: attach at exec, exact bytes, a reload.
  Process leaker({leaker_bin});
  daemon.wait_for_process(leaker.pid(), kApiTimeout);
  ASSERT_EQ(read_ready(leaker), leaker.pid());
  const Json baseline = daemon.sites_at_or_after(leaker.pid(), unix_now() + 0.3, kApiTimeout);
  Json truth = go_and_read_truth(leaker);
  truth["total_live"] = truth.at("total_live").get<int64_t>() + baseline.at("live_bytes").get<int64_t>();
  const Json sites = daemon.sites_at_or_after(leaker.pid(), unix_now() + 0.5, kApiTimeout);
  expect_matches_truth(sites, truth, {comm}, daemon.diagnostics());
  daemon.write_config(body + "log_level: debug\n");
  daemon.wait_for_status([](const Json& s) { return s.at("reloads_total").get<int>() >= 1; }, kApiTimeout,
                         "a reload");
  EXPECT_TRUE(daemon.get_json("/api/v1/status").at("last_reload_successful").get<bool>());
  leaker.write_line("exit");
  leaker.wait_exit(10s);

  std::optional<int> status = daemon.signal_and_wait(SIGTERM, 20s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status << daemon.diagnostics();
  // No call the list missed (each would have been logged).
  EXPECT_EQ(daemon.diagnostics().find("seccomp: system call"), std::string::npos) << daemon.diagnostics();
}

// A copy of /bin/sleep named so that its comm holds a newline and what a
// forged log line would say.
std::string forged_name_copy(const std::string& dir) {
  const std::string path = dir + "/lw\nerror: forged";
  std::filesystem::copy_file("/bin/sleep", path);
  chmod(path.c_str(), 0755);
  return path;
}

TEST_F(LeakwatchSandbox, NewlineInAProcessNameForgesNoLogLine) {
  TempDir bin;
  Process target({forged_name_copy(bin.path()), "60"});
  DaemonProcess daemon({.config_body = "targets:\n  - name: named\n    match: {pids: [" +
                                       std::to_string(target.pid()) + "]}\n    mode: light\n",
                        .args = {"--log-level", "info"}});
  daemon.wait_notify("READY=1", kReadyTimeout);
  Json entry = daemon.wait_for_process(target.pid(), kApiTimeout);
  EXPECT_EQ(entry.at("comm"), "lw\nerror: forge");  // the API's JSON escapes it
  const std::string log = daemon.diagnostics();
  // The attach line is one line, with the newline escaped...
  EXPECT_NE(log.find("attached pid " + std::to_string(target.pid()) + " (lw\\x0aerror: forge)"), std::string::npos)
      << log;
  // ...and no line starts with the forged text.
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);)
    EXPECT_NE(line.rfind("error: forge", 0), 0u) << "forged line: " << line;
}

std::string gunzip(const std::string& in) {
  z_stream zs = {};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return "";
  std::string out;
  char buf[65536];
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  int rc;
  do {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - zs.avail_out);
  } while (rc == Z_OK);
  inflateEnd(&zs);
  return out;
}

TEST_F(LeakwatchSandbox, PreloadSecretNeverAppearsInAnyResponse) {
  TempDir bin;
  const std::string sleeper = bin.path() + "/lw-preload";
  std::filesystem::copy_file("/bin/sleep", sleeper);
  chmod(sleeper.c_str(), 0755);
  // The loader cannot preload it and says so on the target's stderr; the
  // environment still holds the string.
  Process target({sleeper, "60"}, Process::Options{.env = {"LD_PRELOAD=/x/SECRET=1.so"}});
  DaemonProcess daemon({.config_body = "targets:\n  - name: p\n    match: {pids: [" +
                                       std::to_string(target.pid()) + "]}\n    mode: full\n"});
  daemon.wait_notify("READY=1", kReadyTimeout);
  Json entry = daemon.wait_for_process(target.pid(), kApiTimeout);
  ASSERT_TRUE(wait_until(kApiTimeout, [&] {
    auto p = daemon.find_process(target.pid());
    return p && p->at("allocator").at("support") != "pending";
  }));
  entry = *daemon.find_process(target.pid());
  const Json preload = entry.at("allocator").at("preload");
  EXPECT_EQ(preload.at("present"), true) << entry.dump();
  EXPECT_EQ(preload.at("entries"), 1) << entry.dump();
  EXPECT_TRUE(preload.at("objects").empty()) << entry.dump();  // nothing of it is mapped
  const std::string pid = std::to_string(target.pid());
  for (const std::string& path : std::vector<std::string>{"/", "/metrics", "/api/v1/processes", "/api/v1/status",
                                  "/api/v1/processes/" + pid + "/sites", "/debug/pprof/heap",
                                  "/debug/pprof/heap?pid=" + pid}) {
    RawReply r = raw_request(daemon.port(), path);
    ASSERT_EQ(r.status, 200) << path << ": " << r.error;
    std::string body = r.body.size() > 2 && r.body[0] == '\x1f' ? gunzip(r.body) : r.body;
    EXPECT_EQ(body.find("SECRET"), std::string::npos) << path;
    EXPECT_EQ(body.find("/x/"), std::string::npos) << path;
  }
}

}  // namespace
}  // namespace lw::itest
