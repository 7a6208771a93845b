"""Subclasses of built-in containers: stored when the container's own constructor rebuilds
them, refused otherwise (a struct sequence such as ``os.stat_result``), instead of a stream that
cannot be read back or an object that comes back empty. ``collections.OrderedDict``,
``defaultdict`` and ``deque``, C containers that keep state outside their base, and their
Python subclasses round-trip with that state (known_containers.rs, docs/FORMAT.md section 6.7)."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import copal
from helpers.models import Holder


class OrderedSub(collections.OrderedDict):  # type: ignore[type-arg]
    pass


class DefaultSub(collections.defaultdict):  # type: ignore[type-arg]
    pass


class DequeSub(collections.deque):  # type: ignore[type-arg]
    __slots__ = ("tag",)


class Tagged:
    tag = "mixin"


class TaggedList(Tagged, list):  # type: ignore[type-arg]
    pass


class Pair(NamedTuple):
    left: int
    right: str


class Tally(collections.Counter):  # type: ignore[type-arg]
    pass


class Watched(collections.OrderedDict):  # type: ignore[type-arg]
    """Methods that reading must not run: reading fills the instance with OrderedDict's own."""

    calls: list[str] = []

    def __init__(self, *args: Any) -> None:
        Watched.calls.append("__init__")
        super().__init__(*args)

    def __setitem__(self, key: Any, value: Any) -> None:
        Watched.calls.append("__setitem__")
        super().__setitem__(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:
        Watched.calls.append("update")
        super().update(*args, **kwargs)


class OwnNew(collections.deque):  # type: ignore[type-arg]
    """A `__new__` in Python, which reading skips as it skips `__init__`."""

    def __new__(cls, *args: Any, **kwargs: Any) -> OwnNew:
        Watched.calls.append("__new__")
        return super().__new__(cls)


FORMATS = ["binary", "json", "xml", "archive"]


def round_trip(value: Any, fmt: str) -> Any:
    if fmt == "archive":
        return copal.Archive(copal.pack_many([value]))[0]
    return copal.loads(dumps(value, fmt))


def dumps(value: Any, fmt: str) -> bytes:
    if fmt == "archive":
        return copal.pack_many([value])
    return copal.dumps(value) if fmt == "binary" else copal.dumps(value, format=fmt)


def _ordered() -> collections.OrderedDict[str, int]:
    ordered = collections.OrderedDict(a=1, b=2, c=3)
    ordered.move_to_end("a")  # its order is no longer the dict table's
    ordered.note = "kept"  # type: ignore[attr-defined]  # OrderedDict instances have a __dict__
    return ordered


def assert_same_container(back: Any, value: Any) -> None:
    assert type(back) is type(value)
    if isinstance(value, collections.deque):
        assert list(back) == list(value) and back.maxlen == value.maxlen
    else:
        assert list(back.items()) == list(value.items())
    if isinstance(value, collections.defaultdict):
        assert back.default_factory is value.default_factory
    assert getattr(back, "__dict__", {}) == getattr(value, "__dict__", {})


CONTAINERS = {
    "OrderedDict moved": _ordered,
    "OrderedDict subclass": lambda: OrderedSub([("z", 1), ("y", [2])]),
    "defaultdict": lambda: collections.defaultdict(list, {"x": [1]}),
    "defaultdict without factory": lambda: collections.defaultdict(None, {1: 2}),
    "defaultdict of OrderedDict": lambda: collections.defaultdict(collections.OrderedDict),
    "defaultdict subclass": lambda: DefaultSub(int, {"y": 2}),
    "deque": lambda: collections.deque([1, "two", 3.0]),
    "deque with maxlen": lambda: collections.deque([1, 2], maxlen=3),
    "deque with maxlen 0": lambda: collections.deque(maxlen=0),
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("make", CONTAINERS.values(), ids=CONTAINERS.keys())
def test_collections_containers_round_trip(make: Any, fmt: str) -> None:
    value = make()
    back = round_trip(value, fmt)
    assert_same_container(back, value)
    assert_same_container(round_trip([value], fmt)[0], value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_their_python_subclasses_keep_their_attributes(fmt: str) -> None:
    ordered, default, deque = OrderedSub(a=1), DefaultSub(list), DequeSub([1], maxlen=4)
    ordered.note = "o"  # type: ignore[attr-defined]
    default.note = ["d"]  # type: ignore[attr-defined]
    deque.tag = ("t",)
    back = round_trip([ordered, default, deque], fmt)
    assert back[0].note == "o" and back[1].note == ["d"] and back[2].tag == ("t",) and back[2].maxlen == 4
    assert [type(b) for b in back] == [OrderedSub, DefaultSub, DequeSub]


@pytest.mark.parametrize("fmt", FORMATS)
def test_loaded_containers_behave_as_the_originals(fmt: str) -> None:
    ordered, default, deque = round_trip([_ordered(), collections.defaultdict(list), collections.deque([1, 2], maxlen=2)], fmt)
    assert ordered == collections.OrderedDict([("b", 2), ("c", 3), ("a", 1)])  # order-sensitive
    assert ordered != collections.OrderedDict([("a", 1), ("b", 2), ("c", 3)])
    ordered.move_to_end("b")
    assert list(ordered) == ["c", "a", "b"]
    default["missing"].append(1)
    assert default == {"missing": [1]}
    deque.append(3)
    assert list(deque) == [2, 3]


@pytest.mark.parametrize("fmt", FORMATS)
def test_identity_and_cycles_are_kept(fmt: str) -> None:
    ordered = OrderedSub(first=1)
    ordered["self"] = ordered
    deque: collections.deque[Any] = collections.deque([0])
    deque.append(deque)
    default = collections.defaultdict(list)
    default["same"] = default
    back = round_trip([ordered, deque, deque, default, ordered], fmt)
    assert back[0]["self"] is back[0] is back[4] and list(back[0]) == ["first", "self"]
    assert back[1] is back[2] and back[1][1] is back[1]
    assert back[3]["same"] is back[3] and back[3].default_factory is list


def test_reading_runs_no_method_of_the_subclass() -> None:
    data = copal.dumps([Watched([("a", 1), ("b", 2)]), OwnNew([1], maxlen=1)])
    Watched.calls.clear()
    back = copal.loads(data)
    assert Watched.calls == [] and type(back[0]) is Watched and list(back[0].items()) == [("a", 1), ("b", 2)]
    assert type(back[1]) is OwnNew and list(back[1]) == [1] and back[1].maxlen == 1


def _watching(base: type, *methods: str) -> type:
    """A subclass of `base` whose `methods` record their calls."""

    def watched(name: str) -> Any:
        inherited = getattr(base, name)

        def method(*args: Any, **kwargs: Any) -> Any:
            Watched.calls.append(f"{base.__name__}.{name}")
            return inherited(*args, **kwargs)

        return staticmethod(method) if name == "__new__" else method

    return type(f"Watched{base.__name__.title()}", (base,), {name: watched(name) for name in methods})


WatchedList = _watching(list, "__new__", "__init__", "extend", "append", "__setitem__", "__iadd__")
WatchedDict = _watching(dict, "__new__", "__init__", "__setitem__", "update", "setdefault")
WatchedSet = _watching(set, "__new__", "__init__", "add", "update", "__ior__")
WatchedTuple = _watching(tuple, "__new__")
WatchedDefaultdict = _watching(collections.defaultdict, "__new__", "__init__", "__setitem__", "update")


@pytest.mark.parametrize("fmt", ["binary", "json", "xml"])
def test_reading_runs_no_method_of_subclasses_of_builtins(fmt: str) -> None:
    values = [WatchedList([1, 2]), WatchedDict(a=1), WatchedSet({3}), WatchedTuple((4, 5)), WatchedDefaultdict(list, {"k": [6]})]
    for value in values:
        value.note = "kept"
    data = dumps(values, fmt)
    Watched.calls.clear()
    back = copal.loads(data)
    assert Watched.calls == []
    assert [type(value) for value in back] == [type(value) for value in values]
    assert back[:4] == values[:4] and dict(back[4]) == {"k": [6]} and back[4].default_factory is list
    assert all(value.note == "kept" for value in back)


def test_the_json_form_names_the_class_and_the_state() -> None:
    document = json.loads(copal.dumps([collections.defaultdict(list, {"k": [1]}), collections.deque([1], maxlen=2)], format="json"))
    assert document["value"] == [
        {"$subclass": "collections.defaultdict", "$base": {"k": [1]}, "default_factory": "list"},
        {"$subclass": "collections.deque", "$base": [1], "maxlen": 2},
    ]
    ordered = json.loads(copal.dumps(_ordered(), format="json"))["value"]
    assert ordered == {"$subclass": "collections.OrderedDict", "$base": {"b": 2, "c": 3, "a": 1}, "note": "kept"}


def _factory() -> list[int]:
    return []


class UserList(list):  # type: ignore[type-arg]
    pass


@pytest.mark.parametrize(
    ("factory", "shown"),
    [(lambda: 0, "<function <lambda>"), (_factory, "<function _factory"), (UserList, "UserList"), (dict.fromkeys, "fromkeys")],
    ids=["lambda", "function", "user class", "builtin function"],
)
@pytest.mark.parametrize("fmt", FORMATS)
def test_other_default_factories_are_refused_when_writing(factory: Any, shown: str, fmt: str) -> None:
    value = {"inside": [collections.defaultdict(factory)]}
    with pytest.raises(TypeError, match=rf"cannot store value\['inside'\]\[0\]: its default_factory .*{shown}.* cannot be stored"):
        dumps(value, fmt)


def _defaultdict_stream(factory: bytes, fields: list[str] = ["default_factory"]) -> bytes:
    """A version 1 stream of a defaultdict with one pair 1: 2, whose first field is `factory`."""
    names = b"".join(bytes([len(name)]) + name.encode() for name in fields)
    table = b"\x01\x00\x17collections.defaultdict" + bytes([len(fields)]) + names
    body = table + b"\x19\x00\x0d\x01\x03\x02\x03\x04" + factory
    return b"CPL1\x01\x00" + bytes([len(body)]) + body


def test_the_stream_of_a_defaultdict_is_as_documented() -> None:
    assert copal.loads(_defaultdict_stream(b"\x07\x03int"))[7] == 0


@pytest.mark.parametrize("name", [b"\x07\x09os.system", b"\x07\x04eval", b"\x07\x0bbuiltins.int", b"\x07\x04List"])
def test_an_unknown_factory_name_is_refused_when_reading(name: bytes) -> None:
    with pytest.raises(copal.SchemaError, match="default_factory .* is not a factory copal rebuilds"):
        copal.loads(_defaultdict_stream(name))


@pytest.mark.parametrize("factory", [b"\x03\x02", b"\x0b\x00", b"\x02"], ids=["int", "list", "true"])
def test_a_factory_that_is_no_name_is_corrupt(factory: bytes) -> None:
    with pytest.raises(copal.CorruptRecordError, match="default_factory"):
        copal.loads(_defaultdict_stream(factory))


def test_a_defaultdict_without_its_factory_field_is_refused() -> None:
    with pytest.raises(copal.SchemaError, match="does not have default_factory as its first field"):
        copal.loads(_defaultdict_stream(b"\x00", fields=["other"]))


def _deque_stream(items: int, maxlen: bytes) -> bytes:
    table = b"\x01\x00\x11collections.deque\x01\x06maxlen"
    body = table + b"\x19\x00\x0b" + bytes([items]) + b"\x00" * items + maxlen
    return b"CPL1\x01\x00" + bytes([len(body)]) + body


@pytest.mark.parametrize(
    "maxlen", [b"\x03\x01", b"\x03\x02", b"\x07\x01x", b"\x05" + bytes(8), b"\x04\x09" + bytes(8) + b"\x01"],
    ids=["negative", "below the items", "str", "float", "too large"],
)
def test_a_bad_maxlen_is_corrupt(maxlen: bytes) -> None:
    with pytest.raises(copal.CorruptRecordError, match="deque maxlen"):
        copal.loads(_deque_stream(2, maxlen))


def test_a_container_stored_with_another_base_is_refused() -> None:
    # A deque stored as a DICT, an OrderedDict as a LIST.
    deque = b"\x01\x00\x11collections.deque\x01\x06maxlen" + b"\x19\x00\x0d\x00\x00"
    ordered = b"\x01\x00\x17collections.OrderedDict\x00" + b"\x19\x00\x0b\x00"
    for body in (deque, ordered):
        with pytest.raises(copal.SchemaError, match="is not a subclass of"):
            copal.loads(b"CPL1\x01\x00" + bytes([len(body)]) + body)


def test_a_state_field_in_the_instance_dict_is_refused() -> None:
    default = DefaultSub(list)
    default.__dict__["default_factory"] = "shadowed"  # where copal stores the factory
    with pytest.raises(TypeError, match=r"value\[0\]: its __dict__ holds an attribute default_factory"):
        copal.dumps([default])


@pytest.mark.parametrize(
    "value",
    [os.stat_result(tuple(range(10))), time.gmtime(0)],
    ids=["stat_result", "struct_time"],
)
def test_containers_their_base_cannot_rebuild_are_refused(value: object) -> None:
    with pytest.raises(TypeError, match="cannot be stored"):
        copal.dumps(value)
    with pytest.raises(TypeError, match="cannot be stored"):
        copal.dumps({"inside": [value]}, format="json")


def test_python_subclasses_still_round_trip() -> None:
    tagged = TaggedList([1, 2])
    tagged.note = "kept"  # type: ignore[attr-defined]
    back = copal.loads(copal.dumps([tagged, Pair(1, "x"), Tally("aab")]))
    assert type(back[0]) is TaggedList and back[0] == [1, 2] and back[0].note == "kept"
    assert back[1] == Pair(1, "x") and type(back[1]) is Pair
    assert back[2] == Tally("aab") and type(back[2]) is Tally


def test_a_database_refuses_struct_sequences_and_stays_readable(tmp_path: Path) -> None:
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["kept"] = 1
    with pytest.raises(TypeError, match="cannot be stored"):
        with db.transaction() as tx:
            tx.root["stat"] = os.stat(tmp_path)
    with db.transaction() as tx:
        assert dict(tx.root) == {"kept": 1}
    db.close()


def _stored() -> dict[str, Any]:
    return {name: make() for name, make in CONTAINERS.items()}


def test_a_database_stores_them_in_records_and_as_root_values(tmp_path: Path) -> None:
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["holder"] = Holder(**{name.replace(" ", "_"): value for name, value in _stored().items()})
        tx.root["deque"] = collections.deque([1], maxlen=2)
        tx.root["ordered"] = _ordered()
    db.close()
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        holder = tx.root["holder"]
        for name, value in _stored().items():
            assert_same_container(getattr(holder, name.replace(" ", "_")), value)
        assert_same_container(tx.root["deque"], collections.deque([1], maxlen=2))
        assert_same_container(tx.root["ordered"], _ordered())
    db.close()


def test_changes_inside_them_are_detected_at_commit(tmp_path: Path) -> None:
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["holder"] = Holder(ordered=_ordered(), deque=collections.deque([1], maxlen=2), default=collections.defaultdict(list))
    with db.transaction() as tx:
        holder = tx.root["holder"]
        holder.ordered.move_to_end("b")  # the same items in another order
        holder.deque.append(2)
        holder.default["new"].append(1)  # made by the factory
    db.close()
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        holder = tx.root["holder"]
        assert list(holder.ordered) == ["c", "a", "b"]
        assert list(holder.deque) == [1, 2] and holder.deque.maxlen == 2
        assert holder.default == {"new": [1]} and holder.default.default_factory is list
    db.close()


def test_copal_show_and_export_read_them_without_the_classes(tmp_path: Path) -> None:
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        holder = Holder(ordered=_ordered(), deque=collections.deque([1], maxlen=2), default=collections.defaultdict(list, a=[1]))
        tx.root["holder"] = holder
    oid = holder._p_oid
    db.export(tmp_path / "out.jsonl", format="json")
    db.close()
    shown = subprocess.run([sys.executable, "-m", "copal", "show", str(tmp_path / "db"), hex(oid), "--json"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    fields = json.loads(shown.stdout)["fields"]
    assert fields["ordered"] == {"$subclass": "collections.OrderedDict", "$base": {"b": 2, "c": 3, "a": 1}, "note": "kept"}
    assert fields["deque"] == {"$subclass": "collections.deque", "$base": [1], "maxlen": 2}
    assert fields["default"] == {"$subclass": "collections.defaultdict", "$base": {"a": [1]}, "default_factory": "list"}
    # A JSON export imports into a database that reads them back whole.
    copy = copal.open(tmp_path / "copy")
    copy.import_from(tmp_path / "out.jsonl")
    with copy.transaction() as tx:
        copied = tx.root["holder"]
        assert_same_container(copied.ordered, _ordered())
        assert_same_container(copied.deque, collections.deque([1], maxlen=2))
        assert_same_container(copied.default, collections.defaultdict(list, a=[1]))
    copy.close()


# -- subclasses of bytearray ----------------------------------------------------------------------
# A SUBCLASS whose base is a BYTEARRAY (stream version 4 and text documents; docs/STREAM.md section
# 5). The cases follow CPython's pickle test suite (pickletester.py: `test_newobj_generic` pickles
# `x = C(base_value); x.foo = 42` for a subclass of every built-in, bytearray among them, and checks
# the class, the value and `__dict__`), with the identity checks of its recursive tests.

TEXT_AND_BINARY = ["binary", "json", "xml"]


class Buffer(bytearray):
    pass


class SlottedBuffer(bytearray):
    __slots__ = ("tag", "unset")


class BufferChild(Buffer):
    """A subclass of a subclass, with an `__init__` that reading must not run."""

    def __init__(self, *args: Any) -> None:
        Watched.calls.append("BufferChild.__init__")
        super().__init__(*args)


BUFFERS = {
    "empty": lambda: Buffer(),
    "every byte": lambda: Buffer(range(256)),
    "grandchild": lambda: BufferChild(b"child"),
    "slots": lambda: SlottedBuffer(b"slotted"),
}


def assert_same_buffer(back: Any, value: Any) -> None:
    assert type(back) is type(value) and bytes(back) == bytes(value)
    assert getattr(back, "__dict__", None) == getattr(value, "__dict__", None)


@pytest.mark.parametrize("fmt", TEXT_AND_BINARY)
@pytest.mark.parametrize("make", BUFFERS.values(), ids=BUFFERS.keys())
def test_bytearray_subclasses_round_trip(make: Any, fmt: str) -> None:
    value = make()
    assert_same_buffer(round_trip(value, fmt), value)
    assert_same_buffer(round_trip({"inside": [value]}, fmt)["inside"][0], value)


@pytest.mark.parametrize("fmt", TEXT_AND_BINARY)
def test_a_bytearray_subclass_keeps_its_attributes(fmt: str) -> None:
    # pickletester's test_newobj_generic, for bytearray.
    x = Buffer(b"abc")
    x.foo = 42  # type: ignore[attr-defined]
    slotted = SlottedBuffer(b"s")
    slotted.tag = ("t", 1)
    y, back_slotted = round_trip([x, slotted], fmt)
    assert type(y) is Buffer and y == x and y.foo == 42 and y.__dict__ == {"foo": 42}
    assert type(back_slotted) is SlottedBuffer and back_slotted.tag == ("t", 1) and not hasattr(back_slotted, "unset")


@pytest.mark.parametrize("fmt", TEXT_AND_BINARY)
def test_a_bytearray_subclass_is_one_mutable_object(fmt: str) -> None:
    shared = Buffer(b"shared")
    back = round_trip([shared, {"again": shared}, Buffer(b"shared")], fmt)
    assert back[0] is back[1]["again"] and back[0] is not back[2] and back[0] == back[2]
    back[0].extend(b"!")
    assert back[1]["again"] == b"shared!"


@pytest.mark.parametrize("fmt", TEXT_AND_BINARY)
def test_cycles_through_the_instance_dict(fmt: str) -> None:
    # pickletester's recursive tests: the instance holds itself, directly and inside a list.
    x = Buffer(b"cycle")
    x.me = x  # type: ignore[attr-defined]
    x.inside = [x, {"x": x}]  # type: ignore[attr-defined]
    y = round_trip(x, fmt)
    assert type(y) is Buffer and y == b"cycle"
    assert y.me is y and y.inside[0] is y and y.inside[1]["x"] is y


def test_reading_a_bytearray_subclass_runs_none_of_its_methods() -> None:
    data = copal.dumps(BufferChild(b"c"))
    Watched.calls.clear()
    back = copal.loads(data)
    assert Watched.calls == [] and type(back) is BufferChild and back == b"c"


def test_a_stream_with_a_bytearray_subclass_is_version_4() -> None:
    assert copal.dumps(Buffer(b"x"))[4] == 4
    assert copal.dumps(bytearray(b"x"))[4] == 3


def test_the_json_and_xml_forms_of_a_bytearray_subclass() -> None:
    x = Buffer(b"abc")
    x.foo = 42  # type: ignore[attr-defined]
    document = json.loads(copal.dumps([x, x], format="json"))
    name = f"{__name__}.Buffer"
    assert document["value"] == [{"$id": 1, "$subclass": name, "$base": {"$bytearray": "YWJj"}, "foo": 42}, {"$ref": 1}]
    xml = copal.dumps(x, format="xml").decode()
    assert f'<subclass type="{name}"><bytearray>YWJj</bytearray><field name="foo"><int>42</int></field></subclass>' in xml


@pytest.mark.parametrize(
    "document",
    [
        '{"$copal":2,"value":{"$subclass":"m.B","$base":{"$id":3,"$bytearray":"YQ=="}}}',
        '<copal version="1"><subclass type="m.B"><bytearray id="3">YQ==</bytearray></subclass></copal>',
    ],
    ids=["json", "xml"],
)
def test_the_bytearray_base_of_a_document_carries_no_id(document: str) -> None:
    with pytest.raises(copal.CorruptRecordError, match="cannot carry an id"):
        copal.loads(document)


@pytest.mark.parametrize("fmt", ["database", "archive"])
def test_databases_and_archives_refuse_bytearray_subclasses(fmt: str, tmp_path: Path) -> None:
    value = {"inside": [Buffer(b"x")]}
    expected = rf"cannot store .*\['inside'\]\[0\]: a value of type {__name__}.Buffer, a subclass of bytearray, can only be written"
    if fmt == "archive":
        with pytest.raises(TypeError, match=expected):
            copal.pack_many([value])
        return
    db = copal.open(tmp_path / "db")
    with pytest.raises(TypeError, match=expected):
        with db.transaction() as tx:
            tx.root["value"] = value
    db.close()


def _buffer_stream(value: bytes, type_name: str = f"{__name__}.Buffer", version: int = 4) -> bytes:
    """A stream of one SUBCLASS of descriptor 0 (`type_name`, no fields) whose base starts with
    `value`."""
    name = type_name.encode()
    body = b"\x01\x00" + bytes([len(name)]) + name + b"\x00" + b"\x19\x00" + value
    return b"CPL1" + bytes([version, 0, len(body)]) + body


def test_the_stream_of_a_bytearray_subclass_is_as_documented() -> None:
    assert copal.dumps(Buffer(b"ab")) == _buffer_stream(b"\x0a\x02ab")
    back = copal.loads(_buffer_stream(b"\x0a\x02ab"))
    assert type(back) is Buffer and back == b"ab"


@pytest.mark.parametrize(
    ("base", "version", "kind"),
    [
        (b"\x0a\x03ab", 4, "exceeds the remaining"),
        (b"\x0a", 4, "truncated"),
        (b"\x0a\x00", 3, "unknown tag 0x0a"),
    ],
    ids=["blob past the end", "no blob", "version 3"],
)
def test_a_corrupt_bytearray_base_is_corrupt(base: bytes, version: int, kind: str) -> None:
    with pytest.raises(copal.CorruptRecordError, match=kind):
        copal.loads(_buffer_stream(base, version=version))


@pytest.mark.parametrize("type_name", [f"{__name__}.TaggedList", "builtins.bytes", f"{__name__}.Tagged"])
def test_a_bytearray_base_needs_a_subclass_of_bytearray(type_name: str) -> None:
    with pytest.raises(copal.SchemaError, match="is not a subclass of bytearray"):
        copal.loads(_buffer_stream(b"\x0a\x01a", type_name=type_name))
