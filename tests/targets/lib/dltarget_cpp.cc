// SPDX-License-Identifier: Apache-2.0
// A C++ library that dlopener (a C program, without libstdc++) loads after
// leakwatch attached. Loading it maps libstdc++ into the process for the
// first time, so operator new is only probed if the tracer attaches to
// libraries as they appear. Without that probe the block is still seen at
// malloc, but attributed to operator new (libstdc++ keeps no frame pointer)
// instead of dltarget_cpp_leak_site.
#include <new>

#include "../target_protocol.h"

namespace {

void *volatile keep[3];

}  // namespace

extern "C" {

LW_SITE void *dltarget_cpp_leak_site(unsigned long size) { return ::operator new(size, std::nothrow); }

// Leaks 3 blocks; returns the bytes leaked, or 0 if operator new failed.
unsigned long long dltarget_cpp_leak(void) {
  for (int i = 0; i < 3; i++) {
    keep[i] = dltarget_cpp_leak_site(2203);
    if (keep[i] == nullptr) return 0;
  }
  return 3 * 2203;
}

}  // extern "C"
