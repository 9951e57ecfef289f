#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CUDA probe cost on the stand-in libraries (tests/targets/cuda): ns per
# cudaMalloc+cudaFree pair (runtime -> nested driver call) and per
# cuMemAlloc_v2+cuMemFree_v2 pair, without and with `leakwatch top`
# attached, in one run, ratios printed. The stand-in driver maps and unmaps
# a page per allocation (two syscalls), which a real driver's allocation
# costs far more than; the ratio is therefore an upper bound for real CUDA.
#
#   bench/cuda_run.sh [BUILD_DIR] [PAIRS]     (as root; defaults ./build 20000)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"
build=${1:-./build}
pairs=${2:-20000}
leaker=$build/tests/targets/cuda_leaker
lw=$build/leakwatch
require_root
[[ -x $leaker && -x $lw ]] || die "build first (scripts/build.sh)"
tmp=$(mktemp -d /tmp/lw-cuda-bench.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT

run() {  # $1 = without|with -> prints "runtime_ns driver_ns"
  mkfifo "$tmp/in"
  "$leaker" bench "$pairs" <"$tmp/in" >"$tmp/out" &
  local target=$!
  exec 8>"$tmp/in"
  for _ in $(seq 100); do grep -q '^ready' "$tmp/out" && break; sleep 0.1; done
  local top=
  if [[ $1 == with ]]; then
    "$lw" top -p "$target" --json --interval 1 >"$tmp/top.json" 2>"$tmp/top.err" &
    top=$!
    for _ in $(seq 300); do [[ -s $tmp/top.json ]] && break; sleep 0.1; done
  fi
  echo go >&8
  for _ in $(seq 1200); do grep -q '^done' "$tmp/out" && break; sleep 0.1; done
  echo exit >&8
  exec 8>&-
  wait "$target"
  [[ -n $top ]] && { kill -INT "$top"; wait "$top" || true; }
  rm -f "$tmp/in"
  grep '^done' "$tmp/out" | sed 's/^done //' |
    python3 -c 'import json,sys; f=json.load(sys.stdin)["facts"]; print(f["runtime_ns_per_pair"], f["driver_ns_per_pair"])'
}

read -r rt0 dr0 < <(run without)
read -r rt1 dr1 < <(run with)
read -r rt2 dr2 < <(run without)
python3 - "$rt0" "$dr0" "$rt1" "$dr1" "$rt2" "$dr2" "$pairs" <<'PY'
import sys
rt0, dr0, rt1, dr1, rt2, dr2, n = map(int, sys.argv[1:])
rtb, drb = (rt0 + rt2) / 2, (dr0 + dr2) / 2
print(f"pairs per case: {n}")
print(f"{'':28}{'untraced':>12}{'leakwatch':>12}{'ratio':>8}")
print(f"{'cudaMalloc+cudaFree ns':28}{rtb:12.0f}{rt1:12d}{rt1 / rtb:8.2f}")
print(f"{'cuMemAlloc_v2+cuMemFree ns':28}{drb:12.0f}{dr1:12d}{dr1 / drb:8.2f}")
print(f"(untraced = mean of the runs before and after: {rt0}/{rt2} and {dr0}/{dr2})")
PY
