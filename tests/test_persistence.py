"""Object identity, persistence by reachability, lazy loading, dirty tracking, corrupt records,
the bounded object cache and a full storage map."""

from __future__ import annotations

import datetime
import decimal
import os
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest

import copal
from copal import CorruptRecordError, PersistentDict, PersistentList, StorageError
from helpers.measure import Delta
from helpers.models import Holder, Item, Point, PSerTest, SerCollection, SerTest
from helpers.procs import run_helper

# Identity and reachability.


def test_open_creates_directory_and_accepts_pathlike(tmp_path: Path) -> None:
    path = tmp_path / "fresh"
    assert not path.exists()
    db = copal.open(path)
    try:
        with db.transaction() as tx:
            tx.root["x"] = Item("x")
    finally:
        db.close()
    assert path.is_dir()
    db = copal.open(str(path))
    try:
        with db.transaction() as tx:
            assert tx.root["x"].name == "x"
    finally:
        db.close()


def test_oid_is_none_before_commit_and_an_int_after(db: Any) -> None:
    item, other = Item("a"), Item("b")
    assert item._p_oid is None
    with db.transaction() as tx:
        tx.root["a"] = item
        tx.root["b"] = other
    assert isinstance(item._p_oid, int)
    assert isinstance(other._p_oid, int)
    assert item._p_oid != other._p_oid


def test_get_returns_the_same_object_within_a_transaction(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["a"] = Item("a")
    with db.transaction() as tx:
        oid = tx.root["a"]._p_oid
    db = store.reopen(db)
    with db.transaction() as tx:
        first = tx.get(oid)
        assert first is tx.get(oid)
        assert first is tx.root["a"]
        assert first.name == "a"
        assert tx.get(oid) is first


def test_runs_of_one_object_in_a_stored_list_read_back(store: Any) -> None:
    """Records write strings in full (no string table): a run of one string object in a list
    is its bytes again, as for a scalar (encode/containers.rs `list_values`)."""
    text, big = "repeated", 10**30
    value = [text] * 50 + [0] * 40 + [big] * 3 + [2.5] * 3 + [None] * 2 + ["\ud800"] * 2 + [text]
    db = store.open()
    with db.transaction() as tx:
        tx.root["runs"] = Item("runs", value)
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.root["runs"].value == value


def test_two_paths_to_one_object_give_one_python_object(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        shared = Item("shared")
        tx.root["a"] = Holder(friend=shared)
        tx.root["b"] = Holder(friends=[shared], by_name={"s": shared})
        tx.root["list"] = PersistentList([shared])
        tx.root["dict"] = PersistentDict({"s": shared})
    db = store.reopen(db)
    with db.transaction() as tx:
        a = tx.root["a"].friend
        assert a is tx.root["b"].friends[0]
        assert a is tx.root["b"].by_name["s"]
        assert a is tx.root["list"][0]
        assert a is tx.root["dict"]["s"]
        assert a is tx.get(a._p_oid)
        a.value = 5
        assert tx.root["list"][0].value == 5
    with db.transaction() as tx:
        assert tx.root["dict"]["s"].value == 5


def test_persistent_cycles_between_objects(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        a, b = Holder(name="a"), Holder(name="b")
        a.other, b.other = b, a
        a.me = a
        tx.root["a"] = a
    db = store.reopen(db)
    with db.transaction() as tx:
        a = tx.root["a"]
        assert a.other.other is a
        assert a.me is a
        assert a.other.name == "b"


def test_objects_reachable_from_a_root_are_stored(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        leaf = Item("leaf")
        middle = Holder(inner=[{"deep": leaf}])
        tx.root["top"] = Holder(child=middle)
    assert isinstance(leaf._p_oid, int)
    assert isinstance(middle._p_oid, int)
    leaf_oid = leaf._p_oid
    db = store.reopen(db)
    with db.transaction() as tx:
        loaded = tx.get(leaf_oid)
        assert loaded.name == "leaf"
        assert tx.root["top"].child.inner[0]["deep"] is loaded


def test_objects_become_reachable_in_a_later_transaction(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["top"] = Holder(children=[])
    with db.transaction() as tx:
        tx.root["top"].children.append(Item("late"))
    db = store.reopen(db)
    with db.transaction() as tx:
        assert [c.name for c in tx.root["top"].children] == ["late"]
        assert tx.query(Item).count() == 1


def test_add_stores_an_object_without_a_root(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        item = Item("unrooted", 7)
        tx.add(item)
    oid = item._p_oid
    assert isinstance(oid, int)
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.get(oid).value == 7
        assert tx.query(Item).where(name="unrooted").first() is tx.get(oid)
        assert len(tx.root) == 0


def test_unreachable_new_objects_are_not_stored(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["kept"] = Item("kept")
        orphan = Item("orphan")
    assert orphan._p_oid is None
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.query(Item).count() == 1
        assert tx.query(Item).where(name="orphan").first() is None


def test_delete_removes_the_object(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        for name in "abc":
            tx.add(Item(name))
    with db.transaction() as tx:
        tx.delete(tx.query(Item).where(name="b").first())
    db = store.reopen(db)
    with db.transaction() as tx:
        assert sorted(i.name for i in tx.query(Item)) == ["a", "c"]


def test_get_of_a_deleted_object_raises_dangling_reference(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        doomed = Item("doomed")
        tx.add(doomed)
    oid = doomed._p_oid
    with db.transaction() as tx:
        tx.delete(tx.get(oid))
    db = store.reopen(db)
    with db.transaction() as tx:
        with pytest.raises(copal.DanglingReference):
            tx.get(oid)


# Lazy loading, on the graph of the seed white paper: 1000 SerTest, each with a SerCollection
# holding a PersistentList of 100 PSerTest.

N_TESTS, N_ITEMS = 1000, 100
GRAPH_RECORDS = 1 + N_TESTS * 3 + N_TESTS * N_ITEMS  # list + (SerTest, SerCollection, list) + items


@pytest.fixture(scope="module")
def paper_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("paper") / "db"
    db = copal.open(str(path))
    try:
        with db.transaction() as tx:
            tests = PersistentList()
            for i in range(N_TESTS):
                items = PersistentList([PSerTest(i * N_ITEMS + j) for j in range(N_ITEMS)])
                tests.append(SerTest(i, SerCollection(items)))
            tx.root["tests"] = tests
    finally:
        db.close()
    return path


@pytest.fixture
def paper_db(paper_path: Path) -> Any:
    db = copal.open(str(paper_path))
    yield db
    db.close()


def test_touching_roots_reads_only_their_records(paper_db: Any) -> None:
    reads = Delta(paper_db)
    with paper_db.transaction() as tx:
        tests = tx.root["tests"]
        assert sum(t.attribute for t in tests) == sum(range(N_TESTS))
        after_roots = reads["records_read"]
        # The root mapping, the list and the 1000 SerTest records; no collection, no item.
        assert N_TESTS <= after_roots <= N_TESTS + 10, after_roots
        # Touching one item three references down loads exactly the three records on the way.
        assert tests[7].collection.items[3].attribute == 7 * N_ITEMS + 3
        assert reads["records_read"] - after_roots == 3


def test_load_closure_loads_everything_in_one_go(paper_db: Any) -> None:
    reads = Delta(paper_db)
    with paper_db.transaction() as tx:
        tests = tx.root["tests"]
        tx.load_closure([tests])
        loaded = reads["records_read"]
        assert GRAPH_RECORDS <= loaded <= GRAPH_RECORDS + 10, loaded
        reads.reset()
        total = sum(p.attribute for t in tests for p in t.collection.items)
        assert total == sum(range(N_TESTS * N_ITEMS))
        assert reads["records_read"] == 0


def test_load_closure_with_depth_one_loads_one_level(paper_db: Any) -> None:
    reads = Delta(paper_db)
    with paper_db.transaction() as tx:
        tests = tx.root["tests"]
        tx.load_closure([tests], depth=1)
        loaded = reads["records_read"]
        # The list and the SerTests it references (at most also their collections), not items.
        assert N_TESTS <= loaded <= 2 * N_TESTS + 10, loaded
        reads.reset()
        assert sum(t.attribute for t in tests) == sum(range(N_TESTS))
        assert reads["records_read"] == 0
        assert tests[0].collection.items[0].attribute == 0
        assert reads["records_read"] >= 1


def test_load_closure_of_several_objects_and_depth_zero(paper_db: Any) -> None:
    reads = Delta(paper_db)
    with paper_db.transaction() as tx:
        tests = tx.root["tests"]
        first = [tests[0], tests[1]]
        reads.reset()
        tx.load_closure(first)
        # Two SerTests, their collections, lists and 2 x 100 items (the SerTests may have been
        # loaded already when they were taken from the list).
        assert 2 * 2 + 2 * N_ITEMS <= reads["records_read"] <= 2 * 3 + 2 * N_ITEMS
        reads.reset()
        assert [p.attribute for p in first[1].collection.items][:2] == [N_ITEMS, N_ITEMS + 1]
        assert reads["records_read"] == 0


# Dirty tracking.


def test_attribute_assignment_is_written(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["a"] = Item("a", 1)
    with db.transaction() as tx:
        tx.root["a"].value = 2
        tx.root["a"].new_attribute = "added"
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.root["a"].value == 2
        assert tx.root["a"].new_attribute == "added"


def test_attribute_deletion_is_written(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["a"] = Holder(x=1, y=2)
    with db.transaction() as tx:
        del tx.root["a"].y
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.root["a"].x == 1
        assert not hasattr(tx.root["a"], "y")


LIST_OPS: dict[str, Callable[[Any], Any]] = {
    "append": lambda l: l.append(4),
    "append_persistent": lambda l: l.append(Item("new")),
    "extend": lambda l: l.extend([5, 6]),
    "setitem": lambda l: l.__setitem__(0, 9),
    "setitem_negative": lambda l: l.__setitem__(-1, 9),
    "setitem_slice": lambda l: l.__setitem__(slice(1, 2), [7, 8]),
    "delitem": lambda l: l.__delitem__(0),
    "delitem_slice": lambda l: l.__delitem__(slice(None, 2)),
    "pop": lambda l: l.pop(),
    "pop_index": lambda l: l.pop(0),
    "insert": lambda l: l.insert(1, "x"),
    "sort": lambda l: l.sort(),
    "sort_reverse": lambda l: l.sort(reverse=True),
    "reverse": lambda l: l.reverse(),
    "remove": lambda l: l.remove(1),
    "clear": lambda l: l.clear(),
    "iadd": lambda l: l.__iadd__([1]),
    "imul": lambda l: l.__imul__(2),
}


def _comparable(value: Any) -> Any:
    return [("Item", v.name) if isinstance(v, Item) else v for v in value]


@pytest.mark.parametrize("loaded_before", [False, True], ids=["ghost", "cached"])
@pytest.mark.parametrize("op", LIST_OPS.values(), ids=LIST_OPS.keys())
def test_persistent_list_mutation_is_written(store: Any, op: Callable[[Any], Any],
                                             loaded_before: bool) -> None:
    initial = [3, 1, 2]
    expected = list(initial)
    op(expected)
    db = store.open()
    with db.transaction() as tx:
        tx.root["l"] = PersistentList(initial)
    db = store.reopen(db)
    if loaded_before:
        with db.transaction() as tx:
            assert list(tx.root["l"]) == initial
    with db.transaction() as tx:
        op(tx.root["l"])  # on a ghost, the mutation must load the list first
        assert _comparable(tx.root["l"]) == _comparable(expected)
    db = store.reopen(db)
    with db.transaction() as tx:
        assert _comparable(tx.root["l"]) == _comparable(expected)


DICT_OPS: dict[str, Callable[[Any], Any]] = {
    "setitem_new": lambda d: d.__setitem__("c", 3),
    "setitem_existing": lambda d: d.__setitem__("a", 10),
    "setitem_non_str_key": lambda d: d.__setitem__((1, 2), "t"),
    "delitem": lambda d: d.__delitem__("a"),
    "pop": lambda d: d.pop("b"),
    "popitem": lambda d: d.popitem(),
    "update": lambda d: d.update({"a": 5, "z": 6}),
    "update_kwargs": lambda d: d.update(q=1),
    "setdefault_new": lambda d: d.setdefault("n", [1]),
    "clear": lambda d: d.clear(),
    "ior": lambda d: d.__ior__({"m": 1}),
}


@pytest.mark.parametrize("loaded_before", [False, True], ids=["ghost", "cached"])
@pytest.mark.parametrize("op", DICT_OPS.values(), ids=DICT_OPS.keys())
def test_persistent_dict_mutation_is_written(store: Any, op: Callable[[Any], Any],
                                             loaded_before: bool) -> None:
    initial = {"a": 1, "b": 2}
    expected = dict(initial)
    op(expected)
    db = store.open()
    with db.transaction() as tx:
        tx.root["d"] = PersistentDict(initial)
    db = store.reopen(db)
    if loaded_before:
        with db.transaction() as tx:
            assert dict(tx.root["d"]) == initial
    with db.transaction() as tx:
        op(tx.root["d"])
        assert dict(tx.root["d"]) == expected
    db = store.reopen(db)
    with db.transaction() as tx:
        assert dict(tx.root["d"]) == expected
        assert list(tx.root["d"]) == list(expected)


def _nested_holder() -> Holder:
    return Holder(
        items=[{"a": 1}],
        d={"k": {"x": 0}},
        s={1, 2},
        t=(0, [1]),
        p=Point(1, [2]),
        ba=bytearray(b"a"),
        deep={"l": [[{"s": {1}}]]},
    )


NESTED_MUTATIONS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "list_append": (lambda h: h.items.append("x"), lambda h: h.items == [{"a": 1}, "x"]),
    "list_setitem": (lambda h: h.items.__setitem__(0, 5), lambda h: h.items == [5]),
    "dict_in_list": (lambda h: h.items[0].__setitem__("b", 2), lambda h: h.items == [{"a": 1, "b": 2}]),
    "dict_in_dict": (lambda h: h.d["k"].__setitem__("j", 1), lambda h: h.d == {"k": {"x": 0, "j": 1}}),
    "dict_del": (lambda h: h.d.__delitem__("k"), lambda h: h.d == {}),
    "set_add": (lambda h: h.s.add(3), lambda h: h.s == {1, 2, 3}),
    "set_discard": (lambda h: h.s.discard(1), lambda h: h.s == {2}),
    "list_in_tuple": (lambda h: h.t[1].append(5), lambda h: h.t == (0, [1, 5])),
    "embedded_object_attribute": (lambda h: setattr(h.p, "x", 5), lambda h: h.p == Point(5, [2])),
    "list_in_embedded_object": (lambda h: h.p.y.append(3), lambda h: h.p == Point(1, [2, 3])),
    "bytearray_extend": (lambda h: h.ba.extend(b"bc"), lambda h: h.ba == bytearray(b"abc")),
    "deeply_nested_set": (lambda h: h.deep["l"][0][0]["s"].add(9), lambda h: h.deep == {"l": [[{"s": {1, 9}}]]}),
}


@pytest.mark.parametrize("mutation", NESTED_MUTATIONS.values(), ids=NESTED_MUTATIONS.keys())
def test_in_place_mutation_of_plain_containers_is_detected(store: Any, mutation: Any) -> None:
    mutate, check = mutation
    db = store.open()
    with db.transaction() as tx:
        tx.root["h"] = _nested_holder()
    db = store.reopen(db)
    with db.transaction() as tx:
        h = tx.root["h"]
        h.items  # noqa: B018 (load it in an earlier transaction; it stays cached)
    with db.transaction() as tx:
        mutate(tx.root["h"])
    with db.transaction() as tx:
        assert check(tx.root["h"])
    db = store.reopen(db)
    with db.transaction() as tx:
        assert check(tx.root["h"]), vars(tx.root["h"])


def test_in_place_mutation_in_the_creating_transaction_after_add(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        h = Holder(items=[])
        tx.root["h"] = h
    with db.transaction() as tx:
        h.items.append(1)  # the Python object kept from the previous transaction
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.root["h"].items == [1]


def test_unchanged_loaded_objects_are_not_rewritten(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["objs"] = PersistentList(
            Holder(
                n=i,
                nums=[i, float("nan"), -0.0],
                names={f"name{j}" for j in range(3)},
                mixed={(1, 2): {3, 4}, None: [b"x"], 2.5: frozenset({"a", "b"})},
                p=Point({"k": [1]}, (2, 3)),
                when=datetime.datetime(2024, 1, 1, 12),
            )
            for i in range(10)
        )
    db = store.reopen(db)
    writes = Delta(db)
    with db.transaction() as tx:
        for h in tx.root["objs"]:
            assert len(h.names) == 3
            list(h.mixed.items())
            h.nums[0]  # noqa: B018
            h.p.x["k"]  # noqa: B018
    assert writes["records_written"] == 0
    with db.transaction() as tx:
        objs = tx.root["objs"]
        for h in objs:
            h.n  # noqa: B018
        objs[3].n = 33
    assert writes["records_written"] == 1


@pytest.mark.parametrize("value", [
    {f"name{j}" for j in range(60)},
    frozenset(f"name{j}" for j in range(60)),
    {"k": {f"s{j}" for j in range(40)}},
    {(f"t{j}", j) for j in range(40)},
], ids=["set_of_str", "frozenset_of_str", "set_in_dict", "set_of_tuples"])
def test_reading_sets_does_not_rewrite_the_object(store: Any, value: Any) -> None:
    """A decoded set may iterate in another order than the set that was encoded; that must not
    make an unchanged object look changed (a needless write, and a needless conflict)."""
    db = store.open()
    with db.transaction() as tx:
        tx.root["h"] = Holder(value=value)
    db = store.reopen(db)
    writes = Delta(db)
    with db.transaction() as tx:
        assert tx.root["h"].value == value
    assert writes["records_written"] == 0


# Corrupt records (through the debug hooks).


def _corrupt_setup(store: Any) -> tuple[Any, int]:
    db = store.open()
    with db.transaction() as tx:
        tx.root["victim"] = Item("victim", [1, 2, {"three": 3.0}], payload=b"p" * 64)
        tx.root["other"] = Item("other", 2)
        tx.root["holder"] = Holder(ref=tx.root["victim"])
    with db.transaction() as tx:
        oid = tx.root["victim"]._p_oid
    return db, oid


CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {
    "empty": lambda raw: b"",
    "one_byte": lambda raw: raw[:1],
    "half": lambda raw: raw[: len(raw) // 2],
    "minus_one_byte": lambda raw: raw[:-1],
    "all_ff": lambda raw: b"\xff" * len(raw),
    "all_zero": lambda raw: b"\x00" * len(raw),
    "random": lambda raw: bytes((i * 197 + 89) % 256 for i in range(len(raw))),
    "header_then_garbage": lambda raw: raw[:4] + b"\xfe" * (len(raw) - 4),
    "text": lambda raw: b"this is not a copal record at all",
}


def test_debug_hooks_round_trip(store: Any) -> None:
    db, oid = _corrupt_setup(store)
    raw = db._debug_raw_record(oid)
    assert isinstance(raw, bytes) and len(raw) > 0
    db._debug_put_raw_record(oid, raw)
    db = store.reopen(db)
    assert db._debug_raw_record(oid) == raw
    with db.transaction() as tx:
        assert tx.get(oid).value == [1, 2, {"three": 3.0}]


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_corrupt_record_raises_corrupt_record_error(store: Any, corrupt: Callable[[bytes], bytes]) -> None:
    db, oid = _corrupt_setup(store)
    raw = db._debug_raw_record(oid)
    db._debug_put_raw_record(oid, corrupt(raw))
    db = store.reopen(db)
    with db.transaction() as tx:
        with pytest.raises(CorruptRecordError):
            tx.get(oid).name  # noqa: B018
        with pytest.raises(CorruptRecordError):
            tx.root["holder"].ref.value  # noqa: B018
        # Everything else still loads, in the same transaction.
        assert tx.root["other"].value == 2
        assert tx.root["holder"].ref._p_oid == oid
    with db.transaction() as tx:
        with pytest.raises(CorruptRecordError):
            tx.root["victim"].payload  # noqa: B018
        assert tx.root["other"].name == "other"


def test_corrupt_root_record_raises_corrupt_record_error(store: Any) -> None:
    db, oid = _corrupt_setup(store)
    with db.transaction() as tx:
        root_oid = tx.root._p_oid
    raw = db._debug_raw_record(root_oid)
    db._debug_put_raw_record(root_oid, raw[: len(raw) // 2])
    db = store.reopen(db)
    with db.transaction() as tx:
        with pytest.raises(CorruptRecordError):
            tx.root["other"]  # noqa: B018
        assert tx.get(oid).name == "victim"  # objects are still reachable by id


def test_corrupt_record_is_repairable(store: Any) -> None:
    db, oid = _corrupt_setup(store)
    raw = db._debug_raw_record(oid)
    db._debug_put_raw_record(oid, raw[:3])
    db = store.reopen(db)
    with db.transaction() as tx:
        with pytest.raises(CorruptRecordError):
            tx.get(oid).name  # noqa: B018
    db._debug_put_raw_record(oid, raw)
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.get(oid).name == "victim"


def test_random_record_mutations_never_crash(store: Any, soak: bool) -> None:
    """Byte flips, insertions and truncations of valid records, decoded in a child process so
    that a crash (a panic that aborts, a segfault, an unbounded allocation) fails this test
    instead of killing the test run: 800 mutations, 20,000 with ``--soak``."""
    db, _ = _corrupt_setup(store)
    with db.transaction() as tx:
        tx.root["rich"] = Holder(
            a=[1, 2**70, -3.5, "s\ud800", b"b", (1, {2}), frozenset({3})],
            b={"k": {"nested": [None, True]}, 7: Point(1, 2)},
            c=decimal.Decimal("-1.5E-7"),
            d=datetime.datetime(2020, 2, 2, tzinfo=datetime.timezone.utc),
            e=uuid.UUID(int=77),
        )
    store.close(db)
    mutations = 20_000 if soak else 800
    out = run_helper("fuzz_records.py", store.path, 1234, mutations, timeout=mutations // 20 + 60)
    assert "ok" in out.splitlines()[-1], out


# The bounded object cache.


def test_bounded_cache_evicts_and_reloads(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["many"] = PersistentList(Item(str(i), i) for i in range(10_000))
    db = store.reopen(db, cache_size=100)
    reads = Delta(db)
    with db.transaction() as tx:
        assert sum(item.value for item in tx.root["many"]) == sum(range(10_000))
    assert reads["records_read"] >= 10_000
    reads.reset()
    with db.transaction() as tx:
        # The private hook, where the binding has it: loaded objects after eviction.
        loaded_count = getattr(tx._conn, "loaded_count", None)
        if loaded_count is not None:
            assert loaded_count() <= 100
        many = tx.root["many"]
        fifth = many[5]
        assert sum(item.value for item in many) == sum(range(10_000))
        # Objects evicted at the transaction start were loaded again...
        assert reads["records_read"] >= 9_000
        # ...and identity still holds within the transaction after touching 10,000 objects.
        assert many[5] is fifth
        assert tx.get(fifth._p_oid) is fifth
        assert fifth.value == 5
        fifth.value = -5
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.root["many"][5].value == -5


def test_eviction_keeps_the_identity_of_objects_a_program_holds(store: Any) -> None:
    """A ghost that the program still references stays in the cache: loading its id again gives
    that very object, never a second one."""
    db = store.open()
    with db.transaction() as tx:
        tx.root["held"] = PersistentList(Item(str(i), i) for i in range(10))
        tx.root["others"] = PersistentList(Item(str(i), i) for i in range(2_000))
    db = store.reopen(db, cache_size=100)
    with db.transaction() as tx:
        held = tx.root["held"][5]
        assert held.value == 5
    for _ in range(2):
        # Each transaction starts by evicting the least recently used: the list "held" and its
        # items become ghosts, and `held` is then referenced by this test alone.
        with db.transaction() as tx:
            assert sum(item.value for item in tx.root["others"]) == sum(range(2_000))
    assert held._p_status == "ghost"
    with db.transaction() as tx:
        assert tx.get(held._p_oid) is held
        assert tx.root["held"][5] is held
        assert held.value == 5


def test_bounded_cache_keeps_uncommitted_changes(store: Any) -> None:
    """Eviction never drops a changed object's state before its transaction commits."""
    db = store.open()
    with db.transaction() as tx:
        tx.root["many"] = PersistentList(Item(str(i), i) for i in range(2_000))
    db = store.reopen(db, cache_size=100)
    with db.transaction() as tx:
        many = tx.root["many"]
        many[0].value = "changed"
        for item in many:
            item.name  # noqa: B018
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.root["many"][0].value == "changed"


# A full storage map.


def test_full_map_raises_storage_error_and_keeps_earlier_commits(tmp_path: Path) -> None:
    path = str(tmp_path / "small")
    db = copal.open(path, map_size=2 * 1024 * 1024)
    try:
        with db.transaction() as tx:
            tx.root["keep"] = Item("keep", 1, payload=b"k" * 10_000)
        with pytest.raises(StorageError):
            with db.transaction() as tx:
                tx.root["big"] = PersistentList(
                    Item(str(i), i, payload=os.urandom(100_000)) for i in range(100))
        with db.transaction() as tx:
            assert "big" not in tx.root
            assert tx.root["keep"].payload == b"k" * 10_000
            assert tx.query(Item).count() == 1
    finally:
        db.close()
    db = copal.open(path)
    try:
        with db.transaction() as tx:
            assert "big" not in tx.root
            assert tx.root["keep"].value == 1
            assert tx.root["keep"].payload == b"k" * 10_000
            tx.root["after"] = Item("after")
        with db.transaction() as tx:
            assert tx.root["after"].name == "after"
    finally:
        db.close()


def test_getting_an_uncached_object_reads_its_record_once(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["item"] = item = Item("pen", 3)
    oid = item._p_oid
    db = store.reopen(db)
    reads = Delta(db)
    with db.transaction() as tx:
        assert tx.root is not None
        assert reads["records_read"] == 1
        assert tx.get(oid).name == "pen"
        assert reads["records_read"] == 2
        # An id with no record: refused without a ghost left behind for it.
        missing = oid + 1000
        for _ in range(2):
            with pytest.raises(copal.DanglingReference):
                tx.get(missing)
