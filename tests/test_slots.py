"""Objects of classes with ``__slots__`` stored by value: their fields are the slots that are
set (bases first), then their ``__dict__``; unset slots stay unset, and loading sets slots
through their member descriptors, never through the class's ``__setattr__``."""

from __future__ import annotations

import dataclasses
import weakref
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import copal
from copal import _core, field
from copal.slots import stored_slots, stored_state

from helpers.versions import load_module


@dataclasses.dataclass(slots=True)
class Point:
    x: int
    y: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Frozen:
    name: str
    tags: tuple[str, ...] = ()


class Private:
    __slots__ = ("__secret", "shown")

    def __init__(self, secret: int, shown: int) -> None:
        self.__secret = secret
        self.shown = shown

    def secret(self) -> int:
        return self.__secret


class Base:
    __slots__ = ("a",)


class Derived(Base):
    __slots__ = ("b", "__weakref__")


class WithDict(Base):
    __slots__ = ("c", "__dict__")


class NoSlotsChild(Base):
    """A subclass without ``__slots__``: its instances have a ``__dict__`` besides slot ``a``."""


class Shadowing(Base):
    @property
    def a(self) -> int:  # type: ignore[override]
        return 1


class Guarded:
    __slots__ = ("value",)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AssertionError("loading must not run __setattr__")


class SlotList(list):  # type: ignore[type-arg]
    __slots__ = ["foo"]


class SlotDict(dict):  # type: ignore[type-arg]
    __slots__ = ("foo",)


class BareTuple(tuple):  # type: ignore[type-arg]
    """A tuple subclass cannot have slots that hold values; ``()`` takes its ``__dict__`` away."""

    __slots__ = ()


class SlotSet(set):  # type: ignore[type-arg]
    __slots__ = ("foo",)


class SlotFrozenSet(frozenset):  # type: ignore[type-arg]
    __slots__ = ("foo",)


class Holder(copal.Persistent):
    def __init__(self, value: Any) -> None:
        self.value = value


class Leaf(copal.Persistent):
    def __init__(self, n: int) -> None:
        self.n = n


@dataclasses.dataclass(slots=True)
class Link:
    target: Any
    weight: int = 1


def derived(a: Any = None, b: Any = None) -> Derived:
    obj = Derived()
    if a is not None:
        obj.a = a
    if b is not None:
        obj.b = b
    return obj


def test_stored_slots_are_in_mro_order_bases_first_with_mangled_names() -> None:
    assert [name for name, _ in stored_slots(Derived)] == ["a", "b"]
    assert [name for name, _ in stored_slots(Private)] == ["_Private__secret", "shown"]
    assert [name for name, _ in stored_slots(WithDict)] == ["a", "c"]
    assert stored_slots(Holder) == ()


def test_dataclasses_and_hand_written_slots_round_trip() -> None:
    values = [Point(1, 2), Frozen("f", ("t",)), Private(7, 8), derived(1, [2])]
    back = copal.loads(copal.dumps(values))
    assert back[:2] == values[:2]
    assert back[2].secret() == 7 and back[2].shown == 8
    assert type(back[3]) is Derived and back[3].a == 1 and back[3].b == [2]


def test_unset_slots_are_absent_and_come_back_unset() -> None:
    back = copal.loads(copal.dumps(derived(b=2)))
    assert back.b == 2
    assert not hasattr(back, "a")
    assert stored_state(back) == {"b": 2}
    empty = copal.loads(copal.dumps(Derived()))
    assert type(empty) is Derived and stored_state(empty) == {}


def test_slots_and_instance_dict_are_both_fields() -> None:
    obj = WithDict()
    obj.a, obj.c, obj.extra = 1, 2, 3  # type: ignore[attr-defined]
    child = NoSlotsChild()
    child.a, child.more = 4, 5  # type: ignore[attr-defined]
    back, back_child = copal.loads(copal.dumps([obj, child]))
    assert (back.a, back.c, back.extra) == (1, 2, 3)
    assert back_child.a == 4 and back_child.more == 5 and vars(back_child) == {"more": 5}


def test_instance_dict_entry_named_like_a_set_slot_is_refused() -> None:
    obj = WithDict()
    obj.a = 1
    obj.__dict__["a"] = 2  # reachable only through the dict: the slot takes attribute access
    with pytest.raises(TypeError, match="named like one of its slots"):
        copal.dumps(obj)


def test_weakref_slot_is_not_a_field_and_still_works() -> None:
    back = copal.loads(copal.dumps(derived(1, 2)))
    assert weakref.ref(back)() is back


def test_loading_sets_slots_without_running_setattr() -> None:
    obj = Guarded.__new__(Guarded)
    object.__setattr__(obj, "value", 5)
    assert copal.loads(copal.dumps(obj)).value == 5
    frozen = copal.loads(copal.dumps(Frozen("x")))
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen.name = "y"  # type: ignore[misc]


def test_shared_and_cyclic_slots_objects() -> None:
    link = Link(None)
    link.target = link
    shared = Point(1)
    back_link, (p, q) = copal.loads(copal.dumps([link, (shared, shared)]))
    assert back_link.target is back_link
    assert p is q


def test_slot_shadowed_by_a_property_is_refused() -> None:
    obj = Shadowing()
    Base.a.__set__(obj, 3)  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="shadowed by property 'a'"):
        copal.dumps(obj)
    with pytest.raises(TypeError, match="shadowed"):
        copal.dumps(obj, format="json")


def test_persistent_classes_with_slots_are_refused_at_class_creation() -> None:
    with pytest.raises(TypeError, match="declares __slots__"):

        class Slotted(copal.Persistent):
            __slots__ = ("x",)

    class Harmless(copal.Persistent):
        __slots__ = ()  # holds nothing: the instances keep their dict

    assert Harmless.__name__ == "Harmless"


@pytest.mark.parametrize(
    "value",
    [SlotList([1, 2]), SlotDict(a=1), SlotSet({1}), SlotFrozenSet({1})],
    ids=["list", "dict", "set", "frozenset"],
)
def test_container_subclasses_keep_their_slot_values(value: Any) -> None:
    value.foo = {"kept": True}
    for data in (copal.dumps(value), copal.dumps(value, format="json"), copal.dumps(value, format="xml")):
        back = copal.loads(data)
        assert type(back) is type(value) and back == value and back.foo == {"kept": True}
    unset = copal.loads(copal.dumps(type(value)(value)))
    assert not hasattr(unset, "foo")


def test_container_subclass_without_dict_or_slot_values() -> None:
    back = copal.loads(copal.dumps(BareTuple((1, 2))))
    assert type(back) is BareTuple and back == (1, 2)


def test_newobj_list_slots() -> None:
    """CPython's pickle test of the same name: a list subclass with a slot."""
    x = SlotList([1, 2, 3])
    x.foo = 42
    y = copal.loads(copal.dumps(x))
    assert y == x and y.foo == 42 and type(y) is SlotList


@pytest.mark.parametrize("text_format", ["json", "xml"])
def test_text_formats(text_format: copal.serialize.Format) -> None:
    values = [Point(1, 2), Frozen("f"), derived(b="only b"), Private(1, 2)]
    back = copal.loads(copal.dumps(values, format=text_format))
    assert back[:2] == values[:2] and back[2].b == "only b" and not hasattr(back[2], "a")
    assert back[3].secret() == 1
    if text_format == "json":
        assert '"x":1' in copal.dumps(Point(1, 2), format="json").decode().replace(" ", "")


def test_json_is_written_directly_as_the_transcoder_writes_it() -> None:
    values = [Point(1, 2), [Point(3, 4), Point(5, 6)], derived(b=1), Frozen("f"), Private(1, 2), Derived()]
    direct = _core.dumps_json_raw(values)
    assert direct is not None and direct == _core.dumps_text_raw(values, "json")


def _slots_and_dicts() -> list[Any]:
    with_dict, child, dict_only, made = WithDict(), NoSlotsChild(), WithDict(), WithDict()
    with_dict.a, with_dict.c, with_dict.extra = 1, 2, 3  # type: ignore[attr-defined]
    child.a, child.more = 4, 5  # type: ignore[attr-defined]
    dict_only.__dict__["a"] = 6  # named like a slot that is not set: the encoder takes it
    made.c, made.extra = 7, 8  # type: ignore[attr-defined]
    vars(made)  # its instance dict made, where the others keep their attributes inline
    return [with_dict, child, dict_only, made]


def test_json_of_objects_with_slots_and_a_dict_is_written_directly() -> None:
    values = _slots_and_dicts()
    direct = _core.dumps_json_raw(values)
    assert direct is not None and direct == _core.dumps_text_raw(values, "json")


def test_json_of_an_instance_dict_entry_named_like_a_set_slot_is_refused() -> None:
    obj = WithDict()
    obj.a = 1
    obj.__dict__["a"] = 2
    assert _core.dumps_json_raw([obj]) is None  # left to the encoder, which refuses it
    with pytest.raises(TypeError, match="named like one of its slots"):
        copal.dumps([obj], format="json")


def test_archives() -> None:
    archive = copal.Archive(copal.pack_many([Point(i, -i) for i in range(5)] + [Frozen("z")]))
    assert archive[3] == Point(3, -3) and archive[-1] == Frozen("z")


def test_records_lazy_loading_and_updates(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["h"] = Holder([Point(1, 2), Frozen("f"), derived(b=3), SlotList([1])])
        tx.root["h"].value[3].foo = "foo"
    db = store.reopen(db)
    with db.transaction() as tx:
        holder = tx.root["h"]
        point, frozen, d, listed = holder.value
        assert point == Point(1, 2) and frozen == Frozen("f") and d.b == 3 and not hasattr(d, "a")
        assert listed == [1] and listed.foo == "foo"
        point.y = 20  # a value inside a persistent object, changed in place
        d.a = 1
    db = store.reopen(db)
    with db.transaction() as tx:
        point, _, d, _ = tx.root["h"].value
        assert point.y == 20 and d.a == 1


def test_queries_read_slot_fields(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        for i in range(4):
            tx.add(Holder(Point(i, i * 10)))
    db = store.reopen(db)
    with db.transaction() as tx:
        query = tx.query(Holder)
        assert sorted(h.value.x for h in query.where(field("value.y") >= 20)) == [2, 3]
        # Read-your-writes: a pending object is evaluated in Python.
        tx.add(Holder(Point(9, 90)))
        assert sorted(h.value.x for h in query.where(field("value.y") >= 20)) == [2, 3, 9]
        assert [h.value.x for h in query.where(field("value.missing") == 1)] == []


def test_references_held_in_slots(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["links"] = [Link(Leaf(i)) for i in range(3)]
    db = store.reopen(db)
    with db.transaction() as tx:
        links = tx.root["links"]
        assert tx.load_closure([tx.root]) >= 3
        assert all(link.target._p_status == "saved" for link in links)
        leaf = Leaf(7)
        tx.add(Holder(Link(leaf, 2)))
        holders = tx.query(Holder).where(field("value.target.n") == 7)
        assert [h.value.weight for h in holders] == [2]


def test_database_export_of_slots_values(store: Any, tmp_path: Path) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["h"] = Holder(Point(5, 6))
    db.export(tmp_path / "out.jsonl", format="json")
    text = (tmp_path / "out.jsonl").read_text()
    assert '"x":5' in text.replace(" ", "")


V1 = """
import dataclasses
import copal

@dataclasses.dataclass(slots=True)
class Item:
    name: str
    old: int = 0
    legacy: str = "gone"

class Box(copal.Persistent):
    def __init__(self, item):
        self.item = item
"""

V2 = """
import dataclasses
import copal

@dataclasses.dataclass(slots=True)
class Item:
    __copal_renamed__ = {"old": "new"}
    __copal_removed__ = ("legacy",)
    name: str
    new: int = 0
    added: list = dataclasses.field(default_factory=list)
    level: int = 3

class Box(copal.Persistent):
    def __init__(self, item):
        self.item = item
"""


def stored_by_v1(tmp_path: Path, module: str, v2: str) -> bytes:
    """Stores a Box of Item("n", 4) as module version V1 defines them, then redefines the module
    as ``v2``; returns the stream of that Item as V1 wrote it."""
    v1 = load_module(tmp_path, module, V1)
    data = copal.dumps(v1.Item("n", 4))
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["b"] = v1.Box(v1.Item("n", 4))
    db.close()
    load_module(tmp_path, module, v2)
    return data


def test_evolution_of_a_slots_dataclass(tmp_path: Path) -> None:
    stored_by_v1(tmp_path, "evo_slots", V2)
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        item = tx.root["b"].item
        assert (item.name, item.new, item.level) == ("n", 4, 3)  # renamed, and an added default
        assert not hasattr(item, "legacy") and not hasattr(item, "old")
        assert tx.query(type(tx.root["b"])).where(field("item.level") == 3).count() == 1
    db.close()


NARROWED_V2 = """
import dataclasses
import copal

@dataclasses.dataclass(slots=True)
class Item:
    name: str
    level: int = 3

class Box(copal.Persistent):
    def __init__(self, item):
        self.item = item
"""


def test_a_stored_field_a_slots_class_has_no_place_for(tmp_path: Path) -> None:
    data = stored_by_v1(tmp_path, "evo_narrowed", NARROWED_V2)
    with pytest.raises(copal.SchemaError, match="field old that its class has neither a slot nor a __dict__"):
        copal.loads(data)
    # A record whose class evolved (an added default) goes through the fix-up first.
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        with pytest.raises(copal.SchemaError, match="neither a slot nor a __dict__ for: add the slot"):
            tx.root["b"].item
    db.close()


slot_values = st.one_of(st.none(), st.integers(), st.text(), st.lists(st.integers(), max_size=3))


@settings(max_examples=50, deadline=None)
@given(a=slot_values, b=slot_values, set_a=st.booleans(), set_b=st.booleans())
def test_round_trip_property(a: Any, b: Any, set_a: bool, set_b: bool) -> None:
    obj = Derived()
    if set_a:
        obj.a = a
    if set_b:
        obj.b = b
    for data in (copal.dumps([obj, obj]), copal.dumps(obj, format="json")):
        back = copal.loads(data)
        back = back[0] if isinstance(back, list) else back
        assert stored_state(back) == stored_state(obj)
