# SPDX-License-Identifier: Apache-2.0
"""What reading Python frames costs per allocation, by depth
(decision python-frames).

    /usr/bin/python3 bench/python_frames.py [--reps N] [--depths 1,8,32,64]
        [--workloads py,torch] [--build build]          (as root)

For each workload and depth one target (bench/python_loop.py, under
Debian's /usr/bin/python3.11; torch under /usr/bin/python3, which
python3-torch is for) runs its loop DEPTH Python frames deep, and rows are
interleaved over N repetitions: bare (no tracer), native (`leakwatch top
--no-python-frames`: native stacks only) and python (Python frames read).
Each row's figure is the median of the target's CPU ns per iteration; the
cost of Python frames is python - native, per allocator call (malloc and
posix_memalign; frees read no stack), from leakwatch's own count of them.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def start_target(workload, depth, iterations):
    python = "/usr/bin/python3" if workload == "torch" else "/usr/bin/python3.11"
    p = subprocess.Popen([python, os.path.join(HERE, "python_loop.py"), workload, str(depth), str(iterations)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("ready"), line
    return p


def run_once(target):
    target.stdin.write("run\n")
    target.stdin.flush()
    line = target.stdout.readline()
    assert line.startswith("result"), line
    return float(line.split()[1])


def attach(leakwatch_bin, pid, python_frames):
    args = [leakwatch_bin, "top", "-p", str(pid), "--json", "--interval", "0.5"]
    if not python_frames:
        args.append("--no-python-frames")
    lw = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first = json.loads(lw.stdout.readline())  # every probe is attached
    return lw, first


def detach(lw):
    lw.send_signal(signal.SIGINT)
    last = None
    for line in lw.stdout:
        try:
            last = json.loads(line)
        except ValueError:
            pass
    lw.wait()
    return last


def allocations(snap):
    kinds = snap.get("kinds", {}) if snap else {}
    return sum(k.get("allocations", 0) for k in kinds.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--depths", default="1,8,32,64")
    ap.add_argument("--workloads", default="py,torch")
    ap.add_argument("--build", default="build")
    ap.add_argument("--iterations-py", type=int, default=20000)
    ap.add_argument("--iterations-torch", type=int, default=2000)
    a = ap.parse_args()
    leakwatch_bin = os.path.join(a.build, "leakwatch")
    print("workload depth  bare_ns/it  native_ns/it  python_ns/it  allocs/it  python-native ns/alloc  "
          "(native-bare)/alloc")
    for workload in a.workloads.split(","):
        iterations = a.iterations_torch if workload == "torch" else a.iterations_py
        for depth in map(int, a.depths.split(",")):
            target = start_target(workload, depth, iterations)
            rows = {"bare": [], "native": [], "python": []}
            allocs_per_it = []
            for _ in range(a.reps):
                for row in ("bare", "native", "python"):
                    lw = None
                    if row != "bare":
                        lw, first = attach(leakwatch_bin, target.pid, row == "python")
                    rows[row].append(run_once(target))
                    if lw:
                        time.sleep(0.6)
                        last = detach(lw)
                        allocs_per_it.append(allocations(last) / iterations)
            target.stdin.close()
            target.wait()
            med = {k: statistics.median(v) for k, v in rows.items()}
            per_alloc = statistics.median(allocs_per_it) or 1
            print("%-8s %5d %11.0f %13.0f %13.0f %10.2f %23.0f %20.0f" %
                  (workload, depth, med["bare"], med["native"], med["python"], per_alloc,
                   (med["python"] - med["native"]) / per_alloc, (med["native"] - med["bare"]) / per_alloc),
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())
