// SPDX-License-Identifier: Apache-2.0
// What the tensor-tier stand-ins (tests/targets/tensor) share with the
// target that loads them, tensor_leaker: the framework types they are built
// with, the mangled names the target looks up with dlsym, and the stand-ins'
// own C entry points for the ground truth (pool totals, USDT counts).
//
// The framework functions are declared in their real namespaces with their
// real parameter types, so the compiler mangles them as PyTorch and
// TensorFlow do; leakwatch finds them by demangled name in .dynsym.
#ifndef LW_TENSOR_STANDIN_H
#define LW_TENSOR_STANDIN_H

#include <cstddef>
#include <cstdint>

namespace c10 {

// c10/core/DeviceType.h: enum class DeviceType : int8_t { CPU = 0, CUDA = 1, ... }.
enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };

// c10/core/Device.h: two bytes, passed by value (in a register).
struct Device {
  DeviceType type;
  int8_t index;
};

}  // namespace c10

// Mangled names, as `nm -D` shows them in the real libraries.
#define LW_C10_ALLOC_CPU "_ZN3c109alloc_cpuEm"            // c10::alloc_cpu(unsigned long)
#define LW_C10_ALLOC_CPU_BAD "_ZN3c109alloc_cpuEmi"       // c10::alloc_cpu(unsigned long, int): no such PyTorch
#define LW_C10_FREE_CPU "_ZN3c108free_cpuEPv"             // c10::free_cpu(void*)
#define LW_C10_CUDA_RAW_ALLOC "_ZN3c104cuda20CUDACachingAllocator9raw_allocEm"
#define LW_C10_CUDA_RAW_DELETE "_ZN3c104cuda20CUDACachingAllocator10raw_deleteEPv"
#define LW_C10_CUDA_EMPTY_CACHE "_ZN3c104cuda20CUDACachingAllocator10emptyCacheEv"
#define LW_TSL_BFC_ALLOCATE_RAW "_ZN3tsl12BFCAllocator11AllocateRawEmm"
#define LW_TSL_BFC_DEALLOCATE_RAW "_ZN3tsl12BFCAllocator13DeallocateRawEPv"

extern "C" {
// libc10_cuda.so stand-in: the caching allocator's running totals (what it
// last passed to reportMemoryUsageToProfiler) and chunk count.
struct lw_pool_stats {
  uint64_t allocated_bytes;  // blocks handed out, live
  uint64_t reserved_bytes;   // chunks taken from cudaMalloc
  uint64_t chunks;
};
void lw_standin_pool_stats(struct lw_pool_stats *out);

// libc10_cuda.so stand-in: how often each USDT fired (only while its
// semaphore was raised) and the semaphores' values now. All 0 in the
// variant built without the USDTs.
struct lw_usdt_stats {
  uint64_t malloc_fired;
  uint64_t free_fired;
  uint16_t malloc_semaphore;
  uint16_t free_semaphore;
  int has_usdt;
};
void lw_standin_usdt_stats(struct lw_usdt_stats *out);

// libtensorflow_framework.so.2 stand-in: a BFCAllocator (its arena is
// reserved at construction, not from the heap).
void *lw_standin_bfc_new(void);
}

#endif  // LW_TENSOR_STANDIN_H
