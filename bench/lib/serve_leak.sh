# SPDX-License-Identifier: Apache-2.0
# Shared by the drivers that run bench/torch_serve_leak.py under the daemon
# with its default settings (tensor_leak.sh, issue 31; busy_native_leak.sh,
# issue 33): the loop's chunks, the daemon started on one target matching
# the target's pid, and the whole-run cost summary. common.sh first.
#
# Conventions: the target runs as the coprocess TARGET (start_coproc_target)
# and answers `S LEAK` lines with `its_per_s X cpu_ms_per_it Y kept_bytes Z`;
# chunk_seconds is set; the daemon's pid is in daemon_pid, its port in port,
# its stderr in $tmp/daemon.err.
# shellcheck shell=bash
# The variables set here (kept_bytes, daemon_pid, port) are the drivers';
# those read here (tmp, build, target_pid, chunk_seconds) are common.sh's
# and the drivers'.
# shellcheck disable=SC2034,SC2154

# serve_chunk LABEL LEAK: one chunk of the loop, leaking when LEAK is 1;
# appends "ITS CPU KEPT" to $tmp/LABEL and sets kept_bytes.
serve_chunk() {
  local label=$1 leak=$2 k1 its k2 cpu k3 kept
  printf '%s %s\n' "$chunk_seconds" "$leak" >&"${TARGET[1]}"
  read -r -t $((chunk_seconds * 10 + 60)) -u "${TARGET[0]}" k1 its k2 cpu k3 kept ||
    die "target stopped answering: $(tail -n 3 "$tmp/target.err")"
  [[ $k1 == its_per_s && $k2 == cpu_ms_per_it && $k3 == kept_bytes ]] || die "unexpected target output: $k1"
  echo "$its $cpu $kept" >>"$tmp/$label"
  kept_bytes=$kept
}

# start_default_daemon [EXTRA_YAML]: the daemon with one target matching
# target_pid and nothing else (mode auto), plus EXTRA_YAML when given, on a
# random loopback port; waits up to 30 s for its API to answer for the pid
# (then goes on, saying so: the first chunks read `unknown`).
# shellcheck disable=SC2120
start_default_daemon() {
  port=$((20000 + RANDOM % 20000))
  printf 'listen: "127.0.0.1:%s"\ntargets:\n  - name: torch\n    match: {pids: [%s]}\n' \
    "$port" "$target_pid" >"$tmp/cfg.yaml"
  [[ -z ${1:-} ]] || printf '%s\n' "$1" >>"$tmp/cfg.yaml"
  "$build/leakwatch" run --config "$tmp/cfg.yaml" 2>"$tmp/daemon.err" &
  daemon_pid=$!
  local i
  for ((i = 0; i < 150; i++)); do
    curl -sf "http://127.0.0.1:$port/api/v1/processes/$target_pid/sites" >/dev/null 2>&1 && return 0
    kill -0 "$daemon_pid" 2>/dev/null || die "daemon exited: $(tail -n 3 "$tmp/daemon.err")"
    sleep 0.2
  done
  echo "${0##*/}: the daemon's API did not answer for pid $target_pid within 30 s" >&2
}

# SIGTERM to the daemon, reaped.
stop_daemon() {
  kill -TERM "$daemon_pid" 2>/dev/null || true
  wait "$daemon_pid" 2>/dev/null || true
  daemon_pid=''
}

# For the drivers' on_exit: never leave the daemon attached.
kill_daemon() { [[ -z ${daemon_pid:-} ]] || kill -KILL "$daemon_pid" 2>/dev/null || true; }

# seconds_since START: whole seconds since START (date +%s.%N).
seconds_since() {
  awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }'
}

# serve_cost RUN: the whole-run cost from $tmp/bare (before the daemon, not
# leaking), $tmp/daemon (every chunk under it) and $tmp/bareleak (after it
# stopped, still leaking): it/s and CPU ms per iteration under the daemon
# against bare leaking, and what the leak alone costs.
serve_cost() {
  awk -v run="$1" '
    FNR == 1 { file++ }
    { its[file] += $1; cpu[file] += $2; n[file]++ }
    END {
      bi = its[1] / n[1]; di = its[2] / n[2]; bc = cpu[1] / n[1]; dc = cpu[2] / n[2]
      li = its[3] / n[3]; lc = cpu[3] / n[3]
      printf "run %d: it/s bare leaking %.1f, under the daemon %.1f (x%.3f, %.1f%% fewer); CPU ms/it bare leaking %.4f, daemon %.4f (x%.3f)\n", run, li, di, di / li, (1 - di / li) * 100, lc, dc, dc / lc
      printf "run %d: bare without the leak (before the daemon) %.1f it/s, %.4f CPU ms/it: the leak alone x%.3f CPU/it\n", run, bi, bc, lc / bc
    }' "$tmp/bare" "$tmp/daemon" "$tmp/bareleak"
}

# serve_accuracy RUN SITE FLAGGED LIVE KEPT: the run's flag time (or "none")
# and the bytes attributed under SITE against the target's own count.
serve_accuracy() {
  awk -v run="$1" -v site="$2" -v flagged="${3:-none}" -v live="$4" -v kept="$5" 'BEGIN {
    err = kept > 0 ? (live - kept) / kept * 100 : 0
    printf "run %d: flagged leak under %s after %s s; %d B attributed of %d B kept (%+.2f%%)\n", run, site, flagged, live, kept, err
  }'
}

# kept_since_attach KEPT: KEPT less the target's count when the heap probes
# were attached (the daemon log's first "heap probes attached" line), that
# count interpolated between the chunk ends of $tmp/kept_at ("UNIX KEPT").
kept_since_attach() {
  local stamp at
  stamp=$(grep -m1 'heap probes attached' "$tmp/daemon.err" | cut -d' ' -f1) || true
  [[ -n $stamp ]] || { echo "$1"; return; }
  at=$(date -d "$stamp" +%s.%N)
  awk -v at="$at" -v kept="$1" '
    { t[NR] = $1; k[NR] = $2 }
    END {
      base = 0
      for (i = 2; i <= NR; i++)
        if (t[i - 1] <= at && at <= t[i]) base = k[i - 1] + (k[i] - k[i - 1]) * (at - t[i - 1]) / (t[i] - t[i - 1])
      if (NR > 0 && at > t[NR]) base = k[NR]
      printf "%d\n", kept - base
    }' "$tmp/kept_at"
}
