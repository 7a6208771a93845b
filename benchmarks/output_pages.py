"""The JSON writer on memory fresh from the system: seed 001's 17 MB document, two copal builds
paired (benchmarks/pairing.py), msgspec.json(Struct) in the same child.

The codec suite times a writer with one untimed call, then calls while the previous result is
still alive (``copal.bench.codec_seeds.measure``): the next document cannot reuse the last one's
memory, and about every other call writes into pages fresh from the system, each of which costs
a page fault on its first write. A child here makes seed 001's objects (their ``__dict__`` made,
as the suite's shared objects end), then calls each writer six times in a row, each result kept
until the next call returns, and reports per writer the wall time of the first call (which
grows its buffer), the median of calls 2-4 (fresh pages: allocation after allocation extends the
heap) and the median of calls 5-6 (the heap then hands back the memory of the results freed).

Usage::

    python benchmarks/output_pages.py --build main=/tmp/main-pkg --build branch=installed
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from typing import Any, Callable

import pairing
from pairing import materialize

WRITERS = ("copal json", "msgspec.json(Struct)")
CALLS = 6


def _times(call: Callable[[], Any]) -> list[float]:
    times, previous = [], None
    for _ in range(CALLS):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
        previous, result = result, None
    del previous
    return times


def child(args: argparse.Namespace) -> None:
    from copal.bench.codec_models import Foo, make_foos
    from copal.bench.codecs import BY_NAME

    rows: dict[str, dict[str, float]] = {"first call": {}, "calls 2-4, fresh pages": {}, "calls 5-6, reused pages": {}}
    gc.collect()
    gc.disable()
    for name in WRITERS:
        codec = BY_NAME[name].codec(list[Foo])
        value = codec.prepare(make_foos(100_000))
        materialize(value)
        times = _times(lambda: codec.encode(value))
        rows["first call"][name] = times[0]
        rows["calls 2-4, fresh pages"][name] = statistics.median(times[1:4])
        rows["calls 5-6, reused pages"][name] = statistics.median(times[4:])
        del value
        gc.collect()
    print(json.dumps(rows))


if __name__ == "__main__":
    pairing.main(__file__, __doc__, child, lambda parser: None, lambda args: [])
