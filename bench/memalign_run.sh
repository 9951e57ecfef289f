#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Where can posix_memalign's probes sit? (decision return-probe-placement)
# Times a posix_memalign(&p, 64, 64..319)+free loop, ns per pair, bare and
# with three probe layouts of lw_bench_noop --memalign (bench/noop_probes.cc),
# interleaved: bare, entry, moved, retsites, bare, entry, ... so that load
# from others on the machine hits every row alike. Only posix_memalign is
# probed (free's probe would be the same in every layout).
#
#   bench/memalign_run.sh [--reps N] [--seconds S] [BUILD_DIR]   (as root)
#
# Rows:
#   bare      no probe
#   entry     uprobe + uretprobe at the symbol: leakwatch today. The first
#             instruction, cmpb $0,__malloc_initialized(%rip), is single-stepped
#   moved     uprobe + uretprobe at symbol+7, the `push %r12` after that cmpb
#             (emulated); the stack pointer has not moved, so the uretprobe
#             still hijacks the real return address at [sp]
#   retsites  entry uprobe at symbol+7 and a plain uprobe on each `ret` of
#             the function (offsets found here with objdump), reading the
#             caller at [sp]
# After each traced run the tool's hit counters are checked: as many return
# hits as entry hits, posix_memalign returned 0 every time, and the last
# caller seen lies in the target's own executable.
# shellcheck disable=SC2317
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"
# shellcheck source=bench/lib/interleave.sh
. "$here/lib/interleave.sh"

usage() { echo "usage: $0 [--reps N] [--seconds S] [BUILD_DIR]" >&2; exit 2; }
reps=5 seconds=2 build=./build
parse_options "--reps=reps --seconds=seconds" "$@"
rounds=5 cal_pairs=2000

require_root uprobes
loop_bin=$build/bench/malloc_free_loop
noop_bin=$build/bench/lw_bench_noop
require_built "cmake --build $build --target malloc_free_loop lw_bench_noop" "$loop_bin" "$noop_bin"
command -v objdump >/dev/null || die "objdump not found (binutils)"

make_scratch lw-memalign

start_target() { start_coproc_target 10 "$loop_bin" --posix-memalign "$cal_pairs" "$rounds"; }

# posix_memalign's `ret` offsets in the libc a target maps, from objdump.
start_target
libc=$(awk '$2 ~ /x/ && $6 ~ /\/libc(\.so|-[0-9.]+\.so)/ { print $6; exit }' "/proc/$target_pid/maps")
stop_target
[[ -n $libc ]] || die "no libc mapped by the target"
read -r sym_addr sym_size < <(nm -D -S --defined-only "$libc" | awk '$4 ~ /^posix_memalign(@|$)/ { print $1, $2; exit }')
[[ -n ${sym_addr:-} ]] || die "posix_memalign not found in $libc"
ret_offsets='' sep=''
while read -r addr; do
  ret_offsets+=$sep$(printf '0x%x' $((16#$addr - 16#$sym_addr)))
  sep=,
done < <(objdump -d --no-show-raw-insn --start-address=$((16#$sym_addr)) \
           --stop-address=$((16#$sym_addr + 16#$sym_size)) "$libc" |
         awk '$2 == "ret" || $2 == "retq" { sub(":", "", $1); print $1 }')
[[ -n $ret_offsets ]] || die "no ret found in posix_memalign of $libc"
echo "libc $libc: posix_memalign at 0x$sym_addr, $((16#$sym_size)) bytes, ret at +$ret_offsets" >&2
objdump -d --start-address=$((16#$sym_addr)) --stop-address=$((16#$sym_addr + 16)) "$libc" |
  awk '/^ +[0-9a-f]+:/' | sed 's/^/  /' >&2

results=$tmp/results
: >"$results"
layouts=(bare entry moved retsites)

measure() {
  local layout=$1 cal pairs ns exe_lo exe_hi line
  start_target
  if [[ $layout != bare ]]; then
    local extra=()
    [[ $layout == retsites ]] && extra=(--ret-offsets "$ret_offsets")
    launch_tracer tracer "$noop_bin" -p "$target_pid" --memalign "$layout" "${extra[@]}"
    wait_attached "$layout: tracer" tracer 30   # its first line: `attached`
  fi
  cal=$(run_batch "")
  pairs=$(batch_pairs "$seconds" "$cal" "$rounds" "$cal_pairs")
  ns=$(run_batch "$pairs")
  if [[ $layout != bare ]]; then
    tracer_alive_or_die "$layout: tracer" tracer
    # The executable's mapping, to check the caller the probes saw.
    local range exe
    exe=$(readlink -f "/proc/$target_pid/exe")
    range=$(awk -v exe="$exe" '$6 == exe && $2 ~ /x/ { print $1; exit }' "/proc/$target_pid/maps")
    exe_lo=$((16#${range%-*})) exe_hi=$((16#${range#*-}))
    stop_tracer
    line=$(grep '^memalign_hits' "$tmp/tracer.out") || die "$layout: no hit counts from the tracer"
    local f entry ret nz caller in_exe=no
    read -r -a f <<<"$line"   # memalign_hits entry E return R return_nonzero Z last_caller C
    entry=${f[2]} ret=${f[4]} nz=${f[6]} caller=$((f[8]))
    ((caller >= exe_lo && caller < exe_hi)) && in_exe=yes
    echo "   $layout: entry hits $entry, return hits $ret, nonzero returns $nz, last caller ${f[8]} in the executable: $in_exe" >&2
    if ! ((entry > 0 && ret == entry && nz == 0)) || [[ $in_exe != yes ]]; then
      die "$layout: the probes did not see every call correctly: $line"
    fi
  fi
  stop_target
  echo "   $layout: $ns ns/pair" >&2
  echo "$layout $ns" >>"$results"
}

echo "host: $(host_summary); $reps repetitions of each row, ~${seconds}s each, interleaved" >&2
for ((rep = 1; rep <= reps; rep++)); do
  echo "== repetition $rep/$reps" >&2
  for layout in "${layouts[@]}"; do measure "$layout"; done
done
echo "load after: $(load_avg)" >&2
echo
echo "posix_memalign(64, 64..319) + free, ns per pair; $reps interleaved repetitions, each the median of $rounds rounds"
summarize_runs "$results" ns/pair 0 "${layouts[@]}"
echo "probes: entry = uprobe+uretprobe at posix_memalign; moved = the same at posix_memalign+7 (push, after cmpb);"
echo "        retsites = uprobe at posix_memalign+7 and plain uprobes at +$ret_offsets (ret)"
