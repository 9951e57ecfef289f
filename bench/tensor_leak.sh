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
# shellcheck source=bench/lib/serve_leak.sh
. "$here/lib/serve_leak.sh"
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
on_exit() { kill_daemon; }

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
  for ((i = 0; i < bare_chunks; i++)); do serve_chunk bare 0; done
  extra=''
  [[ -z $max_tensor_hits ]] || extra=$(printf 'governor:\n  max_tensor_hits_per_second: %s' "$max_tensor_hits")
  start_default_daemon "$extra"
  start=$(date +%s.%N) flagged='' false_flags=0 modes='' kept_bytes=0
  deadline=$(($(date +%s) + timeout_minutes * 60))
  while (($(date +%s) < deadline)); do
    serve_chunk daemon 1
    read -r trend live others state mode <<<"$(verdict "$port" "$target_pid")"
    el=$(seconds_since "$start")
    ((others > 0)) && false_flags=$((false_flags + others))
    [[ " $modes " == *" $mode "* ]] || modes="$modes $mode"
    echo "   run $run: ${el}s trend $trend, $live B under remember_batch of $kept_bytes kept; tier $state, mode $mode" >&2
    if [[ $trend == leak ]]; then flagged=$el; break; fi
  done
  read -r _ live _ state _ <<<"$(verdict "$port" "$target_pid")"
  kept_at_flag=$kept_bytes  # the bare chunks below keep leaking
  stop_daemon
  # Bare again, leaking as under the daemon: the leak costs the loop by
  # itself (the kept tensors fragment the heap; 3-4% here), which is not
  # leakwatch's cost. Its bytes come after the accuracy was read.
  for ((i = 0; i < bare_chunks; i++)); do serve_chunk bareleak 1; done
  stop_target
  serve_accuracy "$run" "remember_batch" "${flagged:-none}" "$live" "$kept_at_flag"
  serve_cost "$run"
  echo "run $run: other sites flagged leak: $false_flags; modes seen:$modes; tensor tier $state"
  grep -E "governor|escalation" "$tmp/daemon.err" | sed "s/^/run $run daemon: /" || true
done
