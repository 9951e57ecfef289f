#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch program for the GPU check (tests/gpu/run.sh). Ran on an H100 on
2026-11-27 (run.sh's header).

  torch_leaker.py leak     keeps a reference to a new 16 MiB CUDA tensor
                           every `--interval` seconds, next to a small
                           training loop (the caching allocator must grow
                           with cudaMalloc / cuMemCreate)
  torch_leaker.py control  the same, but drops each tensor after a few
                           steps: live device bytes plateau
  torch_leaker.py bench N  N training steps, prints seconds per step

Speaks the target protocol of tests/targets/target_protocol.h on stdio:
prints "ready <pid>", waits for "go"; then runs until stdin closes.
"""
import os
import select
import sys
import time

import torch


def train_step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "leak"
    interval = float(os.environ.get("LW_GPU_INTERVAL", "2.0"))
    dev = torch.device("cuda:0")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 1024, device=dev)
    y = torch.randn(256, 1024, device=dev)
    train_step(model, opt, x, y)
    torch.cuda.synchronize()

    if mode == "bench":
        steps = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
        print(f"ready {os.getpid()}", flush=True)
        sys.stdin.readline()
        t0 = time.perf_counter()
        for _ in range(steps):
            train_step(model, opt, x, y)
        torch.cuda.synchronize()
        print(f"done {{\"seconds_per_step\": {(time.perf_counter() - t0) / steps}}}", flush=True)
        sys.stdin.readline()
        return

    print(f"ready {os.getpid()}", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    if mode == "oom":
        # More than the device holds: cudaMalloc fails out of memory, the
        # caching allocator frees its cache and retries (fails again), then
        # raises. A fresh block after empty_cache() is a successful cudaMalloc.
        total = torch.cuda.get_device_properties(dev).total_memory
        failed = False
        try:
            torch.empty(2 * total, dtype=torch.uint8, device=dev)
        except torch.cuda.OutOfMemoryError:
            failed = True
        torch.cuda.empty_cache()
        kept = torch.empty(64 << 20, dtype=torch.uint8, device=dev)
        torch.cuda.synchronize()
        print(f"done {{\"oom_raised\": {str(failed).lower()}, \"requested\": {2 * total}}}", flush=True)
        sys.stdin.readline()
        return
    kept = []
    last = 0.0
    while True:
        r, _, _ = select.select([sys.stdin], [], [], 0.01)
        if r and not sys.stdin.readline():
            return
        train_step(model, opt, x, y)
        now = time.monotonic()
        if now - last >= interval:
            last = now
            kept.append(torch.empty(4 << 20, dtype=torch.float32, device=dev))  # 16 MiB
            if mode == "control" and len(kept) > 3:
                kept.pop(0)
                torch.cuda.empty_cache()  # give the segment back: cudaFree


if __name__ == "__main__":
    main()
