#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Where the time goes, per BPF program, on the PyTorch conv loop (the cost
# issue's first step): bench/torch_infer.py runs SECONDS of inference bare,
# then under `leakwatch top -p PID` with each row's options; with
# kernel.bpf_stats_enabled each of the tracer's programs reports its calls
# and run time, printed per inference iteration beside the target's own
# CPU per iteration (bare in the same process, same run).
#
#   bench/bpf_breakdown.sh [--seconds S] [--model conv|mlp] [--row "TOP OPTIONS"]... [BUILD_DIR]   (root)
#
# Default rows: "--mode full", "--mode full --no-python-frames",
# "--mode full --unwind frame_pointers", "--mode light". The run time
# counts the programs' own CPU (stack walk, hashing, map updates, ring
# submits), not the traps that run them: the target's CPU column has both.
# shellcheck disable=SC2317
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"
python=${PYTHON:-/usr/bin/python3}

print_help() { sed -n '3,16p' "$0" | sed 's/^# \{0,1\}//'; }
usage() { echo "usage: $0 [--seconds S] [--model conv|mlp] [--row \"TOP OPTIONS\"]... [BUILD_DIR]" >&2; exit 2; }
seconds=8 model=conv build=./build rows=()
parse_options "--seconds=seconds --row+=rows --model=model" "$@"
((${#rows[@]})) || rows=("--mode full" "--mode full --no-python-frames" "--mode full --unwind frame_pointers" "--mode light")
require_root BPF
leakwatch=$build/leakwatch
require_built scripts/build.sh "$leakwatch"
command -v bpftool >/dev/null || die "bpftool not found: scripts/install-deps.sh --with-test-tools"
"$python" -c 'import torch' 2>/dev/null || die "python3-torch not installed: scripts/install-deps.sh --with-bench-tools"

make_scratch lw-bpf-breakdown
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
on_exit() { sysctl -qw kernel.bpf_stats_enabled="$old_stats"; }
sysctl -qw kernel.bpf_stats_enabled=1

start_coproc_target 180 "$python" "$here/torch_infer.py" --model "$model"

# "name run_cnt run_time_ns" for every program the tracer holds.
prog_stats() {
  local ids=() fd id
  for fd in /proc/"$tracer_pid"/fdinfo/*; do
    id=$(awk '/^prog_id:/ { print $2 }' "$fd" 2>/dev/null) || continue
    [[ -n $id ]] && ids+=("$id")
  done
  for id in $(printf '%s\n' "${ids[@]}" | sort -u); do
    bpftool prog show id "$id" -j 2>/dev/null || true
    echo
  done | "$python" -c '
import json, sys
for line in sys.stdin:
    line = line.strip()
    if not line: continue
    p = json.loads(line)
    print(p.get("name", "?"), p.get("run_cnt", 0), p.get("run_time_ns", 0))'
}

batch() {  # prints "its_per_s cpu_ms_per_it"
  local key its key2 cpu
  printf '%s\n' "$seconds" >&"${TARGET[1]}"
  read -r -t $((seconds * 20 + 60)) -u "${TARGET[0]}" key its key2 cpu || die "target stopped answering"
  [[ $key == its_per_s && $key2 == cpu_ms_per_it ]] || die "unexpected target output: $key $its $key2 $cpu"
  echo "$its $cpu"
}

read -r bare_its bare_cpu < <(batch)
echo "host: $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); ${seconds}s per row"
printf 'bare: %.1f it/s, %.3f CPU ms/it\n\n' "$bare_its" "$bare_cpu"
for row in "${rows[@]}"; do
  # launch_tracer removes top.out first: the wait below must see this
  # row's first line, not the previous row's output (the shell truncates it
  # only once the tracer's job has started).
  # shellcheck disable=SC2086
  launch_tracer top "$leakwatch" top -p "$target_pid" --interval 1 --json $row
  wait_attached "$row: leakwatch" top 90
  batch >/dev/null  # warm: tables, frame cache, stack map
  prog_stats >"$tmp/before"
  read -r its cpu < <(batch)
  prog_stats >"$tmp/after"
  kill -INT "$tracer_pid"; wait "$tracer_pid" 2>/dev/null || true
  last=$(tail -n 1 "$tmp/top.out")
  tracer_pid=''
  "$python" - "$tmp/before" "$tmp/after" "$its" "$cpu" "$seconds" "$bare_cpu" "$row" "$last" <<'PY'
import json, sys
def load(path):
    out = {}
    for line in open(path):
        name, cnt, ns = line.split()
        c, n = out.get(name, (0, 0))
        out[name] = (c + int(cnt), n + int(ns))
    return out
before, after = load(sys.argv[1]), load(sys.argv[2])
its, cpu, seconds, bare_cpu, row = float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), sys.argv[7]
iters = its * seconds
snap = json.loads(sys.argv[8])
print(f"{row}: {its:.1f} it/s, {cpu:.3f} CPU ms/it ({cpu / bare_cpu:.2f}x bare, +{(cpu - bare_cpu) * 1000:.0f} us/it)")
print(f"  {'program':<24} {'calls/it':>9} {'ns/call':>9} {'us/it':>8}")
total = 0.0
for name in sorted(after, key=lambda n: -(after[n][1] - before.get(n, (0, 0))[1])):
    dc = after[name][0] - before.get(name, (0, 0))[0]
    dn = after[name][1] - before.get(name, (0, 0))[1]
    if dc <= 0: continue
    total += dn / iters / 1000
    print(f"  {name:<24} {dc / iters:9.1f} {dn / dc:9.0f} {dn / iters / 1000:8.1f}")
print(f"  {'all programs':<24} {'':>9} {'':>9} {total:8.1f}  ({total / ((cpu - bare_cpu) * 1000) * 100 if cpu > bare_cpu else 0:.0f}% of the added CPU; the rest: traps, the consumer's wakeups)")
c = snap.get("counters", {})
keep = {k: v for k, v in c.items() if v and (k.startswith("stack_end") or k in (
    "events_seen", "events_dropped_ringbuf", "live_insert_failed", "stack_map_full", "stack_failed"))}
print(f"  counters: {json.dumps(keep)}\n")
PY
done
