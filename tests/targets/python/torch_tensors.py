# SPDX-License-Identifier: Apache-2.0
"""PyTorch CPU tensors for the tensor tier (tests/integration/tensor_test.cc).
Run with /usr/bin/python3, the interpreter Debian's python3-torch is for.

After "go": keep_tensors keeps KEPT tensors of 64 KiB (torch.empty(16384),
float32: one c10::alloc_cpu(65536) each); churn_tensors makes and drops
CHURN of them; make_in_thread, on another thread, makes MADE tensors of
32 KiB, of which the main thread drops all but one. The truth's
python_sites are the bytes each function keeps, by innermost Python frame.
"""
import threading

import torch

import lw_protocol

KEPT = 40
CHURN = 2000
MADE = 6
KEEP = []


def keep_tensors(n):
    for _ in range(n):
        KEEP.append(torch.empty(16384, dtype=torch.float32))  # site: keep_tensors


def churn_tensors(n):
    for _ in range(n):
        t = torch.empty(16384, dtype=torch.float32)
        t.fill_(1.0)
        del t


def make_in_thread(out, n):
    for _ in range(n):
        out.append(torch.empty(8192, dtype=torch.float32))  # site: make_in_thread


def main():
    torch.set_num_threads(1)
    # Warm up: first-call allocations are not what is measured.
    keep_tensors(2)
    KEEP.clear()
    churn_tensors(10)
    if not lw_protocol.ready_wait_go():
        return
    keep_tensors(KEPT)
    churn_tensors(CHURN)
    made = []
    worker = threading.Thread(target=make_in_thread, args=(made, MADE))
    worker.start()
    worker.join()
    del made[1:]  # freed by the main thread, made by the worker
    kept = sum(t.element_size() * t.nelement() for t in KEEP)
    lw_protocol.done(python_sites={"keep_tensors": kept, "churn_tensors": 0,
                                   "make_in_thread": made[0].element_size() * made[0].nelement()},
                     facts={"kept_tensors": len(KEEP), "churned": CHURN})
    lw_protocol.wait_exit()


main()
