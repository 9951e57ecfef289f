/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace lw {

struct BpfOptions;

// Benchmark switches (docs/cli.md, "Benchmark switches"): LW_BENCH_*
// environment variables that turn one of the engine's optimisations off,
// or a measuring aid on, for bench/ and the integration tests. They are
// read here, in one place, and reach the engine through its options
// structs (BpfOptions, AttachOptions, DaemonOptions): the engine reads no
// environment. Compiled in only with -DLEAKWATCH_BENCH_SWITCHES=ON (the
// default of any build with tests or benchmarks); without it
// read_bench_switches() reads nothing and returns the defaults.
struct BenchSwitches {
  bool frame_cache = true;               // LW_BENCH_NO_FRAME_CACHE: every frame unwound as if new
  bool walk_reuse = true;                // LW_BENCH_NO_WALK_REUSE (decision walk-reuse)
  bool python_code_memo = true;          // LW_BENCH_NO_PY_CODE_MEMO (decision code-object-memo)
  std::optional<uint32_t> stack_window;  // LW_BENCH_STACK_WINDOW (decision user-read-window): 0 = off
  // LW_BENCH_LIVE_PREALLOC=1|0: the live map preallocated or not, whatever
  // the sizing chose (decision live-map-sizing); `top` and `run`.
  std::optional<bool> live_prealloc;
  bool uprobe_sessions = true;  // LW_BENCH_NO_UPROBE_SESSIONS: entry + return probes instead; `top` and `run`
  bool hint_probes = false;  // LW_BENCH_HINT_PROBES: also the probes that only hint the unwinder
  // Non-empty when a switch holds a value it cannot take: the message of a
  // usage error (exit 2). `top` reports it; `run`, which takes only
  // LW_BENCH_LIVE_PREALLOC, does not.
  std::string error;
};

// The switches set in the environment.
BenchSwitches read_bench_switches();

// The switches that are BpfOptions fields, applied to `bpf`.
void apply_bench_switches(const BenchSwitches& bench, BpfOptions& bpf);

}  // namespace lw
