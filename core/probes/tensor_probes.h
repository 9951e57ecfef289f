/* SPDX-License-Identifier: Apache-2.0 */
// The tensor tier's probes as data (decision tensor-tier): which framework
// libraries carry an allocator worth probing, which exported functions in
// them, matched by demangled name and whole signature, and what to do with
// a known name of another signature (refuse it, with a reason: an argument
// read from the wrong register would be a wrong figure, never an error).
// Pure: the caller hands in the library's exported names; no file access.
// Thread-safety: stateless functions and constant tables.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lw {

enum class TensorLibrary {
  kNone,
  kC10,         // libc10.so: alloc_cpu/free_cpu and the memory-report hook
  kC10Cuda,     // libc10_cuda.so: the caching allocator's USDTs
  kTensorFlow,  // libtensorflow_framework.so*: BFCAllocator
};

// The library a mapped file is, by its file name (libc10.so, libc10.so.1.13.0, ...).
TensorLibrary tensor_library(std::string_view path);
const char* tensor_library_name(TensorLibrary lib);

// Sources, as TensorTierInfo::sources names them.
inline constexpr const char* kSourcePytorchCpu = "pytorch_cpu";
inline constexpr const char* kSourcePytorchCudaUsdt = "pytorch_cuda_usdt";
inline constexpr const char* kSourcePytorchCudaHook = "pytorch_cuda_hook";
inline constexpr const char* kSourceTensorflowBfc = "tensorflow_bfc";

// One function to probe.
struct TensorProbe {
  std::string mangled;    // the .dynsym name
  std::string demangled;  // as matched
  uint32_t func = 0;      // enum lw_func
  bool needs_return = false;
  const char* source = "";
};

// What a library offers: the probes, and why others were refused.
struct TensorLibraryPlan {
  std::vector<TensorProbe> probes;
  std::vector<std::string> refusals;  // "c10::alloc_cpu(unsigned long, int): unknown signature"
  std::vector<std::string> sources;   // distinct sources of `probes`
};

// The mangled-name prefixes whose exports a library's plan looks at (the
// caller lists the .dynsym exports starting with one of them).
const std::vector<std::string>& tensor_symbol_prefixes(TensorLibrary lib);

// The plan for `lib` from its exports (mangled names). `with_hook`: probe
// the memory-report hook (a CUDA caching allocator is mapped);
// `hook_totals_only`: the USDTs record the tensors, the hook keeps only
// the totals. A pair (alloc and free) is probed only whole.
TensorLibraryPlan plan_tensor_library(TensorLibrary lib, const std::vector<std::string>& exports,
                                      bool with_hook, bool hook_totals_only);

// Whether an ELF note section's contents (.note.stapsdt, untrusted,
// bounded by `size`) hold the USDT provider:name (SystemTap's NT_STAPSDT
// notes, 64-bit).
bool has_usdt_note(const uint8_t* data, size_t size, std::string_view provider,
                   std::string_view name);

// The GPU allocator path a process uses, from its environment
// (/proc/PID/environ text, NUL-separated, untrusted) and which framework
// libraries it maps: TensorTierInfo::gpu_allocator.
std::string gpu_allocator_path(std::string_view environ, bool pytorch_cuda, bool tensorflow);

}  // namespace lw
