#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch program for the tensor-tier steps of the GPU check (tests/gpu/run.sh,
issue 31). Speaks the line protocol of tests/targets/target_protocol.h on
stdio: "ready <pid>", waits for "go".

  torch_tensors.py leak    keep_cuda_tensors() keeps one 4 MiB CUDA tensor every
                           LW_GPU_INTERVAL s (default 1), 30 in all, beside a small
                           training loop, then prints "done {...}" (the bytes it
                           keeps) and trains on until stdin closes
  torch_tensors.py retain  make_batch() makes 64 tensors of 4 MiB and prints
                           "made {...}"; on "del" drops them all ("deleted {...}":
                           the pool keeps the memory cached), on "empty" calls
                           torch.cuda.empty_cache() ("emptied {...}"); "exit" ends.
                           Each line carries torch.cuda.memory_allocated/reserved.
"""
import json
import os
import select
import sys
import time

import torch

DEV = torch.device("cuda:0")
KEPT = []


def keep_cuda_tensors():
    KEPT.append(torch.empty(1 << 20, dtype=torch.float32, device=DEV))  # 4 MiB


def make_batch(n):
    return [torch.empty(1 << 20, dtype=torch.float32, device=DEV) for _ in range(n)]


def say(word, **fields):
    torch.cuda.synchronize()
    fields.update(allocated=torch.cuda.memory_allocated(DEV), reserved=torch.cuda.memory_reserved(DEV))
    print(word + " " + json.dumps(fields), flush=True)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "leak"
    interval = float(os.environ.get("LW_GPU_INTERVAL", "1.0"))
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(128, 1024, device=DEV)
    torch.cuda.synchronize()
    print(f"ready {os.getpid()}", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    if mode == "retain":
        batch = make_batch(64)
        say("made", tensors=len(batch), bytes=sum(t.element_size() * t.nelement() for t in batch))
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "del":
                del batch[:]
                say("deleted")
            elif cmd == "empty":
                torch.cuda.empty_cache()
                say("emptied")
            elif cmd == "exit":
                return
        return
    last, done = 0.0, False
    while True:
        r, _, _ = select.select([sys.stdin], [], [], 0.005)
        if r and not sys.stdin.readline():
            return
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()
        now = time.monotonic()
        if len(KEPT) < 30 and now - last >= interval:
            last = now
            keep_cuda_tensors()
        if len(KEPT) == 30 and not done:
            done = True
            say("done", python_sites={"keep_cuda_tensors": sum(t.element_size() * t.nelement() for t in KEPT)})


if __name__ == "__main__":
    main()
