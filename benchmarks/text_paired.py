"""copal's JSON and XML writers against the fastest libraries of the codec suite, two copal builds
paired: the numbers to quote on a shared, noisy machine.

Each round runs one child process per build (``--build NAME=DIR``, DIR holding the ``copal``
package to import; ``installed`` imports the one installed), alternating the builds round after
round (benchmarks/pairing.py). A child makes the data of each case (``--cases``: seeds 001,
100,000 Foo; 002, a TargetObject of 10,000 zeros and 10,000 times the same str; 003, 50,000
Person; and plain dicts), then times each writer's call ``--calls`` times, the writers
interleaved call by call, and keeps the least thread CPU time of each (GC off; the data is
made first, so that its collections are over). The report gives, per build, writer and case, the span of times over the
rounds, and the ratios of copal against the others measured in the same child.

Every writer gets its own copy of the objects: orjson and ``msgspec.json`` read a dataclass's
``__dict__``, which makes CPython 3.11 build a dict for each instance (its attributes otherwise
live in an inline values array), and later writers would then see dicts only. ``--materialized``
asks for every instance's ``__dict__`` before timing, the state the codec suite's shared objects
end in.

Usage::

    python benchmarks/text_paired.py --build main=/tmp/main-pkg --build branch=installed
    python benchmarks/text_paired.py --rounds 3 --calls 9 --materialized
    python benchmarks/text_paired.py --build main=/tmp/main-pkg --build branch=installed --cases 002 --calls 200
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable

import pairing
from pairing import least_times, materialize

JSON_WRITERS = ("copal json", "orjson", "msgspec.json(Struct)", "msgspec.json(dataclass)")
XML_WRITERS = ("copal xml", "xml.etree")


def _dicts() -> list[dict[str, Any]]:
    return [{"id": i, "name": f"n{i}", "email": f"e{i}@x", "city": "Berlin", "zip": "10115", "score": i * 0.5}
            for i in range(50_000)]


def _cases() -> dict[str, tuple[Callable[[], Any], Any]]:
    """Case name -> (maker of its data, root type for the codec suite's builders)."""
    from copal.bench.codec_models import Foo, Person, TargetObject, make_foos, make_people, make_target

    return {"001": (lambda: make_foos(100_000), list[Foo]), "002": (lambda: make_target(10_000), TargetObject),
            "003": (lambda: make_people(50_000), list[Person]), "dicts": (_dicts, None)}


def _writers(root: Any, names: tuple[str, ...]) -> dict[str, tuple[Callable[[Any], bytes], Callable[[Any], Any]]]:
    """Writer name -> (encode, prepare) from the codec suite's registry; for plain data (root
    None) only the writers that take it."""
    from copal.bench.codecs import BY_NAME

    import copal
    import orjson

    if root is None:
        plain = {"copal json": lambda v: copal.dumps(v, format="json"), "orjson": orjson.dumps,
                 "copal xml": lambda v: copal.dumps(v, format="xml")}
        return {name: (plain[name], lambda v: v) for name in names if name in plain}
    writers = {}
    for name in names:
        codec = BY_NAME[name].codec(root)
        writers[name] = (codec.encode, codec.prepare)
    return writers


def child(args: argparse.Namespace) -> None:
    results: dict[str, dict[str, float]] = {}
    for case in args.cases.split(","):
        make, root = _cases()[case]
        writers = _writers(root, XML_WRITERS if args.xml else JSON_WRITERS)
        # Each writer its own objects (see the module docstring), made as an application makes
        # them (a deep copy would scatter them in memory).
        inputs = {name: prepare(make()) for name, (_, prepare) in writers.items()}
        if args.materialized:
            for value in inputs.values():
                materialize(value)
        calls = {name: (lambda e=encode, v=inputs[name]: e(v)) for name, (encode, _) in writers.items()}
        results[case] = least_times(calls, args.calls, gc_on=False)
    print(json.dumps(results))


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=9)
    parser.add_argument("--materialized", action="store_true", help="every instance's __dict__ made first")
    parser.add_argument("--xml", action="store_true", help="XML writers instead of JSON")
    parser.add_argument("--cases", default="001,002,003,dicts", help="comma-separated: 001, 002, 003, dicts")


def _child_args(args: argparse.Namespace) -> list[str]:
    return ["--calls", str(args.calls), "--cases", args.cases] + ["--materialized"] * args.materialized + ["--xml"] * args.xml


if __name__ == "__main__":
    pairing.main(__file__, __doc__, child, _add_arguments, _child_args)
