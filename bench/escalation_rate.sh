#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Escalations per hour of `auto` processes that do not leak, with the
# shipped escalation and analysis defaults (docs/config.md), and whether any
# of them is ever flagged (suspected_leak, any kind). One daemon watches,
# for MINUTES:
#   - cache:  tests/targets/plateau_cache (50 MiB in 60 s, then its entries
#             turn over)
#   - frozen: plateau_cache --no-churn (50 MiB in 60 s, then nothing)
#   - redis:  Debian's redis-server under redis-benchmark SET/GET in a loop
#             (100,000 keys of 64 bytes, 50 clients, as bench/redis_run.sh;
#             passes of 100,000 requests with 2 s between them)
#   - torch:  /usr/bin/python3 bench/torch_infer.py, inference for MINUTES
# Escalations are counted from the daemon's log ("escalation: pid N ...
# light -> full"; leakwatch_process_mode is no count: it reads light while
# the governor has a full process's probes suspended, as it does redis' and
# torch's). With the defaults a process is full for 600 s and then cools
# down for 600 s, so at most 3 an hour, and the first escalation of a
# process started with the daemon is its warm-up: the figures are given
# with and without escalations in the first WARMUP minutes (default 2).
# LW_KEEP_LOG=FILE keeps a copy of the daemon's log.
#
#   bench/escalation_rate.sh [--minutes M] [--warmup-minutes W] [--skip redis,torch] [BUILD_DIR]    (root)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"
minutes=30 skip='' build='' warmup=2
while (($#)); do
  case $1 in
    --minutes) minutes=$2; shift 2 ;;
    --minutes=*) minutes=${1#*=}; shift ;;
    --skip) skip=$2; shift 2 ;;
    --skip=*) skip=${1#*=}; shift ;;
    --warmup-minutes) warmup=$2; shift 2 ;;
    --warmup-minutes=*) warmup=${1#*=}; shift ;;
    -h|--help) sed -n 2,23p "$0"; exit 0 ;;
    *) build=$1; shift ;;
  esac
done
build=${build:-./build}
require_root
tmp=$(mktemp -d /tmp/lw-escrate.XXXXXX)
pids_to_kill=()
cleanup() {
  for p in "${pids_to_kill[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${pids_to_kill[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
skipped() { [[ ,$skip, == *,$1,* ]]; }

cp "$build/tests/targets/plateau_cache" "$tmp/lwescplat$$"
declare -A pid_of
fd_cache='' fd_frozen='' fd_torch=''  # set by start_target
start_target() {  # NAME COMMAND...: started on a fifo held open here (fd_NAME); "ready PID" expected
  local name=$1
  start_fifo_target "$@"
  pids_to_kill+=("$fifo_target_pid")
  pid_of[$name]=$(ready_pid "$name" 300) ||
    { echo "$name did not start: $(tail -2 "$tmp/$name.err")" >&2; exit 1; }
}
start_target cache "$tmp/lwescplat$$"
start_target frozen "$tmp/lwescplat$$" --no-churn
if ! skipped torch; then
  start_target torch /usr/bin/python3 "$here/torch_infer.py"
fi
if ! skipped redis; then
  # Debian's redis-server is a link to redis-check-rdb; comm is redis-server.
  sock=$tmp/redis.sock
  redis-server --port 0 --unixsocket "$sock" --save "" --appendonly no >"$tmp/redis.log" 2>&1 &
  pid_of[redis]=$!
  pids_to_kill+=($!)
  for _ in $(seq 100); do redis-cli -s "$sock" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi
# The daemon watches these pids only: other python3 or redis-server
# processes on the machine are none of its business.
port=$((20000 + RANDOM % 20000))
{
  echo "listen: \"127.0.0.1:$port\""
  echo "targets:"
  for name in "${!pid_of[@]}"; do
    printf '  - name: %s\n    match: {pids: [%s]}\n    mode: auto\n' "$name" "${pid_of[$name]}"
  done
} >"$tmp/cfg.yaml"
"$build/leakwatch" run --config "$tmp/cfg.yaml" 2>"$tmp/daemon.err" &
pids_to_kill+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
sleep 3   # attached at discovery
echo go >&"$fd_cache"; echo go >&"$fd_frozen"
if ! skipped torch; then echo "$((minutes * 60))" >&"$fd_torch"; fi
if ! skipped redis; then
  ( while :; do redis-benchmark -s "$sock" -t set,get -n 100000 -r 100000 -d 64 -c 50 -q >/dev/null 2>&1; sleep 2; done ) &
  pids_to_kill+=($!)
fi
start=$(date +%s)
declare -A flagged
for name in "${!pid_of[@]}"; do flagged[$name]=0; done
while (( $(date +%s) - start < minutes * 60 )); do
  m=$(curl -sf "http://127.0.0.1:$port/metrics" || true)
  for name in "${!pid_of[@]}"; do
    p=${pid_of[$name]}
    if grep -q "^leakwatch_process_suspected_leak{.*pid=\"$p\".* 1$" <<<"$m"; then
      flagged[$name]=$((flagged[$name] + 1))
      echo "$(( ($(date +%s) - start) / 60 )) min: $name (pid $p) FLAGGED: $(grep "^leakwatch_process_suspected_leak{.*pid=\"$p\".* 1$" <<<"$m" | head -2)"
    fi
  done
  sleep 5
done
cp "$tmp/daemon.err" "${LW_KEEP_LOG:-/dev/null}" 2>/dev/null || true
# Escalation times in seconds from the start, per pid, from the log.
t0=$(date -u -d "@$start" +%s)
for name in cache frozen redis torch; do
  [[ -n ${pid_of[$name]:-} ]] || continue
  p=${pid_of[$name]}
  times=$(grep "escalation: pid $p (.*light -> full" "$tmp/daemon.err" | cut -d' ' -f1 |
          while read -r ts; do echo $(( $(date -u -d "$ts" +%s) - t0 )); done | tr '\n' ' ')
  suspensions=$(grep -c "governor: pid $p (.*suspended" "$tmp/daemon.err" || true)
  awk -v n="$name" -v times="$times" -v f="${flagged[$name]}" -v m="$minutes" -v w="$warmup" -v g="$suspensions" '
    BEGIN { k = split(times, t, " "); late = 0
            for (i = 1; i <= k; i++) if (t[i] >= w * 60) late++
            rate_late = m > w ? sprintf("%.1f", late * 60 / (m - w)) : "n/a"
            printf "%-7s escalations %d in %d min = %.1f per hour (%d after the first %d min = %s per hour); at s: %s; governor suspensions %d; flagged in %d scrapes\n",
                   n, k, m, k * 60 / m, late, w, rate_late, times, g, f }'
done
