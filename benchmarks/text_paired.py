"""copal's JSON and XML writers against the fastest libraries of the codec suite, two copal builds
paired: the numbers to quote on a shared, noisy machine.

Each round runs one child process per build (``--build NAME=DIR``, DIR holding the ``copal``
package to import; ``installed`` imports the one installed), alternating the builds round after
round. A child makes the data of seeds 001 (100,000 Foo) and 003 (50,000 Person), then times
each writer's call ``--calls`` times, the writers interleaved call by call, and keeps the least
process CPU time of each (GC off; the data is made first, so that its collections are over).
The report gives, per build, writer and case, the least time over the rounds, and the ratios of
copal against the others measured in the same child.

Every writer gets its own copy of the objects: orjson and ``msgspec.json`` read a dataclass's
``__dict__``, which makes CPython 3.11 build a dict for each instance (its attributes otherwise
live in an inline values array), and later writers would then see dicts only. ``--materialized``
asks for every instance's ``__dict__`` before timing, the state the codec suite's shared objects
end in.

Usage::

    python benchmarks/text_paired.py --build main=/tmp/main-pkg --build branch=installed
    python benchmarks/text_paired.py --rounds 3 --calls 9 --materialized
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable

CASES = ("001", "003", "dicts")
JSON_WRITERS = ("copal json", "orjson", "msgspec.json(Struct)", "msgspec.json(dataclass)")
XML_WRITERS = ("copal xml", "xml.etree")


def _dicts() -> list[dict[str, Any]]:
    return [{"id": i, "name": f"n{i}", "email": f"e{i}@x", "city": "Berlin", "zip": "10115", "score": i * 0.5}
            for i in range(50_000)]


def _cases() -> dict[str, tuple[Callable[[], Any], Any]]:
    """Case name -> (maker of its data, root type for the codec suite's builders)."""
    from copal.bench.codec_models import Foo, Person, make_foos, make_people

    return {"001": (lambda: make_foos(100_000), list[Foo]), "003": (lambda: make_people(50_000), list[Person]),
            "dicts": (_dicts, None)}


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


def _materialize(value: Any) -> None:
    for item in value if isinstance(value, list) else [value]:
        if hasattr(item, "__dict__"):
            for field in vars(item).values():
                _materialize(field)


def child(calls: int, materialized: bool, xml: bool) -> None:
    results: dict[str, dict[str, float]] = {}
    for case, (make, root) in _cases().items():
        writers = _writers(root, XML_WRITERS if xml else JSON_WRITERS)
        # Each writer its own objects (see the module docstring), made as an application makes
        # them (a deep copy would scatter them in memory).
        inputs = {name: prepare(make()) for name, (_, prepare) in writers.items()}
        if materialized:
            for value in inputs.values():
                _materialize(value)
        gc.collect()
        gc.disable()
        best = {name: float("inf") for name in writers}
        for _ in range(calls):
            for name, (encode, _) in writers.items():
                value = inputs[name]
                start = time.process_time()
                encode(value)
                best[name] = min(best[name], time.process_time() - start)
        gc.enable()
        results[case] = best
    print(json.dumps(results))


def parent(args: argparse.Namespace) -> None:
    builds = dict(spec.split("=", 1) for spec in args.build)
    runs: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in builds}
    for round_ in range(args.rounds):
        for name, directory in builds.items():
            env = dict(os.environ)
            if directory != "installed":
                env["PYTHONPATH"] = directory
            command = [sys.executable, __file__, "--child", "--calls", str(args.calls)]
            command += ["--materialized"] * args.materialized + ["--xml"] * args.xml
            output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
            runs[name].append(json.loads(output))
            print(f"round {round_ + 1} {name}: done", file=sys.stderr)
    reference = "copal xml" if args.xml else "copal json"
    for case in CASES:
        print(f"\n{case}")
        for name, rounds in runs.items():
            writers = rounds[0][case]
            best = {w: min(r[case][w] for r in rounds) for w in writers}
            spans = {w: (min(r[case][w] for r in rounds), max(r[case][w] for r in rounds)) for w in writers}
            line = "  ".join(f"{w} {lo * 1e3:.1f}-{hi * 1e3:.1f} ms" for w, (lo, hi) in spans.items())
            print(f"  {name}: {line}")
            ratios = "  ".join(
                f"x {w} {min(r[case][reference] / r[case][w] for r in rounds):.2f}-"
                f"{max(r[case][reference] / r[case][w] for r in rounds):.2f}"
                for w in best if w != reference
            )
            print(f"  {name} {reference} ratios per run: {ratios}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", action="append", default=[], help="NAME=DIR of a copal package, or NAME=installed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=9)
    parser.add_argument("--materialized", action="store_true", help="every instance's __dict__ made first")
    parser.add_argument("--xml", action="store_true", help="XML writers instead of JSON")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.calls, args.materialized, args.xml)
    else:
        parent(args)


if __name__ == "__main__":
    main()
