# SPDX-License-Identifier: Apache-2.0
# What the bench drivers (bench/*.sh) share: the option loop, die and the
# root check, the scratch directory with its cleanup, and the helpers that
# start a target, start a tracer and wait for it to attach, run batches and
# stop both. Summaries of interleaved runs are in interleave.sh.
#
# Conventions the helpers rely on (a driver keeps them, or does not use the
# helper): the scratch directory is $tmp; the target's pid is in target_pid,
# the tracer's in tracer_pid; a malloc_free_loop-style target runs as the
# coprocess TARGET with its stderr in $tmp/target.err.
# shellcheck shell=bash
# The variables set here (build, target_pid, fifo_target_pid, ...) are the
# drivers' to read.
# shellcheck disable=SC2034

# --- errors and checks ---------------------------------------------------

# die MESSAGE: "SCRIPT.sh: MESSAGE" on stderr, exit 1.
die() { echo "${0##*/}: $*" >&2; exit 1; }

# require_root [WHY]: dies unless root; WHY names the capability wanted.
# shellcheck disable=SC2120
require_root() { ((EUID == 0)) || die "must run as root${1:+ ($1)}"; }

# require_built HINT BIN...: dies, saying how to build it, on the first BIN
# that is not an executable.
require_built() {
  local hint=$1 bin
  shift
  for bin; do
    [[ -x $bin ]] || die "$bin not found; build it: $hint"
  done
}

# --- options -------------------------------------------------------------

# parse_options SPEC ARG...: the drivers' option loop. SPEC is one string of
# words (separated by spaces or newlines):
#   --name=VAR     the option takes a value, stored in VAR
#   --name+=ARRAY  the option takes a value, appended to ARRAY
#   --name:VAR=V   a flag: sets VAR to V
# A value that is missing or empty ends the script with exit 1 (as the
# drivers' `${2:?}` did); with lenient_values=1 a missing value calls usage
# and an empty one is taken. -h/--help calls print_help and exits 0
# when the driver defines print_help, usage otherwise; any other word
# starting with '-' calls usage (the driver's: it prints and exits 2). The
# other arguments are the build directory, stored in build (the last wins).
parse_options() {
  local spec=" ${1//$'\n'/ } " opt var
  shift
  while (($#)); do
    opt=$1
    case $opt in
      -h|--help)
        if declare -F print_help >/dev/null; then print_help; exit 0; fi
        usage ;;
      -*)
        if [[ $spec == *" $opt="* || $spec == *" $opt+="* ]]; then
          if ((${lenient_values:-0})); then
            (($# >= 2)) || usage
          else
            [[ -n ${2:-} ]] || { echo "${0##*/}: $opt needs a value" >&2; exit 1; }
          fi
          if [[ $spec == *" $opt="* ]]; then
            var=${spec#*" $opt="}
            printf -v "${var%% *}" '%s' "$2"
          else
            var=${spec#*" $opt+="}
            var=${var%% *}
            eval "$var+=(\"\$2\")"
          fi
          shift
        elif [[ $spec == *" $opt:"* ]]; then
          var=${spec#*" $opt:"}
          var=${var%% *}
          printf -v "${var%%=*}" '%s' "${var#*=}"
        else
          usage
        fi ;;
      *) build=$opt ;;
    esac
    shift
  done
}

# --- scratch directory and cleanup ---------------------------------------

# make_scratch NAME: makes $tmp (/tmp/NAME.XXXXXX) and arranges that, however
# the script exits, the tracer and the target are killed, on_exit runs if
# the driver defines it (its own processes, settings to restore), and $tmp
# is removed. SIGINT and SIGTERM exit 130.
make_scratch() {
  tmp=$(mktemp -d "/tmp/$1.XXXXXX")
  target_pid='' tracer_pid=''
  trap cleanup_scratch EXIT
  trap 'exit 130' INT TERM
}

# Never leave a tracer attached or a target waiting.
cleanup_scratch() {
  [[ -z $tracer_pid ]] || kill -KILL "$tracer_pid" 2>/dev/null || true
  [[ -z $target_pid ]] || kill -KILL "$target_pid" 2>/dev/null || true
  if declare -F on_exit >/dev/null; then on_exit || true; fi
  rm -rf "$tmp"
}

# --- the target ----------------------------------------------------------

# start_coproc_target TIMEOUT_S COMMAND...: starts COMMAND as the coprocess
# TARGET (batch lines to its stdin, results from its stdout; stderr in
# $tmp/target.err) and waits up to TIMEOUT_S for its `ready PID` line; the
# pid goes to target_pid.
start_coproc_target() {
  local timeout=$1 word
  shift
  coproc TARGET { exec "$@" 2>"$tmp/target.err"; }
  read -r -t "$timeout" -u "${TARGET[0]}" word target_pid ||
    die "target did not start: $(tail -n 3 "$tmp/target.err")"
  [[ $word == ready ]] || die "target said '$word', expected 'ready'"
}

# run_batch LINE: sends one batch line to the target (empty: the batch size
# it was started with) and prints its `ns_per_pair` answer. It waits up to
# batch_timeout_s (default 300) for each line; with batch_show_rounds=1 the
# target's `round I NS` lines are echoed to stderr.
run_batch() {
  printf '%s\n' "$1" >&"${TARGET[1]}"
  local key value
  while read -r -t "${batch_timeout_s:-300}" -u "${TARGET[0]}" key value; do
    case $key in
      round) ((${batch_show_rounds:-0})) && echo "    round $value ns/pair" >&2 ;;
      ns_per_pair) echo "$value"; return 0 ;;
    esac
  done
  die "target stopped answering: $(cat "$tmp/target.err")"
}

# batch_pairs SECONDS CAL_NS ROUNDS MIN_PAIRS: pairs per round for a batch
# of ROUNDS rounds to last about SECONDS, from the calibration batch's ns
# per pair; never fewer than MIN_PAIRS.
batch_pairs() {
  awk -v s="$1" -v ns="$2" -v r="$3" -v min="$4" \
    'BEGIN { p = int(s * 1e9 / (ns * r)); print (p > min ? p : min) }'
}

# Closes the target's stdin (it exits) and reaps it.
stop_target() {
  local fd=${TARGET[1]}
  exec {fd}>&-
  wait "$target_pid" 2>/dev/null || true
  target_pid=
}

# start_fifo_target NAME COMMAND...: starts COMMAND in the background with
# its stdin on the fifo $tmp/NAME.in, which this shell holds open for
# writing in the fd whose number is in fd_NAME (the targets end at EOF on
# stdin, so it runs until that fd is closed); stdout and stderr go to
# $tmp/NAME.out and $tmp/NAME.err. Its pid goes to fifo_target_pid.
start_fifo_target() {
  local name=$1 fd
  shift
  rm -f "$tmp/$name.in"
  mkfifo "$tmp/$name.in"
  "$@" <"$tmp/$name.in" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  fifo_target_pid=$!
  exec {fd}>"$tmp/$name.in"
  printf -v "fd_$name" '%s' "$fd"
}

# ready_pid NAME TRIES: waits up to TRIES x 0.2 s for `ready PID` in
# $tmp/NAME.out and prints PID; fails if it did not come.
ready_pid() {
  local i
  for ((i = 0; i < $2; i++)); do
    grep -q '^ready' "$tmp/$1.out" 2>/dev/null && break
    sleep 0.2
  done
  awk '/^ready/ { print $2; found = 1; exit } END { exit !found }' "$tmp/$1.out" 2>/dev/null
}

# --- the tracer ----------------------------------------------------------

# launch_tracer NAME COMMAND...: starts the tracer COMMAND in the background,
# stdin from /dev/null, output in $tmp/NAME.out and $tmp/NAME.err; its pid
# goes to tracer_pid. NAME.out is removed first: a stale one from the
# previous row must not pass for this one's attach.
launch_tracer() {
  local name=$1
  shift
  rm -f "$tmp/$name.out"
  "$@" </dev/null >"$tmp/$name.out" 2>"$tmp/$name.err" &
  tracer_pid=$!
}

# await_tracer TIMEOUT_S TEST...: runs TEST every 0.1 s until it succeeds.
# Returns 0 then, 1 if the tracer exited first, 2 once TIMEOUT_S passed.
await_tracer() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    kill -0 "$tracer_pid" 2>/dev/null || return 1
    ((SECONDS < deadline)) || return 2
    sleep 0.1
  done
}

# wait_attached WHAT NAME TIMEOUT_S: waits until the tracer started with
# launch_tracer NAME has written something to $tmp/NAME.out (leakwatch's
# first report, lw_bench_noop's `attached`, memleak's `Attaching to pid`);
# dies with WHAT ("full: leakwatch") if it exits first or TIMEOUT_S pass.
wait_attached() {
  local what=$1 name=$2 timeout=$3 rc=0
  await_tracer "$timeout" test -s "$tmp/$name.out" || rc=$?
  ((rc != 1)) || die "$what exited: $(tail -n 1 "$tmp/$name.err")"
  ((rc != 2)) || die "$what not attached after $timeout s"
}

# tracer_alive_or_die WHAT NAME: after a run, dies if the tracer exited
# during it (the figure would measure nothing).
tracer_alive_or_die() {
  kill -0 "$tracer_pid" 2>/dev/null ||
    die "$1 exited during the run: $(tail -n 1 "$tmp/$2.err")"
}

# SIGINT, up to 10 s to detach and exit, then SIGKILL.
stop_tracer() {
  kill -INT "$tracer_pid" 2>/dev/null || true
  local i
  for ((i = 0; i < 100; i++)); do kill -0 "$tracer_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$tracer_pid" 2>/dev/null || true
  wait "$tracer_pid" 2>/dev/null || true
  tracer_pid=
}

# --- the host ------------------------------------------------------------

# The load average over 1, 5 and 15 minutes.
load_avg() { cut -d' ' -f1-3 /proc/loadavg; }
# "KERNEL, N CPUs, load L1 L5 L15", for the drivers' `host:` line.
host_summary() { echo "$(uname -r), $(nproc) CPUs, load $(load_avg)"; }
# A process's user+system CPU time so far, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
