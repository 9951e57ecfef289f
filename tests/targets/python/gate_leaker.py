# SPDX-License-Identifier: Apache-2.0
# The leak gate's Python target (tests/integration/gate_test.cc; decision
# leak-gate), run by `leakwatch test -- python3.11 gate_leaker.py MODE`.
#   clean  builds and drops Python objects, exits 0
#   leak   also keeps 8 bytearrays of 2 MiB from hold_buffers(), still
#          referenced when the process ends
# Both end through os._exit(0), as multiprocessing's workers do: no
# interpreter finalization, so what the program still references is still
# allocated at its exit (a normal exit would free module globals).
import os
import sys
import time

BLOCK = 2 << 20
kept = []


def churn():
    total = 0
    for i in range(200):
        data = [bytearray(1000 + i) for _ in range(20)]
        total += sum(len(d) for d in data)
    return total


def hold_buffers(count):
    for _ in range(count):
        kept.append(bytearray(BLOCK))


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "clean"
    total = churn()
    if mode == "leak":
        hold_buffers(8)
    total += churn()  # the program goes on working after the leak
    time.sleep(1.0)  # and lives on a while: its frames are named while it runs
    print("gate_leaker.py", mode, total, flush=True)
    os._exit(0)


main()
