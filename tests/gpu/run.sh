#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# GPU check for issue 5 (CUDA memory per stack), in one command on a machine
# with an NVIDIA GPU, PyTorch with CUDA, and root:
#
#   bash tests/gpu/run.sh            # builds if needed, ~6 minutes
#
# Environment: LW=path (a leakwatch built elsewhere; default build/leakwatch),
# LW_GPU_SECONDS (longest leak/control run, default 240), LW_GPU_STEPS
# (which of "leak bench oom tensor" to run, default all), LW_GPU_BENCH_REPS
# (interleaved overhead repetitions, default 1), OUT (artifacts).
#
# Ran on a lent NVIDIA H100 (driver 580.159.04, PyTorch 2.11.0+cu130,
# Python 3.12, kernel 6.18.44 under Firecracker) on 2026-11-27, with a
# leakwatch built on Debian 12 and carried there with its libraries: all
# four steps passed. It found that a daemon attached after PyTorch's start
# never saw the current device (-1): fixed since (decision cuda-memory), and
# checked below on a one-GPU machine.
#
# It checks, and prints PASS/FAIL for each:
#  0. environment: nvidia-smi, torch.cuda, BPF loads (a sandboxed kernel may
#     refuse it: then it stops and says so);
#  1. leak: leakwatch attached after the start of a PyTorch program that
#     keeps CUDA tensors reports growing cuda_device live bytes at a stack
#     through the CUDA caching allocator, classified as a leak;
#  2. control: the same program dropping its tensors is not flagged;
#  3. overhead: seconds per training step without and with leakwatch, same
#     machine, same run (ratio printed);
#  4. GPU OOM: a PyTorch program asking for twice the device's memory (the
#     caching allocator's cudaMalloc fails, is retried, fails again) gets one
#     gpu_oom report naming the device and the size, the retry counted in
#     `suppressed`, and `recovered` after its next successful cudaMalloc.
#  5. tensor leak (issue 31, the tensor tier): under the daemon's default
#     config (mode auto), a PyTorch program whose function keep_cuda_tensors
#     keeps 30 CUDA tensors of 4 MiB: exactly their bytes in kind tensor_gpu
#     under that Python function, seen at the caching allocator's own
#     USDTs (PyTorch 2.1+) or its profiler hook, not at cudaMalloc;
#  6. pool retention: 64 tensors of 4 MiB made, then dropped (`del`): the
#     tier's live tensors fall by their 256 MiB while gpu_explained shows
#     the pool keeping them cached (its totals equal to
#     torch.cuda.memory_allocated/reserved), until torch.cuda.empty_cache()
#     gives the segments back (the CUDA bytes fall).
# Artifacts (API documents, metrics, logs) go to $OUT or /tmp/lw-gpu.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/lw-gpu}
mkdir -p "$OUT"
LW=${LW:-build/leakwatch}
LW_GPU_SECONDS=${LW_GPU_SECONDS:-240}
LW_GPU_STEPS=${LW_GPU_STEPS:-leak bench oom tensor}
LW_GPU_BENCH_REPS=${LW_GPU_BENCH_REPS:-1}
step() { [[ " $LW_GPU_STEPS " == *" $1 "* ]]; }
fail=0
say() { echo "== $*" | tee -a "$OUT/summary.txt"; }
get() {  # url [file]: curl where the machine has it, else Python
  if command -v curl >/dev/null; then
    if [ $# -gt 1 ]; then curl -s -o "$2" "$1"; else curl -s "$1"; fi
  else python3 -c 'import sys,urllib.request as u; d=u.urlopen(sys.argv[1],timeout=10).read(); (open(sys.argv[2],"wb").write(d) if len(sys.argv)>2 else sys.stdout.buffer.write(d))' "$@" 2>/dev/null
  fi
}

# 0. Environment.
nvidia-smi -L >"$OUT/nvidia-smi.txt" 2>&1 || { say "FAIL no GPU (nvidia-smi)"; exit 2; }
python3 -c 'import torch,sys; print(torch.__version__, torch.version.cuda); sys.exit(0 if torch.cuda.is_available() else 1)' \
  >"$OUT/torch.txt" 2>&1 || { say "FAIL torch.cuda not available: $(cat "$OUT/torch.txt")"; exit 2; }
export LW_GPU_COUNT=$(grep -c '^GPU ' "$OUT/nvidia-smi.txt")
say "env: $(head -1 "$OUT/nvidia-smi.txt"); torch $(cat "$OUT/torch.txt"); kernel $(uname -r)"
[ -r /sys/kernel/btf/vmlinux ] || { say "FAIL kernel has no BTF (/sys/kernel/btf/vmlinux): CO-RE cannot load"; exit 2; }
if [ ! -x "$LW" ]; then
  bash scripts/install-deps.sh >"$OUT/deps.log" 2>&1 || true
  bash scripts/build.sh >"$OUT/build.log" 2>&1 || { say "FAIL build (see $OUT/build.log)"; exit 2; }
fi
# Libraries the program maps: where cudart and the driver are.
python3 - >"$OUT/libs.txt" 2>&1 <<'PY'
import torch, os
torch.zeros(1, device="cuda")
print(open(f"/proc/{os.getpid()}/maps").read())
PY
grep -Eo '/[^ ]*lib(cudart|cuda)\.so[^ ]*' "$OUT/libs.txt" | sort -u | tee "$OUT/cuda-libs.txt"

# Starts the program in a mode; leaves its pid in $PID, stdin on fd ${3:-7}.
start_target() {
  rm -f "$OUT/in.$1"
  mkfifo "$OUT/in.$1"
  python3 tests/gpu/torch_leaker.py "$1" ${2:-} <"$OUT/in.$1" >"$OUT/target.$1.out" 2>"$OUT/target.$1.err" &
  eval "exec ${3:-7}>\"\$OUT/in.\$1\""
  for _ in $(seq 150); do grep -q '^ready' "$OUT/target.$1.out" 2>/dev/null && break; sleep 0.2; done
  PID=$(awk '/^ready/{print $2}' "$OUT/target.$1.out")
}

cat >"$OUT/check_leak.py" <<'PY'
import json, os, sys
doc = json.load(open(sys.argv[1]))
quiet = len(sys.argv) > 2
cuda = [s for s in doc["sites"] if s["kind"] == "cuda_device"]
if not quiet:
    for s in cuda[:5]:
        names = " <- ".join(f["function"] for f in s["frames"][:12])
        print(f"  cuda_device live={s['live_bytes']} allocs={s['live_allocations']} trend={s['trend']} "
              f"rate={s['leak_rate_bytes_per_second']:.0f} B/s frames={len(s['frames'])} "
              f"truncated={s.get('truncated')}: {names}")
    print("  cuda_devices:", json.dumps(doc.get("cuda_devices")))
leaky = [s for s in cuda if s["suspected_leak"] and any(
    "CUDACachingAllocator" in f["function"] or "cudaMalloc" in f["function"] or "cuMemCreate" in f["function"]
    for f in s["frames"])]
ok = bool(leaky) and sum(s["live_bytes"] for s in cuda) > 64 << 20
# One GPU: its only ordinal is 0, also for a context made current before
# the daemon attached (decision cuda-memory).
if os.environ.get("LW_GPU_COUNT") == "1" and any(d["device"] != 0 for d in doc.get("cuda_devices", [])):
    ok = False
    if not quiet:
        print("  a device other than 0 on a one-GPU machine")
if not quiet:
    print("== " + ("PASS" if ok else "FAIL") + " leak: cuda_device site in the caching allocator path flagged")
sys.exit(0 if ok else 1)
PY

# 1 and 2. The leaking program and the control run side by side under one
# daemon, attached after they started. The verdict needs 120 s of samples
# (docs/analysis.md, min_span_s): the run stops once the leak is flagged
# and the control has had 150 s, or after LW_GPU_SECONDS.
leak_and_control() {
  local port=19931 leak_pid control_pid
  start_target leak "" 7; leak_pid=$PID
  start_target control "" 8; control_pid=$PID
  if [ -z "$leak_pid" ] || [ -z "$control_pid" ]; then
    say "FAIL targets did not start: $(cat "$OUT/target.leak.err" "$OUT/target.control.err")"
    fail=1; exec 7>&- 8>&-; return
  fi
  cat >"$OUT/config.leak.yaml" <<YAML
listen: "127.0.0.1:$port"
top_sites_per_process: 50
analysis: {window_seconds: 240, sample_interval_seconds: 2}
targets:
  - name: leak
    match: {pids: [$leak_pid]}
  - name: control
    match: {pids: [$control_pid]}
YAML
  echo go >&7; echo go >&8
  "$LW" run --config "$OUT/config.leak.yaml" >"$OUT/daemon.leak.log" 2>&1 &
  local daemon=$! t0=$SECONDS
  sleep 5
  if ! kill -0 $daemon 2>/dev/null; then
    say "FAIL leakwatch run exited (BPF refused? see $OUT/daemon.leak.log): $(tail -3 "$OUT/daemon.leak.log")"
    fail=1; exec 7>&- 8>&-; wait; return
  fi
  while [ $((SECONDS - t0)) -lt "$LW_GPU_SECONDS" ]; do
    sleep 5
    get "http://127.0.0.1:$port/api/v1/processes/$leak_pid/sites" >"$OUT/sites.leak.json"
    get "http://127.0.0.1:$port/api/v1/processes/$control_pid/sites" >"$OUT/sites.control.json"
    [ $((SECONDS - t0)) -ge 150 ] && python3 "$OUT/check_leak.py" "$OUT/sites.leak.json" quiet 2>/dev/null && break
  done
  say "leak/control ran $((SECONDS - t0)) s under the daemon"
  get "http://127.0.0.1:$port/metrics" >"$OUT/metrics.leak.txt"
  get "http://127.0.0.1:$port/api/v1/status" >"$OUT/status.leak.json"
  get "http://127.0.0.1:$port/debug/pprof/heap?pid=$leak_pid" "$OUT/heap.leak.pb.gz"
  kill $daemon; wait $daemon 2>/dev/null
  exec 7>&- 8>&-; wait
}

if step leak; then
leak_and_control
python3 "$OUT/check_leak.py" "$OUT/sites.leak.json" | tee -a "$OUT/summary.txt"
[ "${PIPESTATUS[0]}" = 0 ] || fail=1
python3 - "$OUT/sites.control.json" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
doc = json.load(open(sys.argv[1]))
cuda = [s for s in doc["sites"] if s["kind"].startswith("cuda")]
flagged = [s for s in cuda if s["suspected_leak"]]
print(f"  control: {len(cuda)} cuda sites, live {sum(s['live_bytes'] for s in cuda)} bytes")
print("== " + ("PASS" if not flagged else "FAIL") + f" control: {len(flagged)} cuda sites flagged")
sys.exit(0 if not flagged else 1)
PY
[ "${PIPESTATUS[0]}" = 0 ] || fail=1
fi

# 3. Overhead: the same training steps without and with `leakwatch top`.
bench() {  # $1 = without | light | full (leakwatch top's --mode) | full-noreuse (decision walk-reuse off)
  start_target bench 3000
  local top= mode=${1%-noreuse}
  if [ "$1" != without ]; then
    if [ "$1" = full-noreuse ]; then export LW_BENCH_NO_WALK_REUSE=1; fi
    "$LW" top -p "$PID" --mode "$mode" --json --interval 5 >"$OUT/top.bench.$1.json" 2>"$OUT/top.bench.$1.err" & top=$!
    unset LW_BENCH_NO_WALK_REUSE
    sleep 5
  fi
  echo go >&7
  for _ in $(seq 600); do grep -q '^done' "$OUT/target.bench.out" && break; sleep 0.5; done
  grep '^done' "$OUT/target.bench.out" | sed 's/^done //' | python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds_per_step"])'
  exec 7>&-; [ -n "$top" ] && kill $top; wait
}
if step bench; then
  for _ in $(seq "$LW_GPU_BENCH_REPS"); do
    t0=$(bench without); t1=$(bench light); t2=$(bench full); t3=$(bench full-noreuse)
    say "overhead: $t0 s/step without, $t1 with leakwatch top --mode light, $t2 with --mode full, $t3 full without walk reuse; ratios $(python3 -c "print(round($t1/$t0,3), round($t2/$t0,3), round($t3/$t0,3))" 2>&1)"
  done
fi
# 4. GPU OOM (decision oom-kill-reports, "GPU OOM").
oom_case() {
  local port=19933
  start_target oom
  [ -n "$PID" ] || { say "FAIL oom: target did not start: $(cat "$OUT/target.oom.err")"; fail=1; return; }
  cat >"$OUT/config.oom.yaml" <<YAML
listen: "127.0.0.1:$port"
oom: {report_dir: "$OUT/oom-reports"}
targets:
  - name: torch
    match: {pids: [$PID]}
YAML
  "$LW" run --config "$OUT/config.oom.yaml" >"$OUT/daemon.oom.log" 2>&1 &
  local daemon=$!
  sleep 5
  echo go >&7
  for _ in $(seq 120); do grep -q '^done' "$OUT/target.oom.out" && break; sleep 0.5; done
  sleep 2
  get "http://127.0.0.1:$port/api/v1/oom_kills" >"$OUT/oom_kills.json"
  get "http://127.0.0.1:$port/metrics" >"$OUT/metrics.oom.txt"
  kill $daemon; wait $daemon 2>/dev/null
  exec 7>&-; wait
  python3 - "$OUT/oom_kills.json" "$PID" <<'PY' | tee -a "$OUT/summary.txt" || fail=1
import json, os, sys
pid = int(sys.argv[2])
try:
    reports = [r for r in json.load(open(sys.argv[1]))["oom_kills"]
               if r["reason"] == "gpu_oom" and r["process"]["pid"] == pid]
except Exception as e:  # the daemon did not answer
    reports = []
    print("  no API document:", e)
for r in reports:
    print("  gpu:", json.dumps(r["gpu"]), "suppressed:", r["suppressed"], "recovered:", r["recovered"])
ok = len(reports) == 1 and reports[0]["recovered"] and reports[0]["gpu"]["api"] == "runtime"
if ok and os.environ.get("LW_GPU_COUNT") == "1" and reports[0]["gpu"]["device"] != 0:
    ok = False
    print("  the report's device is not 0 on a one-GPU machine")
print("== " + ("PASS" if ok else "FAIL") + f" gpu oom: {len(reports)} report(s), recovered, runtime API")
sys.exit(0 if ok else 1)
PY
}
step oom && oom_case

# 5 and 6. The tensor tier (issue 31): tests/gpu/torch_tensors.py, a leak
# and a pool that retains, side by side under one daemon at its defaults.
start_tensor_target() {  # mode fd: leaves the pid in $PID
  rm -f "$OUT/in.t$1"
  mkfifo "$OUT/in.t$1"
  python3 tests/gpu/torch_tensors.py "$1" <"$OUT/in.t$1" >"$OUT/target.t$1.out" 2>"$OUT/target.t$1.err" &
  eval "exec $2>\"\$OUT/in.t\$1\""
  for _ in $(seq 150); do grep -q '^ready' "$OUT/target.t$1.out" 2>/dev/null && break; sleep 0.2; done
  PID=$(awk '/^ready/{print $2}' "$OUT/target.t$1.out")
}
wait_line() {  # file word [seconds]
  for _ in $(seq $((${3:-60} * 5))); do grep -q "^$2 " "$1" 2>/dev/null && return 0; sleep 0.2; done
  return 1
}
# Exits 0 once the daemon traces the process with the tensor tier on, its
# Python frames read and its unwind tables built.
cat >"$OUT/tier_ready.py" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    sys.exit(1)
py, u = d.get("python") or {}, d.get("unwind") or {}
ok = (d.get("tensor") or {}).get("state") == "on" and py.get("frames") and \
    u.get("objects", {}).get("pending", 1) == 0 and u.get("queue_depth", 1) == 0
sys.exit(0 if ok else 1)
PY
tensor_case() {
  local port=19935 leak_pid retain_pid daemon api
  start_tensor_target leak 7; leak_pid=$PID
  start_tensor_target retain 8; retain_pid=$PID
  if [ -z "$leak_pid" ] || [ -z "$retain_pid" ]; then
    say "FAIL tensor: targets did not start: $(cat "$OUT/target.tleak.err" "$OUT/target.tretain.err")"
    fail=1; exec 7>&- 8>&-; return
  fi
  cat >"$OUT/config.tensor.yaml" <<YAML
listen: "127.0.0.1:$port"
top_sites_per_process: 50
targets:
  - name: tensor-leak
    match: {pids: [$leak_pid]}
  - name: tensor-retain
    match: {pids: [$retain_pid]}
YAML
  "$LW" run --config "$OUT/config.tensor.yaml" >"$OUT/daemon.tensor.log" 2>&1 &
  daemon=$!
  api="http://127.0.0.1:$port/api/v1/processes"
  for pid in $leak_pid $retain_pid; do
    for _ in $(seq 120); do
      get "$api/$pid/sites" >"$OUT/sites.tensor.attach.$pid.json"
      python3 "$OUT/tier_ready.py" "$OUT/sites.tensor.attach.$pid.json" && break
      kill -0 $daemon 2>/dev/null || break
      sleep 1
    done
  done
  echo go >&7; echo go >&8
  wait_line "$OUT/target.tleak.out" done 120
  wait_line "$OUT/target.tretain.out" made 60
  sleep 3
  get "$api/$leak_pid/sites" >"$OUT/sites.tensor.leak.json"
  get "$api/$retain_pid/sites" >"$OUT/sites.tensor.made.json"
  echo del >&8; wait_line "$OUT/target.tretain.out" deleted 30; sleep 3
  get "$api/$retain_pid/sites" >"$OUT/sites.tensor.deleted.json"
  echo empty >&8; wait_line "$OUT/target.tretain.out" emptied 30; sleep 3
  get "$api/$retain_pid/sites" >"$OUT/sites.tensor.emptied.json"
  get "http://127.0.0.1:$port/metrics" >"$OUT/metrics.tensor.txt"
  get "http://127.0.0.1:$port/api/v1/status" >"$OUT/status.tensor.json"
  kill $daemon; wait $daemon 2>/dev/null
  echo exit >&8; exec 7>&- 8>&-; wait
  python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt" || fail=1
import json, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(f"{out}/{name}"))
    except Exception as e:
        print(f"  {name}: no API document ({e})")
        return None
def line(name, word):
    for l in open(f"{out}/{name}"):
        if l.startswith(word + " "):
            return json.loads(l[len(word) + 1:])
    return None
def innermost_python(site):
    for f in site["frames"]:
        if f.get("language") == "python":
            return f["function"]
    return None
def device0(doc):
    return next((d for d in (doc or {}).get("gpu_explained", []) if d["device"] == 0), None)
ok_all = True
# 5. The leak, named under its Python function.
leak, done = load("sites.tensor.leak.json"), line("target.tleak.out", "done")
want = done["python_sites"]["keep_cuda_tensors"] if done else None
got, flagged = 0, False
for s in (leak or {}).get("sites", []):
    if s["kind"] == "tensor_gpu" and innermost_python(s) == "keep_cuda_tensors":
        got += s["live_bytes"]
        flagged = flagged or s["suspected_leak"]
if leak:
    print("  tensor:", json.dumps(leak.get("tensor")), "gpu_explained:", json.dumps(leak.get("gpu_explained")))
ok = leak is not None and want is not None and got == want and leak["tensor"]["state"] == "on"
ok_all &= ok
print("== " + ("PASS" if ok else "FAIL") + f" tensor leak: {got} bytes in tensor_gpu under keep_cuda_tensors"
      f" (kept {want}; flagged as a leak yet: {flagged})")
# 6. Pool retention after del, before empty_cache.
made, deleted, emptied = (load(f"sites.tensor.{n}.json") for n in ("made", "deleted", "emptied"))
d_made, d_del, d_emp = device0(made), device0(deleted), device0(emptied)
torch_made, torch_del = line("target.tretain.out", "made"), line("target.tretain.out", "deleted")
for name, d in (("made", d_made), ("deleted", d_del), ("emptied", d_emp)):
    print(f"  {name}: {json.dumps(d)}")
print(f"  torch: made {json.dumps(torch_made)} deleted {json.dumps(torch_del)}")
ok = bool(d_made and d_del and d_emp and torch_made and torch_del)
if ok:
    batch = torch_made["bytes"]
    ok = (d_made["tensors_live_bytes"] - d_del["tensors_live_bytes"] == batch
          and d_del["pool_totals"]
          and d_del["pool_allocated_bytes"] == torch_del["allocated"]
          and d_del["pool_reserved_bytes"] == torch_del["reserved"]
          and d_del["cached_bytes"] >= batch
          and d_emp["cuda_bytes"] <= d_del["cuda_bytes"] - batch)
ok_all &= ok
print("== " + ("PASS" if ok else "FAIL") + " pool retention: tensors_live falls by the batch at del, "
      "cached_bytes holds it (totals = torch's) until empty_cache gives the CUDA bytes back")
sys.exit(0 if ok_all else 1)
PY
}
step tensor && tensor_case

[ $fail = 0 ] && say "ALL PASS" || say "SOME FAILED"
exit $fail
