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
# shellcheck source=bench/lib/interleave.sh
. "$here/lib/interleave.sh"

usage() { echo "usage: $0 [--reps N] [--seconds S] [--depths \"8 32 64\"] [BUILD_DIR]" >&2; exit 2; }
reps=3 seconds=2 depths="8 32 64" build=./build
while (($#)); do
  case $1 in
    --reps) reps=${2:?}; shift ;;
    --seconds) seconds=${2:?}; shift ;;
    --depths) depths=${2:?}; shift ;;
    -h|--help) usage ;;
    -*) usage ;;
    *) build=$1 ;;
  esac
  shift
done
rounds=5 cal_pairs=2000

die() { echo "unwind_depth.sh: $*" >&2; exit 1; }
((EUID == 0)) || die "must run as root (uprobes, bpf stats)"
loop_bin=$build/bench/malloc_free_loop
leakwatch_bin=$build/leakwatch
for bin in "$loop_bin" "$leakwatch_bin"; do
  [[ -x $bin ]] || die "$bin not found; build it: cmake --build $build --target malloc_free_loop leakwatch"
done
command -v bpftool >/dev/null || die "bpftool not found"

tmp=$(mktemp -d /tmp/lw-depth.XXXXXX)
target_pid='' tracer_pid=''
stats_was=$(sysctl -n kernel.bpf_stats_enabled)
cleanup() {
  sysctl -qw kernel.bpf_stats_enabled="$stats_was" || true
  [[ -n $tracer_pid ]] && kill -KILL "$tracer_pid" 2>/dev/null
  [[ -n $target_pid ]] && kill -KILL "$target_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
sysctl -qw kernel.bpf_stats_enabled=1

depth=0
start_target() {
  coproc TARGET { exec "$loop_bin" --depth "$depth" "$cal_pairs" "$rounds" 2>"$tmp/target.err"; }
  local word
  read -r -t 10 -u "${TARGET[0]}" word target_pid || die "target did not start: $(cat "$tmp/target.err")"
  [[ $word == ready ]] || die "target said '$word', expected 'ready'"
}

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
  rm -f "$tmp/tracer.out"
  local mode=cfi env=()
  [[ $row == fp ]] && mode=frame_pointers
  [[ $row == cfi-cold ]] && env=(LW_BENCH_NO_FRAME_CACHE=1)
  env "${env[@]}" "$leakwatch_bin" top -p "$target_pid" --interval 60 --json --unwind "$mode" --top 1 \
    </dev/null >"$tmp/tracer.out" 2>"$tmp/tracer.err" &
  tracer_pid=$!
  local deadline=$((SECONDS + 60))
  until [[ -s $tmp/tracer.out ]]; do
    kill -0 "$tracer_pid" 2>/dev/null || die "$row: leakwatch exited: $(tail -n1 "$tmp/tracer.err")"
    ((SECONDS < deadline)) || die "$row: not attached after 60 s"
    sleep 0.1
  done
  cal=$(run_batch "")
  pairs=$(awk -v s="$seconds" -v ns="$cal" -v r="$rounds" -v min="$cal_pairs" \
    'BEGIN { p = int(s * 1e9 / (ns * r)); print (p > min ? p : min) }')
  before=$(prog_stats)
  ns=$(run_batch "$pairs")
  after=$(prog_stats)
  kill -0 "$tracer_pid" 2>/dev/null || die "$row: leakwatch exited during the run"
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

echo "host: $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $reps repetitions, ~${seconds}s each, interleaved" >&2
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
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo
echo "malloc+free pairs N frames deep, ns per pair (whole cost seen by the target); first row of each depth is the frame-pointer walk"
summarize_runs "$results" ns/pair 0 "${labels[@]}"
echo
echo "BPF run time of lw_alloc_return per call, ns (capture, hash, record)"
summarize_runs "$results.bpf" ns/call 0 "${labels[@]}"
