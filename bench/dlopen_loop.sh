#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The lifecycle budget's figure (decision lifecycle-budget): the daemon
# under a tenth of a core while a target loops dlopen/dlclose, and what the
# tracing costs the loop. Moved here from the integration test, whose CPU
# bound read 4-7% on the development VMs and 11-13% on one CI machine
# (2026-11-29): a timed figure belongs to a benchmark with its baseline.
#
# Per repetition: tests/targets/dlopener --loop S bare (the baseline,
# pairs/s), then the same under a daemon (mode full, governor off,
# limits.max_rescans_per_second 5, as the test). Prints pairs/s of each,
# their ratio, the daemon's CPU over the loop as a percentage of one core,
# and the daemon's lifecycle counters for the process.
#
#   bench/dlopen_loop.sh [--reps N] [--seconds S] [BUILD_DIR]   (as root)
# shellcheck disable=SC2317
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"

usage() { echo "usage: $0 [--reps N] [--seconds S] [BUILD_DIR]" >&2; exit 2; }
reps=3 seconds=15 build=./build
parse_options "--reps=reps --seconds=seconds" "$@"

require_root BPF
dlopener=$build/tests/targets/dlopener
leakwatch_bin=$build/leakwatch
require_built scripts/build.sh "$dlopener" "$leakwatch_bin"
command -v curl >/dev/null || die "curl not found (apt-get install curl)"
make_scratch lw-dlopen-loop

# A private copy with its libraries, so that the selector matches it alone.
cp "$dlopener" "$build/tests/targets/libdltarget.so" "$build/tests/targets/libdltarget_cpp.so" "$tmp/"
port=$((20000 + $$ % 20000))
cat >"$tmp/daemon.yaml" <<EOF
listen: "127.0.0.1:$port"
limits:
  max_rescans_per_second: 5
governor:
  max_hits_per_second: 0
targets:
  - name: dl
    match: {comm: "^dlopener$"}
    mode: full
EOF

# loop_once BINARY TRACED: one loop of $seconds by BINARY (a copy of
# dlopener); prints "PAIRS DAEMON_TICKS" (the daemon's CPU over the loop).
# TRACED 1: waits for the daemon's attach first, and keeps its lifecycle
# counters in $tmp/lifecycle.
loop_once() {
  local bin=$1 traced=$2 pid pairs c0 c1 i
  start_fifo_target loop "$bin" --loop "$seconds"
  pid=$(ready_pid loop 100) || die "$bin did not start: $(cat "$tmp/loop.err")"
  if ((traced)); then
    await_tracer 60 grep -qs "attached pid $pid " "$tmp/daemon.err" || die "the daemon did not attach pid $pid"
  fi
  c0=$(cpu_ticks "$tracer_pid")
  echo go >&"$fd_loop"
  for ((i = 0; i < 10 * (seconds + 60); i++)); do
    grep -q '^looped ' "$tmp/loop.out" && break
    sleep 0.1
  done
  c1=$(cpu_ticks "$tracer_pid")
  pairs=$(awk '/^looped / { print $2 }' "$tmp/loop.out")
  [[ -n $pairs ]] || die "$bin did not finish its loop: $(cat "$tmp/loop.err")"
  for ((i = 0; i < 600; i++)); do grep -q '^done ' "$tmp/loop.out" && break; sleep 0.1; done
  if ((traced)); then
    curl -sf "http://127.0.0.1:$port/api/v1/processes" |
      python3 -c 'import json, sys
for p in json.load(sys.stdin).get("processes", []):
    if p.get("pid") == int(sys.argv[1]): print("lifecycle", json.dumps(p.get("lifecycle"), separators=(",", ":")))' "$pid" >"$tmp/lifecycle" || :
  fi
  echo exit >&"$fd_loop"
  exec {fd_loop}>&-
  wait "$fifo_target_pid" 2>/dev/null || true
  echo "$pairs $((c1 - c0))"
}

echo "host: $(host_summary); $reps repetitions of ${seconds} s loops" >&2
tick=$(getconf CLK_TCK)
# The baseline: a copy the selector does not match, beside the same daemon.
cp "$tmp/dlopener" "$tmp/bareloop"
launch_tracer daemon "$leakwatch_bin" run --config "$tmp/daemon.yaml"
await_tracer 60 grep -qs "listening on" "$tmp/daemon.err" || die "the daemon did not start: $(tail -n 3 "$tmp/daemon.err")"
for ((rep = 1; rep <= reps; rep++)); do
  read -r bare bare_ticks < <(loop_once "$tmp/bareloop" 0)
  read -r traced ticks < <(loop_once "$tmp/dlopener" 1)
  tracer_alive_or_die "leakwatch run" daemon
  awk -v b="$bare" -v t="$traced" -v s="$seconds" -v k="$ticks" -v bk="$bare_ticks" -v hz="$tick" \
    -v lc="$(cat "$tmp/lifecycle" 2>/dev/null)" -v r="$rep" 'BEGIN {
      printf "rep %d: bare %.0f pairs/s, traced %.0f pairs/s (%.2fx bare); daemon %.1f%% of a core traced, %.1f%% beside the bare loop; %s\n",
        r, b / s, t / s, t / b, 100 * k / hz / s, 100 * bk / hz / s, lc }'
done
stop_tracer
