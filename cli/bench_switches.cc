// SPDX-License-Identifier: Apache-2.0
// The benchmark switches (cli/bench_switches.h): the only place the
// LW_BENCH_* variables are read.
#include "cli/bench_switches.h"

#include <cerrno>
#include <cstdlib>

#include "engine/bpf_session.h"

namespace lw {

#ifdef LEAKWATCH_BENCH_SWITCHES

namespace {

bool is_set(const char* name) { return getenv(name) != nullptr; }

// 0, or a power of two from 64 to 4096; std::nullopt otherwise.
std::optional<uint32_t> parse_stack_window(const char* text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long v = strtoul(text, &end, 10);
  if (*text < '0' || *text > '9' || *end != '\0' || errno != 0 ||
      (v != 0 && (v < 64 || v > 4096 || (v & (v - 1)) != 0)))
    return std::nullopt;
  return static_cast<uint32_t>(v);
}

}  // namespace

BenchSwitches read_bench_switches() {
  BenchSwitches s;
  s.frame_cache = !is_set("LW_BENCH_NO_FRAME_CACHE");
  s.walk_reuse = !is_set("LW_BENCH_NO_WALK_REUSE");
  s.python_code_memo = !is_set("LW_BENCH_NO_PY_CODE_MEMO");
  s.hint_probes = is_set("LW_BENCH_HINT_PROBES");
  s.uprobe_sessions = !is_set("LW_BENCH_NO_UPROBE_SESSIONS");
  if (const char* w = getenv("LW_BENCH_STACK_WINDOW")) {
    s.stack_window = parse_stack_window(w);
    if (!s.stack_window)
      s.error = std::string("LW_BENCH_STACK_WINDOW=") + w + ": 0, or a power of two from 64 to 4096";
  }
  // Set and not empty: "1..." preallocates, anything else does not.
  if (const char* p = getenv("LW_BENCH_LIVE_PREALLOC"); p && *p) s.live_prealloc = *p == '1';
  return s;
}

#else

BenchSwitches read_bench_switches() { return {}; }

#endif

void apply_bench_switches(const BenchSwitches& bench, BpfOptions& bpf) {
  if (!bench.frame_cache) bpf.frame_cache = false;
  if (!bench.walk_reuse) bpf.walk_reuse = false;
  if (!bench.python_code_memo) bpf.python_code_memo = false;
  if (bench.stack_window) bpf.stack_window = *bench.stack_window;
  if (bench.live_prealloc) bpf.live_prealloc = *bench.live_prealloc;
  if (!bench.uprobe_sessions) bpf.uprobe_sessions = false;
}

}  // namespace lw
