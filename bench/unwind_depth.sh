#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The native unwinder's cost per stack, by depth
# (decision cfi-unwinding), against the kernel's frame-pointer walk. The target
# makes each malloc+free pair N frames deep through N distinct functions
# (malloc_free_loop --depth N, built with frame pointers so that both ways find
# the whole stack), and `leakwatch top` traces it three ways:
#   fp         --unwind frame_pointers (the kernel's bpf_get_stack walk)
#   cfi        --unwind cfi, the per-CPU frame cache on (the steady state:
#              the same call sites again and again)
#   cfi-cold   --unwind cfi with the frame cache off: every frame looked up
#              as if never seen (mapping, table search)
# Each row gives ns per malloc+free pair (the whole cost the target sees)
# and the BPF run time of lw_alloc_return per call (kernel.bpf_stats_enabled:
# the stack capture, hashing and the record), medians over interleaved
# repetitions, and checks the stacks found are complete (the depth reached).
#
#   bench/unwind_depth.sh [--reps N] [--seconds S] [--depths "8 32 64"] [BUILD_DIR]   (root)
# shellcheck disable=SC2317
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"
# shellcheck source=bench/lib/interleave.sh
. "$here/lib/interleave.sh"

usage() { echo "usage: $0 [--reps N] [--seconds S] [--depths \"8 32 64\"] [BUILD_DIR]" >&2; exit 2; }
reps=3 seconds=2 depths="8 32 64" build=./build
parse_options "--reps=reps --seconds=seconds --depths=depths" "$@"
rounds=5 cal_pairs=2000

require_root "uprobes, bpf stats"
loop_bin=$build/bench/malloc_free_loop
leakwatch_bin=$build/leakwatch
require_built "cmake --build $build --target malloc_free_loop leakwatch" "$loop_bin" "$leakwatch_bin"
command -v bpftool >/dev/null || die "bpftool not found"

make_scratch lw-depth
stats_was=$(sysctl -n kernel.bpf_stats_enabled)
on_exit() { sysctl -qw kernel.bpf_stats_enabled="$stats_was" || true; }
sysctl -qw kernel.bpf_stats_enabled=1

depth=0
start_target() { start_coproc_target 10 "$loop_bin" --depth "$depth" "$cal_pairs" "$rounds"; }

# run_cnt and run_time_ns of this tracer's lw_alloc_return (the program
# whose fd the tracer holds).
prog_stats() {
  local id
  for fd in /proc/"$tracer_pid"/fdinfo/*; do
    id=$(awk '/^prog_id:/ { print $2 }' "$fd" 2>/dev/null) || continue
    [[ -n $id ]] || continue
    bpftool prog show id "$id" -j 2>/dev/null |
      python3 -c 'import json,sys; p=json.load(sys.stdin); print(p.get("run_cnt",0), p.get("run_time_ns",0)) if p.get("name")=="lw_alloc_return" else None'
  done | awk 'NR == 1'
}

results=$tmp/results
: >"$results"
rows=(fp cfi cfi-cold)

measure() {
  local row=$1 cal pairs ns before after
  start_target
  local mode=cfi env=()
  [[ $row == fp ]] && mode=frame_pointers
  [[ $row == cfi-cold ]] && env=(LW_BENCH_NO_FRAME_CACHE=1)
  launch_tracer tracer env "${env[@]}" "$leakwatch_bin" top -p "$target_pid" --interval 60 --json \
    --unwind "$mode" --top 1
  wait_attached "$row: leakwatch" tracer 60
  cal=$(run_batch "")
  pairs=$(batch_pairs "$seconds" "$cal" "$rounds" "$cal_pairs")
  before=$(prog_stats)
  ns=$(run_batch "$pairs")
  after=$(prog_stats)
  tracer_alive_or_die "$row: leakwatch" tracer
  stop_tracer
  stop_target
  local per_call frames
  per_call=$(awk -v b="$before" -v a="$after" 'BEGIN { split(b, x, " "); split(a, y, " ");
    n = y[1] - x[1]; print (n > 0 ? (y[2] - x[2]) / n : 0) }')
  # The deepest stack in the last snapshot: depth N plus the loop, main and
  # libc's start-up frames when the stack is complete.
  frames=$(tail -n1 "$tmp/tracer.out" | python3 -c 'import json,sys
s=json.load(sys.stdin); print(max([len(x["frames"]) for x in s["sites"]] or [0]), max([0]+[1 for x in s["sites"] if x.get("truncated")]))')
  echo "   depth $depth $row: $ns ns/pair, lw_alloc_return $per_call ns/call, frames/truncated $frames" >&2
  echo "d$depth-$row $ns" >>"$results"
  echo "d$depth-$row $per_call" >>"$results.bpf"
}

echo "host: $(host_summary); $reps repetitions, ~${seconds}s each, interleaved" >&2
labels=()
for depth in $depths; do
  for row in "${rows[@]}"; do labels+=("d$depth-$row"); done
done
for ((rep = 1; rep <= reps; rep++)); do
  echo "== repetition $rep/$reps" >&2
  for depth in $depths; do
    for row in "${rows[@]}"; do measure "$row"; done
  done
done
echo "load after: $(load_avg)" >&2
echo
echo "malloc+free pairs N frames deep, ns per pair (whole cost seen by the target); first row of each depth is the frame-pointer walk"
summarize_runs "$results" ns/pair 0 "${labels[@]}"
echo
echo "BPF run time of lw_alloc_return per call, ns (capture, hash, record)"
summarize_runs "$results.bpf" ns/call 0 "${labels[@]}"
