#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A busy PyTorch serving loop that leaks through one Python function: the
target of bench/tensor_leak.sh (issue 31) and bench/busy_native_leak.sh
(issue 33).

    torch_serve_leak.py [--threads N] [--batch B] [--rate-mib-per-min R]
                        [--leak tensor|native --native-lib PATH]

A small conv net, batch B (4) of 3x32x32 images, one intra-op thread. With
`--leak tensor` (the default) its function `remember_batch` keeps a 64 KiB
tensor whenever the bytes it has kept fall behind R MiB per minute (4)
since the leak started: a steady tensor leak, named by one Python
function, in a loop making thousands of tensors a second. With `--leak
native` its function `remember_native` instead calls
`lw_bench_native_keep(65536)` of the library PATH (bench/native_keep.cc,
built -O2 without frame pointers) through ctypes, at the same rate: a C++
op that news without deleting, called every few requests.

Protocol: prints `ready <pid>` after warm-up and reads lines `S LEAK`: runs
S seconds (leaking when LEAK is 1) and prints `its_per_s <X> cpu_ms_per_it
<Y> kept_bytes <Z>`, Z being every byte the leaking function holds (the
library's own count for `native`: the figure leakwatch's bytes under it
are compared with). Exits at end of input.
"""
import argparse
import ctypes
import os
import sys
import time

import torch

from torch_infer import build_conv  # the same conv net as bench/torch_run.sh

KEEP_ELEMENTS = 16384  # float32: 64 KiB per kept tensor
kept = []


def remember_batch(out: torch.Tensor, owed_bytes: float) -> None:
    """Keeps a 64 KiB tensor while the leak is behind its rate."""
    while len(kept) * KEEP_ELEMENTS * 4 < owed_bytes:
        keep = torch.empty(KEEP_ELEMENTS, dtype=torch.float32)
        keep[0] = out[0, 0]
        kept.append(keep)


class NativeKeeper:
    """The library's two functions, through ctypes."""

    def __init__(self, path: str):
        lib = ctypes.CDLL(path)
        self.keep = lib.lw_bench_native_keep
        self.keep.argtypes = [ctypes.c_size_t]
        self.keep.restype = None
        self.kept_bytes = lib.lw_bench_native_kept_bytes
        self.kept_bytes.argtypes = []
        self.kept_bytes.restype = ctypes.c_size_t


def remember_native(native: NativeKeeper, owed_bytes: float) -> None:
    """Has the native op keep 64 KiB while the leak is behind its rate."""
    while native.kept_bytes() < owed_bytes:
        native.keep(KEEP_ELEMENTS * 4)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--rate-mib-per-min", type=float, default=4.0)
    ap.add_argument("--leak", choices=("tensor", "native"), default="tensor")
    ap.add_argument("--native-lib", help="bench/native_keep.cc built as a shared object")
    args = ap.parse_args()
    native = None
    if args.leak == "native":
        if not args.native_lib:
            ap.error("--leak native needs --native-lib PATH")
        native = NativeKeeper(args.native_lib)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_conv()
    batch = torch.randn(args.batch, 3, 32, 32)
    rate = args.rate_mib_per_min * (1 << 20) / 60.0  # bytes per second
    leak_seconds = 0.0  # time spent leaking so far: the leak's clock
    with torch.no_grad():
        for _ in range(20):
            model(batch)
        print(f"ready {os.getpid()}", flush=True)
        for line in sys.stdin:
            seconds, leak = line.split()
            seconds, leak = float(seconds), leak == "1"
            n = 0
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            deadline = t0 + seconds
            while True:
                out = model(batch)
                n += 1
                if leak:
                    owed = (leak_seconds + time.perf_counter() - t0) * rate
                    if native:
                        remember_native(native, owed)
                    else:
                        remember_batch(out, owed)
                if n % 4 == 0 and time.perf_counter() >= deadline:
                    break
            wall = time.perf_counter() - t0
            if leak:
                leak_seconds += wall
            cpu = time.process_time() - cpu0
            kept_bytes = native.kept_bytes() if native else len(kept) * KEEP_ELEMENTS * 4
            print(f"its_per_s {n / wall:.2f} cpu_ms_per_it {cpu * 1e3 / n:.4f} kept_bytes {kept_bytes}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
