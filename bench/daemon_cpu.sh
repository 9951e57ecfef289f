#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The daemon's own CPU while it applies a steady event stream (issue 6,
# benchmark 4: "CPU of the daemon at 100k events/s"), measured on the whole
# `leakwatch run` process, not derived from the consumer benchmark: ring
# buffer reads, tracking, analysis, publishing and symbolization included.
#
# One malloc_free_loop target is traced in mode full by a daemon (governor
# off, so nothing is detached); the loop's malloc+free pairs make two events
# each. Per repetition the script sends one batch sized to last about S
# seconds, reads the daemon's CPU time (/proc/PID/stat utime+stime) before
# and after, and prints events per second (from the exact pair count and the
# wall time), the daemon's CPU as a percentage of one core, and its CPU
# microseconds per 1,000 events. The events the kernel delivered are checked
# against the pairs sent (kernel counter from /api/v1/status), so a run that
# lost events is reported, not averaged in.
#
#   bench/daemon_cpu.sh [--reps N] [--seconds S] [BUILD_DIR]   (as root)
# shellcheck disable=SC2317
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"

usage() { echo "usage: $0 [--reps N] [--seconds S] [BUILD_DIR]" >&2; exit 2; }
reps=5 seconds=10 build=./build
parse_options "--reps=reps --seconds=seconds" "$@"
rounds=1 cal_pairs=20000

require_root BPF
loop_bin=$build/bench/malloc_free_loop
leakwatch_bin=$build/leakwatch
require_built scripts/build.sh "$loop_bin" "$leakwatch_bin"
command -v curl >/dev/null || die "curl not found (apt-get install curl)"

make_scratch lw-daemon-cpu

port=$((20000 + $$ % 20000))
cat >"$tmp/daemon.yaml" <<EOF
listen: "127.0.0.1:$port"
targets:
  - name: bench
    match: {comm: "^malloc_free_loo"}
    mode: full
governor:
  max_hits_per_second: 0
EOF

delivered() {
  curl -sf "http://127.0.0.1:$port/api/v1/status" |
    grep -o '"events_delivered":[0-9]*' | head -n1 | cut -d: -f2
}

start_coproc_target 10 "$loop_bin" "$cal_pairs" "$rounds"
launch_tracer daemon "$leakwatch_bin" run --config "$tmp/daemon.yaml"
# Attached, and serving the status API.
daemon_ready() { grep -qs "attached pid $target_pid " "$tmp/daemon.err" && [[ -n $(delivered || true) ]]; }
rc=0
await_tracer 60 daemon_ready || rc=$?
((rc != 1)) || die "daemon exited: $(tail -n1 "$tmp/daemon.err")"
((rc != 2)) || die "daemon did not attach within 60 s"
tick=$(getconf CLK_TCK)

echo "host: $(host_summary); $reps repetitions of ~${seconds}s" >&2
cal=$(run_batch "")
pairs=$(batch_pairs "$seconds" "$cal" 1 1000)
results=$tmp/results
: >"$results"
for ((rep = 1; rep <= reps; rep++)); do
  sleep 1  # let the daemon drain and publish what the previous batch left
  ev0=$(delivered) cpu0=$(cpu_ticks "$tracer_pid") t0=$(date +%s.%N)
  ns=$(run_batch "$pairs")
  t1=$(date +%s.%N) cpu1=$(cpu_ticks "$tracer_pid")
  sleep 0.5
  ev1=$(delivered)
  events=$((2 * pairs))
  got=$((ev1 - ev0))
  ((got >= events)) || die "repetition $rep: the kernel delivered $got events for $events expected"
  read -r rate pct per_k < <(awk -v e="$events" -v t0="$t0" -v t1="$t1" -v c0="$cpu0" -v c1="$cpu1" -v hz="$tick" \
    'BEGIN { w = t1 - t0; cpu = (c1 - c0) / hz; printf "%.0f %.2f %.2f\n", e / w, 100 * cpu / w, 1e6 * cpu / e * 1000 }')
  echo "   repetition $rep: $pairs pairs at $ns ns/pair, $rate events/s, daemon CPU $pct % of a core, $per_k us per 1k events" >&2
  printf 'rate %s\ncpu%% %s\nus/1k %s\n' "$rate" "$pct" "$per_k" >>"$results"
done
kill -0 "$tracer_pid" 2>/dev/null || die "daemon exited during the run"
echo "load after: $(load_avg)" >&2
echo
echo "leakwatch run (mode full) applying a malloc/free loop's events; $reps repetitions of ~${seconds}s"
awk '{ n[$1]++; s[$1] += $2; if (!($1 in lo) || $2 < lo[$1]) lo[$1] = $2; if (!($1 in hi) || $2 > hi[$1]) hi[$1] = $2 }
  END {
    printf "%-32s %12s %12s %12s\n", "figure", "mean", "min", "max"
    printf "%-32s %12.0f %12.0f %12.0f\n", "events/s", s["rate"] / n["rate"], lo["rate"], hi["rate"]
    printf "%-32s %12.2f %12.2f %12.2f\n", "daemon CPU, % of one core", s["cpu%"] / n["cpu%"], lo["cpu%"], hi["cpu%"]
    printf "%-32s %12.2f %12.2f %12.2f\n", "daemon CPU us per 1k events", s["us/1k"] / n["us/1k"], lo["us/1k"], hi["us/1k"]
  }' "$results"
