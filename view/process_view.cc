// SPDX-License-Identifier: Apache-2.0
#include "view/process_view.h"

namespace lw {

const char* kind_name(uint32_t kind) {
  switch (kind) {
    case LW_KIND_HEAP: return "heap";
    case LW_KIND_MMAP: return "mmap";
    case LW_KIND_CUDA_DEVICE: return "cuda_device";
    case LW_KIND_CUDA_HOST: return "cuda_host";
    case LW_KIND_CUDA_MANAGED: return "cuda_managed";
    case LW_KIND_TENSOR_CPU: return "tensor_cpu";
    case LW_KIND_TENSOR_GPU: return "tensor_gpu";
  }
  return "unknown";
}

}  // namespace lw
