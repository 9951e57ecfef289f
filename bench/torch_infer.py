#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch CPU inference loop, the target of bench/torch_run.sh.

    torch_infer.py [--threads N] [--model conv|mlp]

Models: `conv` (default), a small convolutional net on a batch of 8
32x32 images; `mlp`, a two-layer perceptron 256 wide on a batch of 64
(the cost issue's second workload: few, large allocations per iteration).

Protocol (so a tracer can attach to the running process): builds the
model, warms it up, prints `ready <pid>` and waits on stdin.
Every line read holds a number of seconds S: it runs inference batches for
S seconds and prints `its_per_s <iterations per second> cpu_ms_per_it <the
process's CPU time per iteration>`. It exits at end of input.

Torch allocates tensor storage through posix_memalign (64-byte alignment;
bench/README.md, "Facts measured on these machines"), so a `full`
tracer pays for every intermediate tensor of
every forward pass. One intra-op thread by default: on a small shared
machine more threads only add scheduling noise.
"""
import argparse
import os
import sys
import time

import torch
from torch import nn


def build_mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(256, 256), nn.ReLU(),
        nn.Linear(256, 10),
    ).eval()


def build_conv() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(32, 128), nn.ReLU(),
        nn.Linear(128, 10),
    ).eval()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model", choices=("conv", "mlp"), default="conv")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.model == "mlp":
        model = build_mlp()
        batch = torch.randn(64, 256)
    else:
        model = build_conv()
        batch = torch.randn(8, 3, 32, 32)
    with torch.no_grad():
        for _ in range(20):
            model(batch)
        print(f"ready {os.getpid()}", flush=True)
        for line in sys.stdin:
            seconds = float(line)
            n = 0
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            deadline = t0 + seconds
            while True:
                model(batch)
                n += 1
                if n % 4 == 0 and time.perf_counter() >= deadline:
                    break
            wall = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            print(f"its_per_s {n / wall:.2f} cpu_ms_per_it {cpu * 1e3 / n:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
