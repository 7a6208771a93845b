"""Child process of tests/test_fuzz_decoding.py: decodes the records it is sent.

Usage: fuzz_decode_worker.py DB_DIR

Creates a database in DB_DIR (which must not exist) holding one object of every value type,
prints one JSON line ``{"records": {oid: hex}, "names": {root key: oid}, "descriptors": [...]}``
(and ``"streams": {kind: hex}``) with the valid records, the descriptors of the classes stored
by value and ``copal.dumps`` streams of all the objects, then serves requests, one per stdin
line ``OID HEX`` (HEX ``-`` for no bytes): it writes HEX as the record of OID, loads the object
in a fresh Database (an empty object cache; the process shares one store per directory),
touches every value of its state and answers one JSON line ``{"outcome": ..., "error": ...}``;
``stream HEX`` loads HEX with ``copal.loads`` instead (and, if it loads, dumps and loads the
result again). The outcome is

- ``"loaded"``: the record decoded; the state was then written back (a commit re-encodes it)
  and that record loaded again, both without error;
- ``"CorruptRecordError"`` or ``"SchemaError"``: loading refused the record (allowed);
- ``"unexpected"``: anything else (another exception, including a Rust panic, a failure to
  write back a state that was read, or to read what was written), with a traceback in "error".

The valid record of OID is put back after each request. The decoding runs in this process so
that a crash (abort, segfault, unbounded allocation) or a hang shows up in the test as this
process dying or not answering, instead of killing or stalling the test run.
"""

from __future__ import annotations

import datetime
import decimal
import json
import sys
import traceback
import uuid
import zoneinfo
from typing import Any

import copal
from copal import CorruptRecordError, Persistent, PersistentDict, PersistentList, SchemaError

from helpers.fuzz_decode_models import Perm
from helpers.models import (
    Color, FrozenKey, Holder, Item, Level, Node, Pair, Point, Tagged, TaggedBytes, TaggedComplex, TaggedDict,
    TaggedFloat, TaggedInt, TaggedSet, TaggedStr, TaggedTuple, Vector, tagged,
)


def populate(db: copal.Database) -> dict[str, int]:
    """Stores one object per group of value types; returns their oids by root key ("" for the
    root itself)."""
    shared = [1]
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    through_list: list[Any] = []
    through_list.append((through_list,))
    node = Node("a")
    node.next = Node("b")
    node.next.next = node
    paris = zoneinfo.ZoneInfo("Europe/Paris")
    with db.transaction() as tx:
        item = Item("item", 7, b"payload")
        tx.root["scalars"] = Holder(
            none=None, false=False, true=True, small=5, negative=-1, big=2**70, bigneg=-(2**64),
            nan=float("nan"), negzero=-0.0, inf=float("inf"), z=complex(1.5, -2.0),
            text="héllo", astral="😀", surrogate="a\ud800b", raw=b"\x00\xff", ba=bytearray(b"xy"),
        )
        tx.root["containers"] = Holder(
            items=[1, "two", [3.0, None]], pair=(1, "a"), mapping={"a": 1, 2: [None], (1, 2): "t"},
            numbers={1, 2, 3}, frozen=frozenset({"x", (1, 2)}), shared=[shared, shared],
            cyclic=cyclic, through_list=through_list, nested={"k": ({"v"}, frozenset({frozenset()}))},
        )
        tx.root["times"] = Holder(
            naive=datetime.datetime(2000, 1, 1, 12, 30, 0, 5),
            utc=datetime.datetime(2020, 2, 2, tzinfo=datetime.timezone.utc),
            offset=datetime.datetime(2000, 1, 1, 12, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=-5)), fold=1),
            zoned=datetime.datetime(2021, 6, 1, 8, tzinfo=paris),
            day=datetime.date(2000, 3, 1), clock=datetime.time(1, 2, 3, 4, fold=1),
            clock_tz=datetime.time(12, tzinfo=paris), delta=datetime.timedelta(days=-3, seconds=4, microseconds=5),
        )
        tx.root["misc"] = Holder(
            dec=decimal.Decimal("-1.50E-7"), dec_nan=decimal.Decimal("sNaN12"), uid=uuid.UUID(int=77),
            color=Color.GREEN, level=Level.HIGH, perm=Perm.READ | Perm.EXEC, no_perm=Perm(0), ref=item,
        )
        tx.root["objects"] = Holder(
            point=Point(1, "a"), node=node, vector=Vector(1.0, 2.5, ["t"]),
            keys={FrozenKey(1, "a"), FrozenKey(2, "b")},
            tagged=tagged(Tagged, [1, 2], label="l"), tagged_dict=tagged(TaggedDict, {"k": 1}, label=None),
            tagged_set=tagged(TaggedSet, {1}), tagged_tuple=tagged(TaggedTuple, (1, [2])), pair=Pair(1, 2),
        )
        tx.root["one"] = Holder(value=None)
        tx.root["list"] = PersistentList([item, 1, "x"])
        tx.root["dict"] = PersistentDict({"a": [1], "b": item})
    with db.transaction() as tx:
        return {"": tx.root._p_oid} | {name: tx.root[name]._p_oid for name in tx.root.keys()}


def probes() -> dict[str, Any]:
    """One value per class stored by value (OBJECT, SUBCLASS, ENUM), to learn its descriptor."""
    return {
        "Point": Point(1, 2), "Node": Node("n"), "Vector": Vector(1.0, 2.0), "FrozenKey": FrozenKey(1, "a"),
        "Tagged": tagged(Tagged, [1], label="l"), "TaggedDict": tagged(TaggedDict, {}, label="l"),
        "TaggedSet": tagged(TaggedSet, set()), "TaggedTuple": tagged(TaggedTuple, ()), "Pair": Pair(1, 2),
        "Color": Color.RED, "Level": Level.LOW, "Perm": Perm.READ,
    }


def descriptors(db: copal.Database) -> list[dict[str, Any]]:
    """The descriptor id, tag, field count (and SUBCLASS base tag) of each probe: each is stored
    as the one field of a Holder, whose record is then header, tag, descriptor id, ..."""
    values = probes()
    with db.transaction() as tx:
        holders = {name: Holder(value=value) for name, value in values.items()}
        tx.root["probes"] = PersistentList(holders.values())
    out = []
    for name, holder in holders.items():
        raw = db._debug_raw_record(holder._p_oid)
        # Header: version/flags, descriptor, tid (one byte each in this small database).
        tag, descriptor, rest = raw[3], raw[4], raw[5:]
        assert descriptor < 0x80 and raw[1] < 0x80 and raw[2] < 0x80, raw.hex()
        value = values[name]
        fields = len(vars(value)) if hasattr(value, "__dict__") and tag != 0x16 else 0
        out.append({"name": name, "tag": tag, "id": descriptor, "fields": fields,
                    "base": rest[0] if tag == 0x19 else None})
    return out


def walk(value: Any, seen: set[int], depth: int = 0) -> None:
    """Touches every value of a decoded state (not loading referenced persistent objects)."""
    if depth > 300 or id(value) in seen or isinstance(value, Persistent):
        return
    seen.add(id(value))
    repr(type(value))
    if isinstance(value, dict):
        for k, v in list(value.items()):
            walk(k, seen, depth + 1)
            walk(v, seen, depth + 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in list(value):
            walk(v, seen, depth + 1)
    if hasattr(value, "__dict__") and not isinstance(value, type):
        for v in list(vars(value).values()):
            walk(v, seen, depth + 1)


def load(path: str, oid: int) -> Any:
    """Loads object `oid` in a fresh Database (empty cache) and touches its whole state."""
    with copal.open(path, durable=False) as db:
        with db.transaction() as tx:
            obj = tx.get(oid)
            walk(vars(obj), set())


def write_back(path: str, oid: int) -> None:
    """Loads `oid` and commits it unchanged but marked changed: its state is encoded again."""
    with copal.open(path, durable=False) as db:
        with db.transaction() as tx:
            obj = tx.get(oid)
            obj._p_changed = True


def serve(path: str, db: copal.Database, oid: int, data: bytes) -> dict[str, str]:
    db._debug_put_raw_record(oid, data)
    try:
        load(path, oid)
    except (CorruptRecordError, SchemaError) as error:
        return {"outcome": type(error).__name__, "error": str(error)}
    except BaseException:  # noqa: BLE001 (a Rust panic is a BaseException)
        return {"outcome": "unexpected", "error": "loading: " + traceback.format_exc()}
    try:
        write_back(path, oid)
        load(path, oid)
    except BaseException:  # noqa: BLE001
        rewritten = db._debug_raw_record(oid)
        return {"outcome": "unexpected", "error": "writing back or reloading what was read: "
                f"(record then {rewritten.hex() if rewritten else None})\n" + traceback.format_exc()}
    return {"outcome": "loaded", "error": ""}


def recursive_values() -> list[Any]:
    """Tuples, frozensets and a tuple subclass that contain themselves through mutable values,
    and instances of subclasses of scalar built-ins: their streams hold superseded copies and
    SUBCLASS values of scalar bases (docs/STREAM.md section 5), which records cannot."""
    through_two: tuple[list[Any], dict[str, Any]] = ([], {})
    through_two[0].append(through_two)
    through_two[1]["t"] = through_two
    node = Node("f")
    frozen = frozenset([node, Node("g")])
    node.next = frozen
    sub = tagged(TaggedTuple, ([], "x"), label="l")
    sub[0].append(sub)
    scalars = [tagged(TaggedInt, 2**70, label=sub), tagged(TaggedStr, "s\u00e9", label="l"), TaggedFloat(0.5),
               TaggedComplex(1j), TaggedBytes(b"b"), TaggedInt(-3)]
    return [through_two, frozen, sub, Pair([], 2), scalars]


def streams(db: copal.Database, names: dict[str, int]) -> dict[str, bytes]:
    """``copal.dumps`` of every stored object (persistent objects are written by value), plain
    and compressed, and of `recursive_values`."""
    with db.transaction() as tx:
        graph = {name: tx.get(oid) for name, oid in names.items() if name}
        tx.load_closure(list(graph.values()))
        return {
            "plain": copal.dumps(graph),
            "zstd": copal.dumps(graph, compress="zstd"),
            "gzip": copal.dumps(graph, compress="gzip"),
            "recursive": copal.dumps(recursive_values()),
        }


def serve_stream(data: bytes) -> dict[str, str]:
    """Loads stream `data`; if it loads, dumps the result and loads that again."""
    try:
        value = copal.loads(data)
        walk(value, set())
    except (CorruptRecordError, SchemaError) as error:
        return {"outcome": type(error).__name__, "error": str(error)}
    except BaseException:  # noqa: BLE001 (a Rust panic is a BaseException)
        return {"outcome": "unexpected", "error": "loading: " + traceback.format_exc()}
    try:
        walk(copal.loads(copal.dumps(value)), set())
    except BaseException:  # noqa: BLE001
        return {"outcome": "unexpected", "error": "dumping or reloading what was read:\n" + traceback.format_exc()}
    return {"outcome": "loaded", "error": ""}


def main() -> int:
    path = sys.argv[1]
    db = copal.open(path, durable=False)
    names = populate(db)
    described = descriptors(db)
    originals = {oid: db._debug_raw_record(oid) for oid in names.values()}
    records = {str(oid): raw.hex() for oid, raw in originals.items()}
    dumped = {kind: data.hex() for kind, data in streams(db, names).items()}
    print(json.dumps({"records": records, "names": names, "descriptors": described, "streams": dumped}), flush=True)
    for line in sys.stdin:
        target, hex_text = line.split()
        data = b"" if hex_text == "-" else bytes.fromhex(hex_text)
        if target == "stream":
            answer = serve_stream(data)
        else:
            oid = int(target)
            answer = serve(path, db, oid, data)
            db._debug_put_raw_record(oid, originals[oid])
        print(json.dumps(answer), flush=True)
    db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
