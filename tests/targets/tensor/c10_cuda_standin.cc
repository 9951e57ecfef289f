// SPDX-License-Identifier: Apache-2.0
// A stand-in for PyTorch's libc10_cuda.so: a caching allocator in the shape
// of c10::cuda::CUDACachingAllocator, with no GPU. It reserves 2 MiB chunks
// (more for big blocks) with cudaMalloc from the project's fake
// libcudart.so.13 (tests/targets/cuda), hands out 512-byte-rounded blocks
// from them, keeps freed blocks cached for reuse, and gives whole free
// chunks back only on emptyCache(), as PyTorch's allocator does.
//
// On every block malloc (+size) and free (-size) it calls
// c10::reportMemoryUsageToProfiler with its running totals (bytes allocated
// and reserved) and Device{CUDA, 0}, from the libc10.so stand-in it is
// linked with, of the arity LW_C10_REPORT says (113 or 2).
//
// With LW_C10_CUDA_USDT (PyTorch 2.1 and later) it also carries the USDT
// probes pytorch:malloc(ptr, device, size, stream) and pytorch:free(ptr),
// each with a semaphore, and fires them only while the semaphore is raised
// (PyTorch's TORCH_SDT_IS_ENABLED): a tracer must raise it (libbpf does,
// through the uprobe's ref_ctr_offset). As in PyTorch, pytorch:malloc fires
// after the block malloc and pytorch:free before the block free.
//
// Nothing here allocates from the heap: the tables are static, so a heap
// tier traced beside the tensor tier sees nothing of the pool.
#include <pthread.h>

#include "../cuda/fake_cuda.h"
#include "tensor_standin.h"

#ifdef LW_C10_CUDA_USDT
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
// sys/sdt.h names a probe's semaphore <provider>_<name>_semaphore; the
// stapsdt note holds its address. In .probes, as sys/sdt.h expects.
extern "C" {
__attribute__((visibility("default"), used, section(".probes"))) volatile unsigned short pytorch_malloc_semaphore;
__attribute__((visibility("default"), used, section(".probes"))) volatile unsigned short pytorch_free_semaphore;
}
#endif

#ifndef LW_C10_REPORT
#error "LW_C10_REPORT: 113 or 2"
#endif

namespace c10 {
#if LW_C10_REPORT == 113
void reportMemoryUsageToProfiler(void *ptr, int64_t alloc_size, int64_t total_allocated, int64_t total_reserved,
                                 Device device);
#else
void reportMemoryUsageToProfiler(void *ptr, int64_t alloc_size, size_t total_allocated, size_t total_reserved,
                                 Device device);
#endif
}  // namespace c10

namespace {

constexpr size_t kMinBlock = 512;
constexpr size_t kChunk = 2 << 20;
constexpr int kMaxChunks = 256;
constexpr int kMaxBlocks = 16384;

struct Chunk {
  char *base;
  size_t size;
  size_t used;  // bump pointer: blocks are cut from the front
  int live;     // blocks in use
};

struct Block {
  char *ptr;  // nullptr: an unused slot
  size_t size;
  int chunk;
  bool in_use;
};

pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
Chunk chunks[kMaxChunks];
int chunk_count;
Block blocks[kMaxBlocks];
int block_count;
uint64_t allocated_bytes, reserved_bytes;
uint64_t usdt_malloc_fired, usdt_free_fired;

size_t round_size(size_t n) { return n < kMinBlock ? kMinBlock : (n + kMinBlock - 1) / kMinBlock * kMinBlock; }

void report(void *ptr, int64_t delta) {
  const c10::Device device{c10::DeviceType::CUDA, 0};
#if LW_C10_REPORT == 113
  c10::reportMemoryUsageToProfiler(ptr, delta, static_cast<int64_t>(allocated_bytes),
                                   static_cast<int64_t>(reserved_bytes), device);
#else
  c10::reportMemoryUsageToProfiler(ptr, delta, allocated_bytes, reserved_bytes, device);
#endif
}

int reserve_chunk(size_t need) {
  if (chunk_count == kMaxChunks) return -1;
  const size_t size = need <= kChunk ? kChunk : (need + kChunk - 1) / kChunk * kChunk;
  void *base = nullptr;
  // PyTorch's CUDAGuard: the device is made current before cudaMalloc.
  if (cudaSetDevice(0) != cudaSuccess || cudaMalloc(&base, size) != cudaSuccess) return -1;
  chunks[chunk_count] = Chunk{static_cast<char *>(base), size, 0, 0};
  reserved_bytes += size;
  return chunk_count++;
}

Block *new_block_slot() {
  for (int i = 0; i < block_count; ++i)
    if (!blocks[i].ptr) return &blocks[i];
  return block_count < kMaxBlocks ? &blocks[block_count++] : nullptr;
}

// DeviceCachingAllocator::malloc: a cached block of the size, else one cut
// from a chunk with room, else from a new chunk.
Block *block_malloc(size_t size) {
  for (int i = 0; i < block_count; ++i)
    if (blocks[i].ptr && !blocks[i].in_use && blocks[i].size == size) return &blocks[i];
  int c = -1;
  for (int i = 0; i < chunk_count && c < 0; ++i)
    if (chunks[i].base && chunks[i].size - chunks[i].used >= size) c = i;
  if (c < 0) c = reserve_chunk(size);
  Block *b = c < 0 ? nullptr : new_block_slot();
  if (!b) return nullptr;
  *b = Block{chunks[c].base + chunks[c].used, size, c, false};
  chunks[c].used += size;
  return b;
}

Block *find_block(void *ptr) {
  for (int i = 0; i < block_count; ++i)
    if (blocks[i].ptr == ptr && blocks[i].in_use) return &blocks[i];
  return nullptr;
}

}  // namespace

namespace c10::cuda::CUDACachingAllocator {

__attribute__((visibility("default"))) void *raw_alloc(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t size = round_size(nbytes);
  pthread_mutex_lock(&lock);
  Block *b = block_malloc(size);
  if (b) {
    b->in_use = true;
    chunks[b->chunk].live++;
    allocated_bytes += size;
    report(b->ptr, static_cast<int64_t>(size));
  }
  pthread_mutex_unlock(&lock);
  if (!b) return nullptr;
#ifdef LW_C10_CUDA_USDT
  if (pytorch_malloc_semaphore) {
    void *stream = nullptr;
    int device = 0;
    __atomic_fetch_add(&usdt_malloc_fired, 1, __ATOMIC_RELAXED);
    STAP_PROBE4(pytorch, malloc, b->ptr, device, nbytes, stream);
  }
#endif
  return b->ptr;
}

__attribute__((visibility("default"))) void raw_delete(void *ptr) {
  if (!ptr) return;
#ifdef LW_C10_CUDA_USDT
  if (pytorch_free_semaphore) {
    __atomic_fetch_add(&usdt_free_fired, 1, __ATOMIC_RELAXED);
    STAP_PROBE1(pytorch, free, ptr);
  }
#endif
  pthread_mutex_lock(&lock);
  if (Block *b = find_block(ptr)) {
    b->in_use = false;
    chunks[b->chunk].live--;
    allocated_bytes -= b->size;
    report(b->ptr, -static_cast<int64_t>(b->size));
  }
  pthread_mutex_unlock(&lock);
}

// Gives every chunk without a live block back to the driver. PyTorch calls
// no profiler hook here, so the totals the hook last saw go stale.
__attribute__((visibility("default"))) void emptyCache() {
  pthread_mutex_lock(&lock);
  for (int c = 0; c < chunk_count; ++c) {
    if (!chunks[c].base || chunks[c].live) continue;
    for (int i = 0; i < block_count; ++i)
      if (blocks[i].ptr && blocks[i].chunk == c) blocks[i].ptr = nullptr;
    cudaFree(chunks[c].base);
    reserved_bytes -= chunks[c].size;
    chunks[c] = Chunk{};
  }
  pthread_mutex_unlock(&lock);
}

}  // namespace c10::cuda::CUDACachingAllocator

extern "C" __attribute__((visibility("default"))) void lw_standin_pool_stats(struct lw_pool_stats *out) {
  pthread_mutex_lock(&lock);
  out->allocated_bytes = allocated_bytes;
  out->reserved_bytes = reserved_bytes;
  out->chunks = 0;
  for (int c = 0; c < chunk_count; ++c) out->chunks += chunks[c].base != nullptr;
  pthread_mutex_unlock(&lock);
}

extern "C" __attribute__((visibility("default"))) void lw_standin_usdt_stats(struct lw_usdt_stats *out) {
  out->malloc_fired = __atomic_load_n(&usdt_malloc_fired, __ATOMIC_RELAXED);
  out->free_fired = __atomic_load_n(&usdt_free_fired, __ATOMIC_RELAXED);
#ifdef LW_C10_CUDA_USDT
  out->malloc_semaphore = pytorch_malloc_semaphore;
  out->free_semaphore = pytorch_free_semaphore;
  out->has_usdt = 1;
#else
  out->malloc_semaphore = out->free_semaphore = 0;
  out->has_usdt = 0;
#endif
}
