// SPDX-License-Identifier: Apache-2.0
/* A test stand-in for the CUDA runtime, libcudart.so.13 (and, built into a
 * static library, for a runtime linked into the executable): the real
 * symbol names (versioned `libcudart.so.13` in the shared build, as the real
 * library's are) and C ABI. Like the real runtime it allocates through the
 * driver: cudaMalloc calls cuMemAlloc_v2, which leakwatch must not count a
 * second time. The primary context of the current device is made current
 * lazily, as the runtime does.
 */
#include <stdint.h>

#include "fake_cuda.h"

static __thread int device = -1;

static int ensure_context(void) {
  if (device >= 0) return 0;
  return cudaSetDevice(0);
}

cudaError_t cudaSetDevice(int dev) {
  CUcontext ctx;
  if (cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS) return 101; /* cudaErrorInvalidDevice */
  if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return 101;
  device = dev;
  return cudaSuccess;
}

static cudaError_t rt(CUresult r) { return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorMemoryAllocation; }

cudaError_t cudaMalloc(void **devPtr, size_t size) {
  if (ensure_context()) return 101;
  return rt(cuMemAlloc_v2((CUdeviceptr *)devPtr, size));
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream) {
  if (ensure_context()) return 101;
  return rt(cuMemAllocAsync((CUdeviceptr *)devPtr, size, stream));
}

cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
  if (ensure_context()) return 101;
  return rt(cuMemAllocFromPoolAsync((CUdeviceptr *)ptr, size, memPool, stream));
}

cudaError_t cudaFree(void *devPtr) { return rt(cuMemFree_v2((CUdeviceptr)(uintptr_t)devPtr)); }

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream) {
  return rt(cuMemFreeAsync((CUdeviceptr)(uintptr_t)devPtr, stream));
}

cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) {
  if (ensure_context()) return 101;
  return rt(cuMemAllocManaged((CUdeviceptr *)devPtr, size, flags));
}

cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height) {
  if (ensure_context()) return 101;
  return rt(cuMemAllocPitch_v2((CUdeviceptr *)devPtr, pitch, width, height, 4));
}

cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent) {
  if (ensure_context()) return 101;
  CUdeviceptr p;
  size_t pitch;
  CUresult r = cuMemAllocPitch_v2(&p, &pitch, extent.width, extent.height * extent.depth, 4);
  if (r != CUDA_SUCCESS) return rt(r);
  pitchedDevPtr->ptr = (void *)(uintptr_t)p;
  pitchedDevPtr->pitch = pitch;
  pitchedDevPtr->xsize = extent.width;
  pitchedDevPtr->ysize = extent.height;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t size) {
  if (ensure_context()) return 101;
  return rt(cuMemAllocHost_v2(ptr, size));
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) {
  if (ensure_context()) return 101;
  return rt(cuMemHostAlloc(pHost, size, flags));
}

cudaError_t cudaFreeHost(void *ptr) { return rt(cuMemFreeHost(ptr)); }
