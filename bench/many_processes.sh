#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Many processes in mode light (issue 17, "Many processes"). For each count
# K (default 1, 100, 1000) a fresh daemon (`leakwatch run`, log level debug)
# traces K idle copies of tests/targets/mp_idle, started in one burst, and
# the script prints:
#   - attach rate: K over the time from the first start to the last
#     "attached pid" line (the burst's own fork/exec time included);
#   - exec->attached p50/p99 and the mean of each stage, from the daemon's
#     "attach stages" debug lines (queued: the exec event waiting for its
#     turn on the event loop; identity: /proc reads and matching; probes:
#     the tracer's attach, of which "link" is the uprobe link creation;
#     checks: the start-time checks after it);
#   - the cost of one anonymous mmap+munmap pair in a traced process and in
#     an untraced copy (same binary under another name) in the same run,
#     interleaved, median of the repetitions;
#   - the daemon's CPU (% of one core) while the K idle, its RSS and fds;
#   - churn: for C seconds, R short-lived matching processes a second (each
#     lives 1 s: R exits a second once started), the attach latency of the
#     churned ones, the exits detached per second, and how long after the
#     churn the daemon's fds take to fall back (links closed: each close
#     waits out a grace period).
#
#   bench/many_processes.sh [--counts "1 100 1000"] [--churn-seconds C]
#                           [--churn-rate R] [--pairs N] [--reps N] [BUILD_DIR]
# (as root). LW_BENCH_KEEP_LOG=PATH keeps each daemon's log as PATH.K.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib/common.sh
. "$here/lib/common.sh"

usage() {
  echo "usage: $0 [--counts LIST] [--churn-seconds C] [--churn-rate R] [--pairs N] [--reps N] [BUILD_DIR]" >&2
  exit 2
}
counts="1 100 1000" churn_seconds=10 churn_rate=100 pairs=20000 reps=5 build=./build
parse_options "--counts=counts --churn-seconds=churn_seconds --churn-rate=churn_rate --pairs=pairs
  --reps=reps" "$@"

require_root BPF
idle_bin=$(realpath "$build/tests/targets/mp_idle" 2>/dev/null || true)
leakwatch_bin=$build/leakwatch
require_built scripts/build.sh "$idle_bin" "$leakwatch_bin"
command -v curl >/dev/null || die "curl not found (apt-get install curl)"
ulimit -n "$(ulimit -Hn)"  # links are fds: 2 or more per traced process
ulimit -u unlimited 2>/dev/null || true

make_scratch lw-many
cp "$idle_bin" "$tmp/mp_free"  # the untraced copy: its comm matches no target
daemon_pid='' idle_pids=()
stop_all() {
  local p
  for p in "${idle_pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait "${idle_pids[@]}" 2>/dev/null || true
  idle_pids=()
  [[ -n $daemon_pid ]] && { kill -TERM "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" 2>/dev/null || true; }
  daemon_pid=''
}
on_exit() { stop_all; }

port=$((20000 + $$ % 20000))
tick=$(getconf CLK_TCK)
rss_mib() { awk '/^VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
now() { date +%s.%N; }
attached_count() { grep -c "attached pid [0-9]* (mp_idle)" "$tmp/daemon.err" || true; }
# Percentiles and stage means of the "attach stages" lines after line $1.
stage_summary() {
  tail -n +"$(($1 + 1))" "$tmp/daemon.err" | grep "attach stages pid [0-9]*: queued_ms=" |
    sed 's/.*queued_ms=\([-0-9.]*\) identity_ms=\([0-9.]*\) probes_ms=\([0-9.]*\) checks_ms=\([0-9.]*\)/\1 \2 \3 \4/' |
    awk '$1 >= 0 { print $1 + $2 + $3 + $4, $1, $2, $3, $4 }' | sort -n |
    awk '{ t[NR] = $1; q += $2; i += $3; p += $4; c += $5 }
      END {
        if (NR == 0) { print "- - - - - - 0"; exit }
        p50 = t[int((NR - 1) * 0.50) + 1]; p99 = t[int((NR - 1) * 0.99) + 1]
        printf "%.1f %.1f %.2f %.2f %.2f %.2f %d\n", p50, p99, q / NR, i / NR, p / NR, c / NR, NR }'
}
link_mean() {
  tail -n +"$(($1 + 1))" "$tmp/daemon.err" | grep "attach stages pid [0-9]*: syscalls link" |
    awk '{ s += $(NF - 1); n++ } END { if (n) printf "%.2f", s / n; else print "-" }'
}
# Interleaved pair-cost repetitions: traced (mp_idle) and untraced (mp_free).
pair_costs() {
  local traced_pid word t u r traced_in untraced_in traced_out untraced_out
  rm -f "$tmp"/p_*
  mkfifo "$tmp/p_tin" "$tmp/p_tout" "$tmp/p_uin" "$tmp/p_uout"
  "$idle_bin" pairs "$pairs" <"$tmp/p_tin" >"$tmp/p_tout" &
  "$tmp/mp_free" pairs "$pairs" <"$tmp/p_uin" >"$tmp/p_uout" &
  exec {traced_in}>"$tmp/p_tin" {traced_out}<"$tmp/p_tout"
  exec {untraced_in}>"$tmp/p_uin" {untraced_out}<"$tmp/p_uout"
  read -r -t 10 -u "$traced_out" word traced_pid || die "pair target did not start"
  read -r -t 10 -u "$untraced_out" word _ || die "untraced target did not start"
  local deadline=$((SECONDS + 60))
  until grep -q "attached pid $traced_pid " "$tmp/daemon.err"; do
    ((SECONDS < deadline)) || die "pair target $traced_pid not attached within 60 s"
    sleep 0.1
  done
  : >"$tmp/pairs"
  for ((r = 0; r < reps; r++)); do
    echo go >&"$untraced_in"; read -r u <&"$untraced_out"
    echo go >&"$traced_in"; read -r t <&"$traced_out"
    printf 'traced %s\nuntraced %s\n' "$t" "$u" >>"$tmp/pairs"
  done
  exec {traced_in}>&- {untraced_in}>&-
  exec {traced_out}<&- {untraced_out}<&-
  awk '{ v[$1, ++n[$1]] = $2 }
    function med(l,   i, j, a, m, x) {
      m = n[l]; for (i = 1; i <= m; i++) a[i] = v[l, i]
      for (i = 2; i <= m; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
      return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
    END { printf "%.0f %.0f\n", med("traced"), med("untraced") }' "$tmp/pairs" >"$tmp/pair_result"
}

echo "host: $(host_summary)" >&2
results=$tmp/results
: >"$results"
for k in $counts; do
  cat >"$tmp/daemon.yaml" <<EOF
listen: "127.0.0.1:$port"
targets:
  - name: many
    match: {comm: "^mp_idle$"}
    mode: light
limits:
  max_processes: $((k + 4 * churn_rate + 16))
EOF
  "$leakwatch_bin" run --config "$tmp/daemon.yaml" --log-level debug </dev/null \
    >"$tmp/daemon.out" 2>"$tmp/daemon.err" &
  daemon_pid=$!
  deadline=$((SECONDS + 30))
  until curl -sf "http://127.0.0.1:$port/api/v1/status" >/dev/null; do
    kill -0 "$daemon_pid" 2>/dev/null || die "daemon exited: $(tail -n2 "$tmp/daemon.err")"
    ((SECONDS < deadline)) || die "daemon did not serve within 30 s"
    sleep 0.2
  done
  sleep 1
  fd_base=$(fds "$daemon_pid")
  line0=$(wc -l <"$tmp/daemon.err")
  echo "K=$k: starting $k light processes" >&2
  t0=$(now)
  for ((i = 0; i < k; i++)); do "$idle_bin" 2>/dev/null & idle_pids+=($!); done
  deadline=$((SECONDS + 300))
  until (($(attached_count) >= k)); do
    kill -0 "$daemon_pid" 2>/dev/null || die "daemon exited: $(tail -n2 "$tmp/daemon.err")"
    ((SECONDS < deadline)) || die "only $(attached_count) of $k attached within 300 s"
    sleep 0.05
  done
  t1=$(now)
  rate=$(awk -v k="$k" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", k / (b - a) }')
  read -r p50 p99 q_ms id_ms pr_ms ck_ms n_lat < <(stage_summary "$line0")
  link_ms=$(link_mean "$line0")
  sleep 2
  c0=$(cpu_ticks "$daemon_pid") w0=$(now)
  sleep 5
  c1=$(cpu_ticks "$daemon_pid") w1=$(now)
  cpu_idle=$(awk -v a="$c0" -v b="$c1" -v s="$w0" -v e="$w1" -v hz="$tick" 'BEGIN { printf "%.1f", 100 * (b - a) / hz / (e - s) }')
  rss=$(rss_mib "$daemon_pid") fd_k=$(fds "$daemon_pid")
  pair_costs
  read -r pair_traced pair_untraced <"$tmp/pair_result"
  fd_k=$(fds "$daemon_pid")

  # Churn: churn_rate starts a second, each living 1 s.
  line1=$(wc -l <"$tmp/daemon.err")
  det0=$(grep -c "detached pid [0-9]* (mp_idle): exited" "$tmp/daemon.err" || true)
  c0=$(cpu_ticks "$daemon_pid") w0=$(now)
  started=0
  end=$(awk -v w="$w0" -v s="$churn_seconds" 'BEGIN { printf "%.3f", w + s }')
  while awk -v n="$(now)" -v e="$end" 'BEGIN { exit !(n < e) }'; do
    # Paced against the clock: start what is due, then sleep a tick.
    due=$(awk -v n="$(now)" -v w="$w0" -v r="$churn_rate" 'BEGIN { printf "%d", (n - w) * r }')
    while ((started < due)); do "$idle_bin" live 1000 & started=$((started + 1)); done
    sleep 0.01
  done
  w1=$(now)
  c1=$(cpu_ticks "$daemon_pid")
  cpu_churn=$(awk -v a="$c0" -v b="$c1" -v s="$w0" -v e="$w1" -v hz="$tick" 'BEGIN { printf "%.1f", 100 * (b - a) / hz / (e - s) }')
  churn_rate_real=$(awk -v n="$started" -v s="$w0" -v e="$w1" 'BEGIN { printf "%.0f", n / (e - s) }')
  # After the churn: every churned child is detached once it exited (1 s
  # after its start), then the daemon's fds fall back once their links are
  # closed. Detach rate: the exits over the time from the first exit (1 s
  # after the churn began) to the last detach.
  sleep 1.2  # the last children exit
  churn_attached=$(tail -n +"$((line1 + 1))" "$tmp/daemon.err" | grep -c "attached pid [0-9]* (mp_idle)" || true)
  # Until every one is detached, or none more for 2 s (an exit seen only
  # by the next reconciliation: counted as a straggler).
  detached_now() { echo $(($(grep -c "detached pid [0-9]* (mp_idle): exited" "$tmp/daemon.err" || true) - det0)); }
  last=$(detached_now) t_det=$(now) still=0
  while ((last < churn_attached && still < 100)); do
    sleep 0.02
    cur=$(detached_now)
    if ((cur > last)); then last=$cur t_det=$(now) still=0; else still=$((still + 1)); fi
  done
  stragglers=$((churn_attached - last))
  detach_rate=$(awk -v n="$last" -v s="$w0" -v e="$t_det" 'BEGIN { printf "%.0f", n / (e - s - 1) }')
  deadline=$((SECONDS + 60))
  until (($(fds "$daemon_pid") <= fd_k)); do
    ((SECONDS < deadline)) || break
    sleep 0.02
  done
  drain=$(awk -v e="$t_det" -v n="$(now)" 'BEGIN { printf "%.2f", n - e }')
  read -r c_p50 c_p99 _ _ _ _ c_n < <(stage_summary "$line1")
  failed=$(grep -c "attaching pid [0-9]* (mp_idle)" "$tmp/daemon.err" || true)
  stop_all
  [[ -n ${LW_BENCH_KEEP_LOG:-} ]] && cp "$tmp/daemon.err" "$LW_BENCH_KEEP_LOG.$k"
  echo "$k $rate $p50 $p99 $q_ms $id_ms $pr_ms $ck_ms $link_ms $pair_traced $pair_untraced $cpu_idle $rss $((fd_k - fd_base)) $churn_rate_real $c_p50 $c_p99 $c_n $detach_rate $drain $cpu_churn $failed $n_lat $stragglers" >>"$results"
  echo "   $(tail -n1 "$results")" >&2
  sleep 2
done

echo
echo "leakwatch run, mode light, K idle mp_idle processes started in one burst (times in ms)"
printf "%6s %9s %8s %8s %8s %8s %8s %8s %8s %12s %12s\n" K attach/s p50 p99 queued identity probes checks link \
  "pair ns trc" "pair ns untr"
awk '{ printf "%6d %9s %8s %8s %8s %8s %8s %8s %8s %12s %12s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 }' "$results"
echo
echo "daemon at K idle processes, then churn: R starts/s for ${churn_seconds}s, each living 1 s (R exits/s); detached/s: exits over first exit to last detach; fd drain: last detach to links closed"
printf "%6s %9s %8s %6s %8s %10s %10s %8s %10s %10s %9s %7s %10s\n" K "cpu% idle" "RSS MiB" fds starts/s "churn p50" "churn p99" \
  attached detached/s "fd drain s" "cpu% churn" failed stragglers
awk '{ printf "%6d %9s %8s %6s %8s %10s %10s %8s %10s %10s %9s %7s %10s\n", $1, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $24 }' "$results"
