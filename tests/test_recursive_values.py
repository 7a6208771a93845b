"""Tuples and frozensets that contain themselves through a mutable container, in streams.

The cases mirror the recursive-value tests of CPython's pickle test suite (pickletester.py:
``test_recursive_tuple_and_list``, ``_and_dict``, ``_and_dict_key``, ``test_recursive_set``,
``test_recursive_*_and_inst`` for every builtin container and subclass), with the identity checks
pickle makes: the loaded tuple is the one its own items lead back to. A stream writes such a
tuple again inside its items and supersedes the outer copy (docs/STREAM.md section 5, stream
version 4); databases, archives and text documents refuse it with a TypeError naming the reason.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings

import copal
from helpers.compare import assert_same
from helpers.models import Holder
from helpers.strategies import value_graphs

STREAM_VERSION_AT = 4  # the byte of docs/STREAM.md section 2 that holds the version


class K:
    """An object that holds a value and hashes by identity (pickletester's ``K``)."""

    def __init__(self, value: Any) -> None:
        self.value = value


class Object:
    pass


class MyList(list):  # type: ignore[type-arg]
    pass


class MyDict(dict):  # type: ignore[type-arg]
    pass


class MyTuple(tuple):  # type: ignore[type-arg]
    pass


class MySet(set):  # type: ignore[type-arg]
    pass


class MyFrozenSet(frozenset):  # type: ignore[type-arg]
    pass


Pair = collections.namedtuple("Pair", ["items", "label"])


class TypedPair(NamedTuple):
    items: list[Any]
    label: str


def reload(value: Any) -> Any:
    return copal.loads(copal.dumps(value))


def _append(container: Any, value: Any) -> None:
    container.append(value)


def _put_at_1(container: Any, value: Any) -> None:
    container[1] = value


# container class, how a value is put in it, how it is read back
HOLDERS: dict[str, tuple[type, Callable[[Any, Any], None], Callable[[Any], Any]]] = {
    "list": (list, _append, lambda c: c[0]),
    "list_subclass": (MyList, _append, lambda c: c[0]),
    "dict": (dict, _put_at_1, lambda c: c[1]),
    "dict_subclass": (MyDict, _put_at_1, lambda c: c[1]),
}


@pytest.mark.parametrize(("cls", "put", "get"), HOLDERS.values(), ids=HOLDERS.keys())
def test_recursive_tuple_and_container(cls: type, put: Callable[[Any, Any], None], get: Callable[[Any], Any]) -> None:
    """pickletester's ``test_recursive_tuple_and_list`` and ``_and_dict``: a tuple holding a
    container that holds the tuple, loaded from either end."""
    t = (cls(),)
    put(t[0], t)
    x = reload(t)
    assert type(x) is tuple and len(x) == 1
    assert type(x[0]) is cls and len(x[0]) == 1 and get(x[0]) is x
    (inner,) = t
    y = reload(inner)
    assert type(y) is cls and type(get(y)) is tuple and get(y)[0] is y


@pytest.mark.parametrize("cls", [dict, MyDict])
def test_recursive_tuple_and_dict_key(cls: type) -> None:
    t = (cls(),)
    t[0][K(t)] = 1
    x = reload(t)
    assert type(x) is tuple and len(x) == 1 and type(x[0]) is cls
    (key,) = x[0]
    assert type(key) is K and key.value is x and x[0][key] == 1
    (inner,) = t
    y = reload(inner)
    (key,) = y
    assert type(y) is cls and type(key) is K and key.value[0] is y


def test_recursive_set() -> None:
    y = set()
    y.add(K(y))
    x = reload(y)
    (element,) = x
    assert type(x) is set and type(element) is K and element.value is x
    (k,) = y
    z = reload(k)
    assert type(z) is K and type(z.value) is set and next(iter(z.value)) is z


def _elements(collection: Any) -> list[Any]:
    return list(collection.values() if isinstance(collection, dict) else collection)


FACTORIES: dict[str, Callable[[list[Any]], Any]] = {
    "list": list, "tuple": tuple, "dict": dict.fromkeys, "set": set, "frozenset": frozenset,
    "list_subclass": MyList, "tuple_subclass": MyTuple, "dict_subclass": MyDict.fromkeys,
    "set_subclass": MySet, "frozenset_subclass": MyFrozenSet,
}


@pytest.mark.parametrize("factory", FACTORIES.values(), ids=FACTORIES.keys())
def test_recursive_collection_and_inst(factory: Callable[[list[Any]], Any]) -> None:
    """pickletester's ``_test_recursive_collection_and_inst``: an object holding a collection
    that holds the object, loaded from either end."""
    o = Object()
    o.attr = factory([o])
    kind = type(o.attr)
    x = reload(o)
    assert type(x.attr) is kind and len(x.attr) == 1
    assert list(x.attr)[0] is x
    collection = o.attr
    y = reload(collection)
    assert type(y) is kind and len(y) == 1
    (member,) = list(y)
    assert type(member) is Object and member.attr is y


@pytest.mark.parametrize("factory", [Pair, TypedPair], ids=["namedtuple", "NamedTuple"])
def test_recursive_named_tuples(factory: Callable[..., Any]) -> None:
    p = factory([], "me")
    p.items.append(p)
    x = reload(p)
    assert type(x) is factory and x.label == "me" and x.items[0] is x


def test_recursive_tuple_subclass_keeps_its_attributes() -> None:
    """A SUBCLASS value's fields follow its items: those of the outer copy are set on the value
    of the inner one, which they equal."""
    t = MyTuple([[], "x"])
    t[0].append(t)
    t.label = "outer"
    t.me = [t]
    x = reload(t)
    assert type(x) is MyTuple and x[1] == "x" and x[0][0] is x
    assert x.label == "outer" and x.me[0] is x


def test_a_tuple_reached_again_through_several_containers() -> None:
    """Each container on a cycle that is met before it is written makes one more copy: here
    three copies, of which the innermost is the tuple and the two around it are superseded."""
    a: list[Any] = []
    b: dict[str, Any] = {}
    t = (a, b)
    a.append(t)
    b["t"] = t
    x = reload(t)
    assert x[0][0] is x and x[1]["t"] is x
    # Met again after it is written, it is a back-reference: one object.
    y = reload([t, t, a])
    assert y[0] is y[1] is y[2][0] is y[0][0][0]


def test_tuples_on_each_others_cycles() -> None:
    shared: list[Any] = []
    first = (shared, 1)
    second = (shared, first)
    shared += [first, second]
    x = reload(second)
    assert x[1][0] is x[0] and x[0][0] is x[1] and x[0][1] is x and x[1][1] == 1


def test_recursive_frozenset_of_many_objects() -> None:
    """A frozenset of two or more elements is written in canonical order, found by a trial
    encoding of each element, which meets the frozenset again too."""
    members = [K(None) for _ in range(3)]
    f = frozenset(members)
    for member in members:
        member.value = f
    x = reload(f)
    assert type(x) is frozenset and len(x) == 3
    assert all(type(m) is K and m.value is x for m in x)


def test_recursive_tuple_holding_a_frozenset_of_objects() -> None:
    """The trial encodings that order the frozenset write copies of the unfinished tuple: they
    must not be taken for copies of the real encoding (a back-reference to a slot that the
    stream does not have)."""
    members = [K(None), K(None)]
    t = (frozenset(members), "t")
    for member in members:
        member.value = t
    x = reload(t)
    assert x[1] == "t" and all(m.value is x for m in x[0])


def test_only_streams_with_superseded_copies_are_version_4() -> None:
    t = ([],)
    t[0].append(t)
    assert copal.dumps(t)[STREAM_VERSION_AT] == 4
    assert copal.dumps([(1, 2), ([],)])[STREAM_VERSION_AT] == 3
    # A frozenset sorted by trial encodings that wrote copies, but written without any.
    members = [K(None), K(None)]
    assert copal.dumps(frozenset(members))[STREAM_VERSION_AT] == 3


@pytest.mark.parametrize("compress", [None, "zstd", "gzip", "lz4"])
def test_compressed_and_file_streams(compress: Any, tmp_path: Any) -> None:
    t = ([], "x")
    t[0].append(t)
    x = copal.loads(copal.dumps(t, compress=compress))
    assert x[0][0] is x
    path = tmp_path / "t.cpl"
    with open(path, "wb") as f:
        copal.dump(t, f, compress=compress)
    with open(path, "rb") as f:
        y = copal.load(f)
    assert y[0][0] is y


def _recursive_values() -> dict[str, Any]:
    t: tuple[list[Any]] = ([],)
    t[0].append(t)
    member = K(None)
    f = frozenset([member])
    member.value = f
    sub = MyTuple([[]])
    sub[0].append(sub)
    return {"tuple": t, "frozenset": f, "tuple_subclass": sub}


RECURSIVE = _recursive_values()


@pytest.mark.parametrize("fmt", ["json", "xml"])
@pytest.mark.parametrize("value", RECURSIVE.values(), ids=RECURSIVE.keys())
def test_text_documents_refuse_recursive_tuples(value: Any, fmt: str) -> None:
    with pytest.raises(TypeError, match="contains itself .* only be written to a binary stream"):
        copal.dumps(value, format=fmt)


@pytest.mark.parametrize("value", RECURSIVE.values(), ids=RECURSIVE.keys())
def test_archives_refuse_recursive_tuples(value: Any) -> None:
    with pytest.raises(TypeError, match=r"value\[0\].*contains itself"):
        copal.pack_many([value])


@pytest.mark.parametrize("value", RECURSIVE.values(), ids=RECURSIVE.keys())
def test_databases_refuse_recursive_tuples(store: Any, value: Any) -> None:
    db = store.open()
    with pytest.raises(TypeError, match="contains itself .* not stored in a database"):
        with db.transaction() as tx:
            tx.root["bad"] = Holder(value=value)
    with db.transaction() as tx:
        assert "bad" not in tx.root


def _check_identities(expected: Any, actual: Any, seen: dict[int, Any]) -> None:
    """Every container or object of `expected` met again is `actual`'s same object, tuples
    included (which `assert_same` compares by value)."""
    if not isinstance(expected, (list, tuple, dict, set, frozenset, bytearray)) and not hasattr(expected, "__dict__"):
        return
    if id(expected) in seen:
        assert seen[id(expected)] is actual
        return
    seen[id(expected)] = actual
    if isinstance(expected, (list, tuple)):
        for e, a in zip(expected, actual):
            _check_identities(e, a, seen)
    elif isinstance(expected, dict):
        for e, a in zip(expected.values(), actual.values()):
            _check_identities(e, a, seen)
    elif hasattr(expected, "__dict__"):
        for e, a in zip(vars(expected).values(), vars(actual).values()):
            _check_identities(e, a, seen)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=value_graphs(recursive_tuples=True))
def test_value_graphs_with_recursive_tuples_roundtrip(nodes: list[Any]) -> None:
    loaded = reload(nodes)
    assert_same(nodes, loaded)
    _check_identities(nodes, loaded, {})


def test_records_refuse_superseded_copies(store: Any) -> None:
    """SUPERSEDED_TUPLE is a tag of streams only: in a record it is an unknown tag."""
    db = store.open()
    with db.transaction() as tx:
        tx.root["holder"] = Holder(value=None)
    with db.transaction() as tx:
        oid = tx.root["holder"]._p_oid
    raw = db._debug_raw_record(oid)
    assert raw is not None and raw.endswith(b"\x00")  # the one field of the Holder: NONE
    # The value of the stream of `t = ([],); t[0].append(t)`.
    db._debug_put_raw_record(oid, raw[:-1] + bytes.fromhex("1e010b010c011a0102"))
    db = store.reopen(db)
    with db.transaction() as tx:
        with pytest.raises(copal.CorruptRecordError):
            tx.get(oid).value  # noqa: B018
