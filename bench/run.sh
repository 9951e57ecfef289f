#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Probe-cost benchmark: how much slower a malloc+free loop runs with each
# tracer attached. See bench/README.md for what each row means.
#
#   bench/run.sh [--quick] [--baseline LEAKWATCH_BIN] [BUILD_DIR]
#                                           (as root; BUILD_DIR defaults to ./build)
#
# --baseline BIN: also measures leakwatch full with BIN (another build, e.g.
# the previous commit's) and this build's, alternately three times each,
# and prints the median ratio new/baseline (refactorings must stay within
# +-10%).
#
# Builds nothing: BUILD_DIR must already hold bench/malloc_free_loop,
# bench/lw_bench_noop and, for its row, leakwatch.
#
# Every configuration gets a fresh target process and the same protocol:
# start the target, wait for `ready PID`, start the tracer, wait until it has
# attached, run a short calibration batch (which also warms the traced path),
# size the measured batch from it to last about $seconds_per_config, run it,
# check the tracer is still attached, stop the tracer.

# The tracer_*/ready_* functions and cleanup are called indirectly.
# shellcheck disable=SC2317
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"

usage() { echo "usage: $0 [--quick] [--baseline LEAKWATCH_BIN] [--memleak MEMLEAK_BIN] [BUILD_DIR]" >&2; exit 2; }

quick=0
build=./build
baseline_bin=
memleak_bin=
# Here a missing value is a usage error and an empty one is taken.
lenient_values=1
parse_options "--quick:quick=1 --baseline=baseline_bin --memleak=memleak_bin" "$@"

if ((quick)); then
  seconds_per_config=1 rounds=3 cal_pairs=2000
else
  seconds_per_config=4 rounds=5 cal_pairs=10000
fi
attach_timeout_s=30   # leakwatch and bpftrace load BPF and resolve symbols first
batch_timeout_s=120   # one round; generous, a heavily traced round is slow
batch_show_rounds=1

loop_bin=$build/bench/malloc_free_loop
noop_bin=$build/bench/lw_bench_noop
leakwatch_bin=$build/leakwatch

require_root "uprobes need CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN"
require_built "cmake --build $build --target malloc_free_loop lw_bench_noop" "$loop_bin" "$noop_bin"

# Never leave a tracer attached or a target waiting, whatever way we exit.
make_scratch lw-bench

# --- the target ---------------------------------------------------------

# The loop as a coprocess: we write batch lines to its stdin and read its
# results from its stdout (run_batch: an empty line runs the calibration
# size given on the command line; round lines go to stderr).
start_target() {
  start_coproc_target 10 env ${target_preload:+LD_PRELOAD=$target_preload} "$loop_bin" "$cal_pairs" "$rounds"
}

# --- tracers ------------------------------------------------------------
# Each tracer_X execs the tracer for pid $1 (exec: so $! is the tracer itself
# and our signals reach it); each ready_X says whether that kind of tracer has
# attached, from its stdout in $1.

tracer_noop() { exec "$noop_bin" -p "$1"; }
tracer_noop_free_entry() { exec "$noop_bin" -p "$1" --free-at-entry; }
ready_noop() { grep -qx attached "$1"; }

# leakwatch writes its first report only once its probes are in; the reports
# go to a file instead of /dev/null only so that first line can be seen.
tracer_leakwatch() { exec "$leakwatch_bin" top -p "$1" --interval 1 --json; }
ready_leakwatch() { [[ -s $1 ]] && (($(wc -l <"$1") >= 1)); }
# full with byte sampling at the default mean (512 KiB), and light (no uprobe:
# only the host-wide mmap/munmap/brk tracepoints).
tracer_leakwatch_sampled() { exec "$leakwatch_bin" top -p "$1" --interval 1 --json --sample-mean 524288; }
tracer_leakwatch_light() { exec "$leakwatch_bin" top -p "$1" --interval 1 --json --mode light; }
tracer_leakwatch_baseline() { exec "$baseline_bin" top -p "$1" --interval 1 --json; }
# The daemon (`leakwatch run`), which `top` does not exercise, for --baseline:
# a config matching the loop by comm in mode full, without the governor
# (the loop is far over its default budget and would run unprobed after a
# second); its log goes to stdout, and it is ready once it logged the attach.
daemon_config() {
  printf 'listen: "127.0.0.1:%d"\ngovernor: {max_hits_per_second: 0}\ntargets:\n  - name: loop\n    match: {comm: "^malloc_free_loo"}\n    mode: full\n' \
    $((20000 + RANDOM % 20000)) >"$tmp/daemon.yaml"
}
tracer_leakwatch_daemon() { daemon_config; exec "$leakwatch_bin" run --config "$tmp/daemon.yaml" 2>&1; }
tracer_leakwatch_daemon_baseline() { daemon_config; exec "$baseline_bin" run --config "$tmp/daemon.yaml" 2>&1; }
ready_daemon() { grep -q "attached pid $target_pid " "$1"; }

# The anchor: what a memleak-style tracer costs when written the usual way,
# every probe at the symbol (so free's single-stepped first instruction is
# probed) and a stack captured per allocation.
tracer_bpftrace() {
  local libc
  libc=$(awk '$2 ~ /x/ && $6 ~ /\/libc(\.so|-[0-9.]+\.so)/ { print $6; exit }' "/proc/$1/maps")
  exec bpftrace -p "$1" -e "
uprobe:$libc:malloc { @size[tid] = arg0; }
uretprobe:$libc:malloc /@size[tid]/ { @live[retval] = (@size[tid], ustack); delete(@size[tid]); }
uprobe:$libc:free { delete(@live[arg0]); }
END { clear(@size); clear(@live); }"
}
# bpftrace prints this line before it attaches, not after: allow a second.
ready_bpftrace() { grep -qE '^Attaching [0-9]+ probes' "$1" && sleep 1; }

# bcc libbpf-tools memleak (bench/build_memleak.sh), given with --memleak.
# It prints "Attaching to pid N" once attached; stdbuf line-buffers that
# line into the file.
tracer_memleak() { exec stdbuf -oL "$memleak_bin" -p "$1"; }
ready_memleak() { grep -q '^Attaching to pid' "$1"; }

# The last line a failed tracer wrote, as the reason it is not available.
failure_reason() {
  local line
  line=$(grep -v '^[[:space:]]*$' "$1" | tail -n 1)
  echo "${line:-no message}"
}

# attach_failure NAME READY: waits until ready_READY holds for tracer NAME's
# output; on failure echoes why.
attach_failure() {
  local rc=0
  await_tracer "$attach_timeout_s" "ready_$2" "$tmp/$1.out" || rc=$?
  case $rc in
    1) echo "exited before attaching: $(failure_reason "$tmp/$1.err")" ;;
    2) echo "not attached after ${attach_timeout_s}s: $(failure_reason "$tmp/$1.err")" ;;
  esac
  return "$rc"
}

# --- configurations -----------------------------------------------------

labels=() results=() unavailable=()
target_preload=

# measure LABEL [TRACER READY]: one table row, or one "not available" line.
measure() {
  local label=$1 name=${2:-} ready=${3:-} reason cal pairs ns
  echo "== $label" >&2
  start_target
  if [[ -n $name ]]; then
    # The preloaded-allocator rows reuse a tracer name: launch_tracer
    # removes the earlier row's report first.
    launch_tracer "$name" "tracer_$name" "$target_pid"
    if ! reason=$(attach_failure "$name" "$ready"); then
      stop_tracer
      stop_target
      unavailable+=("$label: not available ($reason)")
      echo "   ${unavailable[-1]}" >&2
      return
    fi
  fi
  cal=$(run_batch "")
  pairs=$(batch_pairs "$seconds_per_config" "$cal" "$rounds" "$cal_pairs")
  echo "   calibration $cal ns/pair; measuring $rounds rounds of $pairs pairs" >&2
  ns=$(run_batch "$pairs")
  if [[ -n $name ]]; then
    # A tracer that died mid-run leaves a number that measures nothing.
    if ! kill -0 "$tracer_pid" 2>/dev/null; then
      reason="exited during the run: $(failure_reason "$tmp/$name.err")"
      stop_tracer
      stop_target
      unavailable+=("$label: not available ($reason)")
      echo "   ${unavailable[-1]}" >&2
      return
    fi
    stop_tracer
  fi
  stop_target
  labels+=("$label") results+=("$ns")
}

echo "host: $(uname -r), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2
echo "each configuration: ~${seconds_per_config}s, median of $rounds rounds" >&2

measure "bare loop (no probes)"
floor_label="no-op, leakwatch placement (floor)"
measure "$floor_label" noop noop
floor_placement=$(grep -m1 '^lw_bench_noop:' "$tmp/noop.err" 2>/dev/null || true)
measure "no-op probes, free at entry" noop_free_entry noop
if [[ -x $leakwatch_bin ]]; then
  measure "leakwatch full" leakwatch leakwatch
  measure "leakwatch full + sampling 512K" leakwatch_sampled leakwatch
  measure "leakwatch light" leakwatch_light leakwatch
else
  unavailable+=("leakwatch: not available ($leakwatch_bin not built)")
fi
if command -v bpftrace >/dev/null; then
  measure "bpftrace memleak-like (anchor)" bpftrace bpftrace
else
  unavailable+=("bpftrace memleak-like (anchor): not available (bpftrace not installed)")
fi
if [[ -z $memleak_bin ]]; then
  unavailable+=("bcc libbpf-tools memleak: not available (no --memleak PATH; bench/build_memleak.sh builds it)")
elif [[ ! -x $memleak_bin ]]; then
  unavailable+=("bcc libbpf-tools memleak: not available ($memleak_bin is not an executable)")
else
  measure "bcc libbpf-tools memleak" memleak memleak
fi

# This build against a baseline binary, alternately, so that drift of the
# machine affects both alike.
baseline_pairs=() daemon_pairs=()
if [[ -n $baseline_bin ]]; then
  if [[ ! -x $baseline_bin || ! -x $leakwatch_bin ]]; then
    unavailable+=("baseline comparison: not available ($baseline_bin or $leakwatch_bin missing)")
  else
    for round in 1 2 3; do
      n=${#results[@]}
      measure "leakwatch full, this build #$round" leakwatch leakwatch
      measure "leakwatch full, baseline #$round" leakwatch_baseline leakwatch
      if ((${#results[@]} == n + 2)); then
        baseline_pairs+=("${results[n]} ${results[n+1]}")
      fi
      n=${#results[@]}
      measure "leakwatch run (daemon), this build #$round" leakwatch_daemon daemon
      measure "leakwatch run (daemon), baseline #$round" leakwatch_daemon_baseline daemon
      if ((${#results[@]} == n + 2)); then
        daemon_pairs+=("${results[n]} ${results[n+1]}")
      fi
    done
  fi
fi

# The same loop with another allocator preloaded (jemalloc, tcmalloc,
# mimalloc), bare and under leakwatch: each ratio is against its own bare
# row, since the allocators differ by themselves. Their entry points begin
# with instructions the kernel single-steps (jemalloc's malloc with `cmp`,
# its free with `mov`), so their per-call cost differs from glibc's.
alloc_rows=()
for lib in libjemalloc.so.2 libtcmalloc.so.4 libmimalloc.so.2; do
  path=/usr/lib/x86_64-linux-gnu/$lib
  if [[ ! -r $path ]]; then
    unavailable+=("$lib rows: not available ($path missing; scripts/install-deps.sh --with-test-tools)")
    continue
  fi
  [[ -x $leakwatch_bin ]] || continue
  target_preload=$path
  n=${#results[@]}
  measure "bare loop, $lib preloaded"
  measure "leakwatch top, $lib preloaded" leakwatch leakwatch
  target_preload=
  if ((${#results[@]} == n + 2)); then
    alloc_rows+=("$(awk -v l="$lib" -v b="${results[n]}" -v t="${results[n+1]}" \
      'BEGIN { printf "%-34s %12.1f %12.1f %10.1f", l, b, t, t / b }')")
  fi
done

# --- report -------------------------------------------------------------

bare=${results[0]}
floor=
[[ ${labels[1]:-} == "$floor_label" ]] && floor=${results[1]}

echo
printf '%-34s %12s %10s %10s\n' configuration ns/pair "x bare" "x floor"
for i in "${!labels[@]}"; do
  awk -v l="${labels[i]}" -v ns="${results[i]}" -v bare="$bare" -v floor="$floor" 'BEGIN {
    xf = floor == "" ? "-" : sprintf("%.2f", ns / floor)
    printf "%-34s %12.1f %10.1f %10s\n", l, ns, ns / bare, xf
  }'
done
if ((${#alloc_rows[@]})); then
  echo
  printf '%-34s %12s %12s %10s\n' "preloaded allocator" "bare ns" "leakwatch ns" "x own bare"
  for row in "${alloc_rows[@]}"; do echo "$row"; done
fi
# median_ratio WHAT PAIR...: the median of the per-round ratios new/old.
median_ratio() {
  local what=$1
  shift
  printf '%s\n' "$@" | awk -v b="$baseline_bin" -v what="$what" '
    { n++; new[n] = $1; old[n] = $2; r[n] = $1 / $2 }
    END {
      # median of the per-round ratios (1 to 3 rounds)
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
      m = n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
      printf "this build / baseline (%s), %s, median of %d alternating rounds: %.3f\n", b, what, n, m
    }'
}
if ((${#baseline_pairs[@]})); then
  echo
  median_ratio "leakwatch full" "${baseline_pairs[@]}"
fi
if ((${#daemon_pairs[@]})); then
  median_ratio "leakwatch run (daemon, full)" "${daemon_pairs[@]}"
fi
for line in "${unavailable[@]}"; do echo "$line"; done
[[ -n $floor_placement ]] && echo "floor probes: ${floor_placement#lw_bench_noop: }"
exit 0
