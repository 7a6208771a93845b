"""Joins followed backwards in queries (``copal.referenced_by``), against a reference computed in
Python, on both stores."""

from __future__ import annotations

import random
from typing import Any

import pytest

import copal
from copal import PersistentList, field, referenced_by
from helpers.query_models import IndexedRec, Owner, Pet, Rec


def _seed(db: Any, n: int = 60) -> None:
    rng = random.Random(5)
    with db.transaction() as tx:
        owners = [Owner(f"owner {i}", age=20 + i) for i in range(n)]
        for owner in owners:
            tx.add(owner)
        for i in range(2 * n):
            # Some pets have no owner; some owners have several pets, some none.
            tx.add(Pet(f"pet {i}", owners[rng.randrange(n)] if i % 7 else None, legs=i % 5))


def _names(objects: Any) -> list[str]:
    return sorted(obj.name for obj in objects)


def test_objects_referenced_by_matching_objects_agree_with_python(store: Any) -> None:
    db = store.open()
    _seed(db)
    with db.transaction() as tx:
        pets = list(tx.query(Pet))
        owners = list(tx.query(Owner))
        for legs in range(5):
            wanted = {id(p.owner) for p in pets if p.owner is not None and p.legs == legs}
            expected = _names(o for o in owners if id(o) in wanted)
            query = tx.query(Owner).where(referenced_by(Pet, "owner", where=field("legs") == legs))
            assert _names(query) == expected
            assert query.count() == len(expected)
        # Without `where`: every owner of a pet; combined with other conditions and negated.
        with_pets = {id(p.owner) for p in pets if p.owner is not None}
        assert _names(tx.query(Owner).where(referenced_by(Pet, "owner"))) == _names(o for o in owners if id(o) in with_pets)
        older = tx.query(Owner).where(~referenced_by(Pet, "owner") & (field("age") >= 50))
        assert _names(older) == _names(o for o in owners if id(o) not in with_pets and o.age >= 50)
        assert tx.query(Owner).where(referenced_by(Pet, "owner")).values("age") == sorted(
            [(o.age,) for o in owners if id(o) in with_pets]
        )
        assert tx.query(Owner).where(referenced_by(Pet, "owner")).sum("age") == sum(o.age for o in owners if id(o) in with_pets)


def test_a_path_through_references_and_containers_of_references(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        a, b, c = Rec(name="a"), Rec(name="b"), Rec(name="c")
        for obj in (a, b, c):
            tx.add(obj)
        tx.add(Rec(name="list holder", parts=PersistentList([a, b]), kind="x"))
        tx.add(Rec(name="plain list holder", parts=[c], kind="y"))
        tx.add(Rec(name="outer", inner=Rec(name="middle", target=c), kind="z"))
    with db.transaction() as tx:
        def referenced(where: Any, path: str = "parts") -> list[str]:
            return _names(tx.query(Rec).where(referenced_by(Rec, path, where=where)))

        # A PersistentList is an object of its own: the holder refers to it, not to its items.
        assert referenced(field("kind") == "x") == []
        assert referenced(field("kind") == "y") == ["c"]
        assert referenced(field("kind") == "z", "inner.target") == ["c"]
        assert referenced(field("kind") == "z", "inner") == ["middle"]


def test_the_transaction_s_own_changes_are_seen(store: Any) -> None:
    db = store.open()
    _seed(db, 10)
    with db.transaction() as tx:
        tx.add(Owner("lonely"))
    with db.transaction() as tx:
        lonely = tx.query(Owner).where(~referenced_by(Pet, "owner")).one()
        assert lonely.name == "lonely"
        assert tx.query(Owner).where(referenced_by(Pet, "owner", where=field("name") == "new pet")).count() == 0
        tx.add(Pet("new pet", lonely))
        found = tx.query(Owner).where(referenced_by(Pet, "owner", where=field("name") == "new pet")).all()
        assert found == [lonely]
        tx.delete(tx.query(Pet).where(name="new pet").one())
        assert tx.query(Owner).where(referenced_by(Pet, "owner", where=field("name") == "new pet")).count() == 0
        tx.abort()


def test_nested_joins_and_indexed_outer_queries(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        targets = [IndexedRec(a=i, name=f"t{i}") for i in range(20)]
        middles = [Rec(name=f"m{i}", to=targets[i], level=i % 3) for i in range(20)]
        for i in range(20):
            tx.add(Rec(name=f"top{i}", to=middles[i], flag=i % 2 == 0))
    with db.transaction() as tx:
        # Targets of middles that an even top refers to, with a >= 5 (an indexed condition).
        middles_of_even = referenced_by(Rec, "to", where=field("flag") == True)  # noqa: E712
        query = tx.query(IndexedRec).where(referenced_by(Rec, "to", where=middles_of_even) & (field("a") >= 5))
        assert _names(query) == _names(t for i, t in enumerate(tx.query(IndexedRec).order_by("a")) if i % 2 == 0 and i >= 5)
        assert "referenced by" in query.explain() and "read of the" in query.explain()


def test_an_unknown_class_refers_to_nothing_and_bad_arguments_are_refused(store: Any) -> None:
    db = store.open()
    _seed(db, 5)

    class NeverStored(copal.Persistent):
        pass

    with db.transaction() as tx:
        assert tx.query(Owner).where(referenced_by(NeverStored, "owner")).count() == 0
        assert tx.query(Owner).where(~referenced_by(NeverStored, "owner")).count() == 5
    with pytest.raises(TypeError, match="takes a class"):
        referenced_by("Pet", "owner")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="invalid field path"):
        referenced_by(Pet, "owner..name")
