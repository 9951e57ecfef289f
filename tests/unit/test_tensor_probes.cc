// SPDX-License-Identifier: Apache-2.0
// The tensor tier's pure parts (decision tensor-tier): which libraries and
// signatures are probed, what is refused and why, the USDT note scan, the
// GPU allocator path, GPU memory explained, and escalation on the growth the
// tensors do not explain.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "bpf/leakwatch_abi.h"
#include "core/analysis/gpu_explained.h"
#include "core/config/config.h"
#include "core/policy/escalation.h"
#include "core/probes/tensor_probes.h"

namespace lw {
namespace {

// Mangled names as g++ emits them (the demangled forms are in the table).
constexpr char kAllocCpu[] = "_ZN3c109alloc_cpuEm";
constexpr char kFreeCpu[] = "_ZN3c108free_cpuEPv";
constexpr char kHook113[] = "_ZN3c1027reportMemoryUsageToProfilerEPvlllNS_6DeviceE";
constexpr char kHookNow[] = "_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE";
constexpr char kHookOld[] = "_ZN3c1027reportMemoryUsageToProfilerEPvlNS_6DeviceE";

uint32_t func_of(const TensorLibraryPlan& p, const std::string& mangled) {
  for (const TensorProbe& t : p.probes)
    if (t.mangled == mangled) return t.func;
  return ~0u;
}

TEST(TensorProbes, LibrariesByFileNameWithAndWithoutVersions) {
  EXPECT_EQ(tensor_library("/usr/lib/x86_64-linux-gnu/libc10.so.1.13.0"), TensorLibrary::kC10);
  EXPECT_EQ(tensor_library("/venv/torch/lib/libc10.so"), TensorLibrary::kC10);
  EXPECT_EQ(tensor_library("/venv/torch/lib/libc10_cuda.so"), TensorLibrary::kC10Cuda);
  EXPECT_EQ(tensor_library("/tf/libtensorflow_framework.so.2"), TensorLibrary::kTensorFlow);
  EXPECT_EQ(tensor_library("/lib/libc10.sox"), TensorLibrary::kNone);
  EXPECT_EQ(tensor_library("/lib/libc10_cuda_extra.so"), TensorLibrary::kNone);
  EXPECT_EQ(tensor_library("/lib/libc.so.6"), TensorLibrary::kNone);
}

TEST(TensorProbes, CpuPairAndEitherHookArityWithTotals) {
  for (const char* hook : {kHook113, kHookNow}) {
    TensorLibraryPlan p = plan_tensor_library(TensorLibrary::kC10, {kAllocCpu, kFreeCpu, hook}, true, false);
    EXPECT_EQ(func_of(p, kAllocCpu), static_cast<uint32_t>(LW_FUNC_TENSOR_CPU_ALLOC));
    EXPECT_EQ(func_of(p, kFreeCpu), static_cast<uint32_t>(LW_FUNC_TENSOR_CPU_FREE));
    EXPECT_EQ(func_of(p, hook), static_cast<uint32_t>(LW_FUNC_TORCH_REPORT)) << hook;
    EXPECT_TRUE(p.refusals.empty()) << p.refusals.front();
    EXPECT_EQ(p.sources, (std::vector<std::string>{"pytorch_cpu", "pytorch_cuda_hook"}));
  }
  TensorLibraryPlan old = plan_tensor_library(TensorLibrary::kC10, {kAllocCpu, kFreeCpu, kHookOld}, true, false);
  EXPECT_EQ(func_of(old, kHookOld), static_cast<uint32_t>(LW_FUNC_TORCH_REPORT_SHORT));
}

TEST(TensorProbes, HookOnlyKeepsTotalsWhereTheUsdtsRecordAndIsLeftOutWithoutCuda) {
  TensorLibraryPlan p = plan_tensor_library(TensorLibrary::kC10, {kAllocCpu, kFreeCpu, kHookNow}, true, true);
  EXPECT_EQ(func_of(p, kHookNow), static_cast<uint32_t>(LW_FUNC_TORCH_REPORT_TOTALS));
  // An arity without totals adds nothing beside the USDTs.
  TensorLibraryPlan q = plan_tensor_library(TensorLibrary::kC10, {kAllocCpu, kFreeCpu, kHookOld}, true, true);
  EXPECT_EQ(func_of(q, kHookOld), ~0u);
  TensorLibraryPlan cpu = plan_tensor_library(TensorLibrary::kC10, {kAllocCpu, kFreeCpu, kHookNow}, false, false);
  EXPECT_EQ(func_of(cpu, kHookNow), ~0u);
  EXPECT_EQ(cpu.sources, std::vector<std::string>{"pytorch_cpu"});
}

TEST(TensorProbes, AnotherSignatureIsRefusedWithAReasonAndNeverHalfAPair) {
  // alloc_cpu(unsigned long, int): a known name, an unknown signature.
  TensorLibraryPlan p = plan_tensor_library(TensorLibrary::kC10, {"_ZN3c109alloc_cpuEmi", kFreeCpu}, false, false);
  EXPECT_TRUE(p.probes.empty());  // free_cpu alone would retire nothing ever recorded
  ASSERT_EQ(p.refusals.size(), 1u);
  EXPECT_EQ(p.refusals[0], "c10::alloc_cpu(unsigned long, int): unknown signature");
  TensorLibraryPlan hook = plan_tensor_library(
      TensorLibrary::kC10, {kAllocCpu, kFreeCpu, "_ZN3c1027reportMemoryUsageToProfilerEPvllNS_6DeviceE"}, true, false);
  EXPECT_EQ(hook.probes.size(), 2u);
  ASSERT_EQ(hook.refusals.size(), 1u);
  EXPECT_NE(hook.refusals[0].find("unknown signature"), std::string::npos);
}

TEST(TensorProbes, MissingExportsAreSaid) {
  TensorLibraryPlan p = plan_tensor_library(TensorLibrary::kC10, {}, false, false);
  EXPECT_TRUE(p.probes.empty());
  EXPECT_EQ(p.refusals, (std::vector<std::string>{".dynsym lacks c10::alloc_cpu", ".dynsym lacks c10::free_cpu"}));
}

TEST(TensorProbes, BfcInEitherNamespace) {
  TensorLibraryPlan tsl = plan_tensor_library(
      TensorLibrary::kTensorFlow,
      {"_ZN3tsl12BFCAllocator11AllocateRawEmm", "_ZN3tsl12BFCAllocator13DeallocateRawEPv"}, false, false);
  EXPECT_EQ(func_of(tsl, "_ZN3tsl12BFCAllocator11AllocateRawEmm"), static_cast<uint32_t>(LW_FUNC_BFC_ALLOC));
  EXPECT_EQ(func_of(tsl, "_ZN3tsl12BFCAllocator13DeallocateRawEPv"), static_cast<uint32_t>(LW_FUNC_BFC_FREE));
  EXPECT_TRUE(tsl.refusals.empty());
  TensorLibraryPlan tf = plan_tensor_library(
      TensorLibrary::kTensorFlow,
      {"_ZN10tensorflow12BFCAllocator11AllocateRawEmmRKNS_20AllocationAttributesE",
       "_ZN10tensorflow12BFCAllocator13DeallocateRawEPv"},
      false, false);
  EXPECT_EQ(tf.probes.size(), 2u);
  EXPECT_EQ(tf.sources, std::vector<std::string>{"tensorflow_bfc"});
}

// One NT_STAPSDT note, as the assembler lays it out.
void add_note(std::vector<uint8_t>& out, const std::string& provider, const std::string& name) {
  std::string desc(24, '\0');
  desc += provider + '\0' + name + '\0' + "8@%rdi" + '\0';
  auto put32 = [&](uint32_t v) {
    uint8_t b[4];
    std::memcpy(b, &v, 4);
    out.insert(out.end(), b, b + 4);
  };
  put32(8);
  put32(static_cast<uint32_t>(desc.size()));
  put32(3);
  const char owner[8] = {'s', 't', 'a', 'p', 's', 'd', 't', '\0'};
  out.insert(out.end(), owner, owner + 8);
  out.insert(out.end(), desc.begin(), desc.end());
  while (out.size() % 4) out.push_back(0);
}

TEST(TensorProbes, UsdtNotesAreFoundAndTruncatedOnesStop) {
  std::vector<uint8_t> notes;
  add_note(notes, "pytorch", "malloc");
  add_note(notes, "pytorch", "free");
  EXPECT_TRUE(has_usdt_note(notes.data(), notes.size(), "pytorch", "malloc"));
  EXPECT_TRUE(has_usdt_note(notes.data(), notes.size(), "pytorch", "free"));
  EXPECT_FALSE(has_usdt_note(notes.data(), notes.size(), "pytorch", "operator_start"));
  EXPECT_FALSE(has_usdt_note(notes.data(), notes.size(), "other", "malloc"));
  // Cut inside the second note: the first is still read, the second not.
  EXPECT_TRUE(has_usdt_note(notes.data(), notes.size() - 6, "pytorch", "malloc"));
  EXPECT_FALSE(has_usdt_note(notes.data(), notes.size() - 6, "pytorch", "free"));
  // A descsz that points past the end stops the scan.
  std::vector<uint8_t> bad = notes;
  const uint32_t huge = 0xfffffff0u;
  std::memcpy(bad.data() + 4, &huge, 4);
  EXPECT_FALSE(has_usdt_note(bad.data(), bad.size(), "pytorch", "malloc"));
}

TEST(TensorProbes, GpuAllocatorPathFromTheEnvironment) {
  using namespace std::string_literals;
  EXPECT_EQ(gpu_allocator_path("A=1\0B=2"s, true, false), "pytorch_caching");
  EXPECT_EQ(gpu_allocator_path("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,backend:cudaMallocAsync\0"s, true,
                               false),
            "pytorch_cuda_malloc_async");
  EXPECT_EQ(gpu_allocator_path("PYTORCH_NO_CUDA_MEMORY_CACHING=1"s, true, false), "pytorch_uncached");
  EXPECT_EQ(gpu_allocator_path("TF_GPU_ALLOCATOR=cuda_malloc_async\0"s, false, true), "tensorflow_cuda_malloc_async");
  EXPECT_EQ(gpu_allocator_path(""s, false, true), "tensorflow_bfc");
  EXPECT_EQ(gpu_allocator_path("PYTORCH_NO_CUDA_MEMORY_CACHING=1"s, false, false), "");
}

TEST(GpuExplained, TensorsPoolCacheAndOutsideThePoolPerDevice) {
  std::vector<CudaDeviceTotal> d = {
      {0, LW_KIND_TENSOR_GPU, 300, 3}, {0, LW_KIND_CUDA_DEVICE, 1000, 1}, {0, LW_KIND_CUDA_MANAGED, 200, 1},
      {0, LW_KIND_CUDA_HOST, 999, 1},  {1, LW_KIND_TENSOR_GPU, 50, 1},
  };
  std::vector<GpuExplained> g = explain_gpu(d, {{0, 320, 1000}});
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].device, 0);
  EXPECT_EQ(g[0].tensors_live_bytes, 300u);
  EXPECT_TRUE(g[0].pool_totals);
  EXPECT_EQ(g[0].cached_bytes, 680u);      // reserved - allocated
  EXPECT_EQ(g[0].cuda_bytes, 1200u);       // device + managed, never pinned host
  EXPECT_EQ(g[0].outside_pool_bytes, 200u);
  EXPECT_EQ(g[1].device, 1);
  EXPECT_FALSE(g[1].pool_totals);  // no totals: nothing derived from them
  EXPECT_EQ(g[1].cached_bytes, 0u);
  EXPECT_EQ(g[1].outside_pool_bytes, 0u);
}

TEST(TensorProbes, EscalationIgnoresGrowthTheTensorsExplain) {
  EscalationConfig c;
  c.check_interval_seconds = 10;
  c.growth_bytes = 4 << 20;
  c.growth_window_seconds = 300;
  EscalationState tensors, native;
  bool escalated_tensors = false, escalated_native = false;
  for (int i = 0; i <= 30; ++i) {
    const double t = 10.0 * i;
    const uint64_t grown = (100ull << 20) + static_cast<uint64_t>(i) * (1 << 20);
    if (tensors.tick(t, c) == EscalationAction::kReadMemory)
      escalated_tensors |= tensors.sample(t, {grown, grown}, c, static_cast<uint64_t>(i) * (1 << 20)) ==
                           EscalationAction::kEscalate;
    if (native.tick(t, c) == EscalationAction::kReadMemory)
      escalated_native |= native.sample(t, {grown, grown}, c, 0) == EscalationAction::kEscalate;
  }
  EXPECT_FALSE(escalated_tensors);  // all of it is tensors: stays light
  EXPECT_TRUE(escalated_native);
}

TEST(TensorProbes, ConfigDefaultsOnAndABudgetApart) {
  TargetConfig t;
  EXPECT_TRUE(t.tensors);
  GovernorConfig g;
  EXPECT_EQ(g.max_tensor_hits_per_second, 50000u);
}

}  // namespace
}  // namespace lw
