// SPDX-License-Identifier: Apache-2.0
// Tracer internals shared by its source files (tracer.cc,
// tracer_budget.cc): the kernel target flags and sampling mean of a
// traced process. Not part of the engine's interface.
#pragma once

#include <chrono>
#include <cstdint>

#include "engine/tracer.h"

namespace lw::tracer_internal {

inline uint32_t target_flags(const AttachOptions& o) {
  uint32_t flags = 0;
  if (o.heap) flags |= LW_TARGET_HEAP;
  if (o.mmap) flags |= LW_TARGET_MMAP;
  if (o.follow_forks) flags |= LW_TARGET_FOLLOW_FORKS;
  if (o.cuda) flags |= LW_TARGET_CUDA;
  return flags;
}

// What the kernel side may account for `p` now: nothing but fork reports
// while the kill switch holds it.
inline uint32_t current_flags(const TracedProcess& p) {
  uint32_t flags = target_flags(p.options);
  if (p.heap_shed) flags &= ~static_cast<uint32_t>(LW_TARGET_HEAP);
  if (p.syscall_sites) flags |= LW_TARGET_SYSCALL_SITES;
  if (p.syscall_sites && p.shared_sites) flags |= LW_TARGET_SHARED_SITES;
  return p.accounting ? flags : flags & LW_TARGET_FOLLOW_FORKS;
}

// The heap's sampling mean in the kernel: automatic sampling's when it
// switched the process (decision auto-sampling), else the configured one.
inline uint64_t heap_mean(const TracedProcess& p) {
  return p.auto_sample_mean > p.options.sample_mean_bytes ? p.auto_sample_mean : p.options.sample_mean_bytes;
}

inline double unix_seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace lw::tracer_internal
