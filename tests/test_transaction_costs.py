"""The work of a transaction follows what it uses, not what the cache holds; read-only
transactions refuse changes and commit nothing; transaction state lives in the connection."""

from __future__ import annotations

from typing import Any

import pytest

import copal
from copal import PersistentList, ReadOnlyError
from helpers.measure import Delta
from helpers.models import Holder, Item

#: Objects holding plain lists, cached by a long-running process.
CACHED = 2_000


def _fill_cache(db: Any) -> list[Any]:
    """Stores CACHED objects holding plain lists and loads them all in one transaction: they
    stay cached, loaded, across the transactions that follow."""
    with db.transaction() as tx:
        tx.root["holders"] = PersistentList(Holder(n=n, tags=[n], notes={"n": n}) for n in range(CACHED))
        tx.root["one"] = Item("one", 1)
    with db.transaction() as tx:
        holders = list(tx.root["holders"])
        assert sum(h.tags[0] for h in holders) == sum(range(CACHED))
    return holders


def test_an_empty_commit_encodes_nothing_whatever_the_cache_holds(db: Any) -> None:
    holders = _fill_cache(db)
    work = Delta(db)
    with db.transaction():
        pass
    assert work["objects_encoded"] == 0
    assert all(h._p_status == "saved" for h in holders)


def test_a_commit_encodes_the_objects_the_transaction_used_only(db: Any) -> None:
    _fill_cache(db)
    work = Delta(db)
    with db.transaction() as tx:
        tx.root["one"].value += 1
    # The root and the changed item; none of the cached holders.
    assert work["objects_encoded"] <= 2
    work.reset()
    with db.transaction() as tx:
        holders = tx.root["holders"]
        holders[5].tags.append("x")
    # The holder it touched (a PersistentList tracks its own changes: it is not compared).
    assert work["objects_encoded"] == 1
    assert work["records_written"] == 1
    with db.transaction() as tx:
        assert tx.root["holders"][5].tags == [5, "x"]


def test_in_place_changes_of_objects_used_in_an_earlier_transaction_are_committed(db: Any) -> None:
    holders = _fill_cache(db)
    with db.transaction():
        holders[7].tags.append("late")
        holders[8].notes["k"] = "v"
    db2 = copal.open(db.path)
    try:
        with db2.transaction() as tx:
            stored = tx.root["holders"]
            assert stored[7].tags == [7, "late"]
            assert stored[8].notes == {"n": 8, "k": "v"}
    finally:
        db2.close()


def test_an_abort_leaves_objects_it_did_not_use_loaded(db: Any) -> None:
    holders = _fill_cache(db)
    with db.transaction() as tx:
        holders[3].tags.append("discarded")
        tx.root["one"].value = 99
        tx.abort()
    assert holders[3]._p_status == "ghost"
    assert sum(h._p_status == "saved" for h in holders) == CACHED - 1
    with db.transaction() as tx:
        assert holders[3].tags == [3]
        assert tx.root["one"].value == 1


def test_an_exception_aborts_only_what_the_transaction_used(db: Any) -> None:
    holders = _fill_cache(db)
    with pytest.raises(KeyError):
        with db.transaction():
            holders[4].tags.clear()
            raise KeyError("boom")
    assert holders[4]._p_status == "ghost"
    assert holders[5]._p_status == "saved"
    with db.transaction():
        assert holders[4].tags == [4]


def test_queries_see_in_place_changes_of_used_objects_only(db: Any) -> None:
    holders = _fill_cache(db)
    with db.transaction() as tx:
        holders[9].tags = ["changed"]
        holders[10].tags.append("x")
        assert tx.query(Holder).where(copal.field("tags") == ["changed"]).one() is holders[9]
        assert tx.query(Holder).where(copal.field("tags") == [10, "x"]).one() is holders[10]
        assert tx.query(Holder).where(copal.field("tags") == [11, "x"]).first() is None
        assert tx._conn.watched_objects() == [holders[10]]


# Read-only transactions.


def test_a_readonly_transaction_reads_the_snapshot(db: Any) -> None:
    _fill_cache(db)
    with db.transaction(readonly=True) as tx:
        assert tx.readonly
        assert tx.root["one"].name == "one"
        assert tx.query(Holder).where(copal.field("n") < 10).count() == 10


def test_a_readonly_transaction_refuses_every_change(db: Any) -> None:
    with db.transaction() as tx:
        tx.root["one"] = Item("one", 1)
    work = Delta(db)
    with db.transaction(readonly=True) as tx:
        item = tx.root["one"]
        with pytest.raises(ReadOnlyError, match="read-only"):
            item.value = 2
        with pytest.raises(ReadOnlyError):
            del item.name
        with pytest.raises(ReadOnlyError):
            item._p_changed = True
        with pytest.raises(ReadOnlyError):
            tx.root["two"] = Item("two")
        with pytest.raises(ReadOnlyError, match="add"):
            tx.add(Item("new"))
        with pytest.raises(ReadOnlyError, match="delete"):
            tx.delete(item)
        assert tx.commit() is None
    assert work["commits"] == 0
    assert work["objects_encoded"] == 0
    with db.transaction() as tx:
        assert tx.root["one"].value == 1
        assert "two" not in tx.root
        tx.root["one"].value = 3  # the object is writable again in a read-write transaction
    with db.transaction() as tx:
        assert tx.root["one"].value == 3


def test_a_readonly_transaction_encodes_nothing_at_its_end(db: Any) -> None:
    holders = _fill_cache(db)
    work = Delta(db)
    with db.transaction(readonly=True) as tx:
        assert sum(len(h.tags) for h in holders) == CACHED
        assert tx._conn.watched_objects() == []  # nothing to compare: nothing watched
    assert work["objects_encoded"] == 0
    assert work["commits"] == 0


def test_run_readonly(db: Any) -> None:
    with db.transaction() as tx:
        tx.root["one"] = Item("one", 1)
    assert db.run(lambda tx: tx.root["one"].value, readonly=True) == 1

    def change(tx: Any) -> None:
        tx.root["one"].value = 5

    with pytest.raises(ReadOnlyError):
        db.run(change, readonly=True)
    assert db.run(lambda tx: tx.root["one"].value) == 1


# Transaction state held by the connection.


def test_add_and_delete_are_held_by_the_connection(db: Any) -> None:
    with db.transaction() as tx:
        kept, dropped = Item("kept"), Item("dropped")
        tx.add(kept)
        tx.add(kept)
        tx.add(dropped)
        tx.delete(dropped)
        assert tx._conn.added_objects() == [kept]
    oid = kept._p_oid
    assert oid is not None and dropped._p_oid is None
    with db.transaction() as tx:
        tx.delete(tx.get(oid))
        tx.delete(tx.get(oid))
        assert len(tx._conn.deleted_objects()) == 1
    with db.transaction() as tx:
        with pytest.raises(copal.DanglingReference):
            tx.get(oid)


def test_deleting_an_object_not_loaded_in_the_transaction(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["items"] = PersistentList([Item("a"), Item("b")])
    db = store.reopen(db)
    with db.transaction() as tx:
        items = tx.root["items"]
        ghost = items[0]
        assert ghost._p_status == "ghost"
        tx.delete(ghost)
        del items[0]
    with db.transaction() as tx:
        assert [i.name for i in tx.root["items"]] == ["b"]
        assert tx.query(Item).count() == 1


def test_add_and_delete_refuse_what_is_not_persistent(db: Any) -> None:
    with db.transaction() as tx:
        with pytest.raises(TypeError, match="Persistent"):
            tx.add(object())  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="Persistent"):
            tx.delete([])  # type: ignore[arg-type]


def test_add_and_delete_refuse_objects_of_another_database(store: Any, tmp_path: Any) -> None:
    db = store.open()
    other = copal.open(tmp_path / "other")
    try:
        with other.transaction() as tx:
            tx.root["foreign"] = Item("foreign")
        with db.transaction() as tx:
            tx.root["mine"] = Item("mine")
        with other.transaction() as otx:
            foreign = otx.root["foreign"]
            with db.transaction() as tx:
                with pytest.raises(TypeError, match="another"):
                    tx.delete(foreign)
                with pytest.raises(TypeError, match="another"):
                    tx.add(foreign)
        with db.transaction() as tx:
            assert tx.root["mine"].name == "mine"
    finally:
        other.close()


def test_queries_refuse_operands_of_another_database(store: Any, tmp_path: Any) -> None:
    # The foreign object's oid is that of this database's own Item: compared by oid, it would
    # match the Holder of an unrelated object.
    db = store.open()
    other = copal.open(tmp_path / "other")
    try:
        for each in (other, db):
            with each.transaction() as tx:
                tx.root["holder"] = Holder(item=Item("item"))
        with other.transaction() as otx:
            foreign = otx.root["holder"].item
            with db.transaction() as tx:
                assert tx.root["holder"].item._p_oid == foreign._p_oid
                with pytest.raises(TypeError, match="another connection or database"):
                    tx.query(Holder).where(item=foreign).count()
    finally:
        other.close()


# Queries.


class Tagged(copal.Persistent):
    __copal_indexes__ = [copal.Index("email", unique=True), copal.Index("rank")]

    def __init__(self, email: str, rank: int) -> None:
        self.email = email
        self.rank = rank
        self.tags = [rank]


def test_an_index_lookup_reads_the_records_it_returns_only_whatever_the_cache_holds(db: Any) -> None:
    with db.transaction() as tx:
        tx.root["all"] = PersistentList(Tagged(f"{n}@x", n % 100) for n in range(3_000))
    with db.transaction() as tx:
        assert sum(len(t.tags) for t in tx.root["all"]) == 3_000  # every object cached
    reads = Delta(db)
    with db.transaction(readonly=True) as tx:
        # Answered by the index alone: ids and counts read no record.
        assert len(tx.query(Tagged).where(copal.field("rank") >= 90).oids()) == 300
        assert tx.query(Tagged).where(rank=5).count() == 30
        assert reads["records_read"] == 0
        assert tx.query(Tagged).where(email="7@x").one().rank == 7
    with db.transaction() as tx:
        tx.query(Tagged).where(email="8@x").one().rank = 1000
    assert reads["objects_encoded"] == 1
    with db.transaction(readonly=True) as tx:
        assert tx.query(Tagged).where(rank=1000).one().email == "8@x"


def test_iterating_an_exact_index_query_reads_a_batch_at_a_time(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["all"] = PersistentList(Tagged(f"{n}@x", n % 100) for n in range(3_000))
    db = store.reopen(db)
    work = Delta(db)
    with db.transaction(readonly=True) as tx:
        results = iter(tx.query(Tagged).where(copal.field("rank") >= 50))
        assert next(results).rank >= 50
        # One batch of 1,000 built, its records read in one sweep; the others when reached.
        assert (work["cache_misses"], work["records_read"]) == (1000, 1000)
        assert sum(1 for _ in results) == 1_499
    assert work["records_read"] == 1_500
