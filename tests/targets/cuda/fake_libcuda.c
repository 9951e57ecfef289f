// SPDX-License-Identifier: Apache-2.0
/* A test stand-in for the CUDA driver, libcuda.so.1: the real symbol names
 * and C ABI, no GPU. "Device" memory is host memory from mmap, so the
 * tracer sees real, distinct addresses; the library keeps the ground truth
 * (bytes live per kind and device) that the targets report.
 *
 * Semantics follow the driver where leakwatch depends on them: errors leave
 * the output untouched; a new context is pushed on the calling thread's
 * stack; cuCtxDestroy releases what was allocated in the context; VMM
 * physical memory lives until it is released and no longer mapped.
 *
 * Device memory is unbounded unless LWFAKE_CUDA_DEVICE_CAPACITY (bytes) is
 * set: then a device or managed allocation that would take a device's live
 * bytes above it fails with CUDA_ERROR_OUT_OF_MEMORY, as a full GPU does.
 *
 * No malloc anywhere (static tables): the targets' heap must stay quiet.
 * Single-threaded use only.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "fake_cuda.h"

#define KIND_DEVICE 2
#define KIND_HOST 3
#define KIND_MANAGED 4
#define MAX_ALLOCS 4096
#define MAX_CTXS 16
#define MAX_HANDLES 256
#define MAX_MAPS 256
#define STACK_DEPTH 8
#define FAIL_ABOVE (1ULL << 40) /* larger requests are "out of memory" */

struct CUctx_st {
  int in_use;
  int device;
  int primary;
};

struct alloc {
  uintptr_t addr;
  size_t size;
  int kind;
  int device;
  CUcontext ctx;
};

struct handle {
  uintptr_t addr; /* backing memory; also the handle value */
  size_t size;
  int device;
  int maps;
  int released;
};

struct mapping {
  CUdeviceptr va;
  size_t size;
  struct handle *h;
};

static struct CUctx_st ctxs[MAX_CTXS];
static struct CUctx_st primary[MAX_CTXS];
static struct alloc allocs[MAX_ALLOCS];
static struct handle handles[MAX_HANDLES];
static struct mapping maps[MAX_MAPS];
static unsigned long long live[5];
static unsigned long long device_live[MAX_CTXS];
static CUdeviceptr next_va = 0x7e0000000000ULL;

static __thread CUcontext stack[STACK_DEPTH];
static __thread int depth;

static CUcontext current(void) { return depth > 0 ? stack[depth - 1] : NULL; }

static void *map_pages(size_t size) {
  void *p = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static void account(int kind, int device, size_t size, int sign) {
  if (sign > 0) {
    live[kind] += size;
    if (kind != KIND_HOST && device >= 0 && device < MAX_CTXS) device_live[device] += size;
  } else {
    live[kind] -= size;
    if (kind != KIND_HOST && device >= 0 && device < MAX_CTXS) device_live[device] -= size;
  }
}

/* LWFAKE_CUDA_DEVICE_CAPACITY, bytes per device; 0: unbounded. */
static unsigned long long device_capacity(void) {
  const char *v = getenv("LWFAKE_CUDA_DEVICE_CAPACITY");
  return v ? strtoull(v, NULL, 0) : 0;
}

static CUresult alloc_kind(uintptr_t *out, size_t size, int kind) {
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0 || size > FAIL_ABOVE) return CUDA_ERROR_OUT_OF_MEMORY;
  CUcontext ctx = current();
  if (ctx == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  unsigned long long cap = device_capacity();
  if (cap && kind != KIND_HOST && ctx->device >= 0 && ctx->device < MAX_CTXS &&
      device_live[ctx->device] + size > cap)
    return CUDA_ERROR_OUT_OF_MEMORY;
  for (int i = 0; i < MAX_ALLOCS; i++) {
    if (allocs[i].addr) continue;
    void *p = map_pages(size);
    if (p == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    allocs[i] = (struct alloc){(uintptr_t)p, size, kind, ctx->device, ctx};
    account(kind, ctx->device, size, +1);
    *out = (uintptr_t)p;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

static void release(struct alloc *a) {
  munmap((void *)a->addr, a->size);
  account(a->kind, a->device, a->size, -1);
  a->addr = 0;
}

static CUresult free_kind(uintptr_t addr, int host) {
  if (addr == 0) return CUDA_SUCCESS;
  for (int i = 0; i < MAX_ALLOCS; i++) {
    if (allocs[i].addr != addr) continue;
    if ((allocs[i].kind == KIND_HOST) != host) return CUDA_ERROR_INVALID_VALUE;
    release(&allocs[i]);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  return alloc_kind((uintptr_t *)dptr, bytesize, KIND_DEVICE);
}

/* Rows are padded to 512 bytes, as the driver's texture alignment does. */
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes) {
  if (pPitch == NULL || ElementSizeBytes == 0 || WidthInBytes == 0 || Height == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (WidthInBytes > FAIL_ABOVE || Height > FAIL_ABOVE) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t pitch = (WidthInBytes + 511) & ~(size_t)511;
  if (Height > FAIL_ABOVE / pitch) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = alloc_kind((uintptr_t *)dptr, pitch * Height, KIND_DEVICE);
  if (r == CUDA_SUCCESS) *pPitch = pitch;
  return r;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
  (void)flags;
  return alloc_kind((uintptr_t *)dptr, bytesize, KIND_MANAGED);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  (void)hStream;
  return alloc_kind((uintptr_t *)dptr, bytesize, KIND_DEVICE);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  (void)pool;
  (void)hStream;
  return alloc_kind((uintptr_t *)dptr, bytesize, KIND_DEVICE);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) { return free_kind(dptr, 0); }

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  (void)hStream;
  return free_kind(dptr, 0);
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) {
  return alloc_kind((uintptr_t *)pp, bytesize, KIND_HOST);
}

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
  (void)Flags;
  return alloc_kind((uintptr_t *)pp, bytesize, KIND_HOST);
}

CUresult cuMemFreeHost(void *p) { return free_kind((uintptr_t)p, 1); }

/* ---- VMM ---- */

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  (void)alignment;
  (void)addr;
  (void)flags;
  if (ptr == NULL || size == 0) return CUDA_ERROR_INVALID_VALUE;
  *ptr = next_va; /* never dereferenced: mappings are bookkeeping only */
  next_va += (size + 0xffffff) & ~(CUdeviceptr)0xffffff;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  (void)ptr;
  (void)size;
  return CUDA_SUCCESS;
}

static void handle_drop_if_done(struct handle *h) {
  if (!h->released || h->maps > 0) return;
  munmap((void *)h->addr, h->size);
  account(KIND_DEVICE, h->device, h->size, -1);
  h->addr = 0;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags) {
  (void)prop;
  (void)flags;
  if (handle == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0 || size > FAIL_ABOVE) return CUDA_ERROR_OUT_OF_MEMORY;
  CUcontext ctx = current();
  int device = ctx ? ctx->device : 0;
  for (int i = 0; i < MAX_HANDLES; i++) {
    if (handles[i].addr) continue;
    void *p = map_pages(size);
    if (p == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    handles[i] = (struct handle){(uintptr_t)p, size, device, 0, 0};
    account(KIND_DEVICE, device, size, +1);
    *handle = (uintptr_t)p;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

static struct handle *find_handle(CUmemGenericAllocationHandle value) {
  for (int i = 0; i < MAX_HANDLES; i++)
    if (handles[i].addr && handles[i].addr == value && !handles[i].released) return &handles[i];
  return NULL;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle value) {
  struct handle *h = find_handle(value);
  if (h == NULL) return CUDA_ERROR_INVALID_VALUE;
  h->released = 1;
  handle_drop_if_done(h);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle value,
                  unsigned long long flags) {
  (void)flags;
  struct handle *h = find_handle(value);
  if (h == NULL || offset != 0 || size != h->size || ptr == 0) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < MAX_MAPS; i++) {
    if (maps[i].h) continue;
    maps[i] = (struct mapping){ptr, size, h};
    h->maps++;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

/* The range may span several mappings laid end to end. */
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  CUdeviceptr end = ptr + size;
  int found = 0;
  for (int i = 0; i < MAX_MAPS; i++) {
    if (!maps[i].h || maps[i].va < ptr || maps[i].va + maps[i].size > end) continue;
    struct handle *h = maps[i].h;
    maps[i].h = NULL;
    h->maps--;
    handle_drop_if_done(h);
    found = 1;
  }
  return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- contexts ---- */

static void push(CUcontext ctx) {
  if (depth < STACK_DEPTH) stack[depth++] = ctx;
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
  (void)flags;
  if (pctx == NULL || dev < 0 || dev >= MAX_CTXS) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < MAX_CTXS; i++) {
    if (ctxs[i].in_use) continue;
    ctxs[i] = (struct CUctx_st){1, dev, 0};
    push(&ctxs[i]);
    *pctx = &ctxs[i];
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  if (ctx == NULL || !ctx->in_use) return CUDA_ERROR_INVALID_CONTEXT;
  for (int i = 0; i < MAX_ALLOCS; i++)
    if (allocs[i].addr && allocs[i].ctx == ctx) release(&allocs[i]);
  if (current() == ctx) depth--;
  ctx->in_use = 0;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (ctx == NULL) {
    if (depth > 0) depth--;
    return CUDA_SUCCESS;
  }
  if (depth == 0) depth = 1;
  stack[depth - 1] = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx) {
  if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
  *pctx = current();
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  if (ctx == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  push(ctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
  if (depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  CUcontext c = stack[--depth];
  if (pctx) *pctx = c;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  if (pctx == NULL || dev < 0 || dev >= MAX_CTXS) return CUDA_ERROR_INVALID_VALUE;
  primary[dev] = (struct CUctx_st){1, dev, 1};
  *pctx = &primary[dev];
  return CUDA_SUCCESS;
}

unsigned long long lwfake_cuda_live_bytes(int kind) { return kind >= 0 && kind < 5 ? live[kind] : 0; }

unsigned long long lwfake_cuda_device_live_bytes(int device) {
  return device >= 0 && device < MAX_CTXS ? device_live[device] : 0;
}
