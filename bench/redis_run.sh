#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# redis-benchmark against Debian's redis-server (jemalloc), requests per
# second, bare vs leakwatch `light` vs leakwatch `full` (issue 6, benchmark 3).
#
#   bench/redis_run.sh [--reps N] [--requests N] [--memleak PATH] [BUILD_DIR]   (as root)
#
# Each run starts a fresh redis-server (unix socket, no persistence),
# attaches the tracer of its row (`leakwatch top -p PID --mode
# light|full`, reports to a scratch file) and waits for its first snapshot
# (every probe is in then), runs redis-benchmark (SET then GET, 50 clients,
# random keys out of 100,000, 64-byte values), checks that the tracer is
# still attached, and stops both. Besides requests per second it reads the
# server's CPU time (all its threads' /proc/PID/task/*/schedstat run time)
# across the benchmark: CPU us per request is what a tracer adds to the
# server's own work (BPF programs run on the traced thread's CPU time), and
# it is far less sensitive than throughput to other load on the machine,
# which on a shared 2-CPU VM moves requests/s by a factor of several
# between back-to-back runs. --pin puts the server on CPU 0 and the client
# on CPU 1 (on a busy machine that made things worse: the pinned server
# cannot escape a busy CPU). Rows are interleaved (bare,
# light, full, bare, ...) so load from other users of the machine hits them
# alike; each row's figure is the median over the repetitions, with its
# min, max and spread printed next to it. Target for light: <= 2% loss.
# --memleak PATH adds a bcc-memleak row: bcc libbpf-tools memleak
# (bench/build_memleak.sh) with `-O` the jemalloc that redis-server links
# (Debian's does; libc otherwise), as it would need to be run to see redis.
# memleak truncates -O at 31 characters, so it gets the library's file name
# (libbpf finds it in the multiarch directory). bcc memleak at the commit
# tried (6d0a964, 2026-08) fails to attach to Debian's libjemalloc.so.2,
# which has no `mmap` of its own; the row is then printed as not available
# with memleak's message, and the other rows run.
# Needs redis-server and redis-tools (scripts/install-deps.sh
# --with-test-tools) and taskset (util-linux).
# shellcheck disable=SC2317
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"
# shellcheck source=bench/lib/interleave.sh
. "$here/lib/interleave.sh"

usage() { echo "usage: $0 [--reps N] [--requests N] [--pin] [--rows ROW,...] [--memleak PATH] [BUILD_DIR]" >&2; exit 2; }
rows_arg=bare,light,full
reps=5 requests=100000 build=./build pin=0 memleak_bin=''
parse_options "--reps=reps --requests=requests --pin:pin=1 --rows=rows_arg --memleak=memleak_bin" "$@"

require_root BPF
leakwatch_bin=$build/leakwatch
require_built scripts/build.sh "$leakwatch_bin"
for tool in redis-server redis-benchmark redis-cli taskset; do
  command -v "$tool" >/dev/null ||
    die "$tool not installed: scripts/install-deps.sh --with-test-tools (redis-server redis-tools util-linux)"
done
# --pin: server and client on different CPUs.
server_pin=() client_pin=()
if ((pin)); then
  (($(nproc) >= 2)) || die "--pin needs 2 CPUs"
  server_pin=(taskset -c 0) client_pin=(taskset -c 1)
fi

make_scratch lw-redis-bench
redis_pid=''
on_exit() { [[ -n $redis_pid ]] && kill -KILL "$redis_pid" 2>/dev/null; }
sock=$tmp/redis.sock

start_redis() {
  rm -f "$sock"
  "${server_pin[@]}" redis-server --port 0 --unixsocket "$sock" --save "" --appendonly no \
    --dir "$tmp" --logfile "$tmp/redis.log" </dev/null >/dev/null 2>&1 &
  redis_pid=$!
  local i
  for ((i = 0; i < 100; i++)); do
    [[ -S $sock ]] && redis-cli -s "$sock" ping 2>/dev/null | grep -q PONG && return 0
    kill -0 "$redis_pid" 2>/dev/null || die "redis-server exited: $(tail -n 3 "$tmp/redis.log")"
    sleep 0.1
  done
  die "redis-server did not answer within 10 s"
}
stop_redis() {
  kill -TERM "$redis_pid" 2>/dev/null || true
  wait "$redis_pid" 2>/dev/null || true
  redis_pid=
}
# A process's CPU time so far, ns, over all its threads.
task_cpu_ns() {
  cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }'
}
server_cpu_ns() { task_cpu_ns "$redis_pid"; }

: >"$tmp/set" ; : >"$tmp/get" ; : >"$tmp/cpu" ; : >"$tmp/tcpu"
# Rows: bare, light, full, and noop-tp (lw_bench_noop --syscall-tp: no-op
# programs on the same host-wide syscall tracepoints as light, to split what
# the tracepoints cost from what leakwatch's programs and process add).
IFS=, read -r -a rows <<<"$rows_arg"
for row in "${rows[@]}"; do
  case $row in bare|light|full|noop-tp|bcc-memleak) ;; *) die "unknown row '$row' (bare, noop-tp, light, full, bcc-memleak)" ;; esac
done
memleak_missing=
if [[ -z $memleak_bin ]]; then
  memleak_missing="bcc-memleak: not available (no --memleak PATH; bench/build_memleak.sh builds it)"
elif [[ ! -x $memleak_bin ]]; then
  memleak_missing="bcc-memleak: not available ($memleak_bin is not an executable)"
elif [[ " ${rows[*]} " != *" bcc-memleak "* ]]; then
  rows+=(bcc-memleak)
fi
[[ -z $memleak_missing ]] || rows=("${rows[@]/bcc-memleak/}")
read -r -a rows <<<"${rows[*]}"
# The allocator memleak must probe: the jemalloc redis-server links, if any.
memleak_obj=$(ldd "$(command -v redis-server)" | awk '/libjemalloc/ { print $3; exit }')
memleak_obj=$(basename "${memleak_obj:-libc.so.6}")
[[ ${rows[0]} == bare ]] || die "the first row must be bare (the baseline)"
if [[ " ${rows[*]} " == *" noop-tp "* && ! -x $build/bench/lw_bench_noop ]]; then
  die "$build/bench/lw_bench_noop not found; build it: cmake --build $build --target lw_bench_noop"
fi

measure() {
  local row=$1 out
  start_redis
  if [[ $row != bare ]]; then
    if [[ $row == noop-tp ]]; then
      launch_tracer tracer "$build/bench/lw_bench_noop" -p "$redis_pid" --syscall-tp
    elif [[ $row == bcc-memleak ]]; then
      # "Attaching to pid N" comes once attached; stdbuf line-buffers it.
      launch_tracer tracer stdbuf -oL "$memleak_bin" -O "$memleak_obj" -p "$redis_pid"
      local rc=0
      await_tracer 60 test -s "$tmp/tracer.out" || rc=$?
      ((rc != 2)) || die "$row: leakwatch not attached after 60 s"
      if ((rc == 1)); then  # memleak exited before attaching: the row is dropped
        wait "$tracer_pid" 2>/dev/null || true
        tracer_pid=
        memleak_missing="bcc-memleak: not available (memleak -O $memleak_obj exited before attaching: $(grep -v '^$' "$tmp/tracer.err" | tail -n 2 | tr '\n' ' '))"
        rows=("${rows[@]/bcc-memleak/}")
        read -r -a rows <<<"${rows[*]}"
        echo "   $memleak_missing" >&2
        stop_redis
        return
      fi
    else
      launch_tracer tracer "$leakwatch_bin" top -p "$redis_pid" --interval 1 --json --mode "$row"
    fi
    wait_attached "$row: leakwatch" tracer 60
  fi
  local cpu0 cpu1 tcpu0=0 tcpu1=0
  [[ $row != bare ]] && tcpu0=$(task_cpu_ns "$tracer_pid")
  cpu0=$(server_cpu_ns)
  out=$("${client_pin[@]}" redis-benchmark -s "$sock" -t set,get -n "$requests" -r 100000 \
        -d 64 -c 50 --csv 2>"$tmp/bench.err") || die "redis-benchmark failed: $(tail -n 2 "$tmp/bench.err")"
  cpu1=$(server_cpu_ns)
  [[ $row != bare ]] && tcpu1=$(task_cpu_ns "$tracer_pid")
  if [[ $row != bare ]]; then
    tracer_alive_or_die "$row: leakwatch" tracer
    stop_tracer
  fi
  stop_redis
  local set get
  set=$(awk -F'","' '$1 == "\"SET" { print $2 }' <<<"$out")
  get=$(awk -F'","' '$1 == "\"GET" { print $2 }' <<<"$out")
  [[ -n $set && -n $get ]] || die "unexpected redis-benchmark output: $out"
  local cpu_us tcpu_us
  cpu_us=$(awk -v a="$cpu0" -v b="$cpu1" -v n="$requests" 'BEGIN { printf "%.3f", (b - a) / 1e3 / (2 * n) }')
  tcpu_us=$(awk -v a="$tcpu0" -v b="$tcpu1" -v n="$requests" 'BEGIN { printf "%.3f", (b - a) / 1e3 / (2 * n) }')
  [[ $row != bare ]] && echo "$row $tcpu_us" >>"$tmp/tcpu"
  echo "$row $set" >>"$tmp/set"
  echo "$row $get" >>"$tmp/get"
  echo "$row $cpu_us" >>"$tmp/cpu"
  echo "   $row: SET $set rps, GET $get rps, server CPU $cpu_us us/request, tracer CPU $tcpu_us us/request" >&2
}

echo "host: $(host_summary); pinned: $( ((pin)) && echo yes || echo no)" >&2
# Another tracer's syscall tracepoints (another leakwatch on the host) tax
# every row alike, bare included: say so.
if command -v bpftool >/dev/null; then
  echo "raw_tracepoint links already on the host: $(bpftool link show 2>/dev/null | grep -c 'raw_tracepoint' || true)" >&2
fi
redis-server --version >&2
for ((rep = 1; rep <= reps; rep++)); do
  echo "== repetition $rep/$reps" >&2
  for row in "${rows[@]}"; do measure "$row"; done
done
echo "load after: $(load_avg)" >&2
echo
echo "redis-benchmark -t set,get -n $requests -r 100000 -d 64 -c 50 (unix socket), requests/s; $reps interleaved repetitions"
echo "SET"
summarize_runs "$tmp/set" rps 1 "${rows[@]}"
echo "GET"
summarize_runs "$tmp/get" rps 1 "${rows[@]}"
echo "server CPU per request (SET+GET), lower is better; x bare is the cost ratio"
summarize_runs "$tmp/cpu" us/req 0 "${rows[@]}"
echo "the tracer process's own CPU per request (not the server's; x bare here: against the first traced row)"
summarize_runs "$tmp/tcpu" us/req 0 "${rows[@]:1}"
[[ " ${rows[*]} " != *" bcc-memleak "* ]] || echo "bcc-memleak probes: $memleak_obj"
[[ -z $memleak_missing ]] || echo "$memleak_missing"
