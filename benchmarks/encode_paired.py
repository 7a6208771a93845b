"""copal's binary encoder (``copal.dumps``) against msgspec.msgpack (dataclass mode) and pickle,
two or more copal builds paired: the numbers to quote on a shared, noisy machine.

Each round runs one child process per build (``--build NAME=DIR``, DIR holding the ``copal``
package to import; ``installed`` imports the one installed), alternating the builds round after
round (benchmarks/pairing.py). A child makes the data of each case, then times each codec's encode ``--calls`` times,
the codecs interleaved call by call, and keeps the least thread CPU time of each, with the GC
off and then on (the data is made and collected first). The report gives, per build, case and
GC mode, the span of those least times over the rounds, and the ratios of copal to msgspec and
pickle measured in the same child.

Object states. CPython 3.11 keeps a dataclass instance's attributes in an inline values array
until something asks for its ``__dict__``; then it makes a dict for the instance, for good.
msgspec and pickle ask for it on their first call, and so does an encoder that reads
attributes through ``__dict__``. Two states are timed:

- ``own``: every codec gets objects made for it alone, so that after its first call they are in
  the state that codec leaves them in (inline values if it never asks for ``__dict__``). The
  first call on them is reported too (``first``): the cost of a codec meeting new objects.
- ``made``: every instance's ``__dict__`` asked for before timing, the state the codec suite's
  shared objects end in.
- ``shared``: one set of objects for all codecs, as ``copal bench --suite codecs`` has them.

Usage::

    python benchmarks/encode_paired.py --build main=/tmp/main-pkg --build branch=installed
    python benchmarks/encode_paired.py --rounds 3 --calls 9 --cases 003,002
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, Callable

import pairing
from pairing import least_times, materialize

CODECS = ("copal", "msgspec.msgpack(dataclass)", "pickle")
STATES = ("own", "made", "shared")
GC_MODES = ("off", "on")


def _cases() -> dict[str, tuple[Callable[[], Any], Any]]:
    """Case name -> (maker of its data, root type for the codec suite's builders)."""
    from copal.bench.codec_models import Foo, Person, TargetObject, make_foos, make_people, make_target

    return {
        "001": (lambda: make_foos(100_000), list[Foo]),
        "002": (lambda: make_target(10_000), TargetObject),
        "003": (lambda: make_people(50_000), list[Person]),
        "003/5k": (lambda: make_people(5_000), list[Person]),
    }


def child(args: argparse.Namespace) -> None:
    from copal.bench.codecs import BY_NAME

    results: dict[str, Any] = {}
    for case in args.cases.split(","):
        make, root = _cases()[case]
        codecs = {name: BY_NAME[name].codec(root) for name in CODECS}
        for state in STATES:
            # Each codec its own objects, made as an application makes them (a deep copy would
            # scatter them in memory).
            shared = make() if state == "shared" else None
            inputs = {name: codec.prepare(make() if shared is None else shared) for name, codec in codecs.items()}
            if state == "made":
                for value in inputs.values():
                    materialize(value)
            encoders = {name: (lambda c=codec, v=inputs[name]: c.encode(v)) for name, codec in codecs.items()}
            if state == "own":
                first = {}
                for name, encode in encoders.items():
                    start = time.thread_time()
                    encode()
                    first[name] = time.thread_time() - start
                results[f"{case} {state} first"] = first
            for mode in GC_MODES:
                results[f"{case} {state} gc {mode}"] = least_times(encoders, args.calls, mode == "on")
            del inputs, encoders, shared
    print(json.dumps(results))


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=9)
    parser.add_argument("--cases", default="003,002,001", help="comma-separated: 001, 002, 003, 003/5k")


def _child_args(args: argparse.Namespace) -> list[str]:
    return ["--calls", str(args.calls), "--cases", args.cases]


if __name__ == "__main__":
    pairing.main(__file__, __doc__, child, _add_arguments, _child_args)
