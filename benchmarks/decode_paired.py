"""copal's binary decoder against pickle and msgspec's dataclass mode, two copal builds paired:
the numbers to quote on a shared, noisy machine.

Each round runs one child process per build (``--build NAME=DIR``, DIR holding the ``copal``
package to import; ``installed`` imports the one installed), alternating the builds round after
round. A child makes the data of seeds 001 (100,000 Foo), 002 (``TargetObject`` of n = 100,
1,000 and 10,000) and 003 (50,000 Person), encodes it once with each codec, then times each
decoder ``--calls`` times per GC mode, the decoders interleaved call by call, and keeps the least
thread CPU time of each. A timed call includes freeing its result, as the codec suite's
``measure`` frees the previous result in its timed loop.
The report gives, per build, case, GC mode and decoder, the span of times over the rounds, and
the ratios of copal against the others measured in the same child.

Usage::

    python benchmarks/decode_paired.py --build main=/tmp/main-pkg --build branch=installed
    python benchmarks/decode_paired.py --rounds 5 --calls 9 --cases 002/10000
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

CASES = ("001", "002/100", "002/1000", "002/10000", "003")
DECODERS = ("copal", "pickle", "msgspec.msgpack(dataclass)")
GC_MODES = ("on", "off")


def _cases() -> dict[str, tuple[Callable[[], Any], Any]]:
    """Case name -> (maker of its data, root type for the codec suite's builders)."""
    from copal.bench.codec_models import Foo, Person, TargetObject, make_foos, make_people, make_target

    cases: dict[str, tuple[Callable[[], Any], Any]] = {"001": (lambda: make_foos(100_000), list[Foo])}
    for n in (100, 1_000, 10_000):
        cases[f"002/{n}"] = (lambda n=n: make_target(n), TargetObject)
    cases["003"] = (lambda: make_people(50_000), list[Person])
    return cases


def _decoders(root: Any, value: Any) -> dict[str, tuple[Callable[[Any], Any], Any]]:
    """Decoder name -> (decode, the encoded value), from the codec suite's registry."""
    from copal.bench.codecs import BY_NAME

    decoders = {}
    for name in DECODERS:
        codec = BY_NAME[name].codec(root)
        decoders[name] = (codec.decode, codec.encode(codec.prepare(value)))
    return decoders


def _least_times(decoders: dict[str, tuple[Callable[[Any], Any], Any]], calls: int, gc_on: bool) -> dict[str, float]:
    best = {name: float("inf") for name in decoders}
    gc.collect()
    if gc_on:
        gc.enable()
    else:
        gc.disable()
    try:
        for _ in range(calls):
            for name, (decode, blob) in decoders.items():
                start = time.thread_time()
                decode(blob)
                best[name] = min(best[name], time.thread_time() - start)
    finally:
        gc.enable()
    return best


def child(calls: int, cases: list[str]) -> None:
    results: dict[str, dict[str, dict[str, float]]] = {}
    makers = _cases()
    for case in cases:
        make, root = makers[case]
        decoders = _decoders(root, make())
        # Small values get more calls: a call is too short for the clock alone.
        case_calls = calls * 10 if case.startswith("002") else calls
        results[case] = {mode: _least_times(decoders, case_calls, mode == "on") for mode in GC_MODES}
    print(json.dumps(results))


def parent(args: argparse.Namespace) -> None:
    builds = dict(spec.split("=", 1) for spec in args.build)
    cases = args.cases.split(",") if args.cases else list(CASES)
    runs: dict[str, list[dict[str, dict[str, dict[str, float]]]]] = {name: [] for name in builds}
    for round_ in range(args.rounds):
        for name, directory in builds.items():
            env = dict(os.environ)
            if directory != "installed":
                env["PYTHONPATH"] = directory
            command = [sys.executable, __file__, "--child", "--calls", str(args.calls), "--cases", ",".join(cases)]
            output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
            runs[name].append(json.loads(output))
            print(f"round {round_ + 1} {name}: done", file=sys.stderr)
    for case in cases:
        for mode in GC_MODES:
            print(f"\n{case} gc {mode}")
            for name, rounds in runs.items():
                times = [r[case][mode] for r in rounds]
                spans = "  ".join(
                    f"{d} {min(t[d] for t in times) * 1e6:.1f}-{max(t[d] for t in times) * 1e6:.1f} us" for d in DECODERS
                )
                print(f"  {name}: {spans}")
                ratios = "  ".join(
                    f"/{d} {min(t['copal'] / t[d] for t in times):.2f}-{max(t['copal'] / t[d] for t in times):.2f}"
                    for d in DECODERS if d != "copal"
                )
                print(f"  {name} copal ratios per run: {ratios}")
    if len(builds) == 2:
        (first, first_runs), (second, second_runs) = runs.items()
        print(f"\n{second}/{first} copal time, per paired round (below 1: {second} faster)")
        for case in cases:
            for mode in GC_MODES:
                pairs = [b[case][mode]["copal"] / a[case][mode]["copal"] for a, b in zip(first_runs, second_runs)]
                print(f"  {case} gc {mode}: {min(pairs):.2f}-{max(pairs):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", action="append", default=[], help="NAME=DIR of a copal package, or NAME=installed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=5, help="calls per decoder and GC mode (ten times more for seed 002)")
    parser.add_argument("--cases", default="", help=f"comma-separated subset of {', '.join(CASES)}")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.calls, args.cases.split(","))
    else:
        parent(args)


if __name__ == "__main__":
    main()
