#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Detection latency in `auto` mode: minutes from the start of a 1 MiB/min
# leak (tests/targets/steady_leaker) until leakwatch flags it, with the
# shipped defaults for escalation and analysis (docs/config.md). Prints when
# the process escalated to full and when suspected_leak first read 1 for
# kind mmap (what light mode sees: glibc's brk growth) and kind heap (after
# escalation, with the leaking call site).
#
#   bench/detect_latency.sh [BUILD_DIR] [TIMEOUT_MINUTES]     (root)
set -euo pipefail
build=${1:-./build}
timeout_min=${2:-15}
((EUID == 0)) || { echo "must run as root" >&2; exit 1; }
tmp=$(mktemp -d /tmp/lw-detect.XXXXXX)
daemon_pid= target_pid=
cleanup() {
  [[ -n $daemon_pid ]] && kill -TERM "$daemon_pid" 2>/dev/null
  [[ -n $target_pid ]] && kill -KILL "$target_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
cp "$build/tests/targets/steady_leaker" "$tmp/lwdetect$$"
comm=$(basename "$tmp/lwdetect$$" | cut -c1-15)
port=$((20000 + RANDOM % 20000))
cat >"$tmp/cfg.yaml" <<CFG
listen: "127.0.0.1:$port"
targets:
  - name: detect
    match: {comm: "^$comm\$"}
    mode: auto
CFG
"$build/leakwatch" run --config "$tmp/cfg.yaml" 2>"$tmp/daemon.err" &
daemon_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
coproc T { exec "$tmp/lwdetect$$" 2>"$tmp/target.err"; }
target_pid=$T_PID
read -r -t 10 -u "${T[0]}" word pid
[[ $word == ready ]] || { echo "target did not start" >&2; exit 1; }
sleep 2   # attached at discovery (exec event / reconcile)
echo go >&"${T[1]}"
start=$(date +%s.%N)
esc= mmap_at= heap_at=
deadline=$(( $(date +%s) + timeout_min * 60 ))
while (( $(date +%s) < deadline )); do
  m=$(curl -sf "http://127.0.0.1:$port/metrics" || true)
  now=$(date +%s.%N)
  el=$(awk -v a="$start" -v b="$now" 'BEGIN { printf "%.2f", (b - a) / 60 }')
  if [[ -z $esc ]] && grep -q "leakwatch_process_mode{.*pid=\"$pid\".*mode=\"full\".* 1$" <<<"$m"; then
    esc=$el; echo "escalated to full after $esc min"; fi
  if [[ -z $mmap_at ]] && grep -q "leakwatch_process_suspected_leak{.*pid=\"$pid\".*kind=\"mmap\".* 1$" <<<"$m"; then
    mmap_at=$el; echo "suspected_leak kind=mmap after $mmap_at min"; fi
  if [[ -z $heap_at ]] && grep -q "leakwatch_process_suspected_leak{.*pid=\"$pid\".*kind=\"heap\".* 1$" <<<"$m"; then
    heap_at=$el; echo "suspected_leak kind=heap after $heap_at min"; fi
  [[ -n $esc && -n $mmap_at && -n $heap_at ]] && break
  sleep 5
done
echo "1 MiB/min leak, auto mode, defaults: escalation ${esc:-none} min; suspected_leak mmap ${mmap_at:-none} min, heap ${heap_at:-none} min (timeout ${timeout_min} min)"
