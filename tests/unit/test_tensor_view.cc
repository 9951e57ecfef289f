// SPDX-License-Identifier: Apache-2.0
// What a reader sees of the tensor tier (decision tensor-tier): the kinds
// tensor_cpu and tensor_gpu, the tier's state and GPU memory explained, in
// the JSON (API and `top --json`) and the metrics.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "exporter/http/http_routes.h"
#include "exporter/metrics.h"
#include "view/json.h"
#include "view/process_view.h"

namespace lw {
namespace {

// A PyTorch process: a heap, CPU tensors, GPU tensors in a caching pool on
// device 0 (with the pool's totals) and on a device not seen (without).
DaemonSnapshot torch_snapshot() {
  DaemonSnapshot snap;
  snap.timestamp = 1.8e9;
  ProcessEntry e;
  e.process.identity.pid = 4242;
  e.process.identity.start_time = 7;
  e.process.identity.comm = "python3";
  e.process.identity.exe = "/usr/bin/python3.11";
  e.process.target = "serving";
  ProcessSnapshot& ps = e.snapshot;
  ps.pid = 4242;
  ps.comm = "python3";
  ps.kinds[LW_KIND_HEAP] = {.live_bytes = 1000, .live_allocations = 10, .allocated_bytes = 5000, .allocations = 50};
  ps.kinds[LW_KIND_TENSOR_CPU] = {.live_bytes = 65536, .live_allocations = 1, .allocated_bytes = 131072,
                                  .allocations = 2, .freed_bytes = 65536, .frees = 1};
  ps.kinds[LW_KIND_TENSOR_GPU] = {.live_bytes = 3 << 20, .live_allocations = 3, .allocated_bytes = 3 << 20,
                                  .allocations = 3};
  ps.kinds[LW_KIND_CUDA_DEVICE] = {.live_bytes = 22 << 20, .live_allocations = 2, .allocated_bytes = 22 << 20,
                                   .allocations = 2};
  ps.cuda_devices = {{.device = 0, .kind = LW_KIND_CUDA_DEVICE, .live_bytes = 22 << 20, .live_allocations = 2},
                     {.device = 0, .kind = LW_KIND_TENSOR_GPU, .live_bytes = 2 << 20, .live_allocations = 2},
                     {.device = -1, .kind = LW_KIND_TENSOR_GPU, .live_bytes = 1 << 20, .live_allocations = 1}};
  ps.tensor.state = "on";
  ps.tensor.sources = {"pytorch_cpu", "pytorch_cuda_hook"};
  ps.tensor.gpu_allocator = "pytorch_caching";
  ps.tensor.hits_per_second = 4902.5;
  GpuExplained d0;
  d0.device = 0;
  d0.tensors_live_bytes = 2 << 20;
  d0.pool_totals = true;
  d0.pool_allocated_bytes = 2 << 20;
  d0.pool_reserved_bytes = 20 << 20;
  d0.cached_bytes = 18 << 20;
  d0.cuda_bytes = 22 << 20;
  d0.outside_pool_bytes = 2 << 20;
  GpuExplained unknown;
  unknown.device = -1;
  unknown.tensors_live_bytes = 1 << 20;
  ps.gpu_explained = {d0, unknown};
  snap.processes.push_back(e);
  return snap;
}

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// promtool, when installed (scripts/install-deps.sh --with-test-tools).
bool promtool_accepts(const std::string& text, std::string* output) {
  if (access("/usr/bin/promtool", X_OK) != 0) return true;
  char path[] = "/tmp/lw_tensor_metrics_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return false;
  std::ofstream(path) << text;
  close(fd);
  const std::string cmd = std::string("/usr/bin/promtool check metrics < ") + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[512];
  while (p && fgets(buf, sizeof(buf), p)) *output += buf;
  const int rc = p ? pclose(p) : -1;
  unlink(path);
  return rc == 0;
}

TEST(TensorView, KindNames) {
  EXPECT_STREQ(kind_name(LW_KIND_TENSOR_CPU), "tensor_cpu");
  EXPECT_STREQ(kind_name(LW_KIND_TENSOR_GPU), "tensor_gpu");
}

TEST(TensorView, TierAndGpuExplainedInTheSnapshotJson) {
  const DaemonSnapshot snap = torch_snapshot();
  const nlohmann::json j = to_json(snap.processes[0].snapshot);
  const nlohmann::json& t = j.at("tensor");
  EXPECT_EQ(t.at("state"), "on");
  EXPECT_EQ(t.at("reason"), "");
  EXPECT_EQ(t.at("sources"), nlohmann::json::array({"pytorch_cpu", "pytorch_cuda_hook"}));
  EXPECT_EQ(t.at("gpu_allocator"), "pytorch_caching");
  EXPECT_DOUBLE_EQ(t.at("hits_per_second").get<double>(), 4902.5);
  const nlohmann::json& g = j.at("gpu_explained");
  ASSERT_EQ(g.size(), 2u) << g.dump();
  EXPECT_EQ(g[0].at("device"), 0);
  EXPECT_EQ(g[0].at("tensors_live_bytes"), 2 << 20);
  EXPECT_EQ(g[0].at("pool_totals"), true);
  EXPECT_EQ(g[0].at("pool_allocated_bytes"), 2 << 20);
  EXPECT_EQ(g[0].at("pool_reserved_bytes"), 20 << 20);
  EXPECT_EQ(g[0].at("cached_bytes"), 18 << 20);
  EXPECT_EQ(g[0].at("cuda_bytes"), 22 << 20);
  EXPECT_EQ(g[0].at("outside_pool_bytes"), 2 << 20);
  // No pool totals: what needs them is null, never a 0 that reads as a figure.
  EXPECT_TRUE(g[1].at("device").is_null());
  EXPECT_EQ(g[1].at("tensors_live_bytes"), 1 << 20);
  EXPECT_EQ(g[1].at("pool_totals"), false);
  for (const char* key : {"pool_allocated_bytes", "pool_reserved_bytes", "cached_bytes", "outside_pool_bytes"})
    EXPECT_TRUE(g[1].at(key).is_null()) << key;
  EXPECT_EQ(g[1].at("cuda_bytes"), 0);
  // The kinds: tensors apart from the heap beneath them.
  EXPECT_EQ(j.at("kinds").at("tensor_cpu").at("live_bytes"), 65536);
  EXPECT_EQ(j.at("kinds").at("tensor_gpu").at("live_allocations"), 3);
  EXPECT_EQ(j.at("kinds").at("heap").at("live_bytes"), 1000);
}

TEST(TensorView, NoFrameworkIsStateNoneAndNoDevices) {
  const nlohmann::json j = to_json(ProcessSnapshot{});
  EXPECT_EQ(j.at("tensor").at("state"), "none");
  EXPECT_TRUE(j.at("tensor").at("gpu_allocator").is_null());
  EXPECT_EQ(j.at("tensor").at("sources"), nlohmann::json::array());
  EXPECT_EQ(j.at("gpu_explained"), nlohmann::json::array());
  EXPECT_FALSE(j.at("kinds").contains("tensor_cpu"));
}

TEST(TensorView, ProcessesApiCarriesTheTierAndGpuExplained) {
  const nlohmann::json doc = nlohmann::json::parse(processes_json(torch_snapshot()));
  const nlohmann::json& p = doc.at("processes").at(0);
  EXPECT_EQ(p.at("tensor").at("state"), "on");
  EXPECT_EQ(p.at("tensor").at("gpu_allocator"), "pytorch_caching");
  ASSERT_EQ(p.at("gpu_explained").size(), 2u);
  EXPECT_EQ(p.at("gpu_explained").at(0).at("cached_bytes"), 18 << 20);
  EXPECT_EQ(p.at("kinds").at("tensor_cpu").at("live_bytes"), 65536);
  int status = 0;
  const nlohmann::json sites = nlohmann::json::parse(sites_json(torch_snapshot(), 4242, 0, &status));
  EXPECT_EQ(status, 200);
  EXPECT_EQ(sites.at("tensor").at("sources").size(), 2u);
  EXPECT_EQ(sites.at("gpu_explained").at(1).at("device"), nullptr);
}

TEST(TensorMetrics, TierInfoAndGpuExplainedSeries) {
  const std::string text = render_metrics(torch_snapshot(), {});
  EXPECT_TRUE(has(text, "leakwatch_process_tensor_tier_info{pid=\"4242\"")) << text;
  EXPECT_TRUE(has(text, "state=\"on\",sources=\"pytorch_cpu,pytorch_cuda_hook\","
                        "gpu_allocator=\"pytorch_caching\"} 1\n"))
      << text;
  // Tensors on every device; the pool's cache, reservation and what lies
  // outside it only where its totals are known.
  EXPECT_TRUE(has(text, "leakwatch_process_gpu_tensor_bytes{pid=\"4242\"")) << text;
  EXPECT_TRUE(has(text, "device=\"0\"} 2097152\n")) << text;
  EXPECT_TRUE(has(text, "device=\"unknown\"} 1048576\n")) << text;
  for (const char* family : {"leakwatch_process_gpu_pool_cached_bytes{", "leakwatch_process_gpu_pool_reserved_bytes{",
                             "leakwatch_process_gpu_outside_pool_bytes{"}) {
    const size_t at = text.find(family);
    ASSERT_NE(at, std::string::npos) << family << "\n" << text;
    const std::string line = text.substr(at, text.find('\n', at) - at);
    EXPECT_TRUE(has(line, "device=\"0\"")) << line;
    EXPECT_EQ(text.find(family, at + 1), std::string::npos) << family << ": only the device with pool totals";
  }
  EXPECT_TRUE(has(text, "leakwatch_process_gpu_pool_cached_bytes{pid=\"4242\"")) << text;
  EXPECT_TRUE(has(text, "device=\"0\"} 18874368\n")) << text;
  EXPECT_TRUE(has(text, "device=\"0\"} 20971520\n")) << text;
  std::string out;
  EXPECT_TRUE(promtool_accepts(text, &out)) << out << text;
}

TEST(TensorMetrics, TensorKindsOnceSeenHeapAndMmapAlways) {
  DaemonSnapshot snap = torch_snapshot();
  std::string text = render_metrics(snap, {});
  EXPECT_TRUE(has(text, "leakwatch_process_live_bytes{pid=\"4242\"")) << text;
  EXPECT_TRUE(has(text, "kind=\"tensor_cpu\"} 65536\n")) << text;
  EXPECT_TRUE(has(text, "kind=\"tensor_gpu\"} 3145728\n")) << text;
  EXPECT_TRUE(has(text, "kind=\"tensor_cpu\",reason=\"map_full\"} 0\n")) << text;
  // leakwatch_cuda_device_live_bytes stays CUDA's own: tensor_gpu by device
  // is leakwatch_process_gpu_tensor_bytes.
  const size_t cuda = text.find("\nleakwatch_cuda_device_live_bytes{");
  ASSERT_NE(cuda, std::string::npos) << text;
  const size_t cuda_end = text.find("\n# ", cuda);
  EXPECT_FALSE(has(text.substr(cuda, cuda_end - cuda), "tensor_gpu")) << text.substr(cuda, cuda_end - cuda);
  // A process with no tensor: no tensor kind series, heap and mmap's
  // unrecorded counters from the start.
  ProcessSnapshot& ps = snap.processes[0].snapshot;
  ps.kinds[LW_KIND_TENSOR_CPU] = {};
  ps.kinds[LW_KIND_TENSOR_GPU] = {};
  ps.tensor = {};
  ps.gpu_explained.clear();
  text = render_metrics(snap, {});
  EXPECT_FALSE(has(text, "tensor_cpu")) << text;
  EXPECT_FALSE(has(text, "tensor_gpu")) << text;
  EXPECT_TRUE(has(text, "kind=\"heap\",reason=\"map_full\"} 0\n")) << text;
  EXPECT_TRUE(has(text, "kind=\"mmap\",reason=\"map_full\"} 0\n")) << text;
  EXPECT_TRUE(has(text, "state=\"none\",sources=\"\",gpu_allocator=\"\"} 1\n")) << text;
  EXPECT_FALSE(has(text, "leakwatch_process_gpu_tensor_bytes{")) << text;
  // A tensor kind that lost an allocation but made none is exported.
  ps.unrecorded.add(LW_KIND_TENSOR_CPU, {.map_full = 2, .map_full_bytes = 128, .stack_map_full = 0});
  text = render_metrics(snap, {});
  EXPECT_TRUE(has(text, "kind=\"tensor_cpu\",reason=\"map_full\"} 2\n")) << text;
}

TEST(TensorMetrics, CountersExportInTheirFamilies) {
  DaemonSnapshot snap = torch_snapshot();
  snap.kernel_counters[LW_CNT_TENSOR_NESTED_SKIPPED] = 39544;
  snap.kernel_counters[LW_CNT_TENSOR_FREE_UNKNOWN] = 3;
  snap.kernel_counters[LW_CNT_TENSOR_OTHER_DEVICE] = 12;
  const std::string text = render_metrics(snap, {});
  EXPECT_TRUE(has(text, "\nleakwatch_tensor_nested_calls_total 39544\n")) << text;
  EXPECT_TRUE(has(text, "\nleakwatch_tensor_other_device_reports_total 12\n")) << text;
  EXPECT_TRUE(has(text, "leakwatch_bpf_failures_total{reason=\"tensor_free_unknown\"} 3\n")) << text;
  EXPECT_TRUE(has(text, "# TYPE leakwatch_tensor_nested_calls_total counter\n")) << text;
}

}  // namespace
}  // namespace lw
