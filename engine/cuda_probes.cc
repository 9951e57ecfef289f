// SPDX-License-Identifier: Apache-2.0
#include "engine/cuda_probes.h"

#include <iterator>

#include "leakwatch_abi.h"

namespace lw {

namespace {

// Runtime: allocations are read at return (the pointer comes back through
// an output argument); frees and cudaSetDevice are entry-only.
constexpr CudaProbeSpec kRuntimeProbes[] = {
    {"cudaMalloc", LW_FUNC_CUDART_MALLOC, true},
    {"cudaMallocAsync", LW_FUNC_CUDART_MALLOC, true},
    {"cudaMallocFromPoolAsync", LW_FUNC_CUDART_MALLOC, true},
    {"cudaMallocManaged", LW_FUNC_CUDART_MALLOC_MANAGED, true},
    {"cudaMallocPitch", LW_FUNC_CUDART_MALLOC_PITCH, true},
    {"cudaMalloc3D", LW_FUNC_CUDART_MALLOC_3D, true},
    {"cudaMallocHost", LW_FUNC_CUDART_MALLOC_HOST, true},
    {"cudaHostAlloc", LW_FUNC_CUDART_MALLOC_HOST, true},
    {"cudaFree", LW_FUNC_CUDART_FREE, false},
    {"cudaFreeAsync", LW_FUNC_CUDART_FREE, false},
    {"cudaFreeHost", LW_FUNC_CUDART_FREE_HOST, false},
    {"cudaSetDevice", LW_FUNC_CUDART_SET_DEVICE, false},
};

// Driver. The _v2 names are what cuda.h maps the plain names to; the
// unversioned cuCtxDestroy is the legacy entry point, still exported.
constexpr CudaProbeSpec kDriverProbes[] = {
    {"cuMemAlloc_v2", LW_FUNC_CU_MEM_ALLOC, true},
    {"cuMemAllocAsync", LW_FUNC_CU_MEM_ALLOC, true},
    {"cuMemAllocFromPoolAsync", LW_FUNC_CU_MEM_ALLOC, true},
    {"cuMemAllocManaged", LW_FUNC_CU_MEM_ALLOC_MANAGED, true},
    {"cuMemAllocPitch_v2", LW_FUNC_CU_MEM_ALLOC_PITCH, true},
    {"cuMemAllocHost_v2", LW_FUNC_CU_MEM_ALLOC_HOST, true},
    {"cuMemHostAlloc", LW_FUNC_CU_MEM_ALLOC_HOST, true},
    {"cuMemFree_v2", LW_FUNC_CU_MEM_FREE, false},
    {"cuMemFreeAsync", LW_FUNC_CU_MEM_FREE, false},
    {"cuMemFreeHost", LW_FUNC_CU_MEM_FREE_HOST, false},
    {"cuMemCreate", LW_FUNC_CU_MEM_CREATE, true},
    {"cuMemRelease", LW_FUNC_CU_MEM_RELEASE, false},
    {"cuMemMap", LW_FUNC_CU_MEM_MAP, true},
    {"cuMemUnmap", LW_FUNC_CU_MEM_UNMAP, false},
    {"cuCtxCreate_v2", LW_FUNC_CU_CTX_CREATE, true},
    {"cuCtxCreate_v4", LW_FUNC_CU_CTX_CREATE_V4, true},
    {"cuDevicePrimaryCtxRetain", LW_FUNC_CU_PRIMARY_CTX_RETAIN, true},
    {"cuCtxDestroy_v2", LW_FUNC_CU_CTX_DESTROY, false},
    {"cuCtxDestroy", LW_FUNC_CU_CTX_DESTROY, false},
    {"cuCtxSetCurrent", LW_FUNC_CU_CTX_SET_CURRENT, false},
    {"cuCtxPushCurrent_v2", LW_FUNC_CU_CTX_PUSH, false},
    {"cuCtxPopCurrent_v2", LW_FUNC_CU_CTX_POP, false},
};

std::string basename_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string cuda_library_role(const std::string& path) {
  std::string base = basename_of(path);
  if (base.rfind("libcudart.so", 0) == 0) return kRoleCudaRuntime;
  if (base.rfind("libcuda.so", 0) == 0) return kRoleCudaDriver;
  return "";
}

bool is_cuda_role(const std::string& role) {
  return role == kRoleCudaRuntime || role == kRoleCudaDriver || role == kRoleCudaStatic;
}

std::span<const CudaProbeSpec> cuda_probe_specs(const std::string& role) {
  if (role == kRoleCudaRuntime || role == kRoleCudaStatic) return kRuntimeProbes;
  if (role == kRoleCudaDriver) return kDriverProbes;
  return {};
}

}  // namespace lw
