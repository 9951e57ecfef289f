#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The tensor tier's cost under the daemon, by configuration, in one run
(issue 31): the serving loop of bench/torch_serve_leak.py (conv net, batch
4, one thread; its leak off) run in chunks, bare and under `leakwatch run`
with one target matching its pid, the configurations interleaved round by
round so that drift hits all alike.

    bench/tensor_tier_cost.py [--rounds N] [--chunk-seconds S] [--build DIR] [CONFIG...]

CONFIGs (default: bare light light-nosessions light-notensors):
  bare              no daemon
  light             `mode: light`: the tensor tier and mmap tracing, no heap probes
  light-nosessions  the same with LW_BENCH_NO_UPROBE_SESSIONS (entry + return probes)
  light-notensors   `mode: light`, `tensors: false`
  auto              the default config (mode auto)
  noop-tensors      no daemon: lw_bench_noop --tensor puts no-op programs where the tier's
                    probes go (alloc_cpu as a uprobe session skipping 0 bytes, free_cpu at entry):
                    the floor of the tier's traps, which no work in its programs can go below
  noop-tensors-nosession  the same with alloc_cpu's entry + uretprobe
  bursts            `mode: full` with the default governor: the loop is over its heap budget,
                    so its heap is traced in bursts, windows and walks (decision busy-processes);
                    the chunk starts once the first window has ended (the process parked)
  bursts-notensors  the same with `tensors: false`: the bursts' cost without the tier's
  bursts-window1    `bursts` with `governor.drain_window_seconds: 1` (2 by default): what the
                    windows after each burst cost
  light-fp          `light` with `unwind.mode: frame_pointers`: what the CFI walk costs the tier
  light-nopy        `light` with `unwind.python_frames: false`: what the Python frames cost it
  light-nomemo      `light` with LW_BENCH_NO_WALK_REUSE: what walk reuse saves it
  light-pynative    `light` with `unwind.native_frames_above_python: true`: the native walk
                    goes on above the first Python frame (the default stops there)
  light-smallmap    `light` with `limits.live_map_entries: 65536`: what the live map's size
                    (its bucket array) costs each lookup

Prints, per chunk, iterations/s, CPU ms per iteration and, from the
kernel's BPF statistics (kernel.bpf_stats_enabled, set for the run and
restored), each leakwatch program's runs per iteration and ns per run; then
each configuration's mean against bare. Each chunk starts once the daemon's
uprobe programs are loaded and 4 s more have passed, so its start-up work
(symbols, unwind tables) is mostly behind it.
Root; python3-torch (scripts/install-deps.sh --with-bench-tools); bpftool.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = ("bare", "light", "light-nosessions", "light-notensors", "auto", "noop-tensors",
           "noop-tensors-nosession", "bursts", "bursts-notensors", "bursts-window1", "light-fp",
           "light-nopy", "light-nomemo", "light-smallmap",
           "light-pynative")


def bpf_stats():
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout
    return {p["id"]: (p["name"], p.get("run_cnt", 0), p.get("run_time_ns", 0))
            for p in json.loads(out or "[]") if p.get("name", "").startswith("lw_")}


class Target:
    def __init__(self):
        self.proc = subprocess.Popen(["/usr/bin/python3", os.path.join(HERE, "torch_serve_leak.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=HERE)
        self.pid = int(self.proc.stdout.readline().split()[1])

    def chunk(self, seconds):
        self.proc.stdin.write(f"{seconds} 0\n")
        self.proc.stdin.flush()
        f = self.proc.stdout.readline().split()
        if len(f) < 4:
            sys.exit("tensor_tier_cost.py: the target stopped answering")
        return float(f[1]), float(f[3])


def start_daemon(cfg, build, pid, scratch):
    port = 20000 + random.randrange(20000)
    body = f'listen: "127.0.0.1:{port}"\ntargets:\n  - name: torch\n    match: {{pids: [{pid}]}}\n'
    if cfg.startswith("light"):
        body += "    mode: light\n"
    if cfg.startswith("bursts"):
        body += "    mode: full\n"
    if cfg.endswith("-notensors"):
        body += "    tensors: false\n"
    if cfg == "bursts-window1":
        body += "governor:\n  drain_window_seconds: 1\n"
    if cfg == "light-fp":
        body += "unwind:\n  mode: frame_pointers\n"
    if cfg == "light-nopy":
        body += "unwind:\n  python_frames: false\n"
    if cfg == "light-pynative":
        body += "unwind:\n  native_frames_above_python: true\n"
    if cfg == "light-smallmap":
        body += "limits:\n  live_map_entries: 65536\n"
    path = os.path.join(scratch, "cfg.yaml")
    with open(path, "w") as f:
        f.write(body)
    env = dict(os.environ)
    if cfg == "light-nosessions":
        env["LW_BENCH_NO_UPROBE_SESSIONS"] = "1"
    if cfg == "light-nomemo":
        env["LW_BENCH_NO_WALK_REUSE"] = "1"
    err = open(os.path.join(scratch, f"daemon-{cfg}.err"), "w")
    proc = subprocess.Popen([os.path.join(build, "leakwatch"), "run", "--config", path], stderr=err, env=env)
    url = f"http://127.0.0.1:{port}/api/v1/processes/{pid}/sites"
    for _ in range(300):
        try:
            urllib.request.urlopen(url, timeout=1)
            break
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"tensor_tier_cost.py: the daemon exited; see {err.name}")
            time.sleep(0.2)
    if cfg != "light-notensors":
        deadline = time.time() + 60
        while time.time() < deadline and not any(
                n in ("lw_entry", "lw_tensor_session") for n, _, _ in bpf_stats().values()):
            time.sleep(0.5)
    time.sleep(4)
    proc.lw_port, proc.lw_err = port, err.name
    return proc


def bursts_of(port, pid):
    """The process's `bursts` object from the API, or None."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/processes", timeout=2) as r:
            procs = json.load(r)
    except OSError:
        return None
    procs = procs.get("processes", procs) if isinstance(procs, dict) else procs
    return next((p.get("bursts") for p in procs if p.get("pid") == pid), None)


def wait_parked(daemon, target):
    """Runs the loop (unmeasured, 2 s at a time: an idle target makes no probe
    hits) until the governor has its heap in bursts and the first window has
    ended."""
    for _ in range(60):
        if daemon.poll() is not None:
            sys.exit(f"tensor_tier_cost.py: the daemon exited; see {daemon.lw_err}")
        target.chunk(2)
        b = bursts_of(daemon.lw_port, target.pid)
        if b and b.get("parked"):
            return
    sys.exit(f"tensor_tier_cost.py: the process was not parked in bursts after 120 s of the loop; "
             f"see {daemon.lw_err}")


def start_noop(cfg, build, pid):
    cmd = [os.path.join(build, "bench", "lw_bench_noop"), "-p", str(pid), "--tensor"]
    if cfg == "noop-tensors-nosession":
        cmd.append("--no-session")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "attached":
        sys.exit(f"tensor_tier_cost.py: {' '.join(cmd)} did not attach")
    return proc


def stop(proc):
    """Stops a daemon or lw_bench_noop; the latter's hit counts, or ''."""
    proc.terminate()
    out = "  " + proc.stdout.read().strip() if proc.stdout else ""
    proc.wait()
    return out


def programs(before, after, its):
    out = []
    for k, (name, runs, ns) in after.items():
        if k in before and runs > before[k][1]:
            dr, dt = runs - before[k][1], ns - before[k][2]
            out.append((dt, f"{name} {dr / its:.1f}/it {dt / dr:.0f} ns"))
    return "; ".join(s for _, s in sorted(out, reverse=True)[:4])


def run_chunk(cfg, args, target, scratch):
    """One configuration's chunk: (it/s, CPU ms/it, what to print after)."""
    if cfg == "bare":
        daemon = None
    elif cfg.startswith("noop"):
        daemon = start_noop(cfg, args.build, target.pid)
    else:
        daemon = start_daemon(cfg, args.build, target.pid, scratch)
    bursts = cfg.startswith("bursts")
    if bursts:
        try:
            wait_parked(daemon, target)
        except SystemExit:
            stop(daemon)  # not left attached to the machine
            raise
    before = bpf_stats()
    b0 = bursts_of(daemon.lw_port, target.pid) if bursts else None
    its, cpu = target.chunk(args.chunk_seconds)
    after = bpf_stats()
    b1 = bursts_of(daemon.lw_port, target.pid) if bursts else None
    extra = programs(before, after, its * args.chunk_seconds)
    extra += stop(daemon) if daemon else ""
    if bursts:
        extra += (f"  bursts in the chunk: {b1['bursts'] - b0['bursts']}" if b0 and b1
                  else "  bursts: left during the chunk (see the daemon's log)")
    return its, cpu, extra


def run_rounds(args, target, scratch):
    results = {c: [] for c in args.configs}
    for r in range(args.rounds):
        for cfg in args.configs:
            its, cpu, extra = run_chunk(cfg, args, target, scratch)
            results[cfg].append((its, cpu))
            print(f"round {r + 1} {cfg:17s} {its:8.1f} it/s {cpu:.4f} CPU ms/it  {extra}", flush=True)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--chunk-seconds", type=float, default=10)
    ap.add_argument("--build", default="build")
    ap.add_argument("configs", nargs="*", default=["bare", "light", "light-nosessions", "light-notensors"])
    args = ap.parse_args()
    bad = [c for c in args.configs if c not in CONFIGS]
    if bad or "bare" not in args.configs:
        ap.error(f"configs from {', '.join(CONFIGS)}, bare included (unknown: {', '.join(bad) or 'none'})")
    if os.geteuid() != 0:
        sys.exit("tensor_tier_cost.py: must run as root (BPF)")
    if not os.access(os.path.join(args.build, "leakwatch"), os.X_OK):
        sys.exit(f"tensor_tier_cost.py: {args.build}/leakwatch not found; build it: scripts/build.sh")
    with open("/proc/sys/kernel/bpf_stats_enabled") as f:
        stats_was = f.read().strip()
    with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
        f.write("1")
    scratch = tempfile.mkdtemp(prefix="lw-tensor-cost.")  # kept: the daemons' logs
    print(f"tensor_tier_cost.py: daemon logs in {scratch}", file=sys.stderr)
    target = Target()
    try:
        results = run_rounds(args, target, scratch)
    finally:
        target.proc.stdin.close()
        target.proc.wait()
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
            f.write(stats_was)
    bare_its = sum(x[0] for x in results["bare"]) / len(results["bare"])
    bare_cpu = sum(x[1] for x in results["bare"]) / len(results["bare"])
    for cfg, rows in results.items():
        its = sum(x[0] for x in rows) / len(rows)
        cpu = sum(x[1] for x in rows) / len(rows)
        print(f"{cfg:17s} {its:8.1f} it/s ({(1 - its / bare_its) * 100:+.1f}% fewer than bare), "
              f"CPU per iteration x{cpu / bare_cpu:.3f}")


if __name__ == "__main__":
    main()
