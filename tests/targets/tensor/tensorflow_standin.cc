// SPDX-License-Identifier: Apache-2.0
// A stand-in for TensorFlow's libtensorflow_framework.so.2: the BFC
// allocator's two entry points with TensorFlow's mangled names,
// tsl::BFCAllocator::AllocateRaw(size_t alignment, size_t num_bytes) and
// tsl::BFCAllocator::DeallocateRaw(void*). (Non-virtual here; TensorFlow's
// are virtual, which changes neither name nor calling convention.)
//
// Like the BFC allocator it serves 256-byte-rounded chunks from a region
// it reserved up front (an anonymous mapping standing in for device memory,
// taken at construction, before any tracing), caching freed chunks for
// reuse. No heap allocation after construction.
#include <pthread.h>
#include <sys/mman.h>

#include <new>

#include "tensor_standin.h"

namespace tsl {

class BFCAllocator {
 public:
  BFCAllocator();
  void *AllocateRaw(size_t alignment, size_t num_bytes);
  void DeallocateRaw(void *ptr);

 private:
  static constexpr size_t kMinAllocationSize = 256;
  static constexpr size_t kRegion = 64 << 20;
  static constexpr int kMaxChunks = 8192;
  struct Chunk {
    char *ptr;
    size_t size;
    bool in_use;
  };
  pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;
  char *region_ = nullptr;
  size_t used_ = 0;
  Chunk chunks_[kMaxChunks] = {};
  int chunk_count_ = 0;
};

BFCAllocator::BFCAllocator() {
  void *p = mmap(nullptr, kRegion, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p != MAP_FAILED) region_ = static_cast<char *>(p);
}

__attribute__((visibility("default"))) void *BFCAllocator::AllocateRaw(size_t alignment, size_t num_bytes) {
  if (num_bytes == 0 || !region_ || alignment > kMinAllocationSize) return nullptr;
  const size_t size = (num_bytes + kMinAllocationSize - 1) / kMinAllocationSize * kMinAllocationSize;
  void *out = nullptr;
  pthread_mutex_lock(&lock_);
  for (int i = 0; i < chunk_count_ && !out; ++i)
    if (!chunks_[i].in_use && chunks_[i].size == size) {
      chunks_[i].in_use = true;
      out = chunks_[i].ptr;
    }
  if (!out && used_ + size <= kRegion && chunk_count_ < kMaxChunks) {
    chunks_[chunk_count_++] = Chunk{region_ + used_, size, true};
    out = region_ + used_;
    used_ += size;
  }
  pthread_mutex_unlock(&lock_);
  return out;
}

__attribute__((visibility("default"))) void BFCAllocator::DeallocateRaw(void *ptr) {
  pthread_mutex_lock(&lock_);
  for (int i = 0; i < chunk_count_; ++i)
    if (chunks_[i].ptr == ptr && chunks_[i].in_use) {
      chunks_[i].in_use = false;
      break;
    }
  pthread_mutex_unlock(&lock_);
}

}  // namespace tsl

// One allocator per process, in static storage (the heap stays untouched).
extern "C" __attribute__((visibility("default"))) void *lw_standin_bfc_new(void) {
  alignas(tsl::BFCAllocator) static unsigned char storage[sizeof(tsl::BFCAllocator)];
  static tsl::BFCAllocator *bfc = new (storage) tsl::BFCAllocator();
  return bfc;
}
