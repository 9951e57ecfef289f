#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What `light` mode costs a syscall-heavy process: ns per getppid() system
# call, bare vs no-op programs on the raw_syscalls sys_enter/sys_exit
# tracepoints (lw_bench_noop --syscall-tp: the attach points light mode
# uses, doing nothing) vs `leakwatch top -p PID --mode light`, interleaved
# (bare, noop-tp, light, bare, ...). The syscall tracepoints are host-wide:
# any program on them makes every task's syscalls take the traced
# entry/exit path, and runs on every syscall of every process. Each run
# also prints how many sys_enter programs others had attached at the time
# (another leakwatch on a shared machine): with one there already, "bare"
# pays the traced path too.
#
# With --mmap the loop is mmap(one anonymous page) + a write + munmap
# instead: what light's probes on libc's wrappers
# (decision libc-syscall-wrappers: one probe after each `syscall`) cost a
# process that maps a lot, and with --others N (N > 0) a fourth row, light-many:
# the target and N idle copies of the loop, all traced in mode light by one
# `leakwatch run` daemon. Every probe on a libc offset is one kernel uprobe with
# one consumer per traced process, and each hit runs every consumer's filter, so
# this row shows what N other traced processes add to each call.
#
#   bench/syscall_run.sh [--reps N] [--seconds S] [--mmap [--others N]] [BUILD_DIR]   (as root)
# shellcheck disable=SC2317
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/interleave.sh
. "$here/lib/interleave.sh"

usage() { echo "usage: $0 [--reps N] [--seconds S] [--mmap [--others N]] [BUILD_DIR]" >&2; exit 2; }
reps=5 seconds=2 build=./build mode=--getppid others=0
while (($#)); do
  case $1 in
    --reps) reps=${2:?}; shift ;;
    --seconds) seconds=${2:?}; shift ;;
    --mmap) mode=--mmap ;;
    --others) others=${2:?}; shift ;;
    -h|--help) usage ;;
    -*) usage ;;
    *) build=$1 ;;
  esac
  shift
done
rounds=5 cal_pairs=20000
unit=syscall
[[ $mode == --mmap ]] && unit=pair

die() { echo "syscall_run.sh: $*" >&2; exit 1; }
((EUID == 0)) || die "must run as root (BPF)"
loop_bin=$build/bench/malloc_free_loop
noop_bin=$build/bench/lw_bench_noop
leakwatch_bin=$build/leakwatch
for bin in "$loop_bin" "$noop_bin" "$leakwatch_bin"; do
  [[ -x $bin ]] || die "$bin not found; build it: scripts/build.sh"
done

[[ $others =~ ^[0-9]+$ ]] || usage
((others == 0)) || [[ $mode == --mmap ]] || die "--others needs --mmap"

tmp=$(mktemp -d /tmp/lw-syscall.XXXXXX)
target_pid='' tracer_pid='' idle_pids=()
cleanup() {
  [[ -n $tracer_pid ]] && kill -KILL "$tracer_pid" 2>/dev/null
  [[ -n $target_pid ]] && kill -KILL "$target_pid" 2>/dev/null
  ((${#idle_pids[@]} == 0)) || kill -KILL "${idle_pids[@]}" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_target() {
  coproc TARGET { exec "$loop_bin" "$mode" "$cal_pairs" "$rounds" 2>"$tmp/target.err"; }
  local word
  read -r -t 10 -u "${TARGET[0]}" word target_pid || die "target did not start: $(cat "$tmp/target.err")"
  [[ $word == ready ]] || die "target said '$word', expected 'ready'"
}
foreign_sys_enter() {
  if command -v bpftool >/dev/null; then
    bpftool link show 2>/dev/null | grep -c "tp 'sys_enter'" || true
  else
    echo "?"
  fi
}

results=$tmp/results
: >"$results"
rows=(bare noop-tp light)
((others == 0)) || rows+=(light-many)

# The idle copies for light-many: each maps libc and waits on stdin (a
# fifo nobody writes to) for the whole benchmark.
if ((others > 0)); then
  mkfifo "$tmp/idle.fifo"
  # Held open read-write for the whole run, so the readers never see EOF.
  # shellcheck disable=SC2034
  exec {idle_fd}<>"$tmp/idle.fifo"
  for ((i = 0; i < others; i++)); do
    "$loop_bin" "$mode" 1 1 <"$tmp/idle.fifo" >/dev/null 2>&1 &
    idle_pids+=($!)
  done
  port=$((20000 + $$ % 20000))
  cat >"$tmp/daemon.yaml" <<EOF
listen: "127.0.0.1:$port"
limits: {max_processes: $((others + 16))}
targets:
  - name: bench
    match: {comm: "^malloc_free_loo"}
    mode: light
EOF
fi

# light-many: a daemon tracing the target and every idle copy in light.
start_daemon() {
  "$leakwatch_bin" run --config "$tmp/daemon.yaml" </dev/null >"$tmp/tracer.out" 2>"$tmp/tracer.err" &
  tracer_pid=$!
  local deadline=$((SECONDS + 120))
  until (($(grep -c "attached pid" "$tmp/tracer.err") >= others + 1)) &&
    grep -q "attached pid $target_pid " "$tmp/tracer.err"; do
    kill -0 "$tracer_pid" 2>/dev/null || die "light-many: daemon exited: $(tail -n1 "$tmp/tracer.err")"
    ((SECONDS < deadline)) || die "light-many: $(grep -c "attached pid" "$tmp/tracer.err") of $((others + 1)) attached after 120 s"
    sleep 0.2
  done
}

measure() {
  local row=$1 cal pairs ns foreign
  foreign=$(foreign_sys_enter)
  start_target
  if [[ $row == light-many ]]; then
    start_daemon
  elif [[ $row != bare ]]; then
    rm -f "$tmp/tracer.out"
    if [[ $row == noop-tp ]]; then
      "$noop_bin" -p "$target_pid" --syscall-tp </dev/null >"$tmp/tracer.out" 2>"$tmp/tracer.err" &
    else
      "$leakwatch_bin" top -p "$target_pid" --interval 1 --json --mode light \
        </dev/null >"$tmp/tracer.out" 2>"$tmp/tracer.err" &
    fi
    tracer_pid=$!
    local deadline=$((SECONDS + 60))
    until [[ -s $tmp/tracer.out ]]; do
      kill -0 "$tracer_pid" 2>/dev/null || die "$row: tracer exited: $(tail -n1 "$tmp/tracer.err")"
      ((SECONDS < deadline)) || die "$row: not attached after 60 s"
      sleep 0.1
    done
  fi
  cal=$(run_batch "")
  pairs=$(awk -v s="$seconds" -v ns="$cal" -v r="$rounds" -v min="$cal_pairs" \
    'BEGIN { p = int(s * 1e9 / (ns * r)); print (p > min ? p : min) }')
  ns=$(run_batch "$pairs")
  if [[ $row != bare ]]; then
    kill -0 "$tracer_pid" 2>/dev/null || die "$row: tracer exited during the run"
    stop_tracer
  fi
  stop_target
  echo "   $row: $ns ns/$unit (sys_enter programs of others attached before: $foreign)" >&2
  echo "$row $ns" >>"$results"
}

echo "host: $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $reps repetitions, ~${seconds}s each, interleaved" >&2
for ((rep = 1; rep <= reps; rep++)); do
  echo "== repetition $rep/$reps" >&2
  for row in "${rows[@]}"; do measure "$row"; done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo
if [[ $mode == --mmap ]]; then
  echo "mmap(4 KiB anonymous) + write + munmap loop, ns per pair; $reps interleaved repetitions, each the median of $rounds rounds"
  ((others == 0)) || echo "light-many: the target and $others idle copies of the loop, all traced in mode light by one daemon"
else
  echo "getppid() loop, ns per system call; $reps interleaved repetitions, each the median of $rounds rounds"
fi
summarize_runs "$results" "ns/$unit" 0 "${rows[@]}"
