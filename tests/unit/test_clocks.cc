// SPDX-License-Identifier: Apache-2.0
// The clocks of core/analysis/analyzer.h: thread_cpu_ns() is what bounds the
// consumer's reads of the live map (Tracer::allow_kernel_read_after), so
// time the thread spends preempted or asleep must not count in it.
#include <gtest/gtest.h>

#include <time.h>

#include <cstdint>

#include "core/platform/clock.h"

namespace lw {
namespace {

TEST(Clocks, ThreadCpuCountsWorkNotSleep) {
  const uint64_t cpu0 = thread_cpu_ns();
  const uint64_t wall0 = monotonic_ns();
  const struct timespec nap = {0, 200 * 1000 * 1000};
  nanosleep(&nap, nullptr);
  const uint64_t slept_cpu = thread_cpu_ns() - cpu0;
  EXPECT_GE(monotonic_ns() - wall0, 200u * 1000 * 1000);
  EXPECT_LT(slept_cpu, 50u * 1000 * 1000) << "200 ms asleep counted as CPU time";

  // 100 ms of CPU time spent: the clock advances by it.
  const uint64_t busy0 = thread_cpu_ns();
  volatile uint64_t sink = 0;
  while (thread_cpu_ns() - busy0 < 100u * 1000 * 1000) sink = sink + 1;
  const uint64_t busy = thread_cpu_ns() - busy0;
  EXPECT_GE(busy, 100u * 1000 * 1000);
  EXPECT_LE(busy, monotonic_ns() - wall0) << "CPU time of one thread beyond wall time";
}

}  // namespace
}  // namespace lw
