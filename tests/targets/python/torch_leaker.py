# SPDX-License-Identifier: Apache-2.0
"""A PyTorch loop that keeps its output tensors (tests/integration/python_test.cc).
Run with /usr/bin/python3, the interpreter Debian's python3-torch is for."""
import torch

import lw_protocol

OUTPUTS = []


def keep_outputs(weight, n):
    x = torch.ones(64, 128)
    for _ in range(n):
        OUTPUTS.append(torch.mm(x, weight))  # site: keep_outputs


def main():
    torch.set_num_threads(1)
    weight = torch.ones(128, 256)
    keep_outputs(weight, 2)  # warm up: first-call allocations are not the leak
    OUTPUTS.clear()
    if not lw_protocol.ready_wait_go():
        return
    with torch.no_grad():
        keep_outputs(weight, 200)
    kept = sum(t.element_size() * t.nelement() for t in OUTPUTS)
    lw_protocol.done(python_sites={"keep_outputs": kept})
    lw_protocol.wait_exit()


main()
