#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Accuracy at scale (issue 17): Debian's redis-server filled with N keys by
# redis-benchmark, traced by `leakwatch top` with its default settings (no
# --live-max, no --sample-mean: the live map sized from the host, automatic
# sampling when the heap outgrows its share). Prints, per N, redis' own
# `used_memory` growth, leakwatch's heap live bytes and their ratio (the
# issue asks 1 +- 0.25; jemalloc rounds sizes up, so a little under 1 is
# expected), whether the heap was sampled and at what mean, what was not
# recorded, and the RSS of `top` and of redis.
#
#   bench/redis_scale.sh [--keys "100000 1000000 3000000"] [--value-bytes 100] [BUILD_DIR]   (as root)
#
# Each N starts a fresh redis-server (unix socket, no persistence), attaches
# `leakwatch top -p PID --json --interval 2`, waits for its first snapshot,
# runs `redis-benchmark -t set -r N -n 3N -P 16` (about 95% of the N keys
# exist after it: DBSIZE is printed), then reads snapshots until one is
# taken 3 s after the benchmark ended. 3,000,000 keys take about 5 minutes
# on a 2-core VM. Needs redis-server and redis-tools
# (scripts/install-deps.sh --with-test-tools).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"

usage() { echo "usage: $0 [--keys \"N ...\"] [--value-bytes B] [BUILD_DIR]" >&2; exit 2; }
keys_list="100000 1000000 3000000" value=100 build=./build
parse_options "--keys=keys_list --value-bytes=value" "$@"
require_root BPF
lw=$build/leakwatch
[[ -x $lw ]] || die "no leakwatch binary at $lw (build first)"
{ command -v redis-server && command -v redis-benchmark; } >/dev/null ||
  die "redis-server/redis-benchmark missing: scripts/install-deps.sh --with-test-tools"

work=$(mktemp -d /tmp/lw-redis-scale.XXXXXX)
redis_pid='' top_pid=''
cleanup() {
  [[ -z $top_pid ]] || kill "$top_pid" 2>/dev/null || true
  [[ -z $redis_pid ]] || kill "$redis_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

used_memory() { redis-cli -s "$work/redis.sock" INFO memory | tr -d '\r' | sed -n 's/^used_memory://p'; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

printf '%-9s %9s %12s %12s %7s %10s %-16s %9s %9s %9s\n' keys dbsize growth_B heap_live_B ratio sampled reason map_full top_MiB redis_MiB
for n in $keys_list; do
  rm -f "$work/redis.sock" "$work/top.json"
  redis-server --port 0 --unixsocket "$work/redis.sock" --save '' --appendonly no --dir "$work" \
    >"$work/redis.log" 2>&1 &
  redis_pid=$!
  for _ in $(seq 100); do [[ -S $work/redis.sock ]] && used_memory >/dev/null 2>&1 && break; sleep 0.1; done
  "$lw" top -p "$redis_pid" --json --interval 2 >"$work/top.json" 2>"$work/top.err" &
  top_pid=$!
  for _ in $(seq 600); do [[ -s $work/top.json ]] && break; sleep 0.1; done
  [[ -s $work/top.json ]] || die "top printed no snapshot: $(tail -5 "$work/top.err")"
  before=$(used_memory)
  redis-benchmark -s "$work/redis.sock" -t set -r "$n" -n $((3 * n)) -d "$value" -P 16 -q >/dev/null 2>&1
  after=$(used_memory)
  dbsize=$(redis-cli -s "$work/redis.sock" DBSIZE | tr -d '\r')
  quiet=$(date +%s.%N)
  line=''
  for _ in $(seq 300); do
    line=$(tail -n 1 "$work/top.json")
    if [[ -n $line ]] && python3 -c 'import json,sys; sys.exit(0 if json.loads(sys.argv[1])["timestamp"] >= float(sys.argv[2]) + 3 else 1)' "$line" "$quiet" 2>/dev/null; then
      break
    fi
    sleep 1
  done
  top_kib=$(rss_kib "$top_pid") redis_kib=$(rss_kib "$redis_pid")
  python3 - "$line" "$n" "$dbsize" "$before" "$after" "$top_kib" "$redis_kib" <<'EOF'
import json, sys
snap = json.loads(sys.argv[1])
n, dbsize, before, after, top_kib, redis_kib = sys.argv[2:]
growth = int(after) - int(before)
heap = snap.get("kinds", {}).get("heap", {}).get("live_bytes", 0)
s = snap["sampling"]
mean = s["mean_bytes"]
print("%-9s %9s %12d %12d %7.3f %10s %-16s %9d %9.1f %9.1f" % (
    n, dbsize, growth, heap, heap / growth if growth else 0.0,
    ("%d B" % mean) if mean else "exact", s.get("reason") or "-",
    snap["unrecorded"]["allocations"]["map_full"], int(top_kib) / 1024, int(redis_kib) / 1024))
EOF
  kill "$top_pid" 2>/dev/null || true
  wait "$top_pid" 2>/dev/null || true
  top_pid=''
  kill "$redis_pid" 2>/dev/null || true
  wait "$redis_pid" 2>/dev/null || true
  redis_pid=''
done
