"""E1 of the codec anchors: 100,000 ``Foo`` objects, each holding two ``Bar``, with the GC on.

``copal.dumps``/``copal.loads`` against ``pickle`` (protocol 5) and, when installed, ``msgspec``
and ``orjson``; plain classes and dataclasses. Every codec writes the domain objects and reads
them back as domain objects (msgspec decodes straight into the dataclasses; orjson returns dicts,
which are converted, as in the anchors' "read obj" column). Times are medians over the
repetitions, codecs interleaved within each repetition; "x pickle" is the median of the
per-repetition ratios to pickle on the same data. The cyclic GC stays on in the timed regions
(``--gc-off`` disables it there instead), because that is how applications run.

Usage::

    python benchmarks/serialization.py                # N = 100,000, 7 repetitions
    python benchmarks/serialization.py -n 10000 -r 3  # quicker
    python benchmarks/serialization.py --json out.json

Data is deterministic (a seeded generator): Foo *i* has ``id = i``, ``name = f"foo-{i}"`` and
two Bars with a random float and the label ``f"bar-{i}-{j}"``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import pickle
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

if __package__ in (None, ""):
    # Run from a checkout: make the in-tree package importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

import copal  # noqa: E402


class Bar:
    def __init__(self, value: float, label: str) -> None:
        self.value = value
        self.label = label


class Foo:
    def __init__(self, id: int, name: str, bars: list[Bar]) -> None:
        self.id = id
        self.name = name
        self.bars = bars


@dataclasses.dataclass
class DBar:
    value: float
    label: str


@dataclasses.dataclass
class DFoo:
    id: int
    name: str
    bars: list[DBar]


def make_plain(n: int, seed: int = 1) -> list[Foo]:
    rng = random.Random(seed)
    return [Foo(i, f"foo-{i}", [Bar(rng.random(), f"bar-{i}-{j}") for j in range(2)]) for i in range(n)]


def make_dataclasses(n: int, seed: int = 1) -> list[DFoo]:
    rng = random.Random(seed)
    return [DFoo(i, f"foo-{i}", [DBar(rng.random(), f"bar-{i}-{j}") for j in range(2)]) for i in range(n)]


Codec = tuple[str, Callable[[Any], bytes], Callable[[bytes], Any]]


def codecs(kind: str) -> list[Codec]:
    """The codecs to compare on ``kind`` ("plain" or "dataclass") objects."""
    found: list[Codec] = [
        ("pickle", lambda o: pickle.dumps(o, protocol=5), pickle.loads),
        ("copal", copal.dumps, copal.loads),
        ("copal+zstd", lambda o: copal.dumps(o, compress="zstd"), copal.loads),
        ("copal+gzip", lambda o: copal.dumps(o, compress="gzip"), copal.loads),
    ]
    if kind != "dataclass":
        return found
    try:
        import msgspec
    except ImportError:
        pass
    else:
        encoder = msgspec.msgpack.Encoder()
        decoder = msgspec.msgpack.Decoder(list[DFoo])
        found.append(("msgspec.msgpack", encoder.encode, decoder.decode))
    try:
        import orjson
    except ImportError:
        pass
    else:
        def orjson_loads(data: bytes) -> list[DFoo]:
            return [DFoo(d["id"], d["name"], [DBar(b["value"], b["label"]) for b in d["bars"]])
                    for d in orjson.loads(data)]
        found.append(("orjson", orjson.dumps, orjson_loads))
    return found


def timed(fn: Callable[[], Any], gc_on: bool) -> tuple[float, Any]:
    gc.collect()
    was_enabled = gc.isenabled()
    if gc_on:
        gc.enable()
    else:
        gc.disable()
    try:
        start = time.perf_counter()
        result = fn()
        elapsed = time.perf_counter() - start
    finally:
        if was_enabled:
            gc.enable()
        else:
            gc.disable()
    return elapsed * 1000.0, result


def check(kind: str, name: str, original: list[Any], decoded: list[Any]) -> None:
    """A cheap equality check of the round trip (first, middle and last objects)."""
    assert len(decoded) == len(original), f"{kind}/{name}: wrong length"
    for i in (0, len(original) // 2, len(original) - 1):
        a, b = original[i], decoded[i]
        assert type(a) is type(b) and (a.id, a.name) == (b.id, b.name), f"{kind}/{name}: object {i} differs"
        assert [(x.value, x.label) for x in a.bars] == [(x.value, x.label) for x in b.bars]


def run(n: int, reps: int, gc_on: bool) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for kind, make in (("plain", make_plain), ("dataclass", make_dataclasses)):
        data = make(n)
        per_codec: dict[str, dict[str, list[float]]] = {}
        sizes: dict[str, int] = {}
        for _ in range(reps):
            for name, dumps, loads in codecs(kind):
                dump_ms, blob = timed(lambda: dumps(data), gc_on)
                load_ms, back = timed(lambda: loads(blob), gc_on)
                check(kind, name, data, back)
                del back
                sizes[name] = len(blob)
                entry = per_codec.setdefault(name, {"dumps": [], "loads": []})
                entry["dumps"].append(dump_ms)
                entry["loads"].append(load_ms)
        base = per_codec["pickle"]
        rows = {}
        for name, times in per_codec.items():
            rows[name] = {
                "bytes": sizes[name],
                "dumps_ms": statistics.median(times["dumps"]),
                "loads_ms": statistics.median(times["loads"]),
                "dumps_x_pickle": statistics.median(t / p for t, p in zip(times["dumps"], base["dumps"])),
                "loads_x_pickle": statistics.median(t / p for t, p in zip(times["loads"], base["loads"])),
                "bytes_x_pickle": sizes[name] / sizes["pickle"],
            }
        results[kind] = rows
    return results


def table(results: dict[str, Any]) -> str:
    lines = []
    for kind, rows in results.items():
        lines += [
            f"\n### {kind} classes\n",
            "| codec | bytes | dumps ms | loads ms | bytes x pickle | dumps x pickle | loads x pickle |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, r in rows.items():
            lines.append(
                f"| {name} | {r['bytes']:,} | {r['dumps_ms']:.1f} | {r['loads_ms']:.1f} | "
                f"{r['bytes_x_pickle']:.3f} | {r['dumps_x_pickle']:.3f} | {r['loads_x_pickle']:.3f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("-n", type=int, default=100_000, help="number of Foo objects")
    parser.add_argument("-r", "--reps", type=int, default=7, help="repetitions")
    parser.add_argument("--gc-off", action="store_true", help="disable the cyclic GC in timed regions")
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    args = parser.parse_args(argv)
    results = run(args.n, args.reps, gc_on=not args.gc_off)
    print(f"## E1: {args.n:,} Foo x 2 Bar, GC {'off' if args.gc_off else 'on'}, median of {args.reps}")
    print(f"python {platform.python_version()}, {platform.platform()}")
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps({"n": args.n, "reps": args.reps, "gc_on": not args.gc_off,
                                         "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
