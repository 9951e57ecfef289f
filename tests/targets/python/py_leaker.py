# SPDX-License-Identifier: Apache-2.0
"""Leaks from Python functions, for tests/integration/python_test.cc.

Modes (argv[1]):
  two_deep   handle_request() -> remember() keeps bytes objects in a
             module-level list (30 MB)
  threads    two threads, each leaking from its own function
  asyncio    a coroutine keeps responses in a cache across awaits
  generator  a generator makes the objects its consumer keeps
  churn      allocates and drops the same amount (the control)
  small      many small objects (pymalloc: arenas, or per-object sites
             with PYTHONMALLOC=malloc)
Each reports, per function, the bytes it keeps (sys.getsizeof of what it
stored), which the test compares with the site whose innermost Python
frame is that function.
"""
import asyncio
import sys
import threading

import lw_protocol

KEEP = []
PAYLOAD = 100_000  # > 512 B: past pymalloc, one malloc per object


def remember(i):
    KEEP.append(bytes(PAYLOAD + (i % 7)))  # site: remember


def handle_request(i):
    remember(i)  # site: handle_request


def two_deep():
    for i in range(300):
        handle_request(i)
    return {"remember": sum(sys.getsizeof(b) for b in KEEP)}


THREAD_KEEP = {"a": [], "b": []}


def leak_in_thread_a(n):
    for i in range(n):
        THREAD_KEEP["a"].append(bytearray(60_000 + i))  # site: leak_in_thread_a


def leak_in_thread_b(n):
    for i in range(n):
        THREAD_KEEP["b"].append(bytes(90_000 + i))  # site: leak_in_thread_b


def threads():
    ta = threading.Thread(target=leak_in_thread_a, args=(150,))
    tb = threading.Thread(target=leak_in_thread_b, args=(100,))
    ta.start()
    tb.start()
    ta.join()
    tb.join()
    return {name: sum(sys.getsizeof(b) for b in THREAD_KEEP[key])
            for name, key in (("leak_in_thread_a", "a"), ("leak_in_thread_b", "b"))}


RESPONSE_CACHE = {}


async def cache_response(request_id):
    await asyncio.sleep(0)
    RESPONSE_CACHE[request_id] = bytes(80_000)  # site: cache_response
    await asyncio.sleep(0)


async def serve():
    await asyncio.gather(*(cache_response(i) for i in range(200)))


def run_asyncio():
    asyncio.run(serve())
    return {"cache_response": sum(sys.getsizeof(b) for b in RESPONSE_CACHE.values())}


GENERATED = []


def produce(n):
    for i in range(n):
        yield bytes(70_000 + i)  # site: produce


def consume_generated():
    for b in produce(150):
        GENERATED.append(b)
    return {"produce": sum(sys.getsizeof(b) for b in GENERATED)}


def churn_once(i):
    scratch = [bytes(50_000 + j) for j in range(20)]  # site: churn_once
    return len(scratch)


def churn():
    total = 0
    for i in range(100):
        total += churn_once(i) * 50_000
    return {"churn_once": 0}, {"churned_bytes": total}


SMALL = []


def make_small_objects(n):
    for i in range(n):
        SMALL.append(b"%0100d" % i)  # site: make_small_objects (133 B each)


def small():
    make_small_objects(150_000)
    return {"make_small_objects": sum(sys.getsizeof(b) for b in SMALL)}


def main():
    mode = sys.argv[1]
    if not lw_protocol.ready_wait_go():
        return
    facts = {}
    if mode == "two_deep":
        sites = two_deep()
    elif mode == "threads":
        sites = threads()
    elif mode == "asyncio":
        sites = run_asyncio()
    elif mode == "generator":
        sites = consume_generated()
    elif mode == "churn":
        sites, facts = churn()
    elif mode == "small":
        sites = small()
    else:
        raise SystemExit("unknown mode " + mode)
    lw_protocol.done(python_sites=sites, facts=facts)
    lw_protocol.wait_exit()


main()
