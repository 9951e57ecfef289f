// SPDX-License-Identifier: Apache-2.0
// A stand-in for PyTorch's libc10.so (tests/targets/tensor/CMakeLists.txt
// builds it once per variant, each in its own directory, always named
// libc10.so): the CPU allocator pair and the profiler hook the CUDA caching
// allocator calls, with PyTorch's mangled names.
//
//   LW_C10_REPORT=113   c10::reportMemoryUsageToProfiler(void*, int64_t, int64_t, int64_t, Device)
//                       (PyTorch 1.13, Debian's python3-torch: ...EPvlllNS_6DeviceE)
//   LW_C10_REPORT=2     c10::reportMemoryUsageToProfiler(void*, int64_t, size_t, size_t, Device)
//                       (PyTorch 2.x: ...EPvlmmNS_6DeviceE)
//   LW_C10_BAD_ALLOC    c10::alloc_cpu(size_t, int): a known name with a signature no
//                       PyTorch has; leakwatch must refuse it ("unsupported: ...")
//   LW_C10_NO_SYMBOLS   none of the names: a libc10.so whose .dynsym lacks them
//
// Built -O2 without frame pointers, as PyTorch is: free_cpu compiles to a
// tail jump to free@plt, as in Debian's 1.13 build.
#include <cstdlib>

#include "tensor_standin.h"

#ifndef LW_C10_REPORT
#define LW_C10_REPORT 0
#endif

namespace c10 {

#if !defined(LW_C10_NO_SYMBOLS)

// c10/core/impl/alloc_cpu.cpp: 64-byte aligned, NULL for 0 bytes.
constexpr size_t kAlignment = 64;

#if defined(LW_C10_BAD_ALLOC)
__attribute__((visibility("default"))) void *alloc_cpu(size_t nbytes, int junk_fill) {
  void *data = nullptr;
  if (nbytes == 0 || posix_memalign(&data, kAlignment, nbytes) != 0) return nullptr;
  if (junk_fill) static_cast<unsigned char *>(data)[0] = 0xff;
  return data;
}
#else
__attribute__((visibility("default"))) void *alloc_cpu(size_t nbytes) {
  void *data = nullptr;
  if (nbytes == 0 || posix_memalign(&data, kAlignment, nbytes) != 0) return nullptr;
  return data;
}
#endif

__attribute__((visibility("default"))) void free_cpu(void *data) { free(data); }

// The real hook looks for an active profiler (thread-local debug info) and
// does nothing without one; here it only counts its calls.
static volatile unsigned long report_calls;

#if LW_C10_REPORT == 113
__attribute__((visibility("default"))) void reportMemoryUsageToProfiler(void *ptr, int64_t alloc_size,
                                                                        int64_t total_allocated,
                                                                        int64_t total_reserved, Device device) {
  (void)ptr, (void)alloc_size, (void)total_allocated, (void)total_reserved, (void)device;
  report_calls = report_calls + 1;
}
#elif LW_C10_REPORT == 2
__attribute__((visibility("default"))) void reportMemoryUsageToProfiler(void *ptr, int64_t alloc_size,
                                                                        size_t total_allocated,
                                                                        size_t total_reserved, Device device) {
  (void)ptr, (void)alloc_size, (void)total_allocated, (void)total_reserved, (void)device;
  report_calls = report_calls + 1;
}
#endif

#else  // LW_C10_NO_SYMBOLS

// Something else, so the library is not empty.
__attribute__((visibility("default"))) int get_num_threads() { return 1; }

#endif

}  // namespace c10
