"""What is stored of a persistent object, and how changes to it are found."""

from __future__ import annotations

import enum
from typing import Any

from copal import Persistent, PersistentDict, PersistentList

from helpers.measure import Delta


class Perm(enum.Flag):
    READ = 1
    WRITE = 2
    EXEC = 4


class Cached(Persistent):
    def __init__(self) -> None:
        self.value = 1
        self._v_cache = object()  # volatile: never stored (and not storable anyway)


def test_volatile_attributes_are_not_stored(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["c"] = Cached()
    db = store.reopen(db)
    with db.transaction() as tx:
        c = tx.root["c"]
        assert c.value == 1
        assert not hasattr(c, "_v_cache")


def test_composite_and_empty_flags_round_trip(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["p"] = PersistentList([Perm.READ | Perm.WRITE, Perm(0), Perm.EXEC])
    db = store.reopen(db)
    with db.transaction() as tx:
        assert list(tx.root["p"]) == [Perm.READ | Perm.WRITE, Perm(0), Perm.EXEC]


def test_mutation_nested_inside_a_tuple_of_a_persistent_collection_is_found(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["t"] = ([1],)
        tx.root["pl"] = PersistentList([([1],)])
        tx.root["pd"] = PersistentDict(k=({"a": 1},))
    db = store.reopen(db)
    with db.transaction() as tx:
        tx.root["t"][0].append(2)
        tx.root["pl"][0][0].append(2)
        tx.root["pd"]["k"][0]["b"] = 2
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.root["t"] == ([1, 2],)
        assert tx.root["pl"][0] == ([1, 2],)
        assert tx.root["pd"]["k"] == ({"a": 1, "b": 2},)


def test_reading_a_persistent_list_of_references_writes_nothing(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["pl"] = PersistentList([Cached() for _ in range(3)])
    db = store.reopen(db)
    writes = Delta(db)
    with db.transaction() as tx:
        assert [c.value for c in tx.root["pl"]] == [1, 1, 1]
    assert writes["records_written"] == 0


def test_ids_of_deleted_objects_are_not_given_again(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        newest = Cached()
        tx.add(newest)
    old_oid = newest._p_oid
    with db.transaction() as tx:
        tx.delete(tx.get(old_oid))
    with db.transaction() as tx:
        fresh = Cached()
        tx.add(fresh)
    assert fresh._p_oid != old_oid


def test_flipped_bits_on_disk_are_detected(store: Any) -> None:
    import copal

    db = store.open()
    with db.transaction() as tx:
        tx.root["c"] = Cached()
        tx.root["c"].value = "a string whose bytes would otherwise decode fine"
    with db.transaction() as tx:
        oid = tx.root["c"]._p_oid
    stored = db._debug_raw_value(oid)
    assert stored is not None
    for bit in (8 * 5 + 1, 8 * (len(stored) - 10) + 3, 8 * (len(stored) - 1)):
        damaged = bytearray(stored)
        damaged[bit // 8] ^= 1 << (bit % 8)
        db._debug_put_raw_record(oid, bytes(damaged), sealed=False)
        db = store.reopen(db)
        with db.transaction() as tx:
            try:
                tx.root["c"].value
            except copal.CorruptRecordError as error:
                assert "checksum" in str(error) or "corrupt" in str(error)
            else:
                raise AssertionError(f"bit {bit} flipped without notice")
        assert db.verify()["problems"]
