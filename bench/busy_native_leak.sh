#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A native leak in a process too busy to trace every call (issue 33, its
# first figure): the PyTorch serving loop of bench/torch_serve_leak.py run
# with --leak native, whose Python function `remember_native` calls
# lw_bench_native_keep (bench/native_keep.cc, built here -O2 without frame
# pointers) through ctypes, which news 64 KiB and never frees it, at 4 MiB/min;
# under the daemon with its default settings (one target matching the pid,
# nothing else: mode auto).
#
# It prints, per run:
#   - flag time: seconds from the attach until a site whose frames hold both
#     lw_bench_native_keep and remember_native reads trend `leak`;
#   - accuracy: the bytes leakwatch holds under such sites against the
#     library's own count of what it kept (relative error);
#   - cost over the whole run: it/s and CPU ms per iteration under the
#     daemon (every chunk from the attach until the flag) against bare
#     chunks of the same process after the daemon stops, still leaking;
#     bare chunks before the daemon, not leaking, show what the leak costs;
#   - false flags: other sites of the process reading `leak`;
#   - what the daemon did: the modes seen, the governor's suspensions (its
#     log lines, tracing_suspended and heap_stale_since), the process's
#     `bursts` object, `sampling`'s heap_basis and burst_fraction, and the
#     named sites' `basis`/`method`/`estimate` fields when the API has them
#     ("absent" otherwise), and the native frame seen without its Python
#     caller (a stack cut short).
#
#   - with --after-flag-minutes A, the daemon stays A minutes after the flag
#     (its cost still counted) and the accuracy is read again at the end;
#     each accuracy line is also given against the bytes kept since the heap
#     probes were attached (the escalation, from the daemon's log, the
#     library's count interpolated between chunk ends): what leakwatch could
#     have seen, as it re-baselines the heap then.
#
#   bench/busy_native_leak.sh [--runs N] [--timeout-minutes M] [--bare-chunks K]
#                             [--chunk-seconds S] [--after-flag-minutes A] [BUILD_DIR]
# Timeout 10 minutes, 3 bare chunks of 10 s, 0 minutes after the flag.
# LW_BENCH_EXTRA_YAML, when set, is appended to the daemon's config (say
# `log_level: debug` to see each heap walk). Root. Needs python3-torch
# (scripts/install-deps.sh --with-bench-tools), g++ and curl.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"
# shellcheck source=bench/lib/serve_leak.sh
. "$here/lib/serve_leak.sh"
usage() { sed -n 2,30p "$0" >&2; exit 2; }
runs=1 timeout_minutes=10 bare_chunks=3 chunk_seconds=10 after_flag_minutes=0 build=./build
python=${PYTHON:-/usr/bin/python3}
parse_options "--runs=runs --timeout-minutes=timeout_minutes --bare-chunks=bare_chunks
  --chunk-seconds=chunk_seconds --after-flag-minutes=after_flag_minutes" "$@"
require_root BPF
require_built scripts/build.sh "$build/leakwatch"
"$python" -c 'import torch' 2>/dev/null ||
  die "python3-torch not installed: scripts/install-deps.sh --with-bench-tools"
command -v curl >/dev/null || die "curl needed"
command -v g++ >/dev/null || die "g++ needed (to build bench/native_keep.cc)"
make_scratch lw-busy-native
on_exit() { kill_daemon; }

# As a user's extension would be built: optimized, no frame pointers.
g++ -O2 -fomit-frame-pointer -fPIC -shared -Wall -Wextra -Werror \
  "$here/native_keep.cc" -o "$tmp/libnative_keep.so" || die "bench/native_keep.cc did not build"

# verdict PORT PID: two lines from the API. The first, "TREND BYTES OTHERS
# MODE SUSPENDED": the sites whose frames name both lw_bench_native_keep
# and remember_native (the worst trend, their live bytes), how many other
# sites read `leak`, the process's mode and tracing_suspended. The second,
# what else the run is to show, as words without spaces.
verdict() {
  local base="http://127.0.0.1:$1/api/v1"
  curl -sf "$base/processes/$2/sites" >"$tmp/sites.json" 2>/dev/null || echo '{}' >"$tmp/sites.json"
  curl -sf "$base/processes" >"$tmp/procs.json" 2>/dev/null || echo '{}' >"$tmp/procs.json"
  "$python" - "$tmp/sites.json" "$tmp/procs.json" "$2" <<'EOF' 2>/dev/null || printf 'unknown 0 0 ? ?\napi_unreadable\n'
import json, sys
d, procs, pid = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
proc = next((p for p in procs.get("processes", []) if p.get("pid") == pid), {})
proc = {**d.get("process", {}), **proc}
rank = {"leak": 3, "growing": 2, "stable": 1, "unknown": 0}
trend, live, others, named, cut, cut_live, kinds, methods = "unknown", 0, 0, 0, 0, 0, set(), []
def word(v): return json.dumps(v, separators=(",", ":")).replace(" ", "_")
for s in d.get("sites", []):
    fns = [f.get("function") or "" for f in s.get("frames", [])]
    native = any(f.startswith("lw_bench_native_keep") for f in fns)
    if native and "remember_native" in fns:
        named += 1
        live += s.get("live_bytes", 0)
        kinds.add(s.get("kind", "?"))
        methods += [f"{k}={word(s[k])}" for k in ("basis", "method", "estimate") if k in s]
        if rank.get(s.get("trend"), 0) > rank[trend]:
            trend = s["trend"]
    elif native:
        cut += 1
        cut_live += s.get("live_bytes", 0)
    elif s.get("trend") == "leak":
        others += 1
holder = next((x for x in (proc, d) if "bursts" in x), None)
sampling = d.get("sampling") or proc.get("sampling") or {}
print(trend, live, others, proc.get("mode", "?"), str(proc.get("tracing_suspended", "?")).lower())
print(f"named_sites={named} kinds={','.join(sorted(kinds)) or '-'}"
      f" native_without_caller={cut}/{cut_live}B"
      f" heap_stale_since={proc.get('heap_stale_since')}"
      f" sampling={word({k: sampling[k] for k in ('mean_bytes', 'heap_basis', 'burst_fraction') if k in sampling})}"
      f" bursts={word(holder['bursts']) if holder else 'absent'}"
      f" site_basis/method/estimate={';'.join(sorted(set(methods))) if methods else 'absent'}")
EOF
}

# governor_counters PORT: the daemon's escalation and governor counters.
governor_counters() {
  curl -sf "http://127.0.0.1:$1/metrics" 2>/dev/null |
    awk '/^leakwatch_(escalations_total|governor_suspensions_total|governor_bursts_total)/ { printf "%s %s; ", $1, $2 }'
}

echo "host: $(host_summary); torch $("$python" -c 'import torch; print(torch.__version__)')" >&2
for ((run = 1; run <= runs; run++)); do
  : >"$tmp/bare"; : >"$tmp/daemon"; : >"$tmp/bareleak"
  start_coproc_target 180 "$python" "$here/torch_serve_leak.py" --leak native \
    --native-lib "$tmp/libnative_keep.so"
  for ((i = 0; i < bare_chunks; i++)); do serve_chunk bare 0; done
  start_default_daemon "${LW_BENCH_EXTRA_YAML:-}"
  start=$(date +%s.%N) flagged='' false_flags=0 modes='' kept_bytes=0 suspended_seen=0 bursts_seen=0
  live_at_flag=0 kept_at_flag=0
  : >"$tmp/kept_at"
  deadline=$(($(date +%s) + timeout_minutes * 60))
  while (($(date +%s) < deadline)); do
    serve_chunk daemon 1
    { read -r trend live others mode suspended; read -r detail; } <<<"$(verdict "$port" "$target_pid")"
    el=$(seconds_since "$start")
    ((others > 0)) && false_flags=$((false_flags + others))
    [[ $suspended != true ]] || suspended_seen=$((suspended_seen + 1))
    [[ $detail == *" bursts=absent "* || $detail == *" bursts=null "* ]] || bursts_seen=$((bursts_seen + 1))
    [[ " $modes " == *" $mode "* ]] || modes="$modes $mode"
    echo "$(date +%s.%N) $kept_bytes" >>"$tmp/kept_at"
    echo "   run $run: ${el}s trend $trend, $live B named of $kept_bytes kept; mode $mode," \
      "suspended $suspended; $detail" >&2
    if [[ $trend == leak && -z $flagged ]]; then
      flagged=$el live_at_flag=$live kept_at_flag=$kept_bytes
      deadline=$(($(date +%s) + after_flag_minutes * 60))
    fi
    [[ -z $flagged ]] || (($(date +%s) < deadline)) || break
  done
  { read -r _ live _ _ _; read -r detail; } <<<"$(verdict "$port" "$target_pid")"
  counters=$(governor_counters "$port")
  kept_at_end=$kept_bytes  # the bare chunks below keep leaking
  stop_daemon
  for ((i = 0; i < bare_chunks; i++)); do serve_chunk bareleak 1; done
  stop_target
  site="lw_bench_native_keep <- remember_native"
  if [[ -n $flagged ]]; then
    serve_accuracy "$run" "$site" "$flagged" "$live_at_flag" "$kept_at_flag"
    serve_accuracy "$run" "$site (at the flag, kept since the heap probes attached)" "$flagged" "$live_at_flag" \
      "$(kept_since_attach "$kept_at_flag")"
  fi
  if [[ -z $flagged ]] || ((after_flag_minutes > 0)); then
    echo "run $run: at the end ($(seconds_since "$start") s):"
    serve_accuracy "$run" "$site" "${flagged:-none}" "$live" "$kept_at_end"
    serve_accuracy "$run" "$site (kept since the heap probes attached)" "${flagged:-none}" "$live" \
      "$(kept_since_attach "$kept_at_end")"
  fi
  serve_cost "$run"
  echo "run $run: other sites flagged leak: $false_flags; modes seen:$modes; chunks read suspended: $suspended_seen," \
    "in bursts: $bursts_seen, of $(wc -l <"$tmp/daemon")"
  echo "run $run: at the end: $detail"
  echo "run $run: counters: ${counters:-none read}"
  echo "run $run: governor log lines: $(grep -c 'governor: pid' "$tmp/daemon.err" || true)," \
    "suspensions among them: $(grep 'governor: pid' "$tmp/daemon.err" | grep -c 'suspended for' || true)"
  grep -E "governor|escalation" "$tmp/daemon.err" | sed "s/^/run $run daemon: /" || true
done
