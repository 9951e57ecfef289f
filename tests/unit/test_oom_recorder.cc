// SPDX-License-Identifier: Apache-2.0
// The OOM recorder (service/oom_recorder.h, decision oom-kill-reports) on the
// fake tracer: a kill becomes one report (API, file, counter), a second
// kill event of the same process none; reports left in oom.report_dir are
// read back newest first and bounded by oom.max_reports; the counter has a
// zero series per (target, reason) from the start.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/accounting/process_notices.h"
#include "core/platform/clock.h"
#include "exporter/http/http_routes.h"
#include "exporter/metrics.h"
#include "fake_tracer.h"
#include "sleep_child.h"
#include "service/discovery.h"
#include "service/oom_recorder.h"
#include "service/publisher.h"

namespace lw {
namespace {

namespace fs = std::filesystem;

Config parse_ok(const std::string& yaml) {
  std::vector<ConfigError> errors;
  Result<Config> c = parse_config(yaml, "test.yaml", &errors);
  if (!c) {
    for (const ConfigError& e : errors) ADD_FAILURE() << format_error(e);
    return Config{};
  }
  return std::move(*c);
}

struct OomParts {
  explicit OomParts(const std::string& dir, uint32_t max_reports)
      : state{parse_ok("targets:\n  - name: sleepers\n    match: {comm: \"^sleep$\"}\n    mode: full\n"
                       "oom:\n  report_dir: " + dir + "\n  max_reports: " + std::to_string(max_reports) + "\n"),
              ""} {}
  DaemonState state;
  FakeTracer tracer;
  ProcessDiscovery discovery{state, tracer, PodDirectoryOptions{}};
  Publisher publisher{state, tracer};
  OomRecorder oom{state, tracer};
};

std::string temp_dir() {
  char tmpl[] = "/tmp/lw-oom-unit-XXXXXX";
  return mkdtemp(tmpl);
}

TEST(OomRecorder, AKillIsOneReportInTheApiTheDirectoryAndTheCounter) {
  const std::string dir = temp_dir();
  OomParts p(dir, 10);
  p.oom.load();
  p.publisher.publish();
  MetricsOptions opts;
  std::string text = render_metrics(*p.publisher.latest(), opts);
  for (const char* reason : {"global", "memory_cgroup", "oom_sender"})
    EXPECT_NE(text.find(std::string("leakwatch_oom_kills_total{target=\"sleepers\",reason=\"") + reason + "\"} 0"),
              std::string::npos)
        << reason << "\n" << text;
  EXPECT_NE(text.find("leakwatch_oom_last_kill_timestamp_seconds 0"), std::string::npos);

  SleepChild child;
  p.discovery.consider(child.pid, 0);
  ASSERT_EQ(p.state.tracked.count(child.pid), 1u);
  p.oom.tick(1000);  // one history sample
  ProcessKill k;
  k.pid = child.pid;
  k.memcg = true;
  k.limit_bytes = 96u << 20;
  k.memcg_usage_bytes = 96u << 20;
  k.rss_bytes = 90u << 20;
  k.event_ns = monotonic_ns();
  p.tracer.kills.push_back(k);
  p.tracer.kills.push_back(k);  // the same process again: no second report
  EXPECT_EQ(p.oom.handle_kills(), 2u);
  ASSERT_EQ(p.state.oom_reports->size(), 1u);
  EXPECT_TRUE(p.state.dirty);
  nlohmann::json r = nlohmann::json::parse(p.state.oom_reports->front().json);
  EXPECT_EQ(r.at("reason"), "memory_cgroup");
  EXPECT_EQ(r.at("process").at("pid"), child.pid);
  EXPECT_EQ(r.at("process").at("comm"), "sleep");
  EXPECT_EQ(r.at("process").at("target"), "sleepers");
  EXPECT_EQ(r.at("memory_cgroup").at("limit_bytes"), 96u << 20);
  EXPECT_EQ(r.at("rss_bytes"), 90u << 20);
  EXPECT_TRUE(r.at("killed_by").is_null());
  EXPECT_EQ(r.at("history").size(), 2u);  // the sample, then the kill
  EXPECT_GE(r.at("report_latency_seconds").get<double>(), 0);
  const std::string file = r.at("file");
  EXPECT_TRUE(fs::exists(file)) << file;
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(file)), r);

  p.publisher.publish();
  text = render_metrics(*p.publisher.latest(), opts);
  EXPECT_NE(text.find("leakwatch_oom_kills_total{target=\"sleepers\",reason=\"memory_cgroup\"} 1"), std::string::npos);
  const std::string api = oom_kills_json(*p.publisher.latest());
  EXPECT_EQ(nlohmann::json::parse(api).at("oom_kills").at(0), r);

  // A SIGKILL of a process not tracked: nothing.
  ProcessKill stranger = k;
  stranger.pid = 1;
  stranger.sigkill = true;
  p.tracer.kills.push_back(stranger);
  p.oom.handle_kills();
  EXPECT_EQ(p.state.oom_reports->size(), 1u);
  fs::remove_all(dir);
}

// GPU OOM (decision oom-kill-reports, "GPU OOM"): one report per process and
// device per minute (kernel time), the rest counted in it; a recovery updates
// the API and the file; the process stays tracked; the counters start at 0.
TEST(OomRecorder, GpuOomIsRateLimitedPerDeviceAndMarkedRecovered) {
  const std::string dir = temp_dir();
  OomParts p(dir, 10);
  p.oom.load();
  p.publisher.publish();
  MetricsOptions opts;
  std::string text = render_metrics(*p.publisher.latest(), opts);
  EXPECT_NE(text.find("leakwatch_oom_kills_total{target=\"sleepers\",reason=\"gpu_oom\"} 0"), std::string::npos);
  EXPECT_NE(text.find("leakwatch_gpu_oom_suppressed_total{target=\"sleepers\"} 0"), std::string::npos);

  SleepChild child;
  p.discovery.consider(child.pid, 0);
  ASSERT_EQ(p.state.tracked.count(child.pid), 1u);
  ProcessKill k;
  k.pid = child.pid;
  k.gpu_oom = true;
  k.gpu_device = 0;
  k.gpu_kind = LW_KIND_CUDA_DEVICE;
  k.gpu_requested = 1u << 30;
  k.gpu_error = LW_CUDART_ERROR_MEMORY_ALLOCATION;
  k.gpu_func = LW_FUNC_CUDART_MALLOC;
  k.event_ns = monotonic_ns();
  p.tracer.kills.push_back(k);
  ProcessKill retry = k;
  retry.event_ns += 1'000'000'000ull;  // 1 s later: suppressed
  p.tracer.kills.push_back(retry);
  ProcessKill other_device = k;
  other_device.gpu_device = 1;
  other_device.gpu_driver = true;
  other_device.gpu_func = LW_FUNC_CU_MEM_ALLOC;
  p.tracer.kills.push_back(other_device);
  EXPECT_EQ(p.oom.handle_kills(), 3u);
  ASSERT_EQ(p.state.oom_reports->size(), 2u);
  nlohmann::json dev0, dev1;
  for (const StoredOomReport& s : *p.state.oom_reports) {
    nlohmann::json j = nlohmann::json::parse(s.json);
    (j.at("gpu").at("device") == 0 ? dev0 : dev1) = j;
  }
  EXPECT_EQ(dev0.at("reason"), "gpu_oom");
  EXPECT_EQ(dev0.at("gpu").at("api"), "runtime");
  EXPECT_EQ(dev0.at("gpu").at("function"), "cudaMalloc");
  EXPECT_EQ(dev0.at("gpu").at("requested_bytes"), 1u << 30);
  EXPECT_EQ(dev0.at("gpu").at("error_code"), 2);
  EXPECT_EQ(dev0.at("suppressed"), 1);
  EXPECT_EQ(dev0.at("recovered"), false);
  EXPECT_TRUE(dev0.at("memory_cgroup").is_null());
  EXPECT_EQ(dev1.at("gpu").at("api"), "driver");
  EXPECT_EQ(dev1.at("gpu").at("function"), "cuMemAlloc");
  EXPECT_EQ(dev1.at("suppressed"), 0);
  EXPECT_NE(dev0.at("file"), dev1.at("file"));
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(dev0.at("file").get<std::string>())), dev0);
  EXPECT_EQ(p.state.counters.oom_last_kill_timestamp, 0) << "a GPU OOM kills nothing";

  ProcessKill recovered;
  recovered.pid = child.pid;
  recovered.gpu_recovered = true;
  recovered.gpu_device = 0;
  recovered.event_ns = monotonic_ns();
  p.tracer.kills.push_back(recovered);
  p.oom.handle_kills();
  ASSERT_EQ(p.state.oom_reports->size(), 2u);
  for (const StoredOomReport& s : *p.state.oom_reports) {
    nlohmann::json j = nlohmann::json::parse(s.json);
    EXPECT_EQ(j.at("recovered"), j.at("gpu").at("device") == 0) << j.dump();
    if (j.at("gpu").at("device") == 0) {
      EXPECT_EQ(nlohmann::json::parse(std::ifstream(j.at("file").get<std::string>())), j) << "the file is updated";
      EXPECT_FALSE(j.at("recovered_timestamp").is_null());
    }
  }
  // A minute later (kernel time): a new report.
  ProcessKill later = k;
  later.event_ns += 61'000'000'000ull;
  p.tracer.kills.push_back(later);
  p.oom.handle_kills();
  EXPECT_EQ(p.state.oom_reports->size(), 3u);
  EXPECT_EQ(p.state.tracked.count(child.pid), 1u) << "still tracked";

  p.publisher.publish();
  text = render_metrics(*p.publisher.latest(), opts);
  EXPECT_NE(text.find("leakwatch_oom_kills_total{target=\"sleepers\",reason=\"gpu_oom\"} 3"), std::string::npos) << text;
  EXPECT_NE(text.find("leakwatch_gpu_oom_suppressed_total{target=\"sleepers\"} 1"), std::string::npos);
  fs::remove_all(dir);
}

TEST(OomRecorder, ReportsAreReadBackNewestFirstAndBounded) {
  const std::string dir = temp_dir();
  for (int i = 1; i <= 3; ++i)
    std::ofstream(dir + "/" + oom_report_file_name(1000.0 * i, 100 + i)) << "{\"timestamp\":" << 1000 * i << "}";
  std::ofstream(dir + "/" + oom_report_file_name(5000, 7)) << "not json";
  std::ofstream(dir + "/unrelated.txt") << "x";
  OomParts p(dir, 2);
  p.oom.load();
  ASSERT_EQ(p.state.oom_reports->size(), 2u);
  EXPECT_EQ(p.state.oom_reports->at(0).timestamp, 3000);
  EXPECT_EQ(p.state.oom_reports->at(1).timestamp, 2000);
  EXPECT_EQ(p.state.counters.oom_last_kill_timestamp, 3000);

  // A new kill: first in the API, and the directory keeps max_reports files.
  SleepChild child;
  p.discovery.consider(child.pid, 0);
  ProcessKill k;
  k.pid = child.pid;
  k.sigkill = true;
  k.sender_pid = 42;
  k.sender_comm = "systemd-oomd";
  k.event_ns = monotonic_ns();
  p.tracer.kills.push_back(k);
  p.oom.handle_kills();
  ASSERT_EQ(p.state.oom_reports->size(), 2u);
  nlohmann::json r = nlohmann::json::parse(p.state.oom_reports->front().json);
  EXPECT_EQ(r.at("reason"), "oom_sender");
  EXPECT_TRUE(r.at("for_memory").get<bool>());
  EXPECT_EQ(r.at("killed_by").at("comm"), "systemd-oomd");
  EXPECT_EQ(p.state.oom_reports->at(1).timestamp, 3000);
  size_t reports = 0;
  for (const auto& e : fs::directory_iterator(dir)) reports += e.path().filename().string().starts_with("oom-");
  EXPECT_EQ(reports, 2u);
  fs::remove_all(dir);
}

// Issue 35: an operator's kill -9 is not a kill for memory. It keeps its
// report (reason sigkill, for_memory false, the sender named) but is
// counted in leakwatch_sigkills_total, not leakwatch_oom_kills_total, and
// does not move the last OOM kill's time; a known OOM sender does all three.
TEST(OomRecorder, AnOperatorsSigkillIsCountedApartFromOomKills) {
  const std::string dir = temp_dir();
  OomParts p(dir, 10);
  p.oom.load();
  p.publisher.publish();
  MetricsOptions opts;
  std::string text = render_metrics(*p.publisher.latest(), opts);
  EXPECT_NE(text.find("leakwatch_sigkills_total{target=\"sleepers\"} 0"), std::string::npos) << text;
  EXPECT_EQ(text.find("reason=\"sigkill\""), std::string::npos) << text;

  SleepChild operator_victim, oomd_victim;
  p.discovery.consider(operator_victim.pid, 0);
  p.discovery.consider(oomd_victim.pid, 0);
  ProcessKill k;
  k.pid = operator_victim.pid;
  k.sigkill = true;
  k.sender_pid = 4242;
  k.sender_comm = "bash";
  k.event_ns = monotonic_ns();
  p.tracer.kills.push_back(k);
  p.oom.handle_kills();
  ASSERT_EQ(p.state.oom_reports->size(), 1u);
  nlohmann::json r = nlohmann::json::parse(p.state.oom_reports->front().json);
  EXPECT_EQ(r.at("reason"), "sigkill");
  EXPECT_FALSE(r.at("for_memory").get<bool>());
  EXPECT_EQ(r.at("killed_by").at("pid"), 4242);
  EXPECT_EQ(r.at("killed_by").at("comm"), "bash");
  EXPECT_EQ(p.state.counters.oom_last_kill_timestamp, 0);
  p.publisher.publish();
  text = render_metrics(*p.publisher.latest(), opts);
  EXPECT_NE(text.find("leakwatch_sigkills_total{target=\"sleepers\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("leakwatch_oom_kills_total{target=\"sleepers\",reason=\"oom_sender\"} 0"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("reason=\"sigkill\""), std::string::npos) << text;

  k.pid = oomd_victim.pid;
  k.sender_comm = "earlyoom";
  p.tracer.kills.push_back(k);
  p.oom.handle_kills();
  r = nlohmann::json::parse(p.state.oom_reports->front().json);
  EXPECT_EQ(r.at("reason"), "oom_sender");
  EXPECT_GT(p.state.counters.oom_last_kill_timestamp, 0);
  p.publisher.publish();
  text = render_metrics(*p.publisher.latest(), opts);
  EXPECT_NE(text.find("leakwatch_oom_kills_total{target=\"sleepers\",reason=\"oom_sender\"} 1"),
            std::string::npos) << text;
  EXPECT_NE(text.find("leakwatch_sigkills_total{target=\"sleepers\"} 1"), std::string::npos) << text;
  fs::remove_all(dir);
}

TEST(OomSenders, OnlyKnownOomKillersCountAsKillsForMemory) {
  for (const char* comm : {"systemd-oomd", "earlyoom", "oomd", "nohang", "kubelet"})
    EXPECT_TRUE(is_oom_sender(comm)) << comm;
  for (const char* comm : {"bash", "kill", "timeout", "containerd-shim", "runc", "systemd", "", "oom", "kubelet2"})
    EXPECT_FALSE(is_oom_sender(comm)) << comm;
}

TEST(OomRecorder, FileNamesSortByTime) {
  EXPECT_EQ(oom_report_file_name(1.5, 42), "oom-0000000001500-42.json");
  EXPECT_LT(oom_report_file_name(999.999, 9), oom_report_file_name(1000, 1));
}

}  // namespace
}  // namespace lw
