// SPDX-License-Identifier: Apache-2.0
// GPU memory without a GPU: real probes on the project's CUDA stand-in
// libraries (tests/targets/cuda: libcudart.so.13 with versioned symbols,
// libcuda.so.1, and the runtime linked into an executable), whose
// allocations are host memory and whose ground truth the targets report.
// Every byte per call site, per kind and per device must match; the
// controls free everything and must show nothing. Where the real CUDA
// runtime is installed, its probes must attach and, with no GPU here, count
// nothing.
#include <signal.h>
#include <unistd.h>

#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "core/accounting/heap_tracker.h"
#include "core/analysis/analyzer.h"
#include "daemon_harness.h"
#include "harness.h"
#include "prometheus_harness.h"

namespace lw::itest {
namespace {

using namespace std::chrono_literals;

const char *const kRealCudart = "/usr/local/cuda/lib64/libcudart.so.13";
// cuda_leaker has more sites than top's default 20 per snapshot.
const std::vector<std::string> kAllSites = {"--top", "100"};

class LeakwatchCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    // BPF needs root here; as root these tests must run, never skip.
    if (geteuid() != 0) GTEST_SKIP() << "not root";
  }
};

int64_t counter(const Json &snapshot, const char *name) { return snapshot.at("counters").at(name).get<int64_t>(); }

// Live bytes per kind over every site of the snapshot.
std::map<std::string, int64_t> live_by_kind(const Json &snapshot) {
  std::map<std::string, int64_t> out;
  for (const Json &site : snapshot.at("sites"))
    out[site.at("kind").get<std::string>()] += site.at("live_bytes").get<int64_t>();
  return out;
}

std::string gunzip(const std::string &in) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return "";
  z.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  std::string out;
  char buf[65536];
  int r;
  do {
    z.next_out = reinterpret_cast<Bytef *>(buf);
    z.avail_out = sizeof buf;
    r = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
  } while (r == Z_OK);
  inflateEnd(&z);
  return r == Z_STREAM_END ? out : "";
}

// Device and managed bytes per device, from the snapshot's cuda_devices.
std::map<int, int64_t> gpu_bytes_by_device(const Json &snapshot) {
  std::map<int, int64_t> out;
  for (const Json &d : snapshot.at("cuda_devices")) {
    if (d.at("kind") == "cuda_host") continue;
    out[d.at("device").get<int>()] += d.at("live_bytes").get<int64_t>();
  }
  return out;
}

TEST_F(LeakwatchCuda, EveryRuntimeAndDriverApiExactPerSiteKindAndDevice) {
  TraceSession session({.target = "cuda_leaker", .leakwatch_args = kAllSites});
  const Json &truth = session.truth();
  const Json &snap = session.snapshot();
  const std::string context = "\n" + describe_sites(snap) + session.diagnostics();
  // Per site (the leaf is the target's own function: a runtime call is
  // attributed at its caller, once), kind, and the process total.
  expect_matches_truth(session, {"cuda_leaker"});

  auto kinds = live_by_kind(snap);
  for (const char *kind : {"cuda_device", "cuda_host", "cuda_managed"})
    EXPECT_EQ(kinds[kind], truth.at("facts").at(kind).get<int64_t>()) << kind << context;
  EXPECT_EQ(kinds["heap"] + kinds["mmap"], 0) << "the stand-in driver's own mmaps are the CUDA records' bytes" << context;

  // Device attribution: cudaSetDevice(1) for one site, a context created on
  // device 3 and pushed for another, a second thread on device 2 while the
  // main thread stays on device 0 (per-thread current device), device 0 for
  // the rest; the context made on device 2 was destroyed with its memory.
  auto devices = gpu_bytes_by_device(snap);
  for (int d = 0; d < 4; ++d) {
    const int64_t expected = truth.at("facts").at("device_" + std::to_string(d)).get<int64_t>();
    EXPECT_EQ(devices[d], expected) << "device " << d << " " << snap.at("cuda_devices").dump() << context;
  }
  EXPECT_EQ(devices.count(-1), 0u) << "every record's device is known" << snap.at("cuda_devices").dump();
  EXPECT_GT(devices[1], 0) << "the truth must exercise device 1";
  EXPECT_GT(devices[3], 0) << "the truth must exercise device 3";
  EXPECT_GT(devices[2], 0) << "the truth must exercise device 2 (the second thread)";

  // The nested driver call of every runtime allocation was seen and not
  // counted again; failed calls were seen and not counted; cuCtxDestroy
  // released the 6 records made in its context (5 device, 1 pinned host).
  EXPECT_GE(counter(snap, "cuda_nested_skipped"), 20) << context;
  EXPECT_GE(counter(snap, "cuda_call_failed"), 4) << context;
  EXPECT_EQ(counter(snap, "cuda_ctx_retired"), 6) << context;
  EXPECT_EQ(counter(snap, "cuda_state_failed"), 0) << context;
  // The kernel's live map agrees with the daemon's view.
  if (snap.contains("kernel_live_bytes")) {
    EXPECT_EQ(snap.at("kernel_live_bytes").get<int64_t>(), snap.at("live_bytes").get<int64_t>()) << context;
  }
}

// A device made current before leakwatch attached is not seen (PyTorch
// selects device 0 once, at its start: the real GPU run of tests/gpu/run.sh
// showed device -1). A process that can see only one device has only
// ordinal 0 (CUDA_VISIBLE_DEVICES with one entry, or one /dev/nvidiaN); one
// that may see more keeps -1: unknown, never a guess.
TEST_F(LeakwatchCuda, DeviceMadeCurrentBeforeAttachIsTheSoleVisibleOne) {
  for (const char *visible : {"GPU-5e1f0c3a-standin", "0,1"}) {
    SCOPED_TRACE(std::string("CUDA_VISIBLE_DEVICES=") + visible);
    TraceSession session({.target = "cuda_leaker",
                          .target_env = {"CUDA_LEAKER_NO_RESELECT=1", std::string("CUDA_VISIBLE_DEVICES=") + visible},
                          .leakwatch_args = kAllSites});
    const Json &snap = session.snapshot();
    const int64_t device0 = session.truth().at("facts").at("device_0").get<int64_t>();
    auto devices = gpu_bytes_by_device(snap);
    const std::string context = snap.at("cuda_devices").dump();
    EXPECT_EQ(devices[1], session.truth().at("facts").at("device_1").get<int64_t>()) << "set while traced" << context;
    if (std::string(visible) == "0,1") {
      EXPECT_GT(devices[-1], 0) << "the main thread's device was never seen" << context;
      EXPECT_EQ(devices[-1] + devices[0], device0) << context;
    } else {
      EXPECT_EQ(devices.count(-1), 0u) << context;
      EXPECT_EQ(devices[0], device0) << context;
    }
  }
}

TEST_F(LeakwatchCuda, ControlThatFreesEverythingShowsZero) {
  TraceSession session({.target = "cuda_leaker", .target_args = {"control"}, .leakwatch_args = kAllSites});
  expect_matches_truth(session, {"cuda_leaker"});
  EXPECT_EQ(session.truth().at("total_live").get<int64_t>(), 0);
  EXPECT_EQ(session.snapshot().at("live_bytes").get<int64_t>(), 0) << describe_sites(session.snapshot());
  EXPECT_TRUE(session.snapshot().at("cuda_devices").empty()) << session.snapshot().at("cuda_devices").dump();
  // It did allocate: the work was seen, and all of it freed.
  EXPECT_GE(counter(session.snapshot(), "cuda_nested_skipped"), 20);
}

// A live map of 16 entries, the least (decision unrecorded-per-kind): the CUDA
// allocations it cannot hold are counted under their own kinds, apart from the
// host's, and the verdict of every site of a kind that lost something says so.
TEST_F(LeakwatchCuda, FullLiveMapIsCountedUnderTheCudaKinds) {
  TraceSession session({.target = "cuda_leaker", .leakwatch_args = {"--top", "100", "--live-max", "16"}});
  const Json &snap = session.snapshot();
  const Json &u = snap.at("unrecorded");
  const Json &kinds = u.at("kinds");
  std::printf("[ metric   ] live map 16, cuda_leaker: by kind %s\n", kinds.dump().c_str());
  int64_t gpu_lost = 0, all_lost = 0;
  for (const auto &[name, k] : kinds.items()) {
    const int64_t lost = k.at("allocations").at("map_full").get<int64_t>();
    all_lost += lost;
    if (name.rfind("cuda_", 0) == 0) gpu_lost += lost;
    EXPECT_EQ(k.at("verdicts_incomplete").get<bool>(), lost > 0) << name << " " << u.dump();
  }
  EXPECT_GT(gpu_lost, 0) << u.dump();
  EXPECT_EQ(all_lost, u.at("allocations").at("map_full").get<int64_t>()) << u.dump();
  EXPECT_TRUE(u.at("verdicts_incomplete").get<bool>()) << u.dump();
  for (const Json &site : snap.at("sites"))
    EXPECT_EQ(site.at("incomplete").get<bool>(), kinds.contains(site.at("kind").get<std::string>())) << site.dump();
}

TEST_F(LeakwatchCuda, StaticRuntimeFoundBySymbolInTheExecutable) {
  TraceSession session({.target = "cuda_leaker_static"});
  // The leaf is the target's site, not the runtime's cudaMalloc inside the
  // executable: the runtime probes attached there, and the driver call
  // nested in it (libcuda.so.1) was not counted again.
  expect_matches_truth(session, {"cuda_leaker_static"});
  EXPECT_GT(session.truth().at("total_live").get<int64_t>(), 0);
  EXPECT_GE(counter(session.snapshot(), "cuda_nested_skipped"), 4) << describe_sites(session.snapshot());
}

TEST_F(LeakwatchCuda, StaticRuntimeControlShowsZero) {
  TraceSession session({.target = "cuda_leaker_static", .target_args = {"control"}});
  expect_matches_truth(session, {"cuda_leaker_static"});
  EXPECT_EQ(session.snapshot().at("live_bytes").get<int64_t>(), 0) << describe_sites(session.snapshot());
}

// The daemon: the probes' attach state (metric and API), the cuda kinds in
// the per-process and per-site metrics and per device, and pprof.
TEST_F(LeakwatchCuda, DaemonMetricsApiAndPprofCoverCudaKinds) {
  TempDir dir;
  const std::string bin = private_target_copy(dir.path(), "cuda_leaker");
  // The copy finds the stand-in libraries through its RUNPATH, which is
  // absolute (the build tree), so it runs from anywhere.
  Process target({bin});
  const pid_t pid = read_ready(target);
  DaemonProcess daemon({.config_body = "top_sites_per_process: 200\n"
                                       "targets:\n"
                                       "  - name: gpu\n"
                                       "    match: {pids: [" + std::to_string(pid) + "]}\n"});
  daemon.wait_notify("READY=1", 20000ms);
  daemon.wait_for_process(pid, 10000ms);
  const Json truth = go_and_read_truth(target);
  const double done_at = unix_now();
  const Json sites = daemon.sites_at_or_after(pid, done_at + 0.5, 20000ms);
  expect_matches_truth(sites, truth, {file_name_of(bin)}, daemon.diagnostics());

  // Every runtime and driver probe attached, by name, in the stand-ins.
  const Json status = daemon.get_json("/api/v1/status");
  std::map<std::string, std::set<std::string>> attached;  // object file name -> functions
  for (const Json &p : status.at("probes"))
    if (p.at("attached").get<bool>())
      attached[file_name_of(p.at("object").get<std::string>())].insert(p.at("symbols").get<std::string>());
  for (const char *f : {"cudaMalloc", "cudaMallocAsync", "cudaMallocFromPoolAsync", "cudaMallocManaged",
                        "cudaMallocPitch", "cudaMalloc3D", "cudaMallocHost", "cudaHostAlloc", "cudaFree",
                        "cudaFreeAsync", "cudaFreeHost", "cudaSetDevice"})
    EXPECT_TRUE(attached["libcudart.so.13"].count(f)) << f << " in libcudart.so.13: " << status.at("probes").dump();
  for (const char *f : {"cuMemAlloc_v2", "cuMemAllocAsync", "cuMemAllocFromPoolAsync", "cuMemAllocManaged",
                        "cuMemAllocPitch_v2", "cuMemAllocHost_v2", "cuMemHostAlloc", "cuMemFree_v2",
                        "cuMemFreeAsync", "cuMemFreeHost", "cuMemCreate", "cuMemRelease", "cuMemMap",
                        "cuMemUnmap", "cuCtxCreate_v2", "cuDevicePrimaryCtxRetain", "cuCtxDestroy_v2",
                        "cuCtxSetCurrent", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2"})
    EXPECT_TRUE(attached["libcuda.so.1"].count(f)) << f << " in libcuda.so.1: " << status.at("probes").dump();

  const HttpReply metrics = daemon.get("/metrics");
  ASSERT_EQ(metrics.status, 200);
  const std::string p = "pid=\"" + std::to_string(pid) + "\"";
  auto has_line = [&](const std::string &name, const std::string &label, const std::string &value) {
    std::istringstream in(metrics.body);
    for (std::string line; std::getline(in, line);)
      if (line.rfind(name + "{", 0) == 0 && line.find(p) != std::string::npos &&
          line.find(label) != std::string::npos && line.substr(line.rfind(' ') + 1) == value)
        return true;
    return false;
  };
  for (const char *kind : {"cuda_device", "cuda_host", "cuda_managed"}) {
    const std::string bytes = std::to_string(truth.at("facts").at(kind).get<int64_t>());
    EXPECT_TRUE(has_line("leakwatch_process_live_bytes", "kind=\"" + std::string(kind) + "\"", bytes))
        << kind << " = " << bytes;
  }
  EXPECT_TRUE(has_line("leakwatch_cuda_device_live_bytes", "device=\"1\"",
                       std::to_string(truth.at("facts").at("device_1").get<int64_t>())));
  EXPECT_TRUE(metrics.body.find("leakwatch_probe_attached{object=\"") != std::string::npos);
  EXPECT_NE(metrics.body.find("function=\"cuMemCreate\"} 1"), std::string::npos);
  // The new families and labels pass promtool's checks and linter.
  const PromtoolReport lint = promtool_check_metrics(metrics.body, daemon.dir());
  EXPECT_TRUE(lint.passed) << lint.output;

  // pprof: the samples carry the kind as a label (docs/api.md), so the
  // profile's string table holds the cuda kinds and the leaking sites.
  const HttpReply profile = daemon.get("/debug/pprof/heap?pid=" + std::to_string(pid));
  ASSERT_EQ(profile.status, 200);
  const std::string proto = gunzip(profile.body);
  ASSERT_FALSE(proto.empty()) << "not a gzip stream";
  for (const char *text : {"kind", "cuda_device", "cuda_host", "cuda_managed", "leak_cuda_malloc", "leak_vmm",
                           "leak_cu_host"})
    EXPECT_NE(proto.find(text), std::string::npos) << text << " missing from the profile";

  target.write_line("exit");
}

// The real libcudart.so.13 where it is installed: the probes attach by
// name; with no GPU every call fails, and nothing is counted.
TEST_F(LeakwatchCuda, RealCudartAttachesAndCountsNothingWithoutGpu) {
  if (!std::filesystem::exists(kRealCudart))
    GTEST_SKIP() << kRealCudart << " is not installed (CUDA absent): nothing to attach to";
  {
    Process probe({target_path("cuda_real_runtime")});
    auto first = probe.read_line(10000ms);
    if (first && first->rfind("skip ", 0) == 0) GTEST_SKIP() << first->substr(5);
  }
  TraceSession session({.target = "cuda_real_runtime"});
  const Json &snap = session.snapshot();
  const std::string context = "\n" + describe_sites(snap) + session.diagnostics();
  auto kinds = live_by_kind(snap);
  for (const char *kind : {"cuda_device", "cuda_host", "cuda_managed"}) EXPECT_EQ(kinds[kind], 0) << kind << context;
  EXPECT_GT(session.truth().at("facts").at("failures").get<int64_t>(), 0) << "no GPU here: the calls must fail";
  // The runtime's allocations were seen at return and their errors counted.
  EXPECT_GE(counter(snap, "cuda_call_failed"), session.truth().at("facts").at("failures").get<int64_t>())
      << context;
}

// GPU OOM (decision oom-kill-reports, "GPU OOM"): the stand-in driver with a
// 64 MiB device capacity. The target fills device 0 through the runtime
// API (OOM: a report), retries at once (OOM again within the minute: no
// second report, suppressed 1), frees a block and allocates (recovered),
// then fills device 1 through the driver API (a second report). The
// process lives on and stays traced.
TEST_F(LeakwatchCuda, GpuOomReportsRateLimitedAndRecovered) {
  TempDir dir;
  const std::string bin = private_target_copy(dir.path(), "cuda_leaker");
  Process target({bin, "oom"}, {.env = {"LWFAKE_CUDA_DEVICE_CAPACITY=" + std::to_string(64 << 20)}});
  const pid_t pid = read_ready(target);
  DaemonProcess daemon({.config_body = "top_sites_per_process: 20\n"
                                       "oom:\n"
                                       "  report_dir: " + dir.path() + "/reports\n"
                                       "targets:\n"
                                       "  - name: gpu\n"
                                       "    match: {pids: [" + std::to_string(pid) + "]}\n"});
  daemon.wait_notify("READY=1", 20000ms);
  daemon.wait_for_process(pid, 10000ms);
  const std::string metrics0 = daemon.get("/metrics").body;
  EXPECT_EQ(metric(metrics0, "leakwatch_oom_kills_total{target=\"gpu\",reason=\"gpu_oom\"}"), 0)
      << "the counter must exist at 0 before any OOM";
  const int64_t chunk = 4 << 20;  // cuda_leaker's OOM_CHUNK
  auto gpu_reports = [&] {
    std::map<int, Json> out;  // device -> report
    const Json doc = daemon.get_json("/api/v1/oom_kills");
    for (const Json &r : doc.at("oom_kills"))
      if (r.at("process").at("pid").get<pid_t>() == pid && r.at("reason") == "gpu_oom")
        out[r.at("gpu").at("device").is_null() ? -1 : r.at("gpu").at("device").get<int>()] = r;
    return out;
  };
  // Device 0 (runtime API): reported, the retry suppressed, then recovered.
  target.write_line("go");
  std::map<int, Json> reports;
  bool complete = wait_until(10000ms, [&] {
    reports = gpu_reports();
    return reports.count(0) && reports[0].at("recovered").get<bool>();
  });
  ASSERT_TRUE(complete) << daemon.get("/api/v1/oom_kills").body << daemon.diagnostics();
  // Device 1 (driver API).
  target.write_line("driver");
  for (;;) {
    auto line = target.read_line(10000ms);
    ASSERT_TRUE(line) << target.stderr_text();
    if (line->rfind("done ", 0) == 0) break;
  }
  complete = wait_until(10000ms, [&] {
    reports = gpu_reports();
    return reports.size() == 2 && reports.count(1);
  });
  std::string all;
  for (const auto &[d, r] : reports) all += r.dump(1) + "\n";
  ASSERT_TRUE(complete) << all << daemon.diagnostics();
  auto top_site_has = [](const Json &report, const std::string &function) {
    if (report.at("sites").empty()) return false;
    for (const Json &f : report.at("sites").at(0).at("frames"))
      if (f.at("function") == function) return true;
    return false;
  };
  const Json &rt = reports[0];
  EXPECT_EQ(rt.at("gpu").at("api"), "runtime") << all;
  EXPECT_EQ(rt.at("gpu").at("function"), "cudaMalloc") << all;
  EXPECT_EQ(rt.at("gpu").at("requested_bytes").get<int64_t>(), chunk) << all;
  EXPECT_EQ(rt.at("gpu").at("error_code").get<int>(), 2) << all;
  EXPECT_EQ(rt.at("suppressed").get<int>(), 1) << "the immediate retry is counted, not reported" << all;
  EXPECT_TRUE(rt.at("recovered").get<bool>()) << all;
  EXPECT_TRUE(top_site_has(rt, "oom_leak_runtime")) << all;
  EXPECT_GE(rt.at("gpu").at("live_bytes").at("cuda_device").get<int64_t>(), (64 << 20) - 2 * chunk) << all;
  EXPECT_TRUE(rt.at("memory_cgroup").is_null()) << all;

  const Json &drv = reports[1];
  EXPECT_EQ(drv.at("gpu").at("api"), "driver") << all;
  EXPECT_EQ(drv.at("gpu").at("function"), "cuMemAlloc") << all;
  EXPECT_EQ(drv.at("gpu").at("requested_bytes").get<int64_t>(), chunk) << all;
  EXPECT_EQ(drv.at("suppressed").get<int>(), 0) << all;
  EXPECT_FALSE(drv.at("recovered").get<bool>()) << all;
  EXPECT_TRUE(top_site_has(drv, "oom_leak_driver")) << all;

  // The stored file holds the updated report.
  {
    std::ifstream in(rt.at("file").get<std::string>());
    const Json file = Json::parse(in);
    EXPECT_TRUE(file.at("recovered").get<bool>()) << file.dump(1);
    EXPECT_EQ(file.at("suppressed").get<int>(), 1) << file.dump(1);
  }

  const std::string metrics = daemon.get("/metrics").body;
  EXPECT_EQ(metric(metrics, "leakwatch_oom_kills_total{target=\"gpu\",reason=\"gpu_oom\"}"), 2) << daemon.diagnostics();
  EXPECT_EQ(metric(metrics, "leakwatch_gpu_oom_suppressed_total{target=\"gpu\"}"), 1);

  // Not killed: still traced, its sites served.
  EXPECT_EQ(kill(pid, 0), 0);
  EXPECT_EQ(daemon.get("/api/v1/processes/" + std::to_string(pid) + "/sites").status, 200);
  target.write_line("exit");
}


}  // namespace
}  // namespace lw::itest

namespace lw {
namespace {

// The leak analysis treats the cuda kinds as it treats the heap (pure, no
// root: fed with events as the kernel sends them). A site that keeps
// allocating device memory over 10 simulated minutes is a leak; a site that
// frees each block after a few seconds is not.
TEST(CudaLeakAnalysis, GrowingDeviceMemoryIsALeakChurnIsNot) {
  HeapTracker heap;
  ProcessAnalyzer analyzer;
  const uint64_t s = 1000000000ull;
  const uint64_t base = 1000 * s;
  uint64_t leak_addr = 0x7f0000000000ull, churn_addr = 0x7e0000000000ull;
  for (int i = 0; i <= 60; ++i) {
    const uint64_t now = base + static_cast<uint64_t>(i) * 10 * s;
    const uint16_t dev0 = 1 << LW_EVF_DEVICE_SHIFT;
    heap.apply(Event{EventType::kAlloc, dev0, 1, 1, LW_KIND_CUDA_DEVICE, now, leak_addr, 1 << 20, now, 11});
    leak_addr += 1 << 20;
    heap.apply(Event{EventType::kAlloc, dev0, 1, 1, LW_KIND_CUDA_MANAGED, now, churn_addr, 1 << 20, now, 12});
    heap.apply(Event{EventType::kFree, dev0, 1, 1, LW_KIND_CUDA_MANAGED, now + s, churn_addr, 1 << 20, now, 0});
    churn_addr += 1 << 20;
    analyzer.sample(heap, static_cast<double>(now) / 1e9, now + 2 * s);
  }
  const SiteAnalysis *leak = analyzer.site(11, LW_KIND_CUDA_DEVICE);
  ASSERT_NE(leak, nullptr);
  EXPECT_TRUE(leak->verdict.suspected_leak) << "rate " << leak->verdict.rate_bytes_per_s;
  EXPECT_GT(leak->verdict.rate_bytes_per_s, 100000.0);
  EXPECT_TRUE(analyzer.process_verdict(LW_KIND_CUDA_DEVICE).suspected_leak);
  EXPECT_FALSE(analyzer.process_verdict(LW_KIND_CUDA_MANAGED).suspected_leak);
  EXPECT_FALSE(analyzer.process_verdict(LW_KIND_HEAP).suspected_leak);
}


}  // namespace
}  // namespace lw
