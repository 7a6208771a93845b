"""copal's binary decoder against pickle and msgspec's dataclass mode, two copal builds paired:
the numbers to quote on a shared, noisy machine.

Each round runs one child process per build (``--build NAME=DIR``, DIR holding the ``copal``
package to import; ``installed`` imports the one installed), alternating the builds round after
round (benchmarks/pairing.py). A child makes the data of seeds 001 (100,000 Foo), 002 (``TargetObject`` of n = 100,
1,000 and 10,000), 003 (50,000 Person, and 5,000 as ``003/5k``: copal's time per record should
not grow with the stream) and 004 (1,000 Foo with two Bar each, one stream per Foo as seed 004
stores them: a timed call decodes the 1,000 streams, so that the per-call cost of a small graph
is measured), encodes it once with each codec, then times each decoder ``--calls`` times per GC
mode, the decoders interleaved call by call, and keeps the least
thread CPU time of each. A timed call includes freeing its result, as the codec suite's
``measure`` frees the previous result in its timed loop.
The report gives, per build, case, GC mode and decoder, the span of times over the rounds, and
the ratios of copal against the others measured in the same child.

``--decoders`` names other decoders of the codec suite's registry, the first being the copal
one under test: ``--decoders "copal json,msgspec.json(Struct),orjson"`` pairs the JSON readers.

Usage::

    python benchmarks/decode_paired.py --build main=/tmp/main-pkg --build branch=installed
    python benchmarks/decode_paired.py --rounds 5 --calls 9 --cases 002/10000
    python benchmarks/decode_paired.py --cases 001,003 --decoders "copal json,msgspec.json(Struct)"
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable

import pairing
from pairing import least_times

CASES = ("001", "002/100", "002/1000", "002/10000", "003", "003/5k", "004")
DECODERS = ("copal", "pickle", "msgspec.msgpack(dataclass)")
GC_MODES = ("on", "off")


def _cases() -> dict[str, tuple[Callable[[], Any], Any]]:
    """Case name -> (maker of its data, root type for the codec suite's builders); the data of
    case 004 is a list of values, each encoded on its own."""
    from copal.bench.codec_models import Foo, Person, TargetObject, make_foos, make_people, make_target

    cases: dict[str, tuple[Callable[[], Any], Any]] = {"001": (lambda: make_foos(100_000), list[Foo])}
    for n in (100, 1_000, 10_000):
        cases[f"002/{n}"] = (lambda n=n: make_target(n), TargetObject)
    cases["003"] = (lambda: make_people(50_000), list[Person])
    cases["003/5k"] = (lambda: make_people(5_000), list[Person])
    cases["004"] = (lambda: make_foos(1_000, seed=4), Foo)
    return cases


def _decoders(names: list[str], root: Any, value: Any, one_by_one: bool) -> dict[str, Callable[[], Any]]:
    """Decoder name -> a call decoding ``value`` encoded, from the codec suite's registry; with
    ``one_by_one``, ``value`` is a list whose items are encoded and decoded one at a time."""
    from copal.bench.codecs import BY_NAME

    decoders: dict[str, Callable[[], Any]] = {}
    for name in names:
        codec = BY_NAME[name].codec(root)
        decode = codec.decode
        if one_by_one:
            blobs = [codec.encode(codec.prepare(item)) for item in value]
            decoders[name] = lambda d=decode, bs=blobs: [d(b) for b in bs]
        else:
            blob = codec.encode(codec.prepare(value))
            decoders[name] = lambda d=decode, b=blob: d(b)
    return decoders


def child(args: argparse.Namespace) -> None:
    results: dict[str, dict[str, float]] = {}
    makers = _cases()
    for case in args.cases.split(","):
        make, root = makers[case]
        calls = _decoders(args.decoders.split(","), root, make(), one_by_one=case == "004")
        # Small values get more calls: a call is too short for the clock alone.
        case_calls = args.calls * 10 if case.startswith("002") else args.calls
        for mode in GC_MODES:
            results[f"{case} gc {mode}"] = least_times(calls, case_calls, mode == "on")
    print(json.dumps(results))


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=5, help="calls per decoder and GC mode (ten times more for seed 002)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {', '.join(CASES)}")
    parser.add_argument("--decoders", default=",".join(DECODERS), help="comma-separated decoders of the codec suite, the copal one first")


def _child_args(args: argparse.Namespace) -> list[str]:
    return ["--calls", str(args.calls), "--cases", args.cases, "--decoders", args.decoders]


if __name__ == "__main__":
    pairing.main(__file__, __doc__, child, _add_arguments, _child_args)
