// SPDX-License-Identifier: Apache-2.0
// The clocks leakwatch measures with. Thread-safety: free functions.
#pragma once

#include <cstdint>

namespace lw {

// CLOCK_MONOTONIC now, in ns: the clock bpf_ktime_get_ns() uses.
uint64_t monotonic_ns();
// CPU time of the calling thread, user and system, in ns: what a bound on a
// thread's own cost measures (a preempted thread's wall time is not its cost).
uint64_t thread_cpu_ns();

}  // namespace lw
