#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Soak (issue #8): the daemon under allocation churn, process churn and
# leakers together for DURATION seconds; its RSS, open fds and threads are
# sampled every 5 s and must stay flat after warm-up. Prints the slopes.
#
#   bench/soak.sh [DURATION_S] [BUILD_DIR]      default 600 s, build
#   bench/soak.sh 86400                         the 24-hour soak
#
# Load, all traced by one `leakwatch run`:
#   - grower hot: malloc+free in a tight loop (mode full; the governor
#     suspends and re-attaches it with backoff, so that path soaks too);
#   - steady_leaker: 1 MiB/min at one site (mode full);
#   - plateau_cache: a 50 MiB cache turning over (mode full);
#   - spawner 100/s of a short-lived program matching a `full` selector and
#     spawner 1000/s of one matching a `light` selector (process churn and
#     pid reuse).
# Pass: the daemon never exits; after warm-up (the first quarter, at least
# 60 s) the fd floor does not rise (the count itself follows the tracked
# set), threads do not grow, RSS grows by at most max(4 MiB, 5%), tracked
# processes return to the long-lived ones once the churn stops and the fd
# count returns to the lowest seen during the run,
# and every target exits 0. Needs root (BPF).
set -euo pipefail
duration=${1:-600}
build=$(cd "${2:-build}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
targets="$build/tests/targets"
leakwatch="$build/leakwatch"
[ "$(id -u)" -eq 0 ] || { echo "soak: needs root (BPF)" >&2; exit 4; }
for f in "$leakwatch" "$targets/grower" "$targets/steady_leaker" "$targets/plateau_cache" \
         "$targets/spawner" "$targets/blip"; do
  [ -x "$f" ] || { echo "soak: $f missing: build first (scripts/build.sh)" >&2; exit 1; }
done

work=$(mktemp -d /tmp/leakwatch-soak.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cp "$targets/blip" "$work/lw_soak_full"
cp "$targets/blip" "$work/lw_soak_light"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$work/leakwatch.yaml" <<EOF
listen: "127.0.0.1:$port"
targets:
  - name: hot
    match: {comm: "^grower\$"}
    mode: full
  - name: leakers
    match: {comm: "^(steady_leaker|plateau_cache)\$"}
    mode: full
  - name: churn_full
    match: {comm: "^lw_soak_full\$"}
    mode: full
  - name: churn_light
    match: {comm: "^lw_soak_light\$"}
    mode: light
EOF
"$leakwatch" check-config "$work/leakwatch.yaml" >/dev/null

# Long-lived targets first, each on a fifo for its stdin.
start_target() {  # name args...
  local name=$1; shift
  mkfifo "$work/$name.in"
  "$@" < "$work/$name.in" > "$work/$name.out" 2> "$work/$name.err" &
  pids+=($!)
  exec {fd}> "$work/$name.in"
  eval "fd_$name=$fd"
}
start_target hot "$targets/grower" hot
start_target leak "$targets/steady_leaker"
start_target cache "$targets/plateau_cache"
start_target full "$targets/spawner" 100 "$work/lw_soak_full"
start_target light "$targets/spawner" 1000 "$work/lw_soak_light"
sleep 0.5

"$leakwatch" run --config "$work/leakwatch.yaml" --log-level warn 2> "$work/daemon.err" &
daemon=$!
pids+=("$daemon")
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$port/healthz" >/dev/null || { cat "$work/daemon.err" >&2; exit 1; }
for t in hot leak cache full light; do eval "echo go >&\$fd_$t"; done

samples="$work/samples.tsv"
echo -e "t\trss_kib\tfds\tthreads\tcpu_ticks\ttracked" > "$samples"
t0=$(date +%s)
tracked() { curl -sf "http://127.0.0.1:$port/metrics" | awk '/^leakwatch_tracked_processes /{print $2}'; }
while :; do
  now=$(date +%s)
  [ $((now - t0)) -ge "$duration" ] && break
  kill -0 "$daemon" 2>/dev/null || { echo "soak: FAIL: the daemon exited" >&2; cat "$work/daemon.err" >&2; exit 1; }
  rss=$(awk '/^VmRSS:/{print $2}' "/proc/$daemon/status")
  threads=$(awk '/^Threads:/{print $2}' "/proc/$daemon/status")
  fds=$(ls "/proc/$daemon/fd" | wc -l)
  cpu=$(awk '{print $14 + $15}' "/proc/$daemon/stat")
  echo -e "$((now - t0))\t$rss\t$fds\t$threads\t$cpu\t$(tracked || echo -1)" >> "$samples"
  sleep 5
done

# Churn off, then the tracked set must shrink back to the long-lived three.
eval "echo count >&\$fd_full"; eval "echo count >&\$fd_light"
for t in full light; do eval "echo exit >&\$fd_$t"; done
sleep 3
settled=-1
for _ in $(seq 30); do
  settled=$(tracked || echo -1)
  [ "$settled" = 3 ] && break
  sleep 1
done
settled_fds=$(ls "/proc/$daemon/fd" 2>/dev/null | wc -l || echo -1)
# What they are, for a failure's diagnosis.
ls -l "/proc/$daemon/fd" 2>/dev/null | awk 'NR > 1 {print $NF}' | sed -E 's/\[[0-9]+\]$//' | sort | uniq -c > "$work/settled_fds.txt" || true
metrics=$(curl -sf "http://127.0.0.1:$port/metrics")
kill -TERM "$daemon"
rc=0; wait "$daemon" || rc=$?
for t in hot leak cache; do eval "echo exit >&\$fd_$t"; done
target_rc=0
for p in "${pids[@]:0:5}"; do wait "$p" || target_rc=$?; done

if python3 - "$samples" "$duration" "$settled_fds" <<'PY'
import sys
settled_fds = float(sys.argv[3])
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
rows = [[float(x) for x in r] for r in rows]
duration = float(sys.argv[2])
warm = max(60.0, duration / 4)
after = [r for r in rows if r[0] >= warm]
if len(after) < 3:
    print("soak: too few samples after warm-up"); sys.exit(1)
def slope(i):
    xs = [r[0] for r in after]; ys = [r[i] for r in after]
    mx = sum(xs) / len(xs); my = sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0
hz = 100.0
cpu = (rows[-1][4] - rows[0][4]) / hz / max(rows[-1][0] - rows[0][0], 1)
rss0, rss1 = after[0][1], after[-1][1]
print(f"soak: {duration:.0f} s, {len(rows)} samples, warm-up {warm:.0f} s")
print(f"soak: daemon RSS {rss0/1024:.1f} -> {rss1/1024:.1f} MiB after warm-up, slope {slope(1)*3600/1024:+.2f} MiB/h")
print(f"soak: fds {after[0][2]:.0f} -> {after[-1][2]:.0f} (max {max(r[2] for r in after):.0f}), slope {slope(2)*3600:+.2f}/h")
print(f"soak: fds after the churn stopped: {settled_fds:.0f} (lowest after warm-up {min(r[2] for r in after):.0f}, of the run {min(r[2] for r in rows):.0f})")
print(f"soak: threads {after[0][3]:.0f} -> {after[-1][3]:.0f}, slope {slope(3)*3600:+.2f}/h")
print(f"soak: daemon CPU {cpu*100:.1f}% of a core on average; tracked processes during churn "
      f"{min(r[5] for r in after):.0f}..{max(r[5] for r in after):.0f}")
bad = []
if rss1 - rss0 > max(4096, 0.05 * rss0): bad.append("RSS grew")
# The fd count follows the tracked set (each attached process holds links),
# so compare floors, not peaks: a leak raises the floor.
half = len(after) // 2
if min(r[2] for r in after[half:]) > min(r[2] for r in after[:half]) + 2: bad.append("fds grew")
# Once the churn is over only the long-lived three are tracked: the fd count
# must come back to the lowest seen after warm-up (3 of slack for the hot
# target's links being attached or suspended by the governor). Not the
# lowest of the whole run: the symbolizer keeps the files of the modules it
# has symbolized open (bounded by its module cache, 256), and the first
# sample is taken before any site was symbolized.
floor = min(r[2] for r in after)
if settled_fds < 0 or settled_fds > floor + 3:
    bad.append(f"fds did not come back after the churn ({settled_fds:.0f}, lowest after warm-up {floor:.0f})")
# Threads, like fds, by their floor: closing links spawns short-lived
# workers (destroy_links, up to 32, joined at once), so a single sample may
# catch some; a leaked thread raises the floor.
if min(r[3] for r in after[half:]) > min(r[3] for r in after[:half]): bad.append("threads grew")
if bad:
    print("soak: samples (t rss_kib fds threads cpu_ticks tracked):")
    for r in rows: print("  " + " ".join(f"{x:.0f}" for x in r))
    print("soak: FAIL: " + ", ".join(bad)); sys.exit(1)
PY
then :; else
  echo "soak: the daemon's fds after the churn (count, target):" >&2
  sed 's/^/  /' "$work/settled_fds.txt" >&2
  exit 1
fi
echo "soak: spawned: $(grep -h spawned "$work/full.out" "$work/light.out" | tr '\n' ' ')"
echo "soak: $(echo "$metrics" | grep -E '^leakwatch_attached_processes_total |^leakwatch_governor_suspensions_total ' | tr '\n' ' ')"
echo "soak: $(echo "$metrics" | grep -E '^leakwatch_attach_errors_total\{' | awk '$2 > 0' | tr '\n' ' ')"
[ "$settled" = 3 ] || { echo "soak: FAIL: $settled processes tracked after the churn stopped (want 3)" >&2; exit 1; }
[ "$rc" -eq 0 ] || { echo "soak: FAIL: daemon exit $rc after SIGTERM" >&2; cat "$work/daemon.err" >&2; exit 1; }
[ "$target_rc" -eq 0 ] || { echo "soak: FAIL: a target exited $target_rc" >&2; exit 1; }
echo "soak: passed"
