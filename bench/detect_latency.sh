#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Detection latency in `auto` mode: minutes from the start of a 1 MiB/min
# leak (tests/targets/steady_leaker) until leakwatch flags it, with the
# shipped defaults for escalation and analysis (docs/config.md). Per run it
# prints when the process escalated to full and when suspected_leak first
# read 1 for kind mmap (what light mode sees: glibc's brk growth), for the
# process's kind heap, and for the leaking heap site itself
# (leakwatch_site_suspected_leak on the site whose label names
# leak_steadily). Then the median of each over the runs.
#
# Controls, in the same daemon and for the same time: two 50 MiB caches that
# fill in 60 s and plateau (tests/targets/plateau_cache, with and without
# churn), started with the leaker. They must never be flagged; each run
# says whether they were and how often they escalated. --watch-minutes keeps
# a run (and its controls) going after the leak is flagged.
#
#   bench/detect_latency.sh [--runs N] [--timeout-minutes M] [--watch-minutes W] [BUILD_DIR]
#   bench/detect_latency.sh [BUILD_DIR] [TIMEOUT_MINUTES]          (the old form, one run)
# Root. Every run is a fresh daemon and fresh targets.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"
runs=1 timeout_min=15 watch_min=0 build=
while (($#)); do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --runs=*) runs=${1#*=}; shift ;;
    --timeout-minutes) timeout_min=$2; shift 2 ;;
    --timeout-minutes=*) timeout_min=${1#*=}; shift ;;
    --watch-minutes) watch_min=$2; shift 2 ;;
    --watch-minutes=*) watch_min=${1#*=}; shift ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) if [[ -z $build ]]; then build=$1; else timeout_min=$1; fi; shift ;;
  esac
done
build=${build:-./build}
require_root
tmp=$(mktemp -d /tmp/lw-detect.XXXXXX)
daemon_pid='' target_pids=()
stop_run() {
  [[ -n $daemon_pid ]] && { kill -TERM "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null || true; }
  for p in "${target_pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  daemon_pid='' target_pids=()
}
trap 'stop_run; rm -rf "$tmp"' EXIT
cp "$build/tests/targets/steady_leaker" "$tmp/lwdetect$$"
cp "$build/tests/targets/plateau_cache" "$tmp/lwplateau$$"
comm=$(basename "$tmp/lwdetect$$" | cut -c1-15)
cache_comm=$(basename "$tmp/lwplateau$$" | cut -c1-15)

# elapsed START: minutes since START (date +%s.%N), two decimals.
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", (b - a) / 60 }'; }
# flag METRICS PID KIND: the process's suspected_leak for KIND reads 1.
flag() { grep -q "^leakwatch_process_suspected_leak{.*pid=\"$2\".*kind=\"$3\".* 1$" <<<"$1"; }
full() { grep -q "^leakwatch_process_mode{.*pid=\"$2\".*mode=\"full\".* 1$" <<<"$1"; }
# The leaking heap site: its row names leak_steadily.
site_flag() {
  grep "^leakwatch_site_suspected_leak{.*pid=\"$2\"" <<<"$1" | grep 'kind="heap"' |
    grep -q 'leak_steadily.* 1$'
}

declare -a all_esc all_mmap all_heap all_site
for run in $(seq "$runs"); do
  port=$((20000 + RANDOM % 20000))
  cat >"$tmp/cfg.yaml" <<CFG
listen: "127.0.0.1:$port"
targets:
  - name: detect
    match: {comm: "^$comm\$"}
    mode: auto
  - name: control
    match: {comm: "^$cache_comm\$"}
    mode: auto
CFG
  "$build/leakwatch" run --config "$tmp/cfg.yaml" 2>"$tmp/daemon.$run.err" &
  daemon_pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
  # Three targets, each fed by its own fifo so that this shell holds them
  # open (EOF on stdin ends a target).
  start_fifo_target leak "$tmp/lwdetect$$"
  target_pids+=("$fifo_target_pid")
  start_fifo_target cache "$tmp/lwplateau$$"
  target_pids+=("$fifo_target_pid")
  start_fifo_target frozen "$tmp/lwplateau$$" --no-churn
  target_pids+=("$fifo_target_pid")
  pids=()
  for name in leak cache frozen; do
    ready=$(ready_pid "$name" 50) || { echo "target $name did not start" >&2; exit 1; }
    pids+=("$ready")
  done
  # cache_pid and frozen_pid are read through ${c}_pid below.
  # shellcheck disable=SC2034
  pid=${pids[0]} cache_pid=${pids[1]} frozen_pid=${pids[2]}
  sleep 2   # attached at discovery (exec event / reconcile)
  for name in leak cache frozen; do fd_var=fd_$name; echo go >&"${!fd_var}"; done
  start=$(date +%s.%N)
  esc='' mmap_at='' heap_at='' site_at='' done_at=''
  # cache_full and frozen_full are read through ${c}_full below.
  # shellcheck disable=SC2034
  cache_flagged=0 frozen_flagged=0 cache_esc=0 frozen_esc=0 cache_full=0 frozen_full=0
  deadline=$(( $(date +%s) + timeout_min * 60 ))
  while (( $(date +%s) < deadline )); do
    m=$(curl -sf "http://127.0.0.1:$port/metrics" || true)
    el=$(elapsed "$start")
    if [[ -z $esc ]] && full "$m" "$pid"; then esc=$el; echo "run $run: escalated to full after $esc min"; fi
    if [[ -z $mmap_at ]] && flag "$m" "$pid" mmap; then mmap_at=$el; echo "run $run: suspected_leak kind=mmap after $mmap_at min"; fi
    if [[ -z $heap_at ]] && flag "$m" "$pid" heap; then heap_at=$el; echo "run $run: suspected_leak kind=heap after $heap_at min"; fi
    if [[ -z $site_at ]] && site_flag "$m" "$pid"; then site_at=$el; echo "run $run: heap site leak_steadily flagged after $site_at min"; fi
    for c in cache frozen; do
      cp_var=${c}_pid; cpid=${!cp_var}
      if flag "$m" "$cpid" heap || flag "$m" "$cpid" mmap; then
        eval "${c}_flagged=\$((${c}_flagged + 1))"
        echo "run $run: control $c (pid $cpid) FLAGGED at $el min"
      fi
      was_var=${c}_full
      if full "$m" "$cpid"; then
        if (( ${!was_var} == 0 )); then eval "${c}_esc=\$((${c}_esc + 1))"; fi
        eval "${c}_full=1"
      else
        eval "${c}_full=0"
      fi
    done
    if [[ -n $heap_at && -n $site_at && -z $done_at ]]; then done_at=$(date +%s); fi
    [[ -n $done_at ]] && (( $(date +%s) - done_at >= watch_min * 60 )) && break
    sleep 5
  done
  watched=$(elapsed "$start")
  echo "run $run: 1 MiB/min leak, auto mode, defaults: escalation ${esc:-none} min; suspected_leak mmap ${mmap_at:-none} min, heap ${heap_at:-none} min, heap site ${site_at:-none} min (timeout ${timeout_min} min)"
  echo "run $run: controls over $watched min: plateau cache (churn) flagged in $cache_flagged scrapes, escalated $cache_esc times; plateau cache (no churn) flagged in $frozen_flagged scrapes, escalated $frozen_esc times"
  all_esc+=("${esc:-none}") all_mmap+=("${mmap_at:-none}") all_heap+=("${heap_at:-none}") all_site+=("${site_at:-none}")
  for name in leak cache frozen; do fd_var=fd_$name; eval "exec ${!fd_var}>&-"; done
  stop_run
done

# median VALUES...: the median of the numeric values ("none" counts as
# infinitely late, so a median of "none" means half the runs missed).
median() {
  printf '%s\n' "$@" | sed 's/^none$/inf/' | sort -g |
    awk '{ v[NR] = $1 } END { if (NR % 2) m = v[(NR + 1) / 2]; else m = (v[NR / 2] + v[NR / 2 + 1]) / 2;
                              if (m == "inf" || m + 0 > 1e300) print "none"; else printf "%.2f\n", m }'
}
echo "per run (min): escalation ${all_esc[*]}; mmap ${all_mmap[*]}; heap ${all_heap[*]}; heap site ${all_site[*]}"
echo "median over $runs runs (min): escalation $(median "${all_esc[@]}"), mmap $(median "${all_mmap[@]}"), heap $(median "${all_heap[@]}"), heap site $(median "${all_site[@]}")"
