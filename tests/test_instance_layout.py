"""Loaded instances are ordinary instances, whichever way their attributes were stored.

On CPython 3.11, crates/copal-py/src/cpython/v3_11/field_slots.rs writes decoded fields straight
into the values array of the compact instance layout, once the first object of a descriptor has
shown where each field goes; elsewhere, and whenever one of its conditions fails, fields are set
with ``PyObject_GenericSetAttr`` (docs/ARCHITECTURE.md "Decoded state goes into CPython's compact
instance layout"). Each test pins a way writing the layout directly could go wrong: a wrong
insertion order, a stale key table, a class changed or an instance's ``__dict__`` materialized
while decoding runs.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import sys
import types
from pathlib import Path
from typing import Any

import pytest

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import copal  # noqa: E402
from test_decoder_reuse import MODULE, module  # noqa: E402, F401 (a fixture)


def define(module: types.ModuleType, source: str) -> None:
    """Runs `source` in `module`, whose classes streams then find by name."""
    exec(source, module.__dict__)
    for value in list(module.__dict__.values()):
        if isinstance(value, type):
            value.__module__ = MODULE


def owners_with_hashed_keys(module: types.ModuleType, key_hash: str, count: int = 4) -> list[Any]:
    """`count` Owners, owner n with `keys = {Key(owner, n): n}` then `later = n`, where hashing a
    Key runs `key_hash` (Python lines, as indented in `Key.__hash__`) before returning 1: a
    decoding of the owners runs it between the loading of an owner's `keys` and its setting."""
    define(
        module,
        "class Owner:\n    pass\n"
        "class Key:\n"
        "    def __init__(self, owner, n):\n        self.owner = owner\n        self.n = n\n"
        f"    def __hash__(self):\n{key_hash}        return 1\n",
    )
    owners = [module.Owner() for _ in range(count)]
    for n, owner in enumerate(owners):
        owner.keys = {module.Key(owner, n): n}
        owner.later = n
    return owners


def test_loaded_instances_behave_like_instances_built_by_init(module: types.ModuleType) -> None:
    define(module, "from dataclasses import dataclass\n@dataclass\nclass Point:\n    x: int\n    y: str\n    z: float\n")
    built = [module.Point(i, f"y{i}", i / 2) for i in range(5)]
    loaded = copal.loads(copal.dumps(built))
    assert loaded == built
    for original, point in zip(built, loaded):
        assert list(vars(point).items()) == list(vars(original).items())
        assert point.__dict__ == original.__dict__
        assert pickle.loads(pickle.dumps(point)) == original
        assert copy.copy(point) == original
        assert dataclasses.replace(point, x=-1).x == -1
    point = loaded[3]
    point.extra = "new"
    del point.y
    point.x = 99
    assert list(vars(point).items()) == [("x", 99), ("z", 1.5), ("extra", "new")]
    assert not hasattr(point, "y")
    point.y = "back"
    assert list(vars(point)) == ["x", "z", "extra", "y"]
    assert vars(loaded[4]) == {"x": 4, "y": "y4", "z": 2.0}


def test_attributes_keep_each_objects_own_order(module: types.ModuleType) -> None:
    define(module, "class Pair:\n    pass\n")
    first, second = module.Pair(), module.Pair()
    first.a, first.b = 1, 2
    second.b, second.a = 3, 4
    loaded = copal.loads(copal.dumps([first, second, first, second]))
    assert [list(vars(obj).items()) for obj in loaded] == [
        [("a", 1), ("b", 2)],
        [("b", 3), ("a", 4)],
        [("a", 1), ("b", 2)],
        [("b", 3), ("a", 4)],
    ]


def test_a_class_without_instances_yet_in_this_process(module: types.ModuleType) -> None:
    # The class that loads the stream has an empty key table until its first object is built.
    define(module, "class Item:\n    def __init__(self, n):\n        self.n = n\n        self.name = str(n)\n")
    data = copal.dumps([module.Item(i) for i in range(10)])
    define(module, "class Item:\n    pass\n")
    loaded = copal.loads(data)
    assert [type(item) for item in loaded] == [module.Item] * 10
    assert [vars(item) for item in loaded] == [{"n": i, "name": str(i)} for i in range(10)]
    loaded[5].other = 1
    assert list(vars(loaded[5])) == ["n", "name", "other"]


def test_more_attributes_than_a_shared_key_table_holds(module: types.ModuleType) -> None:
    # CPython 3.11 shares at most 30 keys among the instances of a class; the rest of the
    # attributes of each instance go to a dict of its own.
    define(module, "class Wide:\n    pass\n")
    objects = []
    for n in range(3):
        obj = module.Wide()
        for i in range(45):
            setattr(obj, f"field_{i}", i * n)
        objects.append(obj)
    loaded = copal.loads(copal.dumps(objects))
    for n, obj in enumerate(loaded):
        assert list(vars(obj).items()) == [(f"field_{i}", i * n) for i in range(45)]


def test_attribute_names_that_are_not_identifiers(module: types.ModuleType) -> None:
    # Names set with setattr are not interned: the key table is searched by value.
    define(module, "class Odd:\n    pass\n")
    objects = []
    for n in range(3):
        obj = module.Odd()
        setattr(obj, "with space", n)
        setattr(obj, "".join(["com", "puted"]), -n)
        objects.append(obj)
    loaded = copal.loads(copal.dumps(objects))
    assert [vars(obj) for obj in loaded] == [{"with space": n, "computed": -n} for n in range(3)]


def test_an_instance_dict_made_while_its_fields_load(module: types.ModuleType) -> None:
    # Hashing the key of a later owner's `keys` asks for that owner's __dict__ while it has no
    # attributes yet: its values array moves into the new dict, where both fields must then
    # go. The first owners fill the class's key table first.
    owners = owners_with_hashed_keys(module, "        if self.n >= 2:\n            vars(self.owner)\n")
    loaded = copal.loads(copal.dumps(owners))
    for n, owner in enumerate(loaded):
        assert list(vars(owner)) == ["keys", "later"]
        assert len(vars(owner)) == 2 and owner.later == n
        (key,) = owner.keys
        assert key.owner is owner and owner.keys[key] == n


def test_a_class_changed_while_its_objects_load(module: types.ModuleType) -> None:
    # A property added to the class mid-decoding takes the stores that follow, as it would
    # from Python: the class's version tag changed, so its objects' fields are set generically.
    module.seen, module.armed = [], False
    owners = owners_with_hashed_keys(
        module,
        "        if armed and self.n == 2:\n"
        "            Owner.later = property(lambda obj: 'read', lambda obj, value: seen.append(value))\n",
    )
    data = copal.dumps(owners)
    module.armed = True
    loaded = copal.loads(data)
    assert module.seen == [2, 3]
    # The property shadows the values stored before it existed.
    assert [vars(owner).get("later") for owner in loaded] == [0, 1, None, None]


def test_builtin_subclasses_and_slotted_classes_are_unchanged(module: types.ModuleType) -> None:
    define(module, "class Tagged(list):\n    pass\nclass Slotted:\n    __slots__ = ('a',)\n")
    tagged = module.Tagged([1, 2])
    tagged.label = "x"
    loaded: Any = copal.loads(copal.dumps([tagged, tagged]))
    assert loaded[0] == [1, 2] and vars(loaded[0]) == {"label": "x"}
    slotted = module.Slotted()
    slotted.a = 1
    assert copal.loads(copal.dumps(slotted)).a == 1
