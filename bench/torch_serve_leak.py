#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A busy PyTorch serving loop that leaks through one Python function: the
target of bench/tensor_leak.sh (issue 31).

    torch_serve_leak.py [--threads N] [--batch B] [--rate-mib-per-min R]

A small conv net, batch B (4) of 3x32x32 images, one intra-op thread. Its
function `remember_batch` keeps a 64 KiB tensor whenever the bytes it has
kept fall behind R MiB per minute (4) since the leak started: a steady
tensor leak, named by one Python function, in a loop making thousands of
tensors a second.

Protocol: prints `ready <pid>` after warm-up and reads lines `S LEAK`: runs
S seconds (leaking when LEAK is 1) and prints `its_per_s <X> cpu_ms_per_it
<Y> kept_bytes <Z>`, Z being every byte `remember_batch` holds (the figure
leakwatch's bytes under it are compared with). Exits at end of input.
"""
import argparse
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--rate-mib-per-min", type=float, default=4.0)
    args = ap.parse_args()
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
                    remember_batch(out, (leak_seconds + time.perf_counter() - t0) * rate)
                if n % 4 == 0 and time.perf_counter() >= deadline:
                    break
            wall = time.perf_counter() - t0
            if leak:
                leak_seconds += wall
            cpu = time.process_time() - cpu0
            kept_bytes = len(kept) * KEEP_ELEMENTS * 4
            print(f"its_per_s {n / wall:.2f} cpu_ms_per_it {cpu * 1e3 / n:.4f} kept_bytes {kept_bytes}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
