# SPDX-License-Identifier: Apache-2.0
# The leak gate's Python target (tests/integration/gate_test.cc; decision
# leak-gate), run by `leakwatch test -- python3.11 gate_leaker.py MODE`.
#   clean  builds and drops Python objects, exits 0
#   leak   also leaks 8 blocks of 2 MiB from leak_native_buffers(): memory
#          a C library call made and nobody frees (a native extension's
#          leak as a Python program shows it), held at exit
import ctypes
import sys

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]

BLOCK = 2 << 20


def churn():
    total = 0
    for i in range(200):
        data = [bytearray(1000 + i) for _ in range(20)]
        total += sum(len(d) for d in data)
    return total


def leak_native_buffers(count):
    for _ in range(count):
        p = libc.malloc(BLOCK)
        libc.memset(p, 1, BLOCK)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "clean"
    total = churn()
    if mode == "leak":
        leak_native_buffers(8)
    print("gate_leaker.py", mode, total)


main()
