"""Subclasses of int, float, complex, str and bytes in binary streams.

The cases follow CPython's pickle test suite (pickletester.py: ``test_newobj_generic`` and
``test_newobj_proxies`` pickle ``x = C(base_value); x.foo = 42`` for subclasses of every built-in
and check the class, the value and ``__dict__``), with the identity checks pickle makes. A stream
holds such an instance as a SUBCLASS value whose base is the plain value (docs/STREAM.md section
5, stream version 4); databases, archives and text documents refuse it with a TypeError.
"""

from __future__ import annotations

import enum
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import copal
from helpers.compare import assert_same
from helpers.models import Holder, Point, Tagged
from helpers.strategies import value_graphs

STREAM_VERSION_AT = 4  # the byte of docs/STREAM.md section 2 that holds the version


class MyInt(int):
    pass


class MyFloat(float):
    pass


class MyComplex(complex):
    pass


class MyStr(str):
    pass


class MyBytes(bytes):
    pass


class Empty(str):
    """Instances without a ``__dict__``: only the base value is stored."""

    __slots__ = ()


class Grandchild(MyInt):
    pass


#: name -> a value of each base (pickletester's ``test_newobj_generic`` values, and the edges of
#: each base's encoding: INT against BIGINT, UTF-8 against lone surrogates, empty values).
INSTANCES: dict[str, Any] = {
    "int": MyInt(5),
    "int_zero": MyInt(0),
    "int_min_i64": MyInt(-(2**63)),
    "int_max_i64": MyInt(2**63 - 1),
    "bigint": MyInt(2**63),
    "bigint_negative": MyInt(-(2**63) - 1),
    "bigint_huge": MyInt(-(3**2000)),
    "int_grandchild": Grandchild(7),
    "float": MyFloat(1.5),
    "float_negative_zero": MyFloat(-0.0),
    "float_nan": MyFloat(math.nan),
    "float_inf": MyFloat(-math.inf),
    "complex": MyComplex(1, -0.0),
    "complex_nan": MyComplex(math.nan, math.inf),
    "str": MyStr("abc"),
    "str_non_ascii": MyStr("h\u00e9llo \u4e16\u754c \U0001f600"),
    "str_surrogate": MyStr("a\ud800b"),
    "str_empty": MyStr(""),
    "bytes": MyBytes(b"\x00\xff"),
    "bytes_empty": MyBytes(b""),
    "no_dict": Empty("slots"),
}


def reload(value: Any, **options: Any) -> Any:
    return copal.loads(copal.dumps(value, **options))


@pytest.mark.parametrize("value", INSTANCES.values(), ids=INSTANCES.keys())
def test_each_base_round_trips_as_its_class(value: Any) -> None:
    data = copal.dumps(value)
    assert data[STREAM_VERSION_AT] == 4
    assert_same(value, copal.loads(data))


@pytest.mark.parametrize("value", [v for v in INSTANCES.values() if hasattr(v, "__dict__")],
                         ids=[k for k, v in INSTANCES.items() if hasattr(v, "__dict__")])
def test_instance_attributes_round_trip(value: Any) -> None:
    """pickletester's ``test_newobj_generic``: ``x = C(value); x.foo = 42``."""
    x = type(value)(value)
    x.foo = 42
    x.bar = [MyStr("nested")]
    loaded = reload(x)
    assert_same(x, loaded)
    assert loaded.foo == 42 and type(loaded.bar[0]) is MyStr


@pytest.mark.parametrize("compress", [None, "zstd", "gzip", "lz4"])
def test_compressed_and_file_streams(compress: Any, tmp_path: Path) -> None:
    value = list(INSTANCES.values())
    assert_same(value, reload(value, compress=compress))
    path = tmp_path / "scalars.cpl"
    with open(path, "wb") as f:
        copal.dump(value, f, compress=compress)
    with open(path, "rb") as f:
        assert_same(value, copal.load(f))


def test_one_instance_met_twice_comes_back_as_one_object() -> None:
    x, s = MyInt(2**100), MyStr("shared")
    loaded = reload([x, s, {"again": x, s: s}, (s,)])
    assert loaded[2]["again"] is loaded[0]
    assert loaded[3][0] is loaded[1] and type(loaded[1]) is MyStr
    key, value = next(iter(loaded[2].items() - {("again", loaded[0])}))
    assert key is loaded[1] and value is loaded[1]


def test_equal_but_distinct_instances_stay_distinct() -> None:
    a, b = MyStr("same"), MyStr("same")
    loaded = reload([a, b])
    assert loaded[0] == loaded[1] and loaded[0] is not loaded[1]


def test_cycles_through_the_instance_dict() -> None:
    x = MyInt(3)
    x.me = x
    x.items = [x, (x,)]
    s = MyBytes(b"s")
    s.peer = x
    x.peer = s
    loaded = reload(x)
    assert loaded.me is loaded and loaded.items[0] is loaded and loaded.items[1][0] is loaded
    assert loaded.peer.peer is loaded and type(loaded.peer) is MyBytes and loaded.peer == b"s"


def test_a_tuple_holding_an_instance_that_holds_the_tuple() -> None:
    """The tuple meets itself again through the instance's dict: a superseded copy."""
    x = MyStr("x")
    t = (x, 1)
    x.t = t
    loaded = reload(t)
    assert loaded[0].t is loaded and type(loaded[0]) is MyStr


def test_sets_of_instances_are_canonical() -> None:
    a, b = MyStr("b"), MyStr("a")
    a.n, b.n = 1, 2
    assert copal.dumps({a, b}) == copal.dumps({b, a})
    loaded = reload(frozenset([a, b]))
    assert {(type(s), str(s), s.n) for s in loaded} == {(MyStr, "b", 1), (MyStr, "a", 2)}


class Noisy(int):
    """Overrides every method the encoder could read the value with: none of them may run."""

    def __int__(self) -> int:
        raise AssertionError("__int__ ran")

    def __index__(self) -> int:
        raise AssertionError("__index__ ran")

    def __lt__(self, other: object) -> bool:
        raise AssertionError("__lt__ ran")

    def bit_length(self) -> int:
        raise AssertionError("bit_length ran")

    def to_bytes(self, *args: Any, **kwargs: Any) -> bytes:
        raise AssertionError("to_bytes ran")


class NoisyStr(str):
    def __str__(self) -> str:
        raise AssertionError("__str__ ran")

    def encode(self, *args: Any, **kwargs: Any) -> bytes:
        raise AssertionError("encode ran")


class NoisyFloat(float):
    def __float__(self) -> float:
        raise AssertionError("__float__ ran")


class NoisyComplex(complex):
    def __complex__(self) -> complex:
        raise AssertionError("__complex__ ran")


class NoisyBytes(bytes):
    def __bytes__(self) -> bytes:
        raise AssertionError("__bytes__ ran")


class Picky(int):
    """A constructor with other arguments, and an ``__init__`` that must not run on load."""

    def __new__(cls, amount: int, currency: str) -> Picky:
        obj = super().__new__(cls, amount)
        obj.currency = currency
        return obj

    def __init__(self, amount: int, currency: str) -> None:
        if currency == "refused":
            raise AssertionError("__init__ ran")


@pytest.mark.parametrize(
    "value",
    [Noisy(-(2**80)), Noisy(12), NoisyStr("\ud800x"), NoisyStr("ok"), NoisyFloat(2.5), NoisyComplex(1j), NoisyBytes(b"b")],
    ids=["bigint", "int", "str_surrogate", "str", "float", "complex", "bytes"],
)
def test_the_value_is_read_without_methods_of_the_subclass(value: Any) -> None:
    assert_same(value, reload(value))


def test_the_classes_constructor_does_not_run_on_load() -> None:
    money = Picky(5, "EUR")
    loaded = reload(money)
    assert type(loaded) is Picky and loaded == 5 and loaded.currency == "EUR"
    money.currency = "refused"
    assert reload(money).currency == "refused"


class WithSlots(str):
    __slots__ = ("unit",)


class BuiltinNew(int):
    """Makes its instances with a ``__new__`` that is not a Python function, which a reader
    calling ``int.__new__`` would bypass."""

    __new__ = int.__new__  # type: ignore[assignment]


class BelowBuiltinNew(BuiltinNew):
    pass


def test_classes_whose_instances_keep_values_in_slots_are_refused() -> None:
    value = WithSlots("5")
    value.unit = "kg"
    with pytest.raises(TypeError, match=r"value\[0\]: values of type .*WithSlots cannot be stored: they keep values in __slots__"):
        copal.dumps([value])


@pytest.mark.parametrize("cls", [BuiltinNew, BelowBuiltinNew])
def test_classes_their_base_cannot_rebuild_are_refused(cls: type) -> None:
    with pytest.raises(TypeError, match=f"{cls.__name__} cannot be stored: .*int's own constructor"):
        copal.dumps(cls(1))


class Level(enum.IntEnum):
    LOW = 1


class Perm(enum.IntFlag):
    R = 4
    W = 2


class Named(str, enum.Enum):
    A = "a"


def test_enums_of_scalar_types_are_still_enum_members() -> None:
    """IntEnum, IntFlag and str mixins are enums: ENUM values, in version 3 streams."""
    value = [Level.LOW, Perm.R | Perm.W, Named.A]
    data = copal.dumps(value)
    assert data[STREAM_VERSION_AT] == 3
    loaded = copal.loads(data)
    assert loaded[0] is Level.LOW and loaded[1] == Perm.R | Perm.W and type(loaded[1]) is Perm and loaded[2] is Named.A


def test_streams_without_them_are_unchanged_version_3() -> None:
    """The bytes of a stream with no such value are those copal wrote before they existed."""
    value = {"a": [1, 2.5, 1j, "x", b"y", (True,)], "b": {frozenset([2**64])}}
    assert copal.dumps(value).hex() == (
        "43504c3103003f"  # header: version 3, 63 payload bytes
        "00"  # no descriptors
        "0d02"  # a dict of two pairs
        "070161" "0b06" "0302" "050000000000000440" "06" "0000000000000000" "000000000000f03f"
        "070178" "090179" "0c0102"
        "070162" "0e01" "0f01" "0409000000000000000001"
    )


def test_version_4_wherever_such_a_value_is() -> None:
    """Inside a set (whose elements are encoded on trial to sort them), a dict key, an object,
    a tuple: the stream is version 4; around them, without one, version 3."""
    for value in [{MyStr("b"), MyStr("a")}, {MyBytes(b"k"): 1}, Point(MyFloat(1), None), (1, (MyComplex(1),))]:
        assert copal.dumps(value)[STREAM_VERSION_AT] == 4
        assert_same(value, reload(value))
    assert copal.dumps([{(1,), ("a",)}, {b"k": 1}, (1, (1j,))])[STREAM_VERSION_AT] == 3


REFUSED = {"int": MyInt(1), "bigint": MyInt(2**70), "float": MyFloat(1), "complex": MyComplex(1),
           "str": MyStr("s"), "bytes": MyBytes(b"b")}


@pytest.mark.parametrize("fmt", ["json", "xml"])
@pytest.mark.parametrize("value", REFUSED.values(), ids=REFUSED.keys())
def test_text_documents_refuse_them(value: Any, fmt: str) -> None:
    with pytest.raises(TypeError, match=r"value\[0\]\['k'\]: a value of type .*, a subclass of \w+, can only be written to a binary stream"):
        copal.dumps([{"k": value}], format=fmt)


@pytest.mark.parametrize("value", REFUSED.values(), ids=REFUSED.keys())
def test_archives_refuse_them(value: Any) -> None:
    with pytest.raises(TypeError, match="can only be written to a binary stream .* not stored in .* an archive"):
        copal.pack_many([1, value])


def test_databases_refuse_them_and_stay_readable(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["kept"] = 1
    for value in REFUSED.values():
        with pytest.raises(TypeError, match=r"Holder\.value: a value of type .* not stored in a database"):
            with db.transaction() as tx:
                tx.root["bad"] = Holder(value=value)
    with db.transaction() as tx:
        assert dict(tx.root) == {"kept": 1}


def test_records_have_no_scalar_bases(store: Any) -> None:
    """A SUBCLASS of a scalar base is a stream's: in a record its base tag is an unknown tag."""
    db = store.open()
    with db.transaction() as tx:
        tx.root["holder"] = Holder(value=Tagged())
    with db.transaction() as tx:
        oid = tx.root["holder"]._p_oid
    raw = db._debug_raw_record(oid)
    assert raw is not None and raw.endswith(b"\x0b\x00")  # the Holder's one field: SUBCLASS of LIST, no items
    db._debug_put_raw_record(oid, raw[:-2] + b"\x03\x0a")
    db = store.reopen(db)
    with db.transaction() as tx:
        with pytest.raises(copal.CorruptRecordError, match="tag"):
            tx.get(oid).value  # noqa: B018


# -- streams naming classes that a SUBCLASS of a scalar base cannot be ---------------------------

def _stream(type_name: str, value: bytes, version: int = 4) -> bytes:
    name = type_name.encode()
    body = b"\x01\x00" + bytes([len(name)]) + name + b"\x00" + value
    return b"CPL1" + bytes([version, 0, len(body)]) + body


@pytest.mark.parametrize(
    ("type_name", "value", "message"),
    [
        (f"{__name__}.MyStr", b"\x19\x00\x03\x0a", "not a subclass of int"),
        (f"{__name__}.MyInt", b"\x19\x00\x07\x01a", "not a subclass of str"),
        (f"{__name__}.MyInt", b"\x19\x00\x0b\x00", "not a subclass of list"),
        ("builtins.bool", b"\x19\x00\x03\x02", "not a subclass of int"),
        (f"{__name__}.Level", b"\x19\x00\x03\x04", "cannot be rebuilt from the int"),
        (f"{__name__}.BuiltinNew", b"\x19\x00\x03\x04", "cannot be rebuilt from the int"),
    ],
    ids=["str_as_int", "int_as_str", "int_as_list", "bool", "int_enum", "builtin_new"],
)
def test_streams_naming_classes_the_base_cannot_rebuild_are_refused(type_name: str, value: bytes, message: str) -> None:
    with pytest.raises(copal.SchemaError, match=message):
        copal.loads(_stream(type_name, value))


def test_a_scalar_base_is_an_unknown_tag_before_version_4() -> None:
    with pytest.raises(copal.CorruptRecordError, match="tag"):
        copal.loads(_stream(f"{__name__}.MyInt", b"\x19\x00\x03\x0a", version=3))
    assert copal.loads(_stream(f"{__name__}.MyInt", b"\x19\x00\x03\x0a")) == 5


class Finalized(int):
    def __del__(self) -> None:
        raise AssertionError("__del__ ran")


def test_a_class_with_a_finalizer_is_refused() -> None:
    with pytest.raises(copal.SchemaError, match="finalizer"):
        copal.loads(_stream(f"{__name__}.Finalized", b"\x19\x00\x03\x0a"))


# -- property test ----------------------------------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=value_graphs(recursive_tuples=True, scalar_subclasses=True))
def test_value_graphs_with_scalar_subclasses_roundtrip(nodes: list[Any]) -> None:
    assert_same(nodes, reload(nodes))


@settings(max_examples=100, deadline=None)
@given(value=st.one_of(st.integers().map(MyInt), st.floats().map(MyFloat), st.text().map(MyStr),
                       st.binary().map(MyBytes), st.complex_numbers(allow_nan=True).map(MyComplex)))
def test_any_scalar_value_round_trips(value: Any) -> None:
    assert_same(value, reload(value))
