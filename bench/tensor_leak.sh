#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The tensor tier on the workload it exists for (issue 31): a busy PyTorch
# serving loop (bench/torch_serve_leak.py: conv net, batch 4, one thread)
# leaking 4 MiB/min of 64 KiB tensors through its Python function
# `remember_batch`, under the daemon with its default settings (one target
# matching the pid, nothing else: mode auto, the tensor tier on).
#
# It prints, per run:
#   - flag time: seconds from the leak's start (the daemon attached) until
#     the site holding tensor_cpu under remember_batch reads trend `leak`;
#   - accuracy: the bytes leakwatch holds under remember_batch against the
#     target's own count of what it kept (relative error);
#   - cost over the whole run: iterations/s and CPU ms per iteration under
#     the daemon (every chunk from the attach until the flag) against bare
#     chunks of the same process after the daemon stops, still leaking (the
#     leak costs the loop 3-4% by itself); bare chunks before the daemon
#     starts, not leaking, show that share;
#   - false flags: any other site of the process called `leak` (the loop's
#     churn must never be);
#   - what the daemon did: mode (escalations), the tier's state.
#
#   bench/tensor_leak.sh [--runs N] [--timeout-minutes M] [--bare-chunks K] [--chunk-seconds S]
#                        [--max-tensor-hits N] [BUILD_DIR]
# --max-tensor-hits sets governor.max_tensor_hits_per_second (unset: the
# default; 0: no budget), to see the tier kept on where the default
# budget suspends it.
# Root. Needs python3-torch (scripts/install-deps.sh --with-bench-tools).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"
usage() { sed -n 2,27p "$0" >&2; exit 2; }
runs=1 timeout_minutes=6 bare_chunks=3 chunk_seconds=10 build=./build max_tensor_hits=
python=${PYTHON:-/usr/bin/python3}
parse_options "--runs=runs --timeout-minutes=timeout_minutes --bare-chunks=bare_chunks
  --chunk-seconds=chunk_seconds --max-tensor-hits=max_tensor_hits" "$@"
require_root BPF
require_built scripts/build.sh "$build/leakwatch"
"$python" -c 'import torch' 2>/dev/null ||
  die "python3-torch not installed: scripts/install-deps.sh --with-bench-tools"
command -v curl >/dev/null || die "curl needed"
make_scratch lw-tensor-leak
daemon_pid=''
on_exit() { [[ -z $daemon_pid ]] || kill -KILL "$daemon_pid" 2>/dev/null || true; }

# chunk LEAK: one chunk of the loop; appends "its cpu kept" to $tmp/LABEL.
chunk() {
  local label=$1 leak=$2 k1 its k2 cpu k3 kept
  printf '%s %s\n' "$chunk_seconds" "$leak" >&"${TARGET[1]}"
  read -r -t $((chunk_seconds * 10 + 60)) -u "${TARGET[0]}" k1 its k2 cpu k3 kept ||
    die "target stopped answering: $(tail -n 3 "$tmp/target.err")"
  [[ $k1 == its_per_s && $k2 == cpu_ms_per_it && $k3 == kept_bytes ]] || die "unexpected target output: $k1"
  echo "$its $cpu $kept" >>"$tmp/$label"
  kept_bytes=$kept
}

# verdict PORT PID: "TREND BYTES FALSE_FLAGS STATE MODE" from the API: the
# tensor_cpu sites whose frames name remember_batch (their trend, the worst
# of them, and their live bytes), how many other sites read `leak`, the
# tensor tier's state and the process's mode.
verdict() {
  curl -sf "http://127.0.0.1:$1/api/v1/processes/$2/sites" | "$python" -c '
import json, sys
d = json.load(sys.stdin)
rank = {"leak": 3, "growing": 2, "stable": 1, "unknown": 0}
trend, live, others = "unknown", 0, 0
for s in d.get("sites", []):
    named = any(f.get("function") == "remember_batch" for f in s.get("frames", []))
    if named and s.get("kind") == "tensor_cpu":
        live += s.get("live_bytes", 0)
        if rank.get(s.get("trend"), 0) > rank[trend]:
            trend = s["trend"]
    elif s.get("trend") == "leak":
        others += 1
mode = d.get("process", {}).get("mode", "?")
print(trend, live, others, d.get("tensor", {}).get("state", "?"), mode)
' 2>/dev/null || echo "unknown 0 0 ? ?"
}

echo "host: $(host_summary); torch $("$python" -c 'import torch; print(torch.__version__)')" >&2
for ((run = 1; run <= runs; run++)); do
  : >"$tmp/bare"; : >"$tmp/daemon"; : >"$tmp/bareleak"
  start_coproc_target 180 "$python" "$here/torch_serve_leak.py"
  for ((i = 0; i < bare_chunks; i++)); do chunk bare 0; done
  port=$((20000 + RANDOM % 20000))
  printf 'listen: "127.0.0.1:%s"\ntargets:\n  - name: torch\n    match: {pids: [%s]}\n' "$port" "$target_pid" >"$tmp/cfg.yaml"
  [[ -z $max_tensor_hits ]] ||
    printf 'governor:\n  max_tensor_hits_per_second: %s\n' "$max_tensor_hits" >>"$tmp/cfg.yaml"
  "$build/leakwatch" run --config "$tmp/cfg.yaml" 2>"$tmp/daemon.err" &
  daemon_pid=$!
  for _ in $(seq 150); do
    curl -sf "http://127.0.0.1:$port/api/v1/processes/$target_pid/sites" >/dev/null 2>&1 && break
    sleep 0.2
  done
  start=$(date +%s.%N) flagged='' false_flags=0 modes='' kept_bytes=0
  deadline=$(($(date +%s) + timeout_minutes * 60))
  while (($(date +%s) < deadline)); do
    chunk daemon 1
    read -r trend live others state mode <<<"$(verdict "$port" "$target_pid")"
    el=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
    ((others > 0)) && false_flags=$((false_flags + others))
    [[ " $modes " == *" $mode "* ]] || modes="$modes $mode"
    echo "   run $run: ${el}s trend $trend, $live B under remember_batch of $kept_bytes kept; tier $state, mode $mode" >&2
    if [[ $trend == leak ]]; then flagged=$el; break; fi
  done
  read -r _ live _ state _ <<<"$(verdict "$port" "$target_pid")"
  kept_at_flag=$kept_bytes  # the bare chunks below keep leaking
  kill -TERM "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true; daemon_pid=''
  # Bare again, leaking as under the daemon: the leak costs the loop by
  # itself (the kept tensors fragment the heap; 3-4% here), which is not
  # leakwatch's cost. Its bytes come after the accuracy was read.
  for ((i = 0; i < bare_chunks; i++)); do chunk bareleak 1; done
  stop_target
  awk -v run="$run" -v flagged="${flagged:-none}" -v live="$live" -v kept="$kept_at_flag" \
    -v ff="$false_flags" -v modes="$modes" -v state="$state" '
    FNR == 1 { file++ }
    { its[file] += $1; cpu[file] += $2; n[file]++ }
    END {
      bi = its[1] / n[1]; di = its[2] / n[2]; bc = cpu[1] / n[1]; dc = cpu[2] / n[2]
      li = its[3] / n[3]; lc = cpu[3] / n[3]
      err = kept > 0 ? (live - kept) / kept * 100 : 0
      printf "run %d: flagged leak under remember_batch after %s s; %d B attributed of %d B kept (%+.2f%%)\n", run, flagged, live, kept, err
      printf "run %d: it/s bare leaking %.1f, under the daemon %.1f (x%.3f, %.1f%% fewer); CPU ms/it bare leaking %.4f, daemon %.4f (x%.3f)\n", run, li, di, di / li, (1 - di / li) * 100, lc, dc, dc / lc
      printf "run %d: bare without the leak (before the daemon) %.1f it/s, %.4f CPU ms/it: the leak alone x%.3f CPU/it\n", run, bi, bc, lc / bc
      printf "run %d: other sites flagged leak: %d; modes seen:%s; tensor tier %s\n", run, ff, modes, state
    }' "$tmp/bare" "$tmp/daemon" "$tmp/bareleak"
  grep -E "governor|escalation" "$tmp/daemon.err" | sed "s/^/run $run daemon: /" || true
done
