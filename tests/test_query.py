"""Foundation queries: equality predicates evaluated in Rust on raw records."""

from __future__ import annotations

import enum
from typing import Any

import copal
from copal import Persistent, PersistentList

from helpers.measure import Delta


class Shade(enum.Enum):
    DARK = 1
    LIGHT = 2


class NeverStored(enum.Enum):
    X = 1


class Animal(Persistent):
    def __init__(self, name: str, legs: Any, shade: Shade = Shade.DARK) -> None:
        self.name = name
        self.legs = legs
        self.shade = shade


class Bird(Animal):
    pass


def _zoo(db: Any) -> None:
    with db.transaction() as tx:
        tx.root["zoo"] = PersistentList(
            [Animal("cat", 4), Animal("snake", 0, Shade.LIGHT), Bird("owl", 2), Bird("kiwi", 2.0, Shade.LIGHT)]
        )


def test_numbers_compare_by_value_across_int_float_and_bool(store: Any) -> None:
    db = store.open()
    _zoo(db)
    with db.transaction() as tx:
        assert sorted(a.name for a in tx.query(Animal).where(legs=2)) == ["kiwi", "owl"]
        assert sorted(a.name for a in tx.query(Animal).where(legs=2.0)) == ["kiwi", "owl"]
        assert [a.name for a in tx.query(Animal).where(legs=False)] == ["snake"]


def test_subclasses_are_in_the_parent_extent_only(store: Any) -> None:
    db = store.open()
    _zoo(db)
    with db.transaction() as tx:
        assert tx.query(Animal).count() == 4
        assert tx.query(Bird).count() == 2
        assert tx.query(Bird).where(name="cat").first() is None


def test_several_equalities_and_enum_operands(store: Any) -> None:
    db = store.open()
    _zoo(db)
    with db.transaction() as tx:
        light_birds = tx.query(Animal).where(shade=Shade.LIGHT).where(legs=2).all()
        assert [a.name for a in light_birds] == ["kiwi"]
        assert tx.query(Animal).where(name="cat", legs=4).first() is tx.root["zoo"][0]


def test_operand_of_a_class_never_stored_matches_nothing(store: Any) -> None:
    db = store.open()
    _zoo(db)
    with db.transaction() as tx:
        assert tx.query(Animal).where(shade=NeverStored.X).all() == []
        assert tx.query(Animal).where(missing_field=1).all() == []


def test_only_matches_become_objects(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["many"] = PersistentList(Animal(f"a{i}", i) for i in range(2000))
    db = store.reopen(db)
    misses = Delta(db)
    with db.transaction() as tx:
        found = tx.query(Animal).where(legs=1234).all()
        assert [a.name for a in found] == ["a1234"]
    assert misses["cache_misses"] == 1


class Pair(Persistent):
    def __init__(self, left: Any, right: Any, tag: str) -> None:
        self.left = left
        self.right = right
        self.tag = tag


def test_query_over_records_that_share_objects_between_fields(store: Any) -> None:
    db = store.open()
    shared = [1, 2]
    with db.transaction() as tx:
        tx.add(Pair(shared, shared, "twins"))
        tx.add(Pair([1, 2], [3], "other"))
    db = store.reopen(db)
    with db.transaction() as tx:
        found = tx.query(Pair).where(tag="twins").all()
        assert len(found) == 1 and found[0].left is found[0].right
        assert [p.tag for p in tx.query(Pair).where(right=[3])] == ["other"]


def test_iteration_builds_objects_in_batches(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["many"] = PersistentList(Animal(f"b{i}", i) for i in range(3500))
    db = store.reopen(db)
    built = Delta(db)
    with db.transaction() as tx:
        results = iter(tx.query(Animal))
        first = [next(results) for _ in range(10)]
        assert [a.name for a in first] == [f"b{i}" for i in range(10)]
        assert built["cache_misses"] == 1000  # one batch, not the 3,500 matches
        assert sum(1 for _ in results) == 3490
    assert built["cache_misses"] == 3500


def test_query_is_generic_and_made_by_the_transaction(store: Any) -> None:
    alias = copal.Query[Animal]
    assert alias.__origin__ is copal.Query and alias.__args__ == (Animal,)
    db = store.open()
    _zoo(db)
    with db.transaction() as tx:
        animals = tx.query(Animal)
        assert isinstance(animals, copal.Query) and isinstance(animals.where(legs=4), copal.Query)
        assert "Query" in repr(type(animals))


def test_a_query_sees_classes_registered_after_it_was_made(store: Any) -> None:
    db = store.open()
    _zoo(db)
    with db.transaction() as tx:
        animals = tx.query(Animal).where(legs=2)
        assert sorted(a.name for a in animals) == ["kiwi", "owl"]

        class Penguin(Bird):
            pass

        tx.root["zoo"].append(Penguin("penguin", 2))
        # The query was made before Penguin existed: it runs with the registry as it is now.
        assert sorted(a.name for a in animals) == ["kiwi", "owl", "penguin"]
        assert animals.count() == 3
