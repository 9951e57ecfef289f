#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What operator new's entry probe costs, and what the native unwinder saves
# by not placing it (decision cfi-unwinding). Times a loop of
# libstdc++'s operator new(64..319) + operator delete (malloc_free_loop
# --new), ns per pair, interleaved: bare, leakwatch, leakwatch with the
# hint probe, bare, ...
#
#   bench/new_run.sh [--reps N] [--seconds S] [BUILD_DIR]   (as root)
#
# Rows:
#   bare          no probe
#   leakwatch     `leakwatch top` (full, CFI unwinding): malloc and free are
#                 probed; libstdc++'s plain operator new is not (the unwinder
#                 finds new's caller through libstdc++'s call-frame information)
#   +new_probe    the same with new's entry probe placed as before decision cfi-unwinding
#                 (LW_BENCH_HINT_PROBES=1), one more trap per new
# shellcheck disable=SC2317
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"
# shellcheck source=bench/lib/interleave.sh
. "$here/lib/interleave.sh"

usage() { echo "usage: $0 [--reps N] [--seconds S] [BUILD_DIR]" >&2; exit 2; }
reps=5 seconds=2 build=./build
parse_options "--reps=reps --seconds=seconds" "$@"
rounds=5 cal_pairs=2000

require_root uprobes
loop_bin=$build/bench/malloc_free_loop
leakwatch_bin=$build/leakwatch
require_built "cmake --build $build --target malloc_free_loop leakwatch" "$loop_bin" "$leakwatch_bin"

make_scratch lw-new

start_target() { start_coproc_target 10 "$loop_bin" --new "$cal_pairs" "$rounds"; }

results=$tmp/results
: >"$results"
rows=(bare leakwatch +new_probe)

measure() {
  local row=$1 cal pairs ns
  start_target
  if [[ $row != bare ]]; then
    local env=()
    [[ $row == +new_probe ]] && env=(LW_BENCH_HINT_PROBES=1)
    launch_tracer tracer env "${env[@]}" "$leakwatch_bin" top -p "$target_pid" --interval 1 --json
    wait_attached "$row: leakwatch" tracer 60
  fi
  cal=$(run_batch "")
  pairs=$(batch_pairs "$seconds" "$cal" "$rounds" "$cal_pairs")
  ns=$(run_batch "$pairs")
  if [[ $row != bare ]]; then
    tracer_alive_or_die "$row: leakwatch" tracer
    stop_tracer
  fi
  stop_target
  echo "   $row: $ns ns/pair" >&2
  echo "$row $ns" >>"$results"
}

echo "host: $(host_summary); $reps repetitions of each row, ~${seconds}s each, interleaved" >&2
for ((rep = 1; rep <= reps; rep++)); do
  echo "== repetition $rep/$reps" >&2
  for row in "${rows[@]}"; do measure "$row"; done
done
echo "load after: $(load_avg)" >&2
echo
echo "operator new(64..319) + operator delete (libstdc++), ns per pair; $reps interleaved repetitions, each the median of $rounds rounds"
summarize_runs "$results" ns/pair 0 "${rows[@]}"
