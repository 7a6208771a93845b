"""Round trips of every supported value type through a persistent object's record.

Each value is stored as an attribute of a Persistent, the database is closed, and a fresh
Database object reads it back; ``assert_same`` then checks exact types, bit-exact floats,
Decimal exponents, datetime folds and zones, and the identity structure of shared references.
"""

from __future__ import annotations

import datetime
import decimal
import io
import math
import socket
import threading
import uuid
import zoneinfo
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from copal import Persistent, PersistentDict, PersistentList
from helpers.compare import assert_same
from helpers.models import (
    Color,
    FrozenKey,
    Holder,
    Item,
    Level,
    Node,
    Pair,
    Point,
    Tagged,
    TaggedDict,
    TaggedSet,
    TaggedTuple,
    Vector,
    tagged,
)
from helpers.strategies import value_graphs, values

UTC = datetime.timezone.utc
IST = datetime.timezone(datetime.timedelta(hours=5, minutes=30), "IST")
BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


def roundtrip(store: Any, value: Any) -> Any:
    """Stores ``value`` as ``Holder.value`` under a root, reopens, and returns the loaded value."""
    db = store.open()
    with db.transaction() as tx:
        tx.root["holder"] = Holder(value=value)
    db = store.reopen(db)
    with db.transaction() as tx:
        holder = tx.root["holder"]
        assert type(holder) is Holder
        return holder.value


SCALARS: dict[str, Any] = {
    "none": None,
    "true": True,
    "false": False,
    "zero": 0,
    "int": 42,
    "negative": -7,
    "i64_max": 2**63 - 1,
    "i64_min": -(2**63),
    "u64_max": 2**64 - 1,
    "above_u64": 2**64,
    "below_i64": -(2**64) - 1,
    "huge": 10**100 + 7,
    "huge_negative": -(2**1000) + 3,
    "float": 1.5,
    "float_tiny": 5e-324,
    "float_max": 1.7976931348623157e308,
    "nan": math.nan,
    "inf": math.inf,
    "minus_inf": -math.inf,
    "minus_zero": -0.0,
    "complex": complex(1.5, -2.0),
    "complex_odd": complex(-0.0, math.inf),
    "str_empty": "",
    "str_ascii": "hello",
    "str_latin": "héllo wörld",
    "str_non_bmp": "emoji 😀 and 𝄞",
    "str_lone_surrogate": "\ud800",
    "str_mixed_surrogates": "a\udcff b\ud83d",
    "str_nul": "a\x00b",
    "str_long": "x" * 100_000,
    "bytes_empty": b"",
    "bytes": bytes(range(256)),
    "bytes_long": b"\x00\xff" * 50_000,
    "bytearray": bytearray(b"abc\x00"),
    "bytearray_empty": bytearray(),
    "date": datetime.date(2024, 2, 29),
    "date_min": datetime.date.min,
    "date_max": datetime.date.max,
    "datetime_naive": datetime.datetime(2024, 5, 17, 13, 45, 1, 123456),
    "datetime_naive_fold": datetime.datetime(2021, 10, 31, 2, 30, fold=1),
    "datetime_utc": datetime.datetime(2024, 5, 17, 13, 45, tzinfo=UTC),
    "datetime_offset": datetime.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=IST),
    "datetime_negative_offset": datetime.datetime(
        2000, 1, 1, tzinfo=datetime.timezone(-datetime.timedelta(hours=9, minutes=15))),
    "datetime_min": datetime.datetime.min,
    "datetime_max": datetime.datetime.max,
    "datetime_zoneinfo": datetime.datetime(2024, 7, 1, 12, 0, tzinfo=BERLIN),
    "datetime_zoneinfo_fold0": datetime.datetime(2021, 10, 31, 2, 30, fold=0, tzinfo=BERLIN),
    "datetime_zoneinfo_fold1": datetime.datetime(2021, 10, 31, 2, 30, fold=1, tzinfo=BERLIN),
    "time": datetime.time(23, 59, 59, 999999),
    "time_tz": datetime.time(8, 30, tzinfo=IST),
    "time_utc_fold": datetime.time(1, 2, 3, fold=1, tzinfo=UTC),
    "timedelta": datetime.timedelta(days=-3, seconds=5, microseconds=7),
    "timedelta_max": datetime.timedelta.max,
    "timedelta_min": datetime.timedelta.min,
    "decimal": decimal.Decimal("3.14159265358979323846264338327950288419716939937510"),
    "decimal_trailing_zeros": decimal.Decimal("1.10"),
    "decimal_exponent": decimal.Decimal("-1.5E+1000"),
    "decimal_nan": decimal.Decimal("NaN"),
    "decimal_snan": decimal.Decimal("sNaN"),
    "decimal_neg_nan_payload": decimal.Decimal("-NaN123"),
    "decimal_minus_zero": decimal.Decimal("-0"),
    "decimal_minus_zero_exp": decimal.Decimal("-0.000"),
    "decimal_inf": decimal.Decimal("-Infinity"),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "uuid_max": uuid.UUID(int=2**128 - 1),
    "enum": Color.GREEN,
    "int_enum": Level.HIGH,
}


@pytest.mark.parametrize("value", SCALARS.values(), ids=SCALARS.keys())
def test_scalar_roundtrip(store: Any, value: Any) -> None:
    assert_same(value, roundtrip(store, value))


CONTAINERS: dict[str, Any] = {
    "list_empty": [],
    "list": [1, "two", 3.0, None, b"four"],
    "tuple_empty": (),
    "tuple": (1, (2, (3, ())), "x"),
    "tuple_single": ("only",),
    "dict_empty": {},
    "dict_str_keys": {"b": 1, "a": 2, "c": 3},  # insertion order, not sorted
    "dict_non_str_keys": {
        1: "int", 2.5: "float", None: "none", (1, 2): "tuple", b"k": "bytes",
        frozenset({1, 2}): "frozenset", Color.RED: "enum", False: "bool",
        datetime.date(2020, 1, 1): "date", decimal.Decimal("1.5"): "decimal",
        uuid.UUID(int=5): "uuid", FrozenKey(1, "a"): "dataclass",
    },
    "set_empty": set(),
    "set": {1, "a", (1, 2), None, b"z", 2.5},
    "frozenset_empty": frozenset(),
    "frozenset_nested": frozenset({1, frozenset({2, frozenset({3})})}),
    "nested": {"a": [1, (2, {3: {4, 5}}), {"deep": [[[[[]]]]]}], "b": ({"x": (1,)},)},
    "enum_list": [Color.RED, Level.LOW, Color.RED],
}


@pytest.mark.parametrize("value", CONTAINERS.values(), ids=CONTAINERS.keys())
def test_container_roundtrip(store: Any, value: Any) -> None:
    loaded = roundtrip(store, value)
    assert loaded == value
    assert_same(value, loaded)


def test_dict_keys_keep_their_type_and_order(store: Any) -> None:
    value = {True: "bool", 2: "int", 3.0: "float", "z": 1, "a": 2}
    loaded = roundtrip(store, value)
    assert [type(k) for k in loaded] == [bool, int, float, str, str]
    assert list(loaded) == [True, 2, 3.0, "z", "a"]


def test_enum_members_are_the_members(store: Any) -> None:
    loaded = roundtrip(store, [Color.RED, Level.HIGH])
    assert loaded[0] is Color.RED
    assert loaded[1] is Level.HIGH


def test_plain_instance_by_value(store: Any) -> None:
    loaded = roundtrip(store, Point(1, [2, 3]))
    assert type(loaded) is Point
    assert loaded == Point(1, [2, 3])
    assert not isinstance(loaded, Persistent)


def test_dataclass_by_value(store: Any) -> None:
    value = [Vector(1.0, -0.0, ["a"]), FrozenKey(3, "b")]
    loaded = roundtrip(store, value)
    assert loaded == value
    assert_same(value, loaded)


def test_embedded_instances_are_copies_not_shared_across_objects(store: Any) -> None:
    """An embedded (non-persistent) object is part of each record that contains it."""
    shared = Point(1, 2)
    db = store.open()
    with db.transaction() as tx:
        tx.root["a"] = Holder(p=shared)
        tx.root["b"] = Holder(p=shared)
    db = store.reopen(db)
    with db.transaction() as tx:
        a, b = tx.root["a"], tx.root["b"]
        assert a.p == b.p == Point(1, 2)
        a.p.x = 100
    with db.transaction() as tx:
        assert tx.root["a"].p.x == 100
        assert tx.root["b"].p.x == 1


CONTAINER_SUBCLASSES: dict[str, Any] = {
    "list_subclass": tagged(Tagged, [1, 2, [3]], tag="t", extra={"k": 1}),
    "dict_subclass": tagged(TaggedDict, {"a": 1, 2: "b"}, tag="d"),
    "set_subclass": tagged(TaggedSet, {1, 2, 3}, tag="s"),
    "tuple_subclass": tagged(TaggedTuple, (1, "x", None), tag="u"),
    "namedtuple": Pair(1, [2, 3]),
    "empty_list_subclass": Tagged(),
}


@pytest.mark.parametrize("value", CONTAINER_SUBCLASSES.values(), ids=CONTAINER_SUBCLASSES.keys())
def test_container_subclass_roundtrip(store: Any, value: Any) -> None:
    loaded = roundtrip(store, value)
    assert type(loaded) is type(value)
    assert loaded == value
    assert_same(value, loaded)


def test_many_attributes_and_types_on_one_object(store: Any) -> None:
    """All the scalar cases at once, as separate attributes of one object."""
    attributes = {name: value for name, value in SCALARS.items()}
    db = store.open()
    with db.transaction() as tx:
        tx.root["h"] = Holder(**attributes)
    db = store.reopen(db)
    with db.transaction() as tx:
        h = tx.root["h"]
        for name, value in attributes.items():
            assert_same(value, getattr(h, name), name)


# Shared references and cycles inside one record.


def test_shared_list_keeps_identity(store: Any) -> None:
    inner = [1, 2]
    loaded = roundtrip(store, [inner, inner, [1, 2]])
    assert loaded[0] is loaded[1]
    assert loaded[0] is not loaded[2]
    assert loaded[0] == loaded[2] == [1, 2]


def test_shared_reference_across_attributes(store: Any) -> None:
    shared: dict[str, Any] = {"k": [1]}
    db = store.open()
    with db.transaction() as tx:
        tx.root["h"] = Holder(a=shared, b=[shared], c=Point(shared, None))
    db = store.reopen(db)
    with db.transaction() as tx:
        h = tx.root["h"]
        assert h.a is h.b[0] is h.c.x
        h.a["k"].append(2)
        assert h.b[0]["k"] == [1, 2]


def test_shared_embedded_instance_keeps_identity(store: Any) -> None:
    p = Point(1, 2)
    loaded = roundtrip(store, {"one": p, "two": [p]})
    assert loaded["one"] is loaded["two"][0]


def test_list_containing_itself(store: Any) -> None:
    cycle: list[Any] = [1]
    cycle.append(cycle)
    loaded = roundtrip(store, cycle)
    assert loaded[0] == 1
    assert loaded[1] is loaded


def test_dict_containing_itself(store: Any) -> None:
    cycle: dict[str, Any] = {"n": 1}
    cycle["self"] = cycle
    loaded = roundtrip(store, cycle)
    assert loaded["self"] is loaded
    assert loaded["n"] == 1


def test_plain_instance_pointing_to_itself(store: Any) -> None:
    node = Node("me")
    node.next = node
    loaded = roundtrip(store, node)
    assert type(loaded) is Node
    assert loaded.next is loaded
    assert loaded.label == "me"


def test_two_instance_cycle(store: Any) -> None:
    a, b = Node("a"), Node("b")
    a.next, b.next = b, a
    loaded = roundtrip(store, [a, b])
    assert loaded[0].next is loaded[1]
    assert loaded[1].next is loaded[0]


def test_cycle_through_tuple_is_refused_clearly(store: Any) -> None:
    """A tuple inside a list that contains the tuple cannot be rebuilt without mutating the
    tuple (pickle does that); copal refuses it with a TypeError naming the path instead."""
    outer: list[Any] = []
    t = (outer, "x")
    outer.append(t)
    db = store.open()
    with pytest.raises(TypeError) as excinfo:
        with db.transaction() as tx:
            tx.root["bad"] = Holder(value=t)
    assert "value[0][0]" in str(excinfo.value)
    _assert_nothing_committed(store, db)


def test_cycle_through_list_subclass_attribute(store: Any) -> None:
    t = Tagged([1])
    t.me = t
    loaded = roundtrip(store, t)
    assert loaded.me is loaded
    assert list(loaded) == [1]


def test_persistent_references_inside_state(store: Any) -> None:
    """Persistent objects inside a plain container are references, not copies."""
    db = store.open()
    with db.transaction() as tx:
        target = Item("t")
        tx.root["h"] = Holder(refs=[target, {"k": target}, (target,)], direct=target)
    db = store.reopen(db)
    with db.transaction() as tx:
        h = tx.root["h"]
        assert isinstance(h.direct, Item)
        assert h.refs[0] is h.direct
        assert h.refs[1]["k"] is h.direct
        assert h.refs[2][0] is h.direct
        assert h.direct.name == "t"


def test_persistent_collections_roundtrip(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["l"] = PersistentList([1, "a", [2]])
        tx.root["d"] = PersistentDict({"x": 1, 2: (3,)})
    db = store.reopen(db)
    with db.transaction() as tx:
        assert list(tx.root["l"]) == [1, "a", [2]]
        assert dict(tx.root["d"]) == {"x": 1, 2: (3,)}
        assert isinstance(tx.root["l"], PersistentList)
        assert isinstance(tx.root["d"], PersistentDict)


# Property tests.


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=values())
def test_hypothesis_values_roundtrip_equal(store: Any, value: Any) -> None:
    loaded = roundtrip(store, value)
    store.close_all()
    assert loaded == value
    assert_same(value, loaded)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(nodes=value_graphs())
def test_hypothesis_value_graphs_roundtrip(store: Any, nodes: list[Any]) -> None:
    loaded = roundtrip(store, nodes)
    store.close_all()
    assert_same(nodes, loaded)


# Unsupported values.


UNSUPPORTED: dict[str, Any] = {
    "lambda": lambda: 0,
    "socket": None,  # made by the fixture
    "open_file": None,  # made by the fixture
    "lock": threading.Lock(),
    "generator": (i for i in range(3)),
    "module": math,
}


@pytest.fixture
def unsupported(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    kind = request.param
    if kind == "socket":
        s = socket.socket()
        request.addfinalizer(s.close)
        return s
    if kind == "open_file":
        f = open(tmp_path / "f.txt", "w")  # noqa: SIM115
        request.addfinalizer(f.close)
        return f
    return UNSUPPORTED[kind]


@pytest.mark.parametrize("unsupported", UNSUPPORTED.keys(), indirect=True)
def test_unsupported_value_in_list_names_the_path(store: Any, unsupported: Any) -> None:
    db = store.open()
    with pytest.raises(TypeError) as excinfo:
        with db.transaction() as tx:
            tx.root["good"] = Item("good")
            tx.root["bad"] = Holder(items=[1, 2, unsupported])
    assert "items[2]" in str(excinfo.value)
    _assert_nothing_committed(store, db)


def test_unsupported_value_in_embedded_object_names_the_path(store: Any) -> None:
    db = store.open()
    with pytest.raises(TypeError) as excinfo:
        with db.transaction() as tx:
            tx.root["good"] = Item("good")
            tx.root["bad"] = Holder(x=Point(1, lambda: 2))
    assert "x.y" in str(excinfo.value)
    _assert_nothing_committed(store, db)


def test_unsupported_value_nested_path(store: Any) -> None:
    db = store.open()
    with pytest.raises(TypeError) as excinfo:
        with db.transaction() as tx:
            tx.root["bad"] = Holder(x=Point([0, {"k": io.StringIO()}], None))
    message = str(excinfo.value)
    assert "x.x[1]" in message and "k" in message, message
    _assert_nothing_committed(store, db)


def test_unsupported_value_as_direct_attribute(store: Any) -> None:
    db = store.open()
    with pytest.raises(TypeError) as excinfo:
        with db.transaction() as tx:
            tx.root["bad"] = Holder(callback=lambda: 0)
    assert "callback" in str(excinfo.value)
    _assert_nothing_committed(store, db)


def test_unsupported_value_in_changed_object_aborts_whole_commit(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["a"] = Item("a", 1)
        tx.root["b"] = Item("b", 1)
    with pytest.raises(TypeError):
        with db.transaction() as tx:
            tx.root["a"].value = 2
            tx.root["b"].value = [lambda: 0]
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.root["a"].value == 1
        assert tx.root["b"].value == 1


def _assert_nothing_committed(store: Any, db: Any) -> None:
    with db.transaction() as tx:
        assert "good" not in tx.root
        assert "bad" not in tx.root
    db = store.reopen(db)
    with db.transaction() as tx:
        assert "good" not in tx.root
        assert "bad" not in tx.root
        assert tx.query(Item).count() == 0
        tx.root["after"] = Item("after")  # the database is still usable
    with db.transaction() as tx:
        assert tx.root["after"].name == "after"
