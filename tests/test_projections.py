"""Projections: ``query.values(*paths)`` reads the values of paths from the records, in Rust,
without building the objects, and gives what loading the objects would give (on both stores)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import copal
from copal import Persistent, PersistentList

from conftest import Store
from helpers.evolved_members import stored_before_and_after
from helpers.measure import Delta


class City(Persistent):
    def __init__(self, name: str, country: str) -> None:
        self.name = name
        self.country = country


class Badge:
    """An embedded (non-persistent) object."""

    def __init__(self, label: str, level: int) -> None:
        self.label = label
        self.level = level


class Citizen(Persistent):
    def __init__(self, name: str, age: Any, city: City | None, badge: Badge | None = None, extra: dict[str, Any] | None = None) -> None:
        self.name = name
        self.age = age
        self.city = city
        self.badge = badge
        self.extra = extra if extra is not None else {}


def _town(db: Any) -> None:
    with db.transaction() as tx:
        paris, lyon = City("Paris", "FR"), City("Lyon", "FR")
        shared = ["a", "b"]
        people = [
            Citizen("ann", 31, paris, Badge("gold", 3), {"score": 7, "tags": shared, "again": shared}),
            Citizen("bob", 25, lyon, None, {"score": 2}),
            Citizen("cy", None, None, Badge("tin", 1)),
            Citizen("dee", 47.5, paris),
        ]
        tx.root["people"] = PersistentList(people)


def _expected(obj: Any, path: str) -> Any:
    """The value of `path` as Python reads it from the loaded object (None where it leads
    nowhere)."""
    value = obj
    for name in path.split("."):
        if isinstance(value, dict):
            value = value.get(name)
        else:
            value = getattr(value, name, None)
        if value is None:
            return None
    return value


PATHS = ["name", "age", "city", "city.name", "city.country", "badge", "badge.label", "extra.score", "extra.tags", "missing", "badge.missing"]


def test_values_are_what_loading_gives(store: Store) -> None:
    db = store.open()
    _town(db)
    db = store.reopen(db)
    with db.transaction() as tx:
        rows = tx.query(Citizen).values(*PATHS)
        people = tx.query(Citizen).all()
        assert len(rows) == len(people) == 4
        for row, person in zip(rows, people):
            for path, value in zip(PATHS, row):
                expected = _expected(person, path)
                if isinstance(expected, Badge):
                    assert isinstance(value, Badge) and vars(value) == vars(expected), path
                else:
                    assert value == expected, path
                # References are the transaction's objects themselves.
                if isinstance(expected, Persistent):
                    assert value is expected


def test_values_build_no_object(store: Store) -> None:
    db = store.open()
    _town(db)
    db = store.reopen(db)
    with db.transaction() as tx:
        built = Delta(db)
        assert sorted(tx.query(Citizen).values("name", "city.name"), key=str) == [("ann", "Paris"), ("bob", "Lyon"), ("cy", None), ("dee", "Paris")]
        assert built["cache_misses"] == 0
        # A reference gives a ghost, loaded only when touched.
        (city,) = tx.query(Citizen).where(name="bob").values("city")[0]
        assert built["cache_misses"] == 0
        assert city.name == "Lyon"
        assert built["cache_misses"] == 1


def test_values_follow_where_order_offset_and_limit(store: Store) -> None:
    db = store.open()
    _town(db)
    with db.transaction() as tx:
        q = tx.query(Citizen)
        assert q.where(copal.field("city.name") == "Paris").values("name") == [("ann",), ("dee",)]
        assert q.order_by("name", descending=True).values("name") == [("dee",), ("cy",), ("bob",), ("ann",)]
        assert q.order_by("name").offset(1).limit(2).values("name", "age") == [("bob", 25), ("cy", None)]
        assert q.order_by(copal.field("badge.level")).values(copal.field("name")) == [("bob",), ("dee",), ("cy",), ("ann",)]
        assert q.where(name="nobody").values("name") == []


def test_a_value_shared_inside_a_record_is_copied_whole(store: Store) -> None:
    db = store.open()
    _town(db)
    with db.transaction() as tx:
        ((tags, again, extra),) = tx.query(Citizen).where(name="ann").values("extra.tags", "extra.again", "extra")
        assert tags == again == ["a", "b"] and tags is not again
        assert extra == {"score": 7, "tags": ["a", "b"], "again": ["a", "b"]}


def test_values_see_the_transactions_changes(store: Store) -> None:
    db = store.open()
    _town(db)
    with db.transaction() as tx:
        ann = tx.query(Citizen).where(name="ann").one()
        ann.age = 32
        tx.delete(tx.query(Citizen).where(name="bob").one())
        nice = City("Nice", "FR")
        tx.add(Citizen("eve", 19, nice))
        rows = tx.query(Citizen).values("name", "age", "city", "city.name")
        assert [row[:2] for row in rows] == [("ann", 32), ("cy", None), ("dee", 47.5), ("eve", 19)]
        # A new object, not stored yet, is itself.
        assert rows[3][2] is nice and rows[3][3] == "Nice"


def test_values_read_added_fields_as_their_defaults(store: Store, tmp_path: Path) -> None:
    db, v2 = stored_before_and_after(store, tmp_path, "evo_added_values")
    with db.transaction() as tx:
        assert tx.query(v2.Member).values("name", "level", "rank", "tier") == [
            ("Ann", "basic", 5, "silver"),
            ("Bob", "basic", 5, "silver"),
            ("Cy", "basic", 5, "silver"),
            ("Dee", "gold", 1, "silver"),
            ("Eve", "basic", 9, "silver"),
        ]


def test_values_needs_paths_and_refuses_bad_ones(store: Store) -> None:
    db = store.open()
    _town(db)
    with db.transaction() as tx:
        with pytest.raises(TypeError, match="at least one path"):
            tx.query(Citizen).values()
        with pytest.raises(TypeError, match=r"a path is a str .* not int"):
            tx.query(Citizen).values(3)
        with pytest.raises(TypeError, match="not int"):
            tx.query(Citizen).order_by(3)
        with pytest.raises(ValueError):
            tx.query(Citizen).values("")


def test_awaitable_values(store: Store) -> None:
    db = store.open()
    _town(db)

    async def main() -> list[tuple[Any, ...]]:
        async with db.transaction(readonly=True) as tx:
            return await tx.query(Citizen).order_by("name").avalues("name", "city.name")

    assert asyncio.run(main()) == [("ann", "Paris"), ("bob", "Lyon"), ("cy", None), ("dee", "Paris")]


def test_a_value_that_holds_itself_is_refused_not_copied_forever(store: Store) -> None:
    db = store.open()
    looped: list[Any] = [1]
    looped.append(looped)
    with db.transaction() as tx:
        tx.root["people"] = PersistentList([Citizen("ann", 31, None, extra={"loop": looped})])
    with db.transaction() as tx:
        with pytest.raises(copal.StorageError, match="holds itself"):
            tx.query(Citizen).values("extra.loop")
        # The object itself loads as it was stored.
        loop = tx.query(Citizen).one().extra["loop"]
        assert loop[1] is loop
        assert tx.query(Citizen).values("name") == [("ann",)]
