"""Errors carry their facts as attributes: ConflictError.oids, UniqueViolation.index and .oids,
DanglingReference.oid, set by the binding from the core's error variants (crates/copal-py/src/
errors.rs), empty when raised from Python with only a message, and kept by pickling."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import copal
from copal import ConflictError, DanglingReference, Index, Persistent, UniqueViolation
from helpers.models import Counter, Item


class Account(Persistent):
    __copal_indexes__ = [Index("email", unique=True)]

    def __init__(self, email: str | None) -> None:
        self.email = email


def _conflict(store: Any) -> tuple[ConflictError, int]:
    """A real conflict: a second database commits a change to the counter that this
    transaction read and changed. Returns the error and the counter's oid."""
    db1, db2 = store.open(), store.open()
    with db1.transaction() as t1:
        t1.root["c"] = Counter(1)
    with pytest.raises(ConflictError) as caught:
        with db2.transaction() as t2:
            counter = t2.root["c"]
            oid = counter._p_oid
            assert counter.value == 1
            with db1.transaction() as t1:
                t1.root["c"].value = 100
            counter.value = 2
    return caught.value, oid


def _unique_violation(store: Any) -> tuple[UniqueViolation, int, int]:
    """A commit giving a stored account the email of another one. Returns the error, the oid
    of the changed account and the oid of the one holding the email."""
    db = store.open()
    with db.transaction() as tx:
        tx.root["a"] = Account("a@example.org")
        tx.root["b"] = Account("b@example.org")
    with pytest.raises(UniqueViolation) as caught:
        with db.transaction() as tx:
            holder, changed = tx.root["a"]._p_oid, tx.root["b"]._p_oid
            tx.root["b"].email = "a@example.org"
    return caught.value, changed, holder


# Raised by copal, with the facts.


def test_conflict_error_has_the_oid_of_the_conflicting_object(store: Any) -> None:
    error, oid = _conflict(store)
    assert isinstance(oid, int)
    assert error.oids == (oid,)
    assert f"object {oid:#x} " in str(error)
    assert error.args == (str(error),)


def test_conflict_error_names_every_object_that_conflicts(store: Any) -> None:
    db1, db2 = store.open(), store.open()
    with db1.transaction() as t1:
        t1.root["a"], t1.root["b"], t1.root["c"], t1.root["gone"] = Counter(1), Counter(2), Counter(3), Item("x")
    refused = db2.stats()["conflicts"]
    with pytest.raises(ConflictError) as caught:
        with db2.transaction() as t2:
            a, b, c, gone = t2.root["a"], t2.root["b"], t2.root["c"], t2.root["gone"]
            with db1.transaction() as t1:
                t1.root["a"].value = 10
                t1.root["b"].value = 20
                t1.delete(t1.root["gone"])
            a.value, b.value, c.value = 11, 21, 31
            t2.delete(gone)
    assert caught.value.oids == (a._p_oid, b._p_oid, gone._p_oid)
    assert all(f"{oid:#x}" in str(caught.value) for oid in caught.value.oids)
    assert f"{c._p_oid:#x}" not in str(caught.value)
    assert db2.stats()["conflicts"] == refused + 1  # one commit refused
    with db2.transaction() as t2:
        assert (t2.root["a"].value, t2.root["c"].value) == (10, 3)


def test_unique_violation_has_the_index_and_both_objects(store: Any) -> None:
    error, changed, holder = _unique_violation(store)
    assert error.index == "test_errors.Account(email)"
    assert error.oids == (changed, holder)
    assert f"{changed:#x}" in str(error) and f"{holder:#x}" in str(error)
    assert error.index in str(error)
    assert error.args == (str(error),)


def test_unique_violation_by_a_new_object_names_it_first(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["a"] = Account("a@example.org")
    with db.transaction() as tx:
        holder = tx.root["a"]._p_oid
    with pytest.raises(UniqueViolation) as caught:
        with db.transaction() as tx:
            tx.add(Account("a@example.org"))
    # The new object's id is given back when the commit fails: it is known only from the error.
    new, other = caught.value.oids
    assert other == holder and new != holder
    assert f"object {new:#x} has the same key as object {holder:#x}" in str(caught.value)


def test_dangling_reference_has_the_oid(db: Any) -> None:
    """Depends on the connection raising errors.rs `dangling(oid)` (it builds its own today)."""
    with db.transaction() as tx:
        tx.root["item"] = Item("kept")
        tx.root["gone"] = Item("deleted")
    with db.transaction() as tx:
        never_committed = tx.root["item"]._p_oid + 1000
        deleted = tx.root["gone"]._p_oid
        tx.delete(tx.root.pop("gone"))
    with db.transaction() as tx:
        for oid in (never_committed, deleted):
            with pytest.raises(DanglingReference) as caught:
                tx.get(oid)
            assert caught.value.oid == oid
            assert str(caught.value) == f"object {oid:#x} does not exist (deleted, or never committed)"


# Raised from Python, with only a message.


@pytest.mark.parametrize(
    ("cls", "defaults"),
    [
        (ConflictError, {"oids": ()}),
        (UniqueViolation, {"index": None, "oids": ()}),
        (DanglingReference, {"oid": None}),
    ],
)
def test_raised_with_only_a_message_the_attributes_are_empty(cls: type[copal.CopalError], defaults: dict[str, Any]) -> None:
    with pytest.raises(cls) as caught:
        raise cls("what happened")
    assert str(caught.value) == "what happened"
    assert caught.value.args == ("what happened",)
    assert {name: getattr(caught.value, name) for name in defaults} == defaults
    assert str(cls()) == ""


def test_attributes_given_by_keyword() -> None:
    conflict = ConflictError("m", oids=[1, 2])
    assert conflict.oids == (1, 2)
    violation = UniqueViolation("m", index="app.Person(email)", oids=(3, 4))
    assert (violation.index, violation.oids) == ("app.Person(email)", (3, 4))
    assert DanglingReference("m", oid=5).oid == 5


# Pickling keeps the class, the message and the attributes.


def _round_trip(error: BaseException) -> BaseException:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert copy.args == error.args
    assert str(copy) == str(error)
    return copy


@pytest.mark.parametrize(
    "error",
    [
        ConflictError("m", (0x30000000001,)),
        UniqueViolation("m", "app.Person(email)", (1, 2)),
        DanglingReference("m", 0x30000000001),
        ConflictError("only a message"),
        UniqueViolation(),
        DanglingReference("m"),
    ],
    ids=repr,
)
def test_pickling_keeps_the_attributes(error: copal.CopalError) -> None:
    copy = _round_trip(error)
    assert vars(copy) == vars(error)


def test_pickling_a_raised_conflict_keeps_its_oids(store: Any) -> None:
    error, oid = _conflict(store)
    copy = _round_trip(error)
    assert isinstance(copy, ConflictError)
    assert copy.oids == (oid,)


def test_pickling_a_raised_unique_violation_keeps_its_facts(store: Any) -> None:
    error, changed, holder = _unique_violation(store)
    copy = _round_trip(error)
    assert isinstance(copy, UniqueViolation)
    assert (copy.index, copy.oids) == ("test_errors.Account(email)", (changed, holder))


def test_pickling_keeps_notes() -> None:
    error = ConflictError("m", (1,))
    error.add_note("while counting")
    copy = _round_trip(error)
    assert copy.__notes__ == ["while counting"]
    assert isinstance(copy, ConflictError) and copy.oids == (1,)
