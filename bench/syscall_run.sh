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
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"
# shellcheck source=bench/lib/interleave.sh
. "$here/lib/interleave.sh"

usage() { echo "usage: $0 [--reps N] [--seconds S] [--mmap [--others N]] [BUILD_DIR]" >&2; exit 2; }
reps=5 seconds=2 build=./build mode=--getppid others=0
parse_options "--reps=reps --seconds=seconds --mmap:mode=--mmap --others=others" "$@"
rounds=5 cal_pairs=20000
unit=syscall
[[ $mode == --mmap ]] && unit=pair

require_root BPF
loop_bin=$build/bench/malloc_free_loop
noop_bin=$build/bench/lw_bench_noop
leakwatch_bin=$build/leakwatch
require_built scripts/build.sh "$loop_bin" "$noop_bin" "$leakwatch_bin"

[[ $others =~ ^[0-9]+$ ]] || usage
((others == 0)) || [[ $mode == --mmap ]] || die "--others needs --mmap"

make_scratch lw-syscall
idle_pids=()
on_exit() { ((${#idle_pids[@]} == 0)) || kill -KILL "${idle_pids[@]}" 2>/dev/null; }

start_target() { start_coproc_target 10 "$loop_bin" "$mode" "$cal_pairs" "$rounds"; }
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
all_attached() {
  (($(grep -c "attached pid" "$tmp/tracer.err") >= others + 1)) &&
    grep -q "attached pid $target_pid " "$tmp/tracer.err"
}
start_daemon() {
  launch_tracer tracer "$leakwatch_bin" run --config "$tmp/daemon.yaml"
  local rc=0
  await_tracer 120 all_attached || rc=$?
  ((rc != 1)) || die "light-many: daemon exited: $(tail -n1 "$tmp/tracer.err")"
  ((rc != 2)) || die "light-many: $(grep -c "attached pid" "$tmp/tracer.err") of $((others + 1)) attached after 120 s"
}

measure() {
  local row=$1 cal pairs ns foreign
  foreign=$(foreign_sys_enter)
  start_target
  if [[ $row == light-many ]]; then
    start_daemon
  elif [[ $row != bare ]]; then
    if [[ $row == noop-tp ]]; then
      launch_tracer tracer "$noop_bin" -p "$target_pid" --syscall-tp
    else
      launch_tracer tracer "$leakwatch_bin" top -p "$target_pid" --interval 1 --json --mode light
    fi
    wait_attached "$row: tracer" tracer 60
  fi
  cal=$(run_batch "")
  pairs=$(batch_pairs "$seconds" "$cal" "$rounds" "$cal_pairs")
  ns=$(run_batch "$pairs")
  if [[ $row != bare ]]; then
    tracer_alive_or_die "$row: tracer" tracer
    stop_tracer
  fi
  stop_target
  echo "   $row: $ns ns/$unit (sys_enter programs of others attached before: $foreign)" >&2
  echo "$row $ns" >>"$results"
}

echo "host: $(host_summary); $reps repetitions, ~${seconds}s each, interleaved" >&2
for ((rep = 1; rep <= reps; rep++)); do
  echo "== repetition $rep/$reps" >&2
  for row in "${rows[@]}"; do measure "$row"; done
done
echo "load after: $(load_avg)" >&2
echo
if [[ $mode == --mmap ]]; then
  echo "mmap(4 KiB anonymous) + write + munmap loop, ns per pair; $reps interleaved repetitions, each the median of $rounds rounds"
  ((others == 0)) || echo "light-many: the target and $others idle copies of the loop, all traced in mode light by one daemon"
else
  echo "getppid() loop, ns per system call; $reps interleaved repetitions, each the median of $rounds rounds"
fi
summarize_runs "$results" "ns/$unit" 0 "${rows[@]}"
