# SPDX-License-Identifier: Apache-2.0
"""The target line protocol (tests/targets/target_protocol.h) for Python
targets: "ready <pid>", wait for "go", "done <json>", wait for "exit".

The tests run these with Debian's /usr/bin/python3.11 (not the first
python3 on PATH, which may be another build). Reads and writes go straight
to fds 0 and 1, without sys.stdin's buffering.
"""
import json
import os


def _write(line):
    data = (line + "\n").encode()
    while data:
        n = os.write(1, data)
        data = data[n:]


def _read_line():
    buf = b""
    while True:
        c = os.read(0, 1)
        if not c:
            return None
        if c == b"\n":
            return buf.decode()
        buf += c


def ready_wait_go():
    """Announces "ready <pid>"; True once "go" arrives, False on EOF."""
    _write("ready %d" % os.getpid())
    while True:
        line = _read_line()
        if line is None:
            return False
        if line == "go":
            return True


def done(python_sites=None, mmap_python_sites=None, facts=None):
    """python_sites: {function: bytes it keeps live}, attributed by the
    innermost Python frame; mmap_python_sites: the same for pymalloc arena
    bytes (kind mmap)."""
    _write("done " + json.dumps({"sites": {}, "mmap_sites": [],
                                 "python_sites": python_sites or {},
                                 "mmap_python_sites": mmap_python_sites or {},
                                 "facts": facts or {}}))


def wait_exit():
    while True:
        line = _read_line()
        if line is None or line == "exit":
            return
