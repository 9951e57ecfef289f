#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A fork loop run by an unprivileged user (nobody) under the daemon with its
# built-in default config (every process, mode auto), against the same loop
# with no daemon, in one run (issue 32: "the daemon's CPU under fork
# storms"), the daemon with the built-in default's target. Per row: forks per second, and with the daemon its CPU
# (/proc/PID/stat utime+stime over the loop) as a share of one core, and the
# fork and exec events it deferred and dropped (limits.max_discoveries_per_second).
#
#   bench/fork_storm.sh [--seconds S] [--reps N] [BUILD_DIR]   (as root)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"
usage() { echo "usage: $0 [--seconds S] [--reps N] [BUILD_DIR]" >&2; exit 2; }
seconds=10 reps=3 build=./build
parse_options "--seconds=seconds --reps=reps" "$@"
require_root "the daemon loads BPF"
require_built scripts/build.sh "$build/leakwatch" "$build/tests/targets/fork_storm"
command -v setpriv >/dev/null || die "setpriv not found (util-linux)"
command -v curl >/dev/null || die "curl not found (apt-get install curl)"
make_scratch lw-fork-storm
# The loop runs as nobody: its copy must be readable and executable by it.
install -m 0755 "$build/tests/targets/fork_storm" "$tmp/fork_loop"
chmod 0755 "$tmp"
daemon_pid=''
on_exit() { [[ -z $daemon_pid ]] || kill -INT "$daemon_pid" 2>/dev/null || true; }
# The built-in default (every process, auto), on a port of its own.
port=$((20000 + $$ % 20000))
cat >"$tmp/daemon.yaml" <<YAML
listen: "127.0.0.1:$port"
targets:
  - name: host
    match: {cgroup: "/"}
    mode: auto
YAML

# The test target's fork loop (tests/targets/native/fork_storm.c): "forks N".
loop() {
  setpriv --reuid=65534 --regid=65534 --clear-groups "$tmp/fork_loop" "$seconds" |
    awk -v s="$seconds" '{ printf "%.0f\n", $2 / s }'
}

echo "host: $(host_summary)"
for ((r = 1; r <= reps; ++r)); do
  bare=$(loop)
  "$build/leakwatch" run --config "$tmp/daemon.yaml" >"$tmp/daemon.log" 2>&1 &
  daemon_pid=$!
  curl -sf --retry 30 --retry-delay 1 --retry-connrefused -o /dev/null http://127.0.0.1:$port/healthz ||
    die "daemon not up: $(tail -n 5 "$tmp/daemon.log")"
  sleep 2
  a=$(cpu_ticks "$daemon_pid")
  traced=$(loop)
  b=$(cpu_ticks "$daemon_pid")
  status=$(curl -sf http://127.0.0.1:$port/api/v1/status)
  kill -INT "$daemon_pid"
  wait "$daemon_pid" || true
  daemon_pid=''
  ticks=$(getconf CLK_TCK)
  read -r deferred dropped < <(python3 -c 'import json,sys; d=json.load(sys.stdin).get("discoveries", {})
print(d.get("deferred", "n/a"), d.get("dropped", "n/a"))' <<<"$status")
  awk -v r="$r" -v bare="$bare" -v traced="$traced" -v d="$((b - a))" -v hz="$ticks" -v s="$seconds" \
    -v def="$deferred" -v drop="$dropped" 'BEGIN {
      printf "rep %d: bare %s forks/s; under the daemon %s forks/s (%.2fx); daemon CPU %.1f%% of a core; deferred %s, dropped %s\n",
             r, bare, traced, traced / bare, 100 * d / hz / s, def, drop }'
done
