// SPDX-License-Identifier: Apache-2.0
#include "core/probes/tensor_probes.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <cstdlib>
#include <memory>

#include "bpf/leakwatch_abi.h"
#include "core/symbols/symbolizer.h"

namespace lw {

namespace {

// One supported signature, exactly as the demangler prints it.
struct Signature {
  const char* demangled;
  uint32_t func;
  bool needs_return;
  const char* source;
};

constexpr Signature kCpuAlloc = {"c10::alloc_cpu(unsigned long)", LW_FUNC_TENSOR_CPU_ALLOC, true,
                                 kSourcePytorchCpu};
constexpr Signature kCpuFree = {"c10::free_cpu(void*)", LW_FUNC_TENSOR_CPU_FREE, false,
                                kSourcePytorchCpu};
// PyTorch 1.13 (int64 totals), current (size_t totals), and older releases
// without the totals.
constexpr Signature kHooks[] = {
    {"c10::reportMemoryUsageToProfiler(void*, long, long, long, c10::Device)",
     LW_FUNC_TORCH_REPORT, false, kSourcePytorchCudaHook},
    {"c10::reportMemoryUsageToProfiler(void*, long, unsigned long, unsigned long, c10::Device)",
     LW_FUNC_TORCH_REPORT, false, kSourcePytorchCudaHook},
    {"c10::reportMemoryUsageToProfiler(void*, long, c10::Device)", LW_FUNC_TORCH_REPORT_SHORT,
     false, kSourcePytorchCudaHook},
};
constexpr Signature kBfcAllocs[] = {
    {"tsl::BFCAllocator::AllocateRaw(unsigned long, unsigned long)", LW_FUNC_BFC_ALLOC, true,
     kSourceTensorflowBfc},
    {"tsl::BFCAllocator::AllocateRaw(unsigned long, unsigned long, tsl::AllocationAttributes const&)",
     LW_FUNC_BFC_ALLOC, true, kSourceTensorflowBfc},
    {"tensorflow::BFCAllocator::AllocateRaw(unsigned long, unsigned long)", LW_FUNC_BFC_ALLOC, true,
     kSourceTensorflowBfc},
    {"tensorflow::BFCAllocator::AllocateRaw(unsigned long, unsigned long, "
     "tensorflow::AllocationAttributes const&)",
     LW_FUNC_BFC_ALLOC, true, kSourceTensorflowBfc},
};
constexpr Signature kBfcFrees[] = {
    {"tsl::BFCAllocator::DeallocateRaw(void*)", LW_FUNC_BFC_FREE, false, kSourceTensorflowBfc},
    {"tensorflow::BFCAllocator::DeallocateRaw(void*)", LW_FUNC_BFC_FREE, false,
     kSourceTensorflowBfc},
};

std::string_view function_name(std::string_view demangled) {
  return demangled.substr(0, demangled.find('('));
}

std::string_view basename_of(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// The exports whose function name is `name` (any signature), demangled.
std::vector<std::pair<std::string, std::string>> named(
    const std::vector<std::pair<std::string, std::string>>& exports, std::string_view name) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : exports)
    if (function_name(e.second) == name) out.push_back(e);
  return out;
}

// Finds `name` among the exports with one of `sigs`; every other signature
// of that name is refused. Returns the probes found.
std::vector<TensorProbe> match(const std::vector<std::pair<std::string, std::string>>& exports,
                               std::string_view name, const Signature* sigs, size_t nsigs,
                               TensorLibraryPlan& plan) {
  std::vector<TensorProbe> found;
  const auto candidates = named(exports, name);
  if (candidates.empty()) {
    plan.refusals.push_back(".dynsym lacks " + std::string(name));
    return found;
  }
  for (const auto& candidate : candidates) {
    const std::string& mangled = candidate.first;
    const std::string& demangled = candidate.second;
    const Signature* sig = std::find_if(sigs, sigs + nsigs, [&](const Signature& s) {
      return demangled == s.demangled;
    });
    if (sig == sigs + nsigs) {
      plan.refusals.push_back(demangled + ": unknown signature");
      continue;
    }
    found.push_back({mangled, demangled, sig->func, sig->needs_return, sig->source});
  }
  return found;
}

// An allocating function and its release, probed only together.
void add_pair(TensorLibraryPlan& plan, std::vector<TensorProbe> allocs,
              std::vector<TensorProbe> frees) {
  if (allocs.empty() || frees.empty()) return;
  for (TensorProbe& p : allocs) plan.probes.push_back(std::move(p));
  for (TensorProbe& p : frees) plan.probes.push_back(std::move(p));
}

void add_hook(TensorLibraryPlan& plan, const std::vector<std::pair<std::string, std::string>>& ex,
              bool totals_only) {
  for (TensorProbe& p : match(ex, "c10::reportMemoryUsageToProfiler", kHooks, std::size(kHooks), plan)) {
    if (totals_only) {
      // The USDTs record the tensors: only an arity with totals adds anything.
      if (p.func != LW_FUNC_TORCH_REPORT) continue;
      p.func = LW_FUNC_TORCH_REPORT_TOTALS;
    }
    plan.probes.push_back(std::move(p));
  }
}

}  // namespace

TensorLibrary tensor_library(std::string_view path) {
  const std::string_view base = basename_of(path);
  // Wheels ship libc10.so; Debian's python3-torch libc10.so.1.13.0.
  auto is = [&](std::string_view name) {
    return base.rfind(name, 0) == 0 && (base.size() == name.size() || base[name.size()] == '.');
  };
  if (is("libc10.so")) return TensorLibrary::kC10;
  if (is("libc10_cuda.so")) return TensorLibrary::kC10Cuda;
  if (base.rfind("libtensorflow_framework.so", 0) == 0) return TensorLibrary::kTensorFlow;
  return TensorLibrary::kNone;
}

const char* tensor_library_name(TensorLibrary lib) {
  switch (lib) {
    case TensorLibrary::kC10: return "libc10.so";
    case TensorLibrary::kC10Cuda: return "libc10_cuda.so";
    case TensorLibrary::kTensorFlow: return "libtensorflow_framework.so";
    case TensorLibrary::kNone: break;
  }
  return "";
}

const std::vector<std::string>& tensor_symbol_prefixes(TensorLibrary lib) {
  static const std::vector<std::string> c10 = {"_ZN3c109alloc_cpuE", "_ZN3c108free_cpuE",
                                               "_ZN3c1027reportMemoryUsageToProfilerE"};
  static const std::vector<std::string> tf = {
      "_ZN3tsl12BFCAllocator11AllocateRawE", "_ZN3tsl12BFCAllocator13DeallocateRawE",
      "_ZN10tensorflow12BFCAllocator11AllocateRawE", "_ZN10tensorflow12BFCAllocator13DeallocateRawE"};
  static const std::vector<std::string> none;
  if (lib == TensorLibrary::kC10) return c10;
  if (lib == TensorLibrary::kTensorFlow) return tf;
  return none;
}

TensorLibraryPlan plan_tensor_library(TensorLibrary lib, const std::vector<std::string>& exports,
                                      bool with_hook, bool hook_totals_only) {
  TensorLibraryPlan plan;
  std::vector<std::pair<std::string, std::string>> ex;
  for (const std::string& m : exports)
    if (std::string d = demangle(m); d != m) ex.emplace_back(m, std::move(d));
  if (lib == TensorLibrary::kC10) {
    // In this order, so the refusals read in it.
    std::vector<TensorProbe> allocs = match(ex, "c10::alloc_cpu", &kCpuAlloc, 1, plan);
    std::vector<TensorProbe> frees = match(ex, "c10::free_cpu", &kCpuFree, 1, plan);
    add_pair(plan, std::move(allocs), std::move(frees));
    if (with_hook) add_hook(plan, ex, hook_totals_only);
  } else if (lib == TensorLibrary::kTensorFlow) {
    std::vector<TensorProbe> allocs = match(ex, "tsl::BFCAllocator::AllocateRaw", kBfcAllocs, 4, plan);
    for (TensorProbe& p : match(ex, "tensorflow::BFCAllocator::AllocateRaw", kBfcAllocs, 4, plan))
      allocs.push_back(std::move(p));
    std::vector<TensorProbe> frees = match(ex, "tsl::BFCAllocator::DeallocateRaw", kBfcFrees, 2, plan);
    for (TensorProbe& p : match(ex, "tensorflow::BFCAllocator::DeallocateRaw", kBfcFrees, 2, plan))
      frees.push_back(std::move(p));
    // One namespace is enough: the other's absence is not worth a word.
    if (!allocs.empty() && !frees.empty())
      std::erase_if(plan.refusals, [](const std::string& r) { return r.rfind(".dynsym lacks", 0) == 0; });
    add_pair(plan, std::move(allocs), std::move(frees));
  }
  for (const TensorProbe& p : plan.probes)
    if (std::find(plan.sources.begin(), plan.sources.end(), p.source) == plan.sources.end())
      plan.sources.push_back(p.source);
  return plan;
}

bool has_usdt_note(const uint8_t* data, size_t size, std::string_view provider,
                   std::string_view name) {
  constexpr uint32_t kNtStapsdt = 3;
  auto align4 = [](uint64_t n) { return (n + 3) & ~uint64_t{3}; };
  uint64_t pos = 0;
  while (pos + 12 <= size) {
    uint32_t namesz, descsz, type;
    std::memcpy(&namesz, data + pos, 4);
    std::memcpy(&descsz, data + pos + 4, 4);
    std::memcpy(&type, data + pos + 8, 4);
    const uint64_t name_at = pos + 12;
    const uint64_t desc_at = name_at + align4(namesz);
    const uint64_t next = desc_at + align4(descsz);
    if (next > size || next <= pos) return false;  // truncated or malformed: stop
    const std::string_view owner(reinterpret_cast<const char*>(data + name_at), namesz);
    if (type == kNtStapsdt && owner == std::string_view("stapsdt\0", 8) && descsz > 24) {
      // pc, base, semaphore (8 bytes each), then provider\0 name\0 args\0.
      const std::string_view text(reinterpret_cast<const char*>(data + desc_at + 24), descsz - 24);
      const size_t p_end = text.find('\0');
      if (p_end != std::string_view::npos) {
        const size_t n_end = text.find('\0', p_end + 1);
        if (n_end != std::string_view::npos && text.substr(0, p_end) == provider &&
            text.substr(p_end + 1, n_end - p_end - 1) == name)
          return true;
      }
    }
    pos = next;
  }
  return false;
}

std::string gpu_allocator_path(std::string_view environ, bool pytorch_cuda, bool tensorflow) {
  auto value = [&](std::string_view key) -> std::optional<std::string_view> {
    size_t pos = 0;
    while (pos < environ.size()) {
      size_t end = environ.find('\0', pos);
      if (end == std::string_view::npos) end = environ.size();
      std::string_view entry = environ.substr(pos, end - pos);
      if (entry.size() > key.size() && entry.substr(0, key.size()) == key && entry[key.size()] == '=')
        return entry.substr(key.size() + 1);
      pos = end + 1;
    }
    return std::nullopt;
  };
  if (pytorch_cuda) {
    auto no_cache = value("PYTORCH_NO_CUDA_MEMORY_CACHING");
    if (no_cache && *no_cache == "1") return "pytorch_uncached";
    for (const char* key : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}) {
      auto conf = value(key);
      if (conf && conf->find("backend:cudaMallocAsync") != std::string_view::npos)
        return "pytorch_cuda_malloc_async";
    }
    return "pytorch_caching";
  }
  if (tensorflow) {
    auto tf = value("TF_GPU_ALLOCATOR");
    if (tf && *tf == "cuda_malloc_async") return "tensorflow_cuda_malloc_async";
    return "tensorflow_bfc";
  }
  return "";
}

}  // namespace lw
