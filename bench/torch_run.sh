#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# PyTorch CPU inference loop (Debian python3-torch), iterations per second,
# bare vs leakwatch `light` vs leakwatch `full` (issue 6, benchmark 2), and
# `light --no-tensors`: `light` carries the tensor tier (c10 alloc_cpu /
# free_cpu; decision tensor-tier), so light minus light-no-tensors is the
# tier's own cost and light against bare what the default costs (issue 31).
#
#   bench/torch_run.sh [--reps N] [--seconds S] [--threads N] [--model conv|mlp] [--no-full] [--memleak PATH]
#                      [--no-noop] [BUILD_DIR]   (as root)
#
# Each repetition starts a fresh bench/torch_infer.py (a small conv net,
# batch of 8 3x32x32 images, one intra-op thread by default; importing torch
# takes long on a busy machine, so one process serves the three rows of a
# repetition) and waits for `ready PID`. For each row it attaches the row's
# tracer (`leakwatch top -p PID --mode light|full`, reports to a scratch
# file), waits for its first snapshot (every probe is in then), runs S
# seconds of inference, checks that the tracer is still attached, and
# detaches it before the next row. Rows are interleaved (bare, light, full, bare,
# ...); each row's figure is the median over the repetitions, with min, max
# and spread. Besides iterations per second the target reports its own CPU
# time per iteration, less sensitive to other load on the machine.
#
# Two more rows when their tools are there (a missing row is printed as
# `<row>: not available (<reason>)` and the other rows still run):
#   noop-malloc-free  BUILD_DIR/bench/lw_bench_noop -p PID: no-op programs at
#                     leakwatch's malloc entry, malloc return and free
#                     (free+9) places only: a lower bound of the floor.
#   noop-full         BUILD_DIR/bench/lw_bench_noop -p PID --layout FILE:
#                     no-op programs at every place `full` attaches to this
#                     process (malloc, calloc, realloc, posix_memalign,
#                     operator new/delete, the mmap wrappers, ld.so's hook,
#                     the tensor tier's alloc_cpu session and free_cpu),
#                     FILE written once a run by bench/lib/probe_layout.py
#                     from a `leakwatch run` in full mode on the first
#                     repetition's target (its /api/v1/status). The floor
#                     of full mode's traps on this loop.
#   bcc-memleak       `memleak -p PID` (bcc libbpf-tools, built by
#                     bench/build_memleak.sh), given with --memleak PATH.
# With full and noop-full, a line gives full's loss of it/s against bare
# minus noop-full's, in points (issue 33: at most 3 on the MLP loop).
# With bcc-memleak, a last line compares the added CPU per iteration (row
# minus bare, medians) of full against memleak's.
# Needs python3-torch: scripts/install-deps.sh --with-bench-tools.
# shellcheck disable=SC2317
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"
# shellcheck source=bench/lib/interleave.sh
. "$here/lib/interleave.sh"

usage() { echo "usage: $0 [--reps N] [--seconds S] [--threads N] [--model conv|mlp] [--no-full] [--memleak PATH] [--no-noop] [BUILD_DIR]" >&2; exit 2; }
reps=5 seconds=5 threads=1 model=conv want_full=1 build=./build memleak_bin='' want_noop=1
# Debian's interpreter, which python3-torch installs into (not a python3
# that PATH may find first, e.g. pyenv's); PYTHON overrides.
python=${PYTHON:-/usr/bin/python3}
parse_options "--reps=reps --seconds=seconds --threads=threads --model=model --memleak=memleak_bin
  --no-noop:want_noop=0 --no-full:want_full=0" "$@"
[[ $model == conv || $model == mlp ]] || usage

require_root BPF
leakwatch_bin=$build/leakwatch
require_built scripts/build.sh "$leakwatch_bin"
"$python" -c 'import torch' 2>/dev/null ||
  die "python3-torch not installed: scripts/install-deps.sh --with-bench-tools"

make_scratch lw-torch-bench

start_target() { start_coproc_target 120 "$python" "$here/torch_infer.py" --threads "$threads" --model "$model"; }

: >"$tmp/its"; : >"$tmp/cpu"
rows=(bare light light-no-tensors full)
missing=()
if ((!want_full)); then
  rows=(bare light light-no-tensors)
  missing+=("full: not run (--no-full: bare and light only)")
fi
noop_bin=$build/bench/lw_bench_noop
if ((!want_noop)); then
  missing+=("noop-malloc-free: not available (--no-noop)")
elif [[ -x $noop_bin ]]; then
  rows+=(noop-malloc-free)
  ((want_full)) && rows+=(noop-full)
else
  missing+=("noop-malloc-free, noop-full: not available ($noop_bin not found; build the bench targets)")
fi
if [[ -z $memleak_bin ]]; then
  missing+=("bcc-memleak: not available (no --memleak PATH; build it with bench/build_memleak.sh)")
elif [[ ! -x $memleak_bin ]]; then
  missing+=("bcc-memleak: not available ($memleak_bin is not an executable)")
else
  rows+=(bcc-memleak)
fi
command -v stdbuf >/dev/null || [[ -z $memleak_bin ]] || die "stdbuf (coreutils) needed for the memleak row"

# Starts the row's tracer on target_pid, output in $tmp/tracer.out; returns
# once it has attached (the tracer's first line of output).
start_tracer() {
  local row=$1
  case $row in
    light|full)
      launch_tracer tracer "$leakwatch_bin" top -p "$target_pid" --interval 1 --json --mode "$row" ;;
    light-no-tensors)
      launch_tracer tracer "$leakwatch_bin" top -p "$target_pid" --interval 1 --json --mode light --no-tensors ;;
    noop-malloc-free)
      launch_tracer tracer "$noop_bin" -p "$target_pid" ;;
    noop-full)
      launch_tracer tracer "$noop_bin" -p "$target_pid" --layout "$tmp/layout" ;;
    bcc-memleak)
      # memleak prints "Attaching to pid N" after its probes are attached;
      # line-buffer its stdout so the line reaches the file. Default
      # 5 s report interval.
      launch_tracer tracer stdbuf -oL "$memleak_bin" -p "$target_pid" ;;
  esac
  wait_attached "$row: tracer" tracer 60
}

measure() {
  local row=$1 key its key2 cpu
  [[ $row == bare ]] || start_tracer "$row"
  printf '%s\n' "$seconds" >&"${TARGET[1]}"
  read -r -t $((seconds * 20 + 60)) -u "${TARGET[0]}" key its key2 cpu ||
    die "$row: target stopped answering: $(tail -n 3 "$tmp/target.err")"
  [[ $key == its_per_s && $key2 == cpu_ms_per_it ]] || die "$row: unexpected target output: $key $its $key2 $cpu"
  if [[ $row != bare ]]; then
    tracer_alive_or_die "$row: tracer" tracer
    stop_tracer
  fi
  echo "$row $its" >>"$tmp/its"
  echo "$row $cpu" >>"$tmp/cpu"
  echo "   $row: $its it/s, $cpu CPU ms/it" >&2
}

echo "host: $(host_summary); torch $("$python" -c 'import torch; print(torch.__version__)'), $threads thread(s)" >&2
for ((rep = 1; rep <= reps; rep++)); do
  echo "== repetition $rep/$reps" >&2
  start_target
  # The places full attaches, once a run (file offsets: the same objects in
  # every repetition's process).
  if [[ " ${rows[*]} " == *" noop-full "* && ! -s $tmp/layout ]]; then
    "$python" "$here/lib/probe_layout.py" --build "$build" --pid "$target_pid" --mode full "$tmp/layout" ||
      die "noop-full: could not read full mode's probe layout"
  fi
  for row in "${rows[@]}"; do measure "$row"; done
  stop_target
done
echo "load after: $(load_avg)" >&2
echo
case $model in
  conv) model_desc="conv net, batch 8x3x32x32" ;;
  mlp) model_desc="two-layer MLP 256 wide, batch 64" ;;
esac
echo "PyTorch CPU inference ($model_desc, $threads thread(s)), ${seconds}s per run; $reps interleaved repetitions"
summarize_runs "$tmp/its" it/s 1 "${rows[@]}"
echo "target CPU per iteration, lower is better"
summarize_runs "$tmp/cpu" ms/it 0 "${rows[@]}"
# An awk program's start: reads "ROW VALUE" lines; med(ROW) is the row's median.
# shellcheck disable=SC2016  # awk's $1, not the shell's
row_medians='{ n[$1]++; v[$1, n[$1]] = $2 }
  function med(l,   i, j, t, a, k) {
    k = n[l]; for (i = 1; i <= k; i++) a[i] = v[l, i]
    for (i = 2; i <= k; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
  }'
# Full's loss of it/s against bare, less the no-op probes' at its places.
if [[ " ${rows[*]} " == *" noop-full "* ]]; then
  awk "$row_medians"'
    END {
      b = med("bare"); f = 100 * (1 - med("full") / b); z = 100 * (1 - med("noop-full") / b)
      printf "it/s lost against bare (medians): full %.1f%%, no-op probes at full'"'"'s places %.1f%%: full - no-op = %.1f points\n", f, z, f - z
    }' "$tmp/its"
  echo "noop-full's places: $(grep -vc '^#' "$tmp/layout") probes ($(awk '!/^#/ { k[$3]++ } END { for (x in k) { printf "%s%d %s", s, k[x], x; s = ", " } }' "$tmp/layout"))"
fi
# Added CPU per iteration (row median - bare median), full against memleak.
if [[ " ${rows[*]} " == *" bcc-memleak "* ]]; then
  awk "$row_medians"'
    END {
      b = med("bare"); f = med("full") - b; m = med("bcc-memleak") - b
      printf "added CPU per iteration vs bare: full %.4f ms, bcc memleak %.4f ms; full / memleak = %s\n",
        f, m, (m > 0 ? sprintf("%.3f", f / m) : "n/a (memleak added nothing)")
    }' "$tmp/cpu"
fi
for line in "${missing[@]}"; do echo "$line"; done
