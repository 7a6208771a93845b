"""What the paired benchmarks (``*_paired.py``) share: copal builds compared round after round in
child processes, each timing copal and its rivals in the same process, so that a shared, noisy
machine slows them alike.

A script defines ``child(args)``, which prints one JSON object ``{row: {contender: seconds}}``
whose first contender in each row is the copal call under test (the reference), and calls
:func:`main`. The parent runs one child per build (``--build NAME=DIR``, DIR holding the
``copal`` package to import; ``installed`` imports the one installed), alternating the builds
round after round, then prints per row and build the span of each contender's times over the
rounds, the ratios of the reference contender (copal) to the others in the same child, and with
two builds the second build's time over the first's per paired round.
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

Runs = dict[str, list[dict[str, dict[str, float]]]]


def least_times(calls: dict[str, Callable[[], Any]], repeats: int, gc_on: bool) -> dict[str, float]:
    """The least thread CPU time of ``repeats`` calls of each of ``calls``, interleaved call by
    call (a collection first; the GC on or off while timing)."""
    gc.collect()
    if gc_on:
        gc.enable()
    else:
        gc.disable()
    best = {name: float("inf") for name in calls}
    try:
        for _ in range(repeats):
            for name, call in calls.items():
                start = time.thread_time()
                call()
                best[name] = min(best[name], time.thread_time() - start)
    finally:
        gc.enable()
    return best


def materialize(value: Any) -> None:
    """Asks for the ``__dict__`` of every instance in ``value`` (a list or one object), as orjson,
    msgspec and pickle do on their first call (CPython 3.11 keeps attributes in an inline values
    array until then)."""
    for item in value if isinstance(value, list) else [value]:
        if hasattr(item, "__dict__"):
            for field in vars(item).values():
                materialize(field)


def _duration(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def _run_rounds(script: str, builds: dict[str, str], rounds: int, child_args: list[str]) -> Runs:
    runs: Runs = {name: [] for name in builds}
    for round_ in range(rounds):
        for name, directory in builds.items():
            env = dict(os.environ)
            if directory != "installed":
                env["PYTHONPATH"] = directory
            command = [sys.executable, script, "--child", *child_args]
            output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
            runs[name].append(json.loads(output))
            print(f"round {round_ + 1} {name}: done", file=sys.stderr)
    return runs


def _report(runs: Runs) -> None:
    first_build = next(iter(runs.values()))
    for row in first_build[0]:
        print(f"\n{row}")
        for name, rounds in runs.items():
            times = [r[row] for r in rounds]
            contenders = list(times[0])
            reference = contenders[0]
            spans = "  ".join(
                f"{c} {_duration(min(t[c] for t in times))}-{_duration(max(t[c] for t in times))}" for c in contenders
            )
            ratios = "  ".join(
                f"/{c} {min(t[reference] / t[c] for t in times):.2f}-{max(t[reference] / t[c] for t in times):.2f}"
                for c in contenders if c != reference
            )
            print(f"  {name}: {spans}\n  {name} {reference} ratios per run: {ratios}")
    if len(runs) == 2:
        (first, first_runs), (second, second_runs) = runs.items()
        print(f"\n{second}/{first} time of the row's reference, per paired round (below 1: {second} faster)")
        for row in first_runs[0]:
            reference = next(iter(first_runs[0][row]))
            pairs = [b[row][reference] / a[row][reference] for a, b in zip(first_runs, second_runs)]
            print(f"  {row}: {min(pairs):.2f}-{max(pairs):.2f}")


def main(
    script: str,
    doc: str | None,
    child: Callable[[argparse.Namespace], None],
    add_arguments: Callable[[argparse.ArgumentParser], None],
    child_args: Callable[[argparse.Namespace], list[str]],
) -> None:
    """Parses the command line of ``script``; runs ``child`` in a child, else the paired rounds.

    ``add_arguments`` adds the script's own options, and ``child_args`` gives them back as
    arguments for the child's command line."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", action="append", default=[], help="NAME=DIR of a copal package, or NAME=installed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_arguments(parser)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    builds = dict(spec.split("=", 1) for spec in args.build) or {"installed": "installed"}
    _report(_run_rounds(script, builds, args.rounds, child_args(args)))
