#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Proves the capability set the systemd unit grants (its
# CapabilityBoundingSet, which the DaemonSet's capabilities.add must equal:
# check_kubernetes.py) is enough, and that each one in it is needed: runs
# `leakwatch top` as user nobody under setpriv with exactly that bounding,
# inheritable and ambient set against leaky_service processes of root, then
# again with each capability dropped, expecting a failure whose message
# names the dropped capability. Three targets:
#   plain     demo/leaky_service as root
#   private   the same with its libc a root-only copy (file 0600 in a 0700
#             directory): opening it needs CAP_DAC_READ_SEARCH
#   deleted   the same with its libc copy deleted after start (a package
#             upgrade replaced it): only /proc/PID/map_files, which needs
#             CAP_CHECKPOINT_RESTORE, still opens it
# Usage: capabilities_test.sh SOURCE_DIR LEAKWATCH_BIN LEAKY_SERVICE_BIN (root)
set -euo pipefail
src=${1:?usage}; leakwatch_bin=${2:?usage}; leaky_bin=${3:?usage}
if [ "$(id -u)" -ne 0 ]; then echo "capabilities_test: not root" >&2; exit 1; fi
command -v setpriv >/dev/null || { echo "capabilities_test: setpriv (util-linux) missing" >&2; exit 1; }

unit="$src/deploy/systemd/leakwatch.service"
read -r -a granted <<< "$(sed -n 's/^CapabilityBoundingSet=//p' "$unit")"
echo "capabilities_test: the unit grants ${granted[*]}"

work=$(mktemp -d /tmp/leakwatch-caps.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
chmod 755 "$work"
# Copies nobody can execute (the build tree may sit under a private home).
install -m 755 "$leakwatch_bin" "$work/leakwatch"
install -m 755 "$leaky_bin" "$work/leaky_service"
libc=$(ldd "$work/leaky_service" | awk '/libc\.so/ {print $3}')

start_target() {  # name libdir-or-empty -> pid in $target_pid
  local name=$1 libdir=$2
  if [ -n "$libdir" ]; then
    LD_LIBRARY_PATH=$libdir "$work/leaky_service" > "$work/$name.log" 2>&1 &
  else
    "$work/leaky_service" > "$work/$name.log" 2>&1 &
  fi
  target_pid=$!
  pids+=("$target_pid")
}
start_target plain ""
plain=$target_pid
mkdir -m 700 "$work/private"
install -m 600 "$libc" "$work/private/libc.so.6"
start_target private "$work/private"
private=$target_pid
mkdir -m 755 "$work/deleted"
install -m 755 "$libc" "$work/deleted/libc.so.6"
start_target deleted "$work/deleted"
deleted=$target_pid
sleep 1
grep -q "$work/private/libc.so.6" "/proc/$private/maps" || { echo "capabilities_test: private libc not mapped" >&2; exit 1; }
rm "$work/deleted/libc.so.6"
grep -q "$work/deleted/libc.so.6 (deleted)" "/proc/$deleted/maps" || { echo "capabilities_test: deleted libc not mapped" >&2; exit 1; }

# Runs top as nobody with exactly the capabilities given; leaves its exit
# code in $rc, its stderr in $err and its last JSON snapshot in $out.
run_top() {  # pid cap...
  local pid=$1; shift
  local set="-all"
  for c in "$@"; do set+=",+$(echo "${c#CAP_}" | tr 'A-Z' 'a-z')"; done
  rc=0
  setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs \
    --inh-caps="$set" --ambient-caps="$set" --bounding-set="$set" \
    "$work/leakwatch" top -p "$pid" --count 2 --interval 1 --json > "$work/out" 2> "$work/err" || rc=$?
  out=$(tail -1 "$work/out"); err=$(cat "$work/err")
}
failures=0
fail() { echo "capabilities_test: FAIL: $*" >&2; failures=$((failures + 1)); }

for target in plain private deleted; do
  run_top "${!target}" "${granted[@]}"
  live=$(echo "$out" | /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.stdin.read() or "{}").get("live_bytes", -1))' 2>/dev/null || echo -1)
  if [ "$rc" -eq 0 ] && [ "$live" -gt 0 ]; then
    echo "capabilities_test: ${granted[*]} as nobody, $target target: traced, live_bytes $live"
  else
    fail "$target target with the unit's set: exit $rc, live_bytes $live: $err"
  fi
done

# Each capability dropped, against the target that needs it.
for cap in "${granted[@]}"; do
  case $cap in
    CAP_DAC_READ_SEARCH) target=private ;;
    CAP_CHECKPOINT_RESTORE) target=deleted ;;
    *) target=plain ;;
  esac
  rest=()
  for c in "${granted[@]}"; do [ "$c" = "$cap" ] || rest+=("$c"); done
  run_top "${!target}" "${rest[@]}"
  msg=$(echo "$err" | grep '^leakwatch' | tail -1)
  if [ "$rc" -ne 0 ] && echo "$msg" | grep -q "missing.*$cap"; then
    echo "capabilities_test: without $cap ($target target): exit $rc: $msg"
  else
    fail "without $cap ($target target): exit $rc, message does not name $cap: $err"
  fi
done
[ "$failures" -eq 0 ] && echo "capabilities_test: passed"
exit $((failures > 0))
