#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A many-threaded malloc/free loop with a planted leak (issue 33: "a
# 16-thread malloc/free loop at the highest rate this machine reaches: the
# daemon holds its CPU budget; a planted leak of 1 MiB/min is still named
# within 10 minutes"): bench/threads_leak.c, built here with gcc -O2, its N
# workers making malloc/free pairs as fast as they can while one thread
# (worker 0, or the main thread with --leak-thread main) keeps a 16 KiB
# block through lw_bench_leak_caller -> lw_bench_plant_leak whenever its
# kept bytes fall behind 1 MiB/min; under the daemon with its default
# settings (one target matching the pid, nothing else: mode auto).
#
# It prints, per run:
#   - flag time: seconds from the attach until a site whose frames hold both
#     lw_bench_plant_leak and lw_bench_leak_caller reads trend `leak`, and
#     its kind (`heap`, or `mmap`: the brk steps of the main arena, seen
#     while no heap probe is on, name the planting frames too);
#   - accuracy: the `heap` bytes leakwatch holds under such sites against the
#     target's own count of what it kept, and against what it kept since
#     the heap probes were attached (the daemon log's "heap probes
#     attached" line, the count interpolated between chunk ends): what
#     leakwatch could have seen, as it re-baselines the heap then;
#   - cost: pairs/s and CPU ms per million pairs under the daemon (every
#     chunk from the attach until the flag, or the timeout) against bare
#     chunks of the same process before the daemon and after it stopped
#     (leaking in both: the target never stops its leak);
#   - the daemon's own CPU (utime+stime of /proc/PID/stat) as % of one core,
#     over the chunks alone and over the whole span with the API reads;
#   - false flags: other sites of the process reading `leak`;
#   - what the daemon did: the modes seen, the chunks read suspended or in
#     bursts, the process's `bursts` object and `sampling.heap_walk` at the
#     end, the governor/escalation/walk counters from /metrics and the
#     daemon's governor/escalation log lines.
#   With --after-flag-minutes A the daemon stays A minutes after the flag
#   (its cost still counted) and the accuracy is read again at the end.
#
#   bench/busy_threads.sh [--runs N] [--threads T] [--leak-thread worker|main]
#                         [--timeout-minutes M] [--bare-chunks K] [--chunk-seconds S]
#                         [--after-flag-minutes A] [BUILD_DIR]
# 1 run, 16 threads, the leak on worker 0, timeout 10 minutes, 3 bare chunks
# of 10 s, 0 minutes after the flag, BUILD_DIR ./build. Root. Needs gcc,
# curl and python3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"
# shellcheck source=bench/lib/serve_leak.sh
. "$here/lib/serve_leak.sh"
usage() { sed -n 2,42p "$0" >&2; exit 2; }
runs=1 threads=16 leak_thread=worker timeout_minutes=10 bare_chunks=3 chunk_seconds=10 after_flag_minutes=0
build=./build
python=${PYTHON:-python3}
parse_options "--runs=runs --threads=threads --leak-thread=leak_thread --timeout-minutes=timeout_minutes
  --bare-chunks=bare_chunks --chunk-seconds=chunk_seconds --after-flag-minutes=after_flag_minutes" "$@"
[[ $leak_thread == worker || $leak_thread == main ]] || usage
for n in "$runs" "$threads" "$timeout_minutes" "$bare_chunks" "$chunk_seconds" "$after_flag_minutes"; do
  [[ $n =~ ^[0-9]+$ ]] || die "options take whole numbers: '$n'"
done
((bare_chunks > 0 && chunk_seconds > 0 && threads > 0)) || die "--bare-chunks, --chunk-seconds and --threads must be > 0"
require_root BPF
require_built scripts/build.sh "$build/leakwatch"
command -v curl >/dev/null || die "curl needed"
command -v gcc >/dev/null || die "gcc needed (to build bench/threads_leak.c)"
command -v "$python" >/dev/null || die "python3 needed (to read the API)"
make_scratch lw-busy-threads
on_exit() { kill_daemon; }
clk_tck=$(getconf CLK_TCK)

gcc -O2 -pthread -Wall -Wextra -Werror "$here/threads_leak.c" -o "$tmp/threads_leak" ||
  die "bench/threads_leak.c did not build"

# threads_chunk LABEL: one chunk of the loop; appends "PAIRS_PER_S
# CPU_MS_PER_MPAIR KEPT" to $tmp/LABEL and "UNIX KEPT" to $tmp/kept_at, and
# sets kept_bytes.
threads_chunk() {
  local k1 pps k2 cpu k3 kept
  printf '%s\n' "$chunk_seconds" >&"${TARGET[1]}"
  read -r -t $((chunk_seconds * 10 + 60)) -u "${TARGET[0]}" k1 pps k2 cpu k3 kept ||
    die "target stopped answering: $(tail -n 3 "$tmp/target.err")"
  [[ $k1 == pairs_per_s && $k2 == cpu_ms_per_mpair && $k3 == kept_bytes ]] || die "unexpected target output: $k1"
  echo "$pps $cpu $kept" >>"$tmp/$1"
  echo "$(date +%s.%N) $kept" >>"$tmp/kept_at"
  kept_bytes=$kept
}

# verdict PORT PID: two lines from the API. The first, "TREND KINDS BYTES
# OTHERS MODE SUSPENDED": of the sites whose frames name both
# lw_bench_plant_leak and lw_bench_leak_caller, the worst trend and the
# kinds of the sites that read it, their live bytes of kind heap (the
# blocks themselves; in light mode the brk steps the blocks caused are
# named too, as another kind, not counted here), then how many other sites
# read `leak`, the process's mode and tracing_suspended. The second, what
# else the run is to show, as words without spaces (named= lists each
# named site as KIND:BASIS:TREND:BYTES).
verdict() {
  local base="http://127.0.0.1:$1/api/v1"
  curl -sf "$base/processes/$2/sites" >"$tmp/sites.json" 2>/dev/null || echo '{}' >"$tmp/sites.json"
  curl -sf "$base/processes" >"$tmp/procs.json" 2>/dev/null || echo '{}' >"$tmp/procs.json"
  "$python" - "$tmp/sites.json" "$tmp/procs.json" "$2" <<'EOF' 2>/dev/null || printf 'unknown - 0 0 ? ?\napi_unreadable\n'
import json, sys
d, procs, pid = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
proc = next((p for p in procs.get("processes", []) if p.get("pid") == pid), {})
proc = {**d.get("process", {}), **proc}
rank = {"leak": 3, "growing": 2, "stable": 1, "unknown": 0}
trend, live, others, cut, cut_live, named = "unknown", 0, 0, 0, 0, []
def word(v): return json.dumps(v, separators=(",", ":")).replace(" ", "_")
for s in d.get("sites", []):
    fns = [f.get("function") or "" for f in s.get("frames", [])]
    plant = any(f.startswith("lw_bench_plant_leak") for f in fns)
    if plant and any(f.startswith("lw_bench_leak_caller") for f in fns):
        named.append(s)
        if s.get("kind") == "heap":
            live += s.get("live_bytes", 0)
        if rank.get(s.get("trend"), 0) > rank[trend]:
            trend = s["trend"]
    elif plant:
        cut += 1
        cut_live += s.get("live_bytes", 0)
    elif s.get("trend") == "leak":
        others += 1
holder = next((x for x in (proc, d) if "bursts" in x), None)
sampling = d.get("sampling") or proc.get("sampling") or {}
kinds = sorted({s.get("kind", "?") for s in named if s.get("trend", "unknown") == trend}) or ["-"]
print(trend, ",".join(kinds), live, others, proc.get("mode", "?"), str(proc.get("tracing_suspended", "?")).lower())
print("named=" + (";".join(f"{s.get('kind', '?')}:{s.get('basis', 'absent')}:{s.get('trend', '?')}:{s.get('live_bytes', 0)}"
                           for s in named) or "none") +
      f" plant_without_caller={cut}/{cut_live}B"
      f" heap_stale_since={proc.get('heap_stale_since')}"
      f" sampling={word({k: sampling[k] for k in ('mean_bytes', 'heap_basis', 'burst_fraction') if k in sampling})}"
      f" heap_walk={word(sampling['heap_walk']) if 'heap_walk' in sampling else 'absent'}"
      f" bursts={word(holder['bursts']) if holder else 'absent'}")
EOF
}

# counters PORT: the daemon's escalation, governor and heap-walk counters.
counters() {
  curl -sf "http://127.0.0.1:$1/metrics" 2>/dev/null |
    awk '/^leakwatch_(escalations_total|governor_suspensions_total|governor_bursts_total|drain_reallocs_total|process_heap_walk_records_total|process_heap_walk_undecided_bytes_total|process_heap_bursts_fraction)/ {
      printf "%s %s; ", $1, $2 }'
}

# threads_cost RUN: pairs/s and CPU ms per million pairs under the daemon
# ($tmp/daemon) against the bare chunks before it ($tmp/bare) and after it
# ($tmp/bareafter), both leaking, and against the two together.
threads_cost() {
  awk -v run="$1" '
    FNR == 1 { file++ }
    { pps[file] += $1; cpu[file] += $2; n[file]++ }
    END {
      b1 = pps[1] / n[1]; d = pps[2] / n[2]; b2 = pps[3] / n[3]; b = (pps[1] + pps[3]) / (n[1] + n[3])
      c1 = cpu[1] / n[1]; dc = cpu[2] / n[2]; c2 = cpu[3] / n[3]; c = (cpu[1] + cpu[3]) / (n[1] + n[3])
      printf "run %d: pairs/s bare %.0f (before %.0f, after %.0f), under the daemon %.0f (x%.3f, %+.1f%%; x%.3f of before, x%.3f of after)\n", run, b, b1, b2, d, d / b, (d / b - 1) * 100, d / b1, d / b2
      printf "run %d: CPU ms per million pairs bare %.3f (before %.3f, after %.3f), under the daemon %.3f (x%.3f)\n", run, c, c1, c2, dc, dc / c
    }' "$tmp/bare" "$tmp/daemon" "$tmp/bareafter"
}

# daemon_alive_or_die: dies, with the daemon's exit status and the end of
# its log, when it exited during the run (the figures would measure
# nothing, and the scratch folder with its log goes with the exit).
daemon_alive_or_die() {
  kill -0 "$daemon_pid" 2>/dev/null && return 0
  local rc=0
  wait "$daemon_pid" 2>/dev/null || rc=$?
  daemon_pid=''
  die "the daemon exited during the run (status $rc); its log ends: $(tail -n 20 "$tmp/daemon.err")"
}

# pct TICKS SECONDS: TICKS of CPU over SECONDS of wall, as % of one core.
pct() { awk -v t="$1" -v s="$2" -v hz="$clk_tck" 'BEGIN { printf "%.2f", (s > 0 ? t / hz / s * 100 : 0) }'; }

echo "host: $(host_summary); $threads threads, the leak on the $leak_thread thread" >&2
for ((run = 1; run <= runs; run++)); do
  : >"$tmp/bare"; : >"$tmp/daemon"; : >"$tmp/bareafter"; : >"$tmp/kept_at"
  start_coproc_target 30 "$tmp/threads_leak" --threads "$threads" --leak-thread "$leak_thread"
  for ((i = 0; i < bare_chunks; i++)); do
    threads_chunk bare
    echo "   run $run: bare $(tail -n 1 "$tmp/bare") (pairs/s, CPU ms/Mpair, kept)" >&2
  done
  start_default_daemon
  start=$(date +%s.%N) flagged='' false_flags=0 modes='' suspended_seen=0 bursts_seen=0 parked_seen=0
  live_at_flag=0 kept_at_flag=0 flag_kinds=- chunk_ticks=0 chunk_wall=0
  span_ticks0=$(cpu_ticks "$daemon_pid")
  deadline=$(($(date +%s) + timeout_minutes * 60))
  while (($(date +%s) < deadline)); do
    t0=$(date +%s.%N) c0=$(cpu_ticks "$daemon_pid")
    threads_chunk daemon
    daemon_alive_or_die
    c1=$(cpu_ticks "$daemon_pid")
    wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
    chunk_ticks=$((chunk_ticks + c1 - c0))
    chunk_wall=$(awk -v a="$chunk_wall" -v b="$wall" 'BEGIN { print a + b }')
    { read -r trend kinds live others mode suspended; read -r detail; } <<<"$(verdict "$port" "$target_pid")"
    el=$(seconds_since "$start")
    ((others > 0)) && false_flags=$((false_flags + others))
    [[ $suspended != true ]] || suspended_seen=$((suspended_seen + 1))
    bursts=${detail##* bursts=}
    [[ $bursts == absent || $bursts == null ]] || bursts_seen=$((bursts_seen + 1))
    [[ $detail != *'"parked":true'* ]] || parked_seen=$((parked_seen + 1))
    [[ " $modes " == *" $mode "* ]] || modes="$modes $mode"
    read -r pps _ _ < <(tail -n 1 "$tmp/daemon")
    echo "   run $run: ${el}s trend $trend ($kinds), $live B heap named of $kept_bytes kept; $pps pairs/s;" \
      "daemon $(pct $((c1 - c0)) "$wall")% of a core; mode $mode, suspended $suspended; $detail" >&2
    if [[ $trend == leak && -z $flagged ]]; then
      flagged=$el live_at_flag=$live kept_at_flag=$kept_bytes flag_kinds=$kinds
      deadline=$(($(date +%s) + after_flag_minutes * 60))
    fi
    [[ -z $flagged ]] || (($(date +%s) < deadline)) || break
  done
  { read -r _ _ live _ _ _; read -r detail; } <<<"$(verdict "$port" "$target_pid")"
  daemon_alive_or_die
  metrics=$(counters "$port")
  span_ticks=$(($(cpu_ticks "$daemon_pid") - span_ticks0)) span_wall=$(seconds_since "$start")
  kept_at_end=$kept_bytes  # the bare chunks below keep leaking
  stop_daemon
  for ((i = 0; i < bare_chunks; i++)); do
    threads_chunk bareafter
    echo "   run $run: bare after $(tail -n 1 "$tmp/bareafter")" >&2
  done
  stop_target
  site="lw_bench_plant_leak <- lw_bench_leak_caller"
  [[ -z $flagged ]] || echo "run $run: the site read leak as kind $flag_kinds; bytes below: kind heap"
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
  threads_cost "$run"
  echo "run $run: daemon CPU $(pct "$chunk_ticks" "$chunk_wall")% of one core over the chunks," \
    "$(pct "$span_ticks" "$span_wall")% over ${span_wall} s with the API reads"
  echo "run $run: other sites flagged leak: $false_flags; modes seen:$modes; chunks read suspended: $suspended_seen," \
    "in bursts: $bursts_seen, parked: $parked_seen, of $(wc -l <"$tmp/daemon")"
  echo "run $run: at the end: $detail"
  echo "run $run: counters: ${metrics:-none read}"
  echo "run $run: governor log lines: $(grep -c 'governor: pid' "$tmp/daemon.err" || true)," \
    "suspensions among them: $(grep 'governor: pid' "$tmp/daemon.err" | grep -c 'suspended for' || true)"
  grep -E "governor|escalation|heap probes" "$tmp/daemon.err" | sed "s/^/run $run daemon: /" || true
done
