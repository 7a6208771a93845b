"""Seed 001 with ``__slots__`` dataclasses: copal against itself with plain dataclasses, and
against pickle and msgspec, in one process; each figure is the minimum over ``--reps`` runs of
the thread CPU time, with the collector off while timed (as the codec suite's "GC off" mode).

    python benchmarks/slots.py --reps 7 --json out.json
    python benchmarks/slots.py --only copal --reps 5

Run it under two builds, alternately, to compare them (the slots rows are skipped by a build
that cannot store slots objects).
"""

from __future__ import annotations

import argparse
import gc
import json
import pickle
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import copal
from copal.bench.codec_models import Bar, Foo, make_foos


@dataclass(slots=True)
class SlotBar:
    value: float
    label: str


@dataclass(slots=True)
class SlotFoo:
    id: int
    name: str
    bars: list[SlotBar]


def slot_foos(foos: list[Foo]) -> list[SlotFoo]:
    return [SlotFoo(f.id, f.name, [SlotBar(b.value, b.label) for b in f.bars]) for f in foos]


def best(reps: int, run: Callable[[], Any]) -> float:
    times = []
    for _ in range(reps):
        gc.collect()
        gc.disable()
        start = time.thread_time()
        result = run()
        times.append(time.thread_time() - start)
        gc.enable()
        del result
    return min(times)


def codecs(model: str) -> dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]]:
    found: dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]] = {
        "copal": (copal.dumps, copal.loads),
        "pickle": (lambda v: pickle.dumps(v, protocol=5), pickle.loads),
    }
    try:
        import msgspec
    except ImportError:
        return found
    kind = list[SlotFoo] if model == "slots" else list[Foo]
    encoder, decoder = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(kind)
    found["msgspec"] = (encoder.encode, decoder.decode)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--json")
    parser.add_argument("--only", help="one codec (copal, pickle or msgspec), for paired runs of two builds")
    args = parser.parse_args()
    plain = make_foos(args.n)
    values = {"dict": plain, "slots": slot_foos(plain)}
    rows: dict[str, dict[str, float]] = {}
    for model, data in values.items():
        for name, (encode, decode) in codecs(model).items():
            if args.only not in (None, name):
                continue
            try:
                blob = encode(data)
            except TypeError:
                continue  # a build without slots support
            assert decode(blob) == data
            rows[f"{model}/{name}"] = {
                "encode_ms": best(args.reps, lambda: encode(data)) * 1e3,
                "decode_ms": best(args.reps, lambda: decode(blob)) * 1e3,
                "bytes": len(blob),
            }
    for key, row in rows.items():
        print(f"{key:16} encode {row['encode_ms']:7.1f} ms  decode {row['decode_ms']:7.1f} ms  {row['bytes']:>9,} B")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out)


if __name__ == "__main__":
    sys.exit(main())
