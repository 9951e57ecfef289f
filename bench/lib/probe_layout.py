#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Where leakwatch puts its probes on one process, as a layout file for
`lw_bench_noop --layout` (bench/torch_run.sh, row noop-full).

    bench/lib/probe_layout.py --build DIR --pid PID [--mode full|light] OUT

Starts `leakwatch run` with one target matching PID in the given mode,
waits until its heap probes are attached (light: until the probe list
stops changing) and the list has not changed for 3 s, reads every
attached uprobe from /api/v1/status and writes one line per probe:
`PATH FILE_OFFSET entry|entry+return|session  # SYMBOLS`. Then stops
the daemon.
USDTs (semaphore-gated) are left out and said on stderr: a plain uprobe
at their address would not raise the semaphore. Root.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.request


def fail(msg):
    sys.exit(f"probe_layout.py: {msg}")


def start_daemon(build, pid, mode, scratch):
    port = 20000 + random.randrange(20000)
    cfg = os.path.join(scratch, "cfg.yaml")
    with open(cfg, "w") as f:
        f.write(f'listen: "127.0.0.1:{port}"\ntargets:\n  - name: layout\n'
                f'    match: {{pids: [{pid}]}}\n    mode: {mode}\n')
    err = open(os.path.join(scratch, "daemon.err"), "w")
    proc = subprocess.Popen([os.path.join(build, "leakwatch"), "run", "--config", cfg],
                            stdout=subprocess.DEVNULL, stderr=err)
    return proc, f"http://127.0.0.1:{port}/api/v1/status", err.name


def read_probes(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return json.load(r).get("probes", [])
    except OSError:
        return None


def is_usdt(symbols):
    """provider:name (pytorch:malloc), not a symbol (c10::alloc_cpu has two colons)."""
    return re.fullmatch(r"[\w.]+:[\w.]+", symbols) is not None


def kind_of(p):
    if p.get("retprobe"):
        return "session" if "uprobe session" in p.get("placement", "") else "entry+return"
    return "entry"


def wait_stable(proc, url, mode, errfile, timeout=120):
    """The attached probes once heap probes are in (full) and the list held 3 s."""
    deadline = time.time() + timeout
    last, since = None, time.time()
    while time.time() < deadline:
        if proc.poll() is not None:
            fail(f"the daemon exited ({proc.returncode}); see {errfile}")
        probes = read_probes(url)
        if probes is not None:
            attached = sorted({(p["object"], p["file_offset"], kind_of(p), p.get("symbols", ""))
                               for p in probes if p.get("attached")})
            heap = any("malloc" in s.split(",") for _, _, _, s in attached)
            if attached != last:
                last, since = attached, time.time()
            elif (heap or mode != "full") and attached and time.time() - since >= 3:
                return attached
        time.sleep(0.5)
    fail(f"no stable probe list within {timeout} s (last: {len(last or [])} probes); see {errfile}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--mode", choices=("full", "light"), default="full")
    ap.add_argument("out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        fail("needs root (BPF)")
    with tempfile.TemporaryDirectory(prefix="lw-layout-") as scratch:
        proc, url, errfile = start_daemon(args.build, args.pid, args.mode, scratch)
        try:
            attached = wait_stable(proc, url, args.mode, errfile)
        finally:
            proc.terminate()
            proc.wait()
    lines, usdts = [], []
    for obj, off, kind, symbols in attached:
        if is_usdt(symbols):
            usdts.append(f"{symbols} in {obj}")
            continue
        lines.append(f"{obj} {off} {kind}  # {symbols}")
    with open(args.out, "w") as f:
        f.write("# leakwatch --mode %s on pid %d: PATH FILE_OFFSET KIND\n" % (args.mode, args.pid))
        f.write("".join(l + "\n" for l in lines))
    kinds = {k: sum(1 for _, _, kk, s in attached if kk == k and not is_usdt(s))
             for k in ("entry", "entry+return", "session")}
    print(f"probe_layout.py: {len(lines)} probes ({', '.join(f'{v} {k}' for k, v in kinds.items())}) "
          f"on {len({o for o, _, _, _ in attached})} objects"
          + (f"; left out (USDTs): {'; '.join(usdts)}" if usdts else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
