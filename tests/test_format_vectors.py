"""The format test vectors (docs/FORMAT.md section 12) against two readers and one writer.

1. The independent reference decoder (tests/reference_decoder.py, written from FORMAT.md only)
   decodes every valid vector to its tagged JSON and rejects every invalid one with its kind.
2. copal itself agrees, through public API only: a ``Holder`` whose one attribute is the
   vector's value is committed to a fresh database, and the state bytes of its record must be the
   vector's bytes; the vector's bytes, written as the raw record of a Holder, must load as that
   value; invalid bytes must fail to load with CorruptRecordError.

The descriptor ids inside the vectors (3 = Point, 4 = Color, ...) are the ones a fresh database
assigns when its first commit stores the ``record_prime`` object; the ``primed`` fixture makes
that commit and checks its bytes, which pins descriptor allocation too.

``tests/vectors/vectors.txt`` (read by crates/copal-core/tests/vectors.rs) is generated from
vectors.json: ``python tests/test_format_vectors.py --write-txt``.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import json
import math
import struct
import sys
import types
import uuid
import zoneinfo
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference_decoder as rd  # noqa: E402

VECTOR_DIR = Path(__file__).resolve().parent / "vectors"
VECTORS: dict[str, Any] = json.loads((VECTOR_DIR / "vectors.json").read_text(encoding="utf-8"))
DESCRIPTORS: dict[int, list[str]] = {d["id"]: d["fields"] for d in VECTORS["descriptors"]}
BY_NAME: dict[str, Any] = {v["name"]: v for v in VECTORS["values"] + VECTORS["records"] + VECTORS["invalid"]}
HOLDER_DESCRIPTOR = 2


def ids(vectors: list[dict[str, Any]]) -> list[str]:
    return [v["name"] for v in vectors]


# -- the classes of the vectors' descriptor table ---------------------------------------------
# copal resolves stored type names among imported modules (never by importing), so the plain
# classes live in a module registered under a fixed name: their type names do not depend on how
# pytest imports this file.

MODULE = "copal_vectors"
_module = types.ModuleType(MODULE)


def _in_module(cls: type) -> type:
    cls.__module__ = MODULE
    setattr(_module, cls.__name__, cls)
    return cls


@_in_module
class Point:
    def __init__(self, x: Any, y: Any) -> None:
        self.x = x
        self.y = y


@_in_module
class Color(enum.Enum):
    RED = 1
    GREEN = 2


@_in_module
class Tags(list):  # type: ignore[type-arg]
    """A list subclass with an instance attribute ``label``."""


@_in_module
class Pair(tuple):  # type: ignore[type-arg]
    """A tuple subclass without __dict__."""

    __slots__ = ()


@_in_module
class Empty:
    pass


sys.modules.setdefault(MODULE, _module)

import copal  # noqa: E402


class Holder(copal.Persistent):
    __copal_type__ = "copal_vectors.Holder"

    def __init__(self, value: Any) -> None:
        self.value = value


CLASSES: dict[int, type] = {3: Point, 4: Color, 5: Tags, 6: Point, 7: Pair, 8: Empty}


# -- tagged JSON <-> Python values --------------------------------------------------------------

EPOCH = datetime.datetime(1970, 1, 1)
EPOCH_ORDINAL = EPOCH.toordinal()


class RefMarker:
    """Stands for a reference to the persistent object with this oid."""

    def __init__(self, oid: int) -> None:
        self.oid = oid


def oid_of(ref: dict[str, int]) -> int:
    return (ref["class"] << 48) | ref["seq"]


def to_tz(tz: Any) -> datetime.tzinfo | None:
    if tz is None:
        return None
    if "offset" in tz:
        return datetime.timezone(datetime.timedelta(microseconds=tz["offset"]))
    return zoneinfo.ZoneInfo(tz["zone"])


def to_python(node: Any, resolve_ref: Callable[[int], Any]) -> Any:
    """The Python value of a tagged JSON value, with memo slots rebuilt as the format says."""
    memo: list[Any] = []

    def build(node: Any) -> Any:
        if node is None or isinstance(node, bool):
            return node
        ((tag, body),) = node.items()
        if tag == "int":
            return body
        if tag == "bigint":
            return int(body)
        if tag == "float":
            return struct.unpack(">d", bytes.fromhex(body))[0]
        if tag == "complex":
            re_, im = (struct.unpack(">d", bytes.fromhex(part))[0] for part in body)
            return complex(re_, im)
        if tag == "str":
            return body
        if tag == "str_surrogates":
            return "".join(map(chr, body))
        if tag == "bytes":
            return bytes.fromhex(body)
        if tag == "bytearray":
            value = bytearray.fromhex(body)
            memo.append(value)
            return value
        if tag in ("list", "set", "dict"):
            return fill(memo_new({"list": list, "set": set, "dict": dict}[tag]()), tag, body)
        if tag in ("tuple", "frozenset"):
            return immutable(tuple if tag == "tuple" else frozenset, None, body)
        if tag == "datetime":
            naive = EPOCH + datetime.timedelta(microseconds=body["micros"])
            return naive.replace(tzinfo=to_tz(body["tz"]), fold=int(body["fold"]))
        if tag == "date":
            return datetime.date.fromordinal(EPOCH_ORDINAL + body["days"])
        if tag == "time":
            seconds, micro = divmod(body["micros"], 1_000_000)
            return datetime.time(
                seconds // 3600, seconds // 60 % 60, seconds % 60, micro, tzinfo=to_tz(body["tz"]), fold=int(body["fold"])
            )
        if tag == "timedelta":
            return datetime.timedelta(days=body["days"], seconds=body["seconds"], microseconds=body["micros"])
        if tag == "decimal":
            return decimal.Decimal(body)
        if tag == "uuid":
            return uuid.UUID(body)
        if tag == "enum":
            return CLASSES[body["descriptor"]][body["member"]]  # type: ignore[index]
        if tag == "ref":
            return resolve_ref(oid_of(body))
        if tag == "object":
            obj = memo_new(object.__new__(CLASSES[body["descriptor"]]))
            set_fields(obj, body)
            return obj
        if tag == "subclass":
            cls = CLASSES[body["descriptor"]]
            ((base, items),) = body["base"].items()
            if base in ("tuple", "frozenset"):
                obj = immutable(tuple if base == "tuple" else frozenset, cls, items)
            else:
                obj = fill(memo_new(cls()), base, items)
            set_fields(obj, body)
            return obj
        if tag == "backref":
            value = memo[body]
            assert value is not None, "back-reference to an unfinished tuple"
            return value
        raise AssertionError(f"unknown tagged value {tag}")

    def memo_new(value: Any) -> Any:
        memo.append(value)
        return value

    def fill(container: Any, kind: str, items: list[Any]) -> Any:
        for item in items:
            if kind == "dict":
                key = build(item[0])
                dict.__setitem__(container, key, build(item[1]))
            elif kind == "set":
                set.add(container, build(item))
            else:
                list.append(container, build(item))
        return container

    def immutable(base: type, cls: type | None, items: list[Any]) -> Any:
        slot = len(memo)
        memo.append(None)
        values = [build(item) for item in items]
        memo[slot] = base.__new__(cls or base, values)
        return memo[slot]

    def set_fields(obj: Any, body: dict[str, Any]) -> None:
        for name, field in zip(DESCRIPTORS[body["descriptor"]], body["fields"]):
            setattr(obj, name, build(field))

    return build(node)


def expected_flags(node: Any) -> int:
    """FLAG_MUTABLE_STATE as copal sets it for a Holder (FORMAT.md section 4)."""

    def mutable(node: Any) -> bool:
        if not isinstance(node, dict):
            return False
        ((tag, body),) = node.items()
        if tag in ("list", "dict", "set", "bytearray", "object"):
            return True
        if tag == "subclass":
            ((base, _),) = body["base"].items()
            return base in ("list", "dict", "set") or any(map(mutable, children(node)))
        return any(map(mutable, children(node)))

    return 1 if mutable(node) else 0


def children(node: Any) -> Iterator[Any]:
    ((tag, body),) = node.items()
    if tag in ("list", "tuple", "set", "frozenset"):
        yield from body
    elif tag == "dict":
        for key, value in body:
            yield key
            yield value
    elif tag == "object":
        yield from body["fields"]
    elif tag == "subclass":
        yield body["base"]
        yield from body["fields"]


def assert_same(actual: Any, expected: Any) -> None:
    """Exact types, bit-exact floats, zones and folds, and the same sharing of objects."""
    forward: dict[int, Any] = {}
    backward: dict[int, Any] = {}
    keep: list[Any] = []

    def same(a: Any, b: Any, path: str) -> None:
        if isinstance(b, RefMarker):
            assert isinstance(a, copal.Persistent), path
            assert a._p_oid == b.oid, path
            return
        assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
        if isinstance(a, copal.Persistent):
            assert a is b, path
            return
        if isinstance(a, (list, dict, set, frozenset, tuple, bytearray)) or hasattr(a, "__dict__"):
            if isinstance(a, enum.Enum):
                assert a is b, path
                return
            if id(a) in forward or id(b) in backward:
                assert forward.get(id(a)) is b and backward.get(id(b)) is a, f"{path}: sharing differs"
                return
            forward[id(a)], backward[id(b)] = b, a
            keep.extend((a, b))
        if isinstance(a, float):
            assert struct.pack("<d", a) == struct.pack("<d", b), f"{path}: {a!r} != {b!r}"
        elif isinstance(a, complex):
            assert struct.pack("<dd", a.real, a.imag) == struct.pack("<dd", b.real, b.imag), path
        elif isinstance(a, decimal.Decimal):
            assert str(a) == str(b), path
        elif isinstance(a, (datetime.datetime, datetime.time)):
            assert a.replace(tzinfo=None) == b.replace(tzinfo=None) and a.fold == b.fold, f"{path}: {a!r} != {b!r}"
            assert type(a.tzinfo) is type(b.tzinfo), path
            if isinstance(a.tzinfo, zoneinfo.ZoneInfo):
                assert a.tzinfo.key == b.tzinfo.key, path  # type: ignore[union-attr]
            elif a.tzinfo is not None:
                assert a.tzinfo.utcoffset(None) == b.tzinfo.utcoffset(None), path  # type: ignore[union-attr]
        elif isinstance(a, dict):
            assert len(a) == len(b), path
            for (ka, va), (kb, vb) in zip(dict.items(a), dict.items(b)):
                same(ka, kb, f"{path}<key>")
                same(va, vb, f"{path}[{ka!r}]")
        elif isinstance(a, (list, tuple)):
            assert len(a) == len(b), path
            for i, (x, y) in enumerate(zip(list.__iter__(a) if isinstance(a, list) else tuple.__iter__(a), b)):
                same(x, y, f"{path}[{i}]")
        elif isinstance(a, (set, frozenset)):
            assert a == b, path
            for x in a:
                same(x, next(y for y in b if y == x), f"{path}{{{x!r}}}")
        elif not hasattr(a, "__dict__"):
            assert a == b, f"{path}: {a!r} != {b!r}"
        if hasattr(a, "__dict__") and not isinstance(a, type):
            assert list(vars(a)) == list(vars(b)), path
            for name in vars(a):
                same(vars(a)[name], vars(b)[name], f"{path}.{name}")

    same(actual, expected, "value")


# -- the text form of the vectors ---------------------------------------------------------------


def compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def vectors_txt() -> str:
    """vectors.txt: one vector per line, six tab-separated columns."""
    lines = [
        "# copal format test vectors, generated from vectors.json by",
        "# `python tests/test_format_vectors.py --write-txt`; do not edit (docs/FORMAT.md section 12).",
        "# kind\tname\thex\texpected\treencoded\trust_known_issue",
        "# kind: descriptor (name = id, expected = class, type and fields), value, record,",
        "# invalid-value or invalid-record (expected = error kind). expected JSON is compact with sorted",
        "# keys and ASCII escapes; '-' marks an empty column.",
    ]

    def line(kind: str, name: str, hexs: str, expected: str, vector: dict[str, Any]) -> str:
        issue = vector.get("known_issue", {}).get("rust", "-")
        return "\t".join([kind, name, hexs, expected, vector.get("reencoded", "-"), issue])

    for d in VECTORS["descriptors"]:
        expected = compact({"class": d["class"], "type": d["type"], "fields": d["fields"]})
        lines.append(line("descriptor", str(d["id"]), d["hex"], expected, d))
    for v in VECTORS["values"]:
        lines.append(line("value", v["name"], v["hex"], compact(v["value"]), v))
    for v in VECTORS["records"]:
        lines.append(line("record", v["name"], v["hex"], compact({"header": v["header"], "fields": v["fields"]}), v))
    for v in VECTORS["invalid"]:
        lines.append(line(f"invalid-{v['scope']}", v["name"], v["hex"], v["error"], v))
    return "\n".join(lines) + "\n"


def test_vectors_txt_is_generated_from_vectors_json() -> None:
    current = (VECTOR_DIR / "vectors.txt").read_text(encoding="utf-8")
    assert current == vectors_txt(), "run: python tests/test_format_vectors.py --write-txt"


def test_vector_names_are_unique_and_the_file_is_complete() -> None:
    names = [v["name"] for v in VECTORS["values"] + VECTORS["records"] + VECTORS["invalid"]]
    assert len(names) == len(set(names))
    assert len(VECTORS["values"]) >= 30 and len(VECTORS["records"]) >= 3 and len(VECTORS["invalid"]) >= 6
    spec = (Path(__file__).resolve().parents[1] / "docs" / "FORMAT.md").read_text(encoding="utf-8")
    for path in VECTOR_DIR.iterdir():
        assert f"tests/vectors/{path.name}" in spec, f"FORMAT.md section 12 must list {path.name}"


# -- 1. the reference decoder -------------------------------------------------------------------


@pytest.mark.parametrize("descriptor", VECTORS["descriptors"], ids=[str(d["id"]) for d in VECTORS["descriptors"]])
def test_reference_decodes_descriptor(descriptor: dict[str, Any]) -> None:
    decoded = rd.decode_descriptor(bytes.fromhex(descriptor["hex"]))
    assert decoded == {"class": descriptor["class"], "type": descriptor["type"], "fields": descriptor["fields"]}


@pytest.mark.parametrize("vector", VECTORS["values"], ids=ids(VECTORS["values"]))
def test_reference_decodes_value(vector: dict[str, Any]) -> None:
    assert rd.decode_value(bytes.fromhex(vector["hex"]), DESCRIPTORS) == vector["value"]


@pytest.mark.parametrize("vector", VECTORS["records"], ids=ids(VECTORS["records"]))
def test_reference_decodes_record(vector: dict[str, Any]) -> None:
    decoded = rd.decode_record(bytes.fromhex(vector["hex"]), DESCRIPTORS)
    assert decoded == {"header": vector["header"], "fields": vector["fields"]}


@pytest.mark.parametrize("vector", VECTORS["invalid"], ids=ids(VECTORS["invalid"]))
def test_reference_rejects_invalid(vector: dict[str, Any]) -> None:
    decode = rd.decode_value if vector["scope"] == "value" else rd.decode_record
    with pytest.raises(ValueError) as caught:
        decode(bytes.fromhex(vector["hex"]), DESCRIPTORS)
    assert isinstance(caught.value, rd.DecodeError)
    assert caught.value.kind == vector["error"]


def leb128(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_reference_enforces_the_bigint_limit() -> None:
    """Too large for a vector file: a BIGINT of 1 MiB is accepted, one byte more is not."""
    limit = 1 << 20
    assert rd.decode_value(b"\x04" + leb128(limit) + b"\x00" * limit, {}) == {"bigint": "0"}
    with pytest.raises(rd.DecodeError) as caught:
        rd.decode_value(b"\x04" + leb128(limit + 1) + b"\x00" * (limit + 1), {})
    assert caught.value.kind == "OutOfRange"


def test_zigzag_and_varint_examples_of_the_spec() -> None:
    for value, encoded in [(0, "00"), (127, "7f"), (128, "8001"), (300, "ac02"), (2**64 - 1, "ffffffffffffffffff01")]:
        assert leb128(value).hex() == encoded
        assert rd._Reader(bytes.fromhex(encoded), {}).varint() == value
    for signed, unsigned in [(0, 0), (-1, 1), (1, 2), (-2, 3), (2**63 - 1, 2**64 - 2), (-(2**63), 2**64 - 1)]:
        assert rd._Reader(leb128(unsigned), {}).zigzag() == signed


# -- 2. copal agrees ----------------------------------------------------------------------------


class Primed:
    """A fresh database whose first commit created descriptors 2-8 of the vectors' table."""

    def __init__(self, db: Any, prime: Holder) -> None:
        self.db = db
        self.prime = prime

    def store(self, value_of: Callable[[Callable[[int], Any]], Any]) -> Holder:
        with self.db.transaction() as tx:
            holder = Holder(value_of(tx.get))
            tx.add(holder)
        return holder

    def load(self, record: bytes) -> Any:
        """Writes `record` as the raw record of a new Holder and loads that Holder's value."""
        holder = self.store(lambda _: None)
        self.db._debug_put_raw_record(holder._p_oid, record)
        with self.db.transaction() as tx:
            return tx.get(holder._p_oid).value


@pytest.fixture(scope="module")
def primed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Primed]:
    db = copal.open(tmp_path_factory.mktemp("vectors") / "db")
    try:
        with db.transaction() as tx:
            prime = Holder(
                [Point(1, 2), Color.RED, Tags(["a"]), Point(1, 2), Pair((1, 2)), Empty()]
            )
            prime.value[2].label = "x"
            prime.value[3].z = 3
            tx.root["prime"] = prime
        yield Primed(db, prime)
    finally:
        db.close()


def split_record(record: bytes) -> tuple[dict[str, int], bytes]:
    """The header fields of a record (FORMAT.md section 4) and its state bytes."""
    r = rd._Reader(record, {})
    first = r.u8()
    header = {"version": first >> 4, "flags": first & 0x0F, "descriptor": r.varint(), "tid": r.varint()}
    return header, record[r.pos :]


def test_copal_creates_the_root_record_of_the_spec(tmp_path: Path) -> None:
    db = copal.open(tmp_path / "db")
    try:
        root = db._debug_raw_record(1 << 48)
    finally:
        db.close()
    assert root is not None and root.hex() == BY_NAME["record_root_fresh"]["hex"]


def test_copal_assigns_the_descriptor_table_of_the_vectors(primed: Primed) -> None:
    """record_prime pins the descriptor ids the other vectors use."""
    assert primed.prime._p_oid == oid_of({"class": 2, "seq": 0})
    record = primed.db._debug_raw_record(primed.prime._p_oid)
    assert record is not None and record.hex() == BY_NAME["record_prime"]["hex"]


def encodable(vector: dict[str, Any]) -> bool:
    return bool(vector.get("canonical", True) and vector.get("copal_encode", True))


ENCODABLE = [v for v in VECTORS["values"] if encodable(v)]


def xfail_known(vector: dict[str, Any], check: str) -> list[Any]:
    issue = vector.get("known_issue", {}).get(check)
    return [pytest.mark.xfail(reason=issue, strict=True)] if issue else []


@pytest.mark.parametrize(
    "vector", [pytest.param(v, id=v["name"], marks=xfail_known(v, "copal_encode")) for v in ENCODABLE]
)
def test_copal_writes_the_vector(primed: Primed, vector: dict[str, Any]) -> None:
    holder = primed.store(lambda get: to_python(vector["value"], get))
    record = primed.db._debug_raw_record(holder._p_oid)
    header, state = split_record(record)
    assert header == {
        "version": 1,
        "flags": expected_flags(vector["value"]),
        "descriptor": HOLDER_DESCRIPTOR,
        "tid": holder._p_serial,
    }
    assert state.hex() == vector["hex"]


DECODABLE = [v for v in VECTORS["values"] if v.get("copal_decode", True)]


@pytest.mark.parametrize(
    "vector", [pytest.param(v, id=v["name"], marks=xfail_known(v, "copal_decode")) for v in DECODABLE]
)
def test_copal_reads_the_vector(primed: Primed, vector: dict[str, Any]) -> None:
    header = bytes([0x10 | expected_flags(vector["value"]), HOLDER_DESCRIPTOR, 1])
    loaded = primed.load(header + bytes.fromhex(vector["hex"]))
    assert_same(loaded, to_python(vector["value"], RefMarker))


HOLDER_RECORDS = [v for v in VECTORS["records"] if v["header"]["descriptor"] == HOLDER_DESCRIPTOR]


@pytest.mark.parametrize(
    "vector", [pytest.param(v, id=v["name"], marks=xfail_known(v, "copal_decode")) for v in HOLDER_RECORDS]
)
def test_copal_reads_the_record(primed: Primed, vector: dict[str, Any]) -> None:
    loaded = primed.load(bytes.fromhex(vector["hex"]))
    (field,) = vector["fields"]
    assert_same(loaded, to_python(field, RefMarker))


# How copal's CorruptRecordError messages name each error kind (the Display of the core's
# DecodeError), so that the test also checks that copal rejects the bytes for the right reason.
KIND_MESSAGES = {
    "Truncated": "truncated",
    "UnknownTag": "unknown tag",
    "BadVarint": "malformed varint",
    "LengthTooLarge": "exceeds the remaining input",
    "TooDeep": "nested deeper than",
    "BadUtf8": "invalid UTF-8",
    "UnsupportedVersion": "format version",
    "UnknownDescriptor": "unknown class descriptor",
    "BadBackRef": "back-reference to undefined memo slot",
    "TrailingBytes": "unexpected bytes after the last value",
    "OutOfRange": "out of range",
}


@pytest.mark.parametrize("vector", VECTORS["invalid"], ids=ids(VECTORS["invalid"]))
def test_copal_rejects_the_invalid_vector(primed: Primed, vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    if vector["scope"] == "value":
        data = bytes([0x11, HOLDER_DESCRIPTOR, 1]) + data
    with pytest.raises(copal.CorruptRecordError, match=KIND_MESSAGES[vector["error"]]):
        primed.load(data)


def test_nan_vector_is_the_nan_python_produces() -> None:
    (bits,) = struct.unpack(">Q", struct.pack(">d", math.nan))
    assert f"{bits:016x}" == BY_NAME["float_nan"]["value"]["float"]


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-txt"]:
        (VECTOR_DIR / "vectors.txt").write_text(vectors_txt(), encoding="utf-8")
    else:
        sys.exit("usage: python tests/test_format_vectors.py --write-txt")
