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
# shellcheck source=bench/lib/interleave.sh
. "$here/lib/interleave.sh"

usage() { echo "usage: $0 [--reps N] [--seconds S] [BUILD_DIR]" >&2; exit 2; }
reps=5 seconds=2 build=./build
while (($#)); do
  case $1 in
    --reps) reps=${2:?}; shift ;;
    --seconds) seconds=${2:?}; shift ;;
    -h|--help) usage ;;
    -*) usage ;;
    *) build=$1 ;;
  esac
  shift
done
rounds=5 cal_pairs=2000

die() { echo "new_run.sh: $*" >&2; exit 1; }
((EUID == 0)) || die "must run as root (uprobes)"
loop_bin=$build/bench/malloc_free_loop
leakwatch_bin=$build/leakwatch
for bin in "$loop_bin" "$leakwatch_bin"; do
  [[ -x $bin ]] || die "$bin not found; build it: cmake --build $build --target malloc_free_loop leakwatch"
done

tmp=$(mktemp -d /tmp/lw-new.XXXXXX)
target_pid='' tracer_pid=''
cleanup() {
  [[ -n $tracer_pid ]] && kill -KILL "$tracer_pid" 2>/dev/null
  [[ -n $target_pid ]] && kill -KILL "$target_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_target() {
  coproc TARGET { exec "$loop_bin" --new "$cal_pairs" "$rounds" 2>"$tmp/target.err"; }
  local word
  read -r -t 10 -u "${TARGET[0]}" word target_pid || die "target did not start: $(cat "$tmp/target.err")"
  [[ $word == ready ]] || die "target said '$word', expected 'ready'"
}

results=$tmp/results
: >"$results"
rows=(bare leakwatch +new_probe)

measure() {
  local row=$1 cal pairs ns
  start_target
  if [[ $row != bare ]]; then
    rm -f "$tmp/tracer.out"
    if [[ $row == +new_probe ]]; then
      LW_BENCH_HINT_PROBES=1 "$leakwatch_bin" top -p "$target_pid" --interval 1 --json </dev/null \
        >"$tmp/tracer.out" 2>"$tmp/tracer.err" &
    else
      "$leakwatch_bin" top -p "$target_pid" --interval 1 --json </dev/null >"$tmp/tracer.out" 2>"$tmp/tracer.err" &
    fi
    tracer_pid=$!
    local deadline=$((SECONDS + 60))
    until [[ -s $tmp/tracer.out ]]; do
      kill -0 "$tracer_pid" 2>/dev/null || die "$row: leakwatch exited: $(tail -n1 "$tmp/tracer.err")"
      ((SECONDS < deadline)) || die "$row: not attached after 60 s"
      sleep 0.1
    done
  fi
  cal=$(run_batch "")
  pairs=$(awk -v s="$seconds" -v ns="$cal" -v r="$rounds" -v min="$cal_pairs" \
    'BEGIN { p = int(s * 1e9 / (ns * r)); print (p > min ? p : min) }')
  ns=$(run_batch "$pairs")
  if [[ $row != bare ]]; then
    kill -0 "$tracer_pid" 2>/dev/null || die "$row: leakwatch exited during the run"
    stop_tracer
  fi
  stop_target
  echo "   $row: $ns ns/pair" >&2
  echo "$row $ns" >>"$results"
}

echo "host: $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $reps repetitions of each row, ~${seconds}s each, interleaved" >&2
for ((rep = 1; rep <= reps; rep++)); do
  echo "== repetition $rep/$reps" >&2
  for row in "${rows[@]}"; do measure "$row"; done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo
echo "operator new(64..319) + operator delete (libstdc++), ns per pair; $reps interleaved repetitions, each the median of $rounds rounds"
summarize_runs "$results" ns/pair 0 "${rows[@]}"
