"""The seed experiments of ``copal bench --suite codecs``: what is timed, and how.

- 001 (Shirazi): 100,000 ``Foo`` with two ``Bar`` each: write, read, bytes; and
  "get object #54,321 only" by the random-access methods of :data:`LAZY_METHODS`.
- 002 (Llorà): one ``TargetObject`` with n ints and n strings, n = 100 ... 10,000: size
  against the raw data, serialize and deserialize time.
- 003 (Manocha & Kadian): 5,000 ... 50,000 address-book records, without compression and with
  gzip and zstd: time and size, and time per record across sizes (linearity).
- 004 (Marshal + base64 in a database): 100,000 objects in SQLite, one row each, as raw bytes
  (BLOB) or base64 text: write, read, file size.

Method: every measurement runs once per repetition and per GC mode, codecs interleaved within a
repetition (their order rotates from one repetition to the next); medians over repetitions; a
ratio to a reference codec is the median of the per-repetition ratios in the same group (same
seed, size and compression). The cyclic GC is collected before each measurement, then enabled
("on", as applications run) or disabled ("off"). Small payloads are timed over repeated calls
for at least :attr:`Context.min_seconds`. Every codec's first decoded output is compared with
the input (:func:`copal.bench.codecs.plain`): a codec that does not round-trip is an error.
"""

from __future__ import annotations

import array
import base64
import gc
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any, Callable, Sequence

from copal.bench.codec_models import (
    Foo, TargetObject, Person, make_foos, make_people, make_target, target_raw_bytes,
)
from copal.bench.codecs import (
    BY_NAME, CODECS, COMPRESSIONS, Codec, CodecSpec, plain, with_compression,
)

SEED_IDS = ("001", "002", "003", "004")
E1_OBJECTS = 100_000
E1_TARGET = 54_321
E2_SIZES = (100, 200, 500, 1_000, 2_000, 5_000, 10_000)
E3_SIZES = (5_000, 10_000, 25_000, 50_000)
E4_OBJECTS = 100_000
#: Calls per timed batch when getting one object (a single call is too short to time).
GET_BATCH = 1_000
#: The reference codecs of the ratios.
REFERENCES = ("copal", "pickle")


class CodecError(Exception):
    """A codec failed or did not round-trip; the suite reports it and goes on without it."""


@dataclass
class Context:
    """What every experiment needs: sizes, repetitions, GC modes, codecs, where to write."""

    specs: list[CodecSpec]
    reps: int
    gc_modes: tuple[str, ...]
    scale: float
    work: Path
    progress: Any
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def min_seconds(self) -> float:
        """How long a batch of small calls runs at least (shorter at smoke-test scales)."""
        return 0.02 * min(1.0, self.scale)

    def scaled(self, n: int) -> int:
        return max(1, round(n * self.scale))

    def build(self, root: Any) -> list[Codec]:
        """The codecs for ``root``; one that fails to build is recorded and left out."""
        built = []
        for spec in self.specs:
            if spec.name in self.errors:
                continue
            try:
                built.append(spec.codec(root))
            except Exception as exc:  # noqa: BLE001 - one library's failure must not stop the run
                self.errors[spec.name] = f"building for {root}: {type(exc).__name__}: {exc}"
        return built


# --------------------------------------------------------------------------- timing


def measure(fn: Callable[[], Any], gc_on: bool, min_seconds: float = 0.0) -> tuple[float, Any]:
    """Seconds per call of ``fn`` and its last result, calling it until ``min_seconds`` passed.

    Repeated calls get one untimed call first, so that one-time costs (a library's lazily built
    serializer, the first allocation of its buffers) do not dominate a short measurement."""
    if min_seconds > 0:
        fn()
    gc.collect()
    was_enabled = gc.isenabled()
    if gc_on:
        gc.enable()
    else:
        gc.disable()
    try:
        calls = 0
        start = perf_counter()
        while True:
            result = fn()
            calls += 1
            elapsed = perf_counter() - start
            if elapsed >= min_seconds:
                break
    finally:
        if was_enabled:
            gc.enable()
        else:
            gc.disable()
    return elapsed / calls, result


@dataclass
class Samples:
    """Per-repetition values of (group, row) -> metric, and the sizes, of one experiment."""

    values: dict[tuple[str, str], dict[str, list[float]]] = field(default_factory=dict)
    sizes: dict[tuple[str, str], int] = field(default_factory=dict)
    #: The reference rows of the ratios: ratio name -> row.
    references: dict[str, str] = field(default_factory=lambda: {r: r for r in REFERENCES})

    def add(self, group: str, row: str, metric: str, value: float) -> None:
        self.values.setdefault((group, row), {}).setdefault(metric, []).append(value)

    def summary(self, group: str, row: str) -> dict[str, Any]:
        """Median of each metric and its paired ratios to the reference rows of the group."""
        out: dict[str, Any] = {}
        if (group, row) in self.sizes:
            out["bytes"] = self.sizes[(group, row)]
        for metric, values in self.values.get((group, row), {}).items():
            entry: dict[str, Any] = {"median": _median(values)}
            for ref, ref_row in self.references.items():
                base = self.values.get((group, ref_row), {}).get(metric)
                if base is not None and len(base) == len(values):
                    entry[f"x_{ref}"] = _median([v / b for v, b in zip(values, base) if b > 0])
            out[metric] = entry
        return out


def _median(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _rotated(items: list[Codec], rep: int) -> list[Codec]:
    shift = rep % max(1, len(items))
    return items[shift:] + items[:shift]


@dataclass
class Case:
    """One group of round trips: the same value through every codec."""

    group: str
    codecs: list[Codec]
    value: Any
    #: Each codec's input (``codec.prepare(value)``), computed once.
    inputs: dict[str, Any] = field(default_factory=dict)


def round_trips(ctx: Context, label: str, cases: list[Case], samples: Samples) -> None:
    """Encode and decode each case's value with each codec, ``reps`` times per GC mode.

    Records ``enc_<gc>`` and ``dec_<gc>`` seconds and the encoded size; checks the first
    decoded value of each codec and case against the input."""
    for rep in range(ctx.reps):
        for case in cases:
            ctx.progress.show(f"{label} {case.group} rep {rep + 1}/{ctx.reps}")
            expected = plain(case.value) if rep == 0 else None
            for codec in _rotated(case.codecs, rep):
                if codec.name in ctx.errors:
                    continue
                try:
                    _one_round_trip(ctx, case, codec, samples, expected)
                except Exception as exc:  # noqa: BLE001 - report and go on without this codec
                    ctx.errors[codec.name] = f"{label} {case.group}: {type(exc).__name__}: {exc}"
            ctx.progress.step()


def _one_round_trip(ctx: Context, case: Case, codec: Codec, samples: Samples, expected: Any) -> None:
    if codec.name not in case.inputs:
        case.inputs[codec.name] = codec.prepare(case.value)
    value = case.inputs[codec.name]
    for mode in ctx.gc_modes:
        seconds, blob = measure(lambda: codec.encode(value), mode == "on", ctx.min_seconds)
        samples.add(case.group, codec.name, f"enc_{mode}", seconds)
        seconds, back = measure(lambda: codec.decode(blob), mode == "on", ctx.min_seconds)
        samples.add(case.group, codec.name, f"dec_{mode}", seconds)
        samples.sizes[(case.group, codec.name)] = len(blob)
        if expected is not None:
            if plain(back) != expected:
                raise CodecError("the decoded value differs from the input")
            expected = None
        del back


# --------------------------------------------------------------------------- seed 001


def seed_001(ctx: Context) -> dict[str, Any]:
    n = ctx.scaled(E1_OBJECTS)
    data = make_foos(n)
    samples = Samples()
    round_trips(ctx, "001", [Case("E1", ctx.build(list[Foo]), data)], samples)
    del data
    return {"n": n, "rows": _rows(ctx, samples, ["E1"])["E1"], "get_one": seed_001_lazy(ctx)}


@dataclass(frozen=True)
class LazyMethod:
    """A way to get object #k of many without decoding the others.

    ``pack`` (timed as the write) turns the objects into a container; ``open`` turns the
    container into ``get(k)``; ``size`` is the container's bytes."""

    name: str
    #: The codec it is built on (it runs only when that codec does), or None.
    codec: str | None
    pack: Callable[[list[Any]], Any]
    open: Callable[[Any], Callable[[int], Any]]
    size: Callable[[Any], int]


def _indexed_name(codec_name: str) -> str:
    return f"{codec_name} (per-object blobs + offset index)"


def _indexed(codec_name: str) -> LazyMethod:
    """Per-object blobs of a codec, concatenated, with an 8-byte offset per object (the
    seed's "index file beside a data file", in plain Python)."""
    spec = BY_NAME[codec_name]
    # Built on first use: LAZY_METHODS is made at import, when the library may be absent.
    built: list[Codec] = []

    def codec() -> Codec:
        if not built:
            built.append(spec.codec(Foo))
        return built[0]

    def pack(objects: list[Any]) -> tuple[bytes, array.array[int]]:
        encode = codec().encode
        blobs = [encode(o) for o in objects]
        offsets = array.array("Q", [0])
        total = 0
        for blob in blobs:
            total += len(blob)
            offsets.append(total)
        return b"".join(blobs), offsets

    def open_(packed: tuple[bytes, array.array[int]]) -> Callable[[int], Any]:
        data, offsets = packed
        decode = codec().decode
        return lambda k: decode(data[offsets[k]:offsets[k + 1]])

    return LazyMethod(
        _indexed_name(codec_name), codec_name, pack, open_,
        lambda packed: len(packed[0]) + packed[1].itemsize * (len(packed[1]) - 1),
    )


def _archive_pack(objects: list[Any]) -> bytes:
    import copal

    return copal.pack_many(objects)


def _archive_open(packed: bytes) -> Callable[[int], Any]:
    import copal

    return copal.Archive(packed).__getitem__


#: Random-access methods of seed 001: copal's archive, and per-object blobs of other codecs.
LAZY_METHODS: tuple[LazyMethod, ...] = (
    _indexed("pickle"),
    _indexed("copal"),
    LazyMethod("copal archive (copal.pack_many + copal.Archive)", "copal", _archive_pack, _archive_open, len),
    _indexed("msgspec.msgpack(dataclass)"),
    _indexed("pyfory"),
)


def seed_001_lazy(ctx: Context) -> dict[str, Any]:
    """Get object #54,321 of 100,000 (scaled) only."""
    n = ctx.scaled(E1_OBJECTS)
    k = min(n - 1, E1_TARGET * n // E1_OBJECTS)
    data = make_foos(n)
    expected = plain(data[k])
    running = {s.name for s in ctx.specs}
    methods = [m for m in LAZY_METHODS if m.codec is None or m.codec in running]
    samples = Samples(references={ref: _indexed_name(ref) for ref in REFERENCES})
    for rep in range(ctx.reps):
        ctx.progress.show(f"001 get #{k:,} rep {rep + 1}/{ctx.reps}")
        for method in methods:
            if method.name in ctx.errors:
                continue
            try:
                for mode in ctx.gc_modes:
                    seconds, packed = measure(lambda: method.pack(data), mode == "on")
                    samples.add("get", method.name, f"write_{mode}", seconds)
                    get = method.open(packed)
                    if plain(get(k)) != expected:
                        raise CodecError(f"object #{k} differs from the input")

                    def batch() -> None:
                        for _ in range(GET_BATCH):
                            get(k)

                    seconds, _ = measure(batch, mode == "on", ctx.min_seconds)
                    samples.add("get", method.name, f"get_{mode}", seconds / GET_BATCH)
                    samples.sizes[("get", method.name)] = method.size(packed)
                    del packed, get
            except Exception as exc:  # noqa: BLE001 - report and go on without this method
                ctx.errors[method.name] = f"001 get: {type(exc).__name__}: {exc}"
        ctx.progress.step()
    rows = [{"method": m.name, **samples.summary("get", m.name)}
            for m in methods if m.name not in ctx.errors]
    return {"n": n, "k": k, "rows": rows}


# --------------------------------------------------------------------------- seed 002


def seed_002(ctx: Context) -> dict[str, Any]:
    sizes = sorted({ctx.scaled(n) for n in E2_SIZES})
    codecs = ctx.build(TargetObject)
    cases = [Case(f"n={n}", codecs, make_target(n)) for n in sizes]
    samples = Samples()
    round_trips(ctx, "002", cases, samples)
    rows = _rows(ctx, samples, [c.group for c in cases])
    out = []
    for n, case in zip(sizes, cases):
        raw = target_raw_bytes(n)
        for row in rows[case.group]:
            row["size_ratio"] = row["bytes"] / raw
        out.append({"n": n, "raw_bytes": raw, "rows": rows[case.group]})
    return {"sizes": out}


# --------------------------------------------------------------------------- seed 003


def seed_003(ctx: Context) -> dict[str, Any]:
    sizes = sorted({ctx.scaled(n) for n in E3_SIZES})
    base = ctx.build(list[Person])
    variants: dict[str, list[Codec]] = {"none": base}
    for name, level in COMPRESSIONS.items():
        compressed = [with_compression(c, name, level) for c in base]
        variants[name] = [c for c in compressed if c is not None]
    cases = []
    for n in sizes:
        people = make_people(n)
        cases += [Case(f"{n}/{comp}", codecs, people) for comp, codecs in variants.items()]
    samples = Samples()
    round_trips(ctx, "003", cases, samples)
    rows = _rows(ctx, samples, [c.group for c in cases])
    tables = [
        {"records": n, "compression": comp, "rows": rows[f"{n}/{comp}"]}
        for n in sizes for comp in variants
    ]
    return {"sizes": sizes, "compressions": list(variants), "tables": tables,
            "linearity": _linearity(ctx, sizes, list(variants), rows)}


def _linearity(
    ctx: Context, sizes: list[int], compressions: list[str], rows: dict[str, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Time per record at each size, and the spread (largest / smallest; 1.0 is linear)."""
    out = []
    for comp in compressions:
        names = [r["codec"] for r in rows[f"{sizes[0]}/{comp}"]]
        for name in names:
            entry: dict[str, Any] = {"codec": name, "compression": comp}
            for metric in (f"{d}_{m}" for m in ctx.gc_modes for d in ("enc", "dec")):
                per_record = []
                for n in sizes:
                    row = next((r for r in rows[f"{n}/{comp}"] if r["codec"] == name), None)
                    median = None if row is None else row.get(metric, {}).get("median")
                    per_record.append(None if median is None else median / n)
                known = [v for v in per_record if v is not None]
                entry[metric] = {
                    "per_record_s": per_record,
                    "spread": max(known) / min(known) if known and min(known) > 0 else None,
                }
            out.append(entry)
    return out


# --------------------------------------------------------------------------- seed 004


def seed_004(ctx: Context) -> dict[str, Any]:
    """One row per object in SQLite: ``(id INTEGER PRIMARY KEY, data BLOB | TEXT)``, written in
    one transaction and read back in id order; the file is removed before each write."""
    n = ctx.scaled(E4_OBJECTS)
    objects = make_foos(n, seed=4)
    expected = plain(objects)
    codecs = ctx.build(Foo)
    ctx.work.mkdir(parents=True, exist_ok=True)
    path = ctx.work / "seed004.sqlite"
    samples = Samples()
    for rep in range(ctx.reps):
        for storage in ("blob", "base64"):
            ctx.progress.show(f"004 {storage} rep {rep + 1}/{ctx.reps}")
            for codec in _rotated(codecs, rep):
                if codec.name in ctx.errors:
                    continue
                try:
                    inputs = [codec.prepare(o) for o in objects]
                    for mode in ctx.gc_modes:
                        write, read = _sqlite_ops(path, codec, storage, inputs)
                        seconds, _ = measure(write, mode == "on")
                        samples.add(storage, codec.name, f"write_{mode}", seconds)
                        samples.sizes[(storage, codec.name)] = os.path.getsize(path)
                        seconds, back = measure(read, mode == "on")
                        samples.add(storage, codec.name, f"read_{mode}", seconds)
                        if rep == 0 and plain(back) != expected:
                            raise CodecError("the objects read back differ from those written")
                        del back
                except Exception as exc:  # noqa: BLE001 - report and go on without this codec
                    ctx.errors[codec.name] = f"004 {storage}: {type(exc).__name__}: {exc}"
            ctx.progress.step()
    path.unlink(missing_ok=True)
    rows = _rows(ctx, samples, ["blob", "base64"])
    for row in rows["base64"]:
        blob = next((r for r in rows["blob"] if r["codec"] == row["codec"]), None)
        if blob is not None:
            row["bytes_x_blob"] = row["bytes"] / blob["bytes"]
    return {"n": n, "storages": rows}


def _sqlite_ops(
    path: Path, codec: Codec, storage: str, inputs: list[Any]
) -> tuple[Callable[[], None], Callable[[], list[Any]]]:
    encode, decode = codec.encode, codec.decode
    column = "BLOB"
    to_db: Callable[[Any], Any] = encode
    from_db: Callable[[Any], Any] = decode
    if storage == "base64":
        column = "TEXT"
        to_db = lambda o: base64.b64encode(encode(o)).decode("ascii")  # noqa: E731
        from_db = lambda s: decode(base64.b64decode(s))  # noqa: E731

    def write() -> None:
        path.unlink(missing_ok=True)
        con = sqlite3.connect(path)
        try:
            con.execute(f"CREATE TABLE objects (id INTEGER PRIMARY KEY, data {column} NOT NULL)")
            with con:
                con.executemany("INSERT INTO objects VALUES (?, ?)",
                                ((i, to_db(o)) for i, o in enumerate(inputs)))
        finally:
            con.close()

    def read() -> list[Any]:
        con = sqlite3.connect(path)
        try:
            return [from_db(d) for (d,) in con.execute("SELECT data FROM objects ORDER BY id")]
        finally:
            con.close()

    return write, read


# --------------------------------------------------------------------------- rows


def _rows(ctx: Context, samples: Samples, groups: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Per group, one summary row per codec that ran without error, in registry order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for group in groups:
        names = [row for (g, row) in samples.values if g == group]
        order = {spec.name: i for i, spec in enumerate(CODECS)}
        names.sort(key=lambda name: order.get(name, len(order)))
        out[group] = [
            {"codec": name, **samples.summary(group, name)}
            for name in names if name not in ctx.errors
        ]
    return out


SEEDS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "001": seed_001,
    "002": seed_002,
    "003": seed_003,
    "004": seed_004,
}
