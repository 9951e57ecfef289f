/* SPDX-License-Identifier: Apache-2.0 */
// Which CUDA objects a process maps, and what to probe in each: the runtime
// (libcudart.so.*, or linked into the executable and found by its cudaMalloc
// symbol) and the driver (libcuda.so.*). See
// decision cuda-memory. Every CUDA probe is optional: a process without CUDA,
// or a CUDA library missing a symbol, is not an error. Thread-safety: stateless
// functions and constant tables.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace lw {

struct CudaProbeSpec {
  const char* symbol;
  uint32_t func;      // enum lw_func (32..63): the programs' attach cookie
  bool needs_return;  // read at return (output pointer, error code)
};

// Object roles, as reported in AttachedObject::role.
inline constexpr const char* kRoleCudaRuntime = "cudart";
inline constexpr const char* kRoleCudaDriver = "libcuda";
inline constexpr const char* kRoleCudaStatic = "cudart (static, in the executable)";

// kRoleCudaRuntime or kRoleCudaDriver for a library path, else "".
std::string cuda_library_role(const std::string& path);
bool is_cuda_role(const std::string& role);

// The probes for an object of `role` (empty for anything else).
std::span<const CudaProbeSpec> cuda_probe_specs(const std::string& role);

// The symbol whose presence marks an executable with the runtime linked in.
inline constexpr const char* kCudaStaticMarker = "cudaMalloc";

}  // namespace lw
