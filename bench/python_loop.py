# SPDX-License-Identifier: Apache-2.0
"""Target of bench/python_frames.py: an allocation loop run DEPTH Python
frames deep, timed in this process's CPU time (the probes run in its
context, so their cost is in it).

    python_loop.py py|torch DEPTH ITERATIONS

Protocol on stdin/stdout: "ready PID", then per "run" line one
"result CPU_NS_PER_ITERATION", until EOF.
"""
import os
import sys
import time

workload, depth, iterations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

if workload == "torch":
    import torch

    torch.set_num_threads(1)
    x = torch.ones(64, 128)
    w = torch.ones(128, 256)

    def body():
        for _ in range(iterations):
            y = torch.mm(x, w)  # 64 KiB output: posix_memalign, then freed
            del y
else:

    def body():
        for _ in range(iterations):
            b = bytearray(1000)  # > 512 B: one malloc and one free
            del b


def nest(d):
    if d <= 1:
        start = time.process_time_ns()
        body()
        return time.process_time_ns() - start
    return nest(d - 1)


nest(2)  # warm up
os.write(1, b"ready %d\n" % os.getpid())
for line in sys.stdin:
    if line.strip() != "run":
        continue
    ns = nest(depth)
    os.write(1, b"result %f\n" % (ns / iterations))
