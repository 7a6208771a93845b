"""Aggregates evaluated in Rust on the records: ``sum``, ``min``, ``max``, ``avg`` of a query,
and the same with ``count`` per group of ``group_by``, checked against the same aggregates
computed in Python over the loaded objects (on both stores)."""

from __future__ import annotations

import asyncio
import math
import random
from collections import defaultdict
from datetime import date
from decimal import Decimal
from typing import Any, Callable

import pytest

import copal
from copal import Persistent, PersistentList

from conftest import Store
from helpers.measure import Delta


class Team(Persistent):
    def __init__(self, name: str) -> None:
        self.name = name


class Player(Persistent):
    def __init__(self, name: str, team: Team | None, score: Any, joined: date | None, level: Any = 0) -> None:
        self.name = name
        self.team = team
        self.score = score
        self.joined = joined
        self.level = level


class Never(Persistent):
    """Never stored."""


def _league(db: Any, n: int = 300, seed: int = 5) -> None:
    rng = random.Random(seed)
    teams = [Team(name) for name in ["red", "blue", "green"]]
    players = []
    for i in range(n):
        score: Any = rng.choice([rng.randint(-50, 200), rng.uniform(-10.0, 10.0), None, True])
        joined = None if i % 7 == 0 else date(2020, 1, 1 + i % 28)
        players.append(Player(f"p{i:03}", None if i % 11 == 0 else rng.choice(teams), score, joined, rng.choice([1, 1.0, 2, True, None])))
    with db.transaction() as tx:
        tx.root["players"] = PersistentList(players)


def _values(players: list[Any], get: Callable[[Any], Any]) -> list[Any]:
    return [v for v in map(get, players) if v is not None]


def _sum(values: list[Any]) -> Any:
    return None if not values else (math.fsum(values) if any(isinstance(v, float) for v in values) else sum(values))


def _avg(values: list[Any]) -> float | None:
    return None if not values else math.fsum(values) / len(values)


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9)
    return bool(a == b and type(a) is type(b))


def test_aggregates_match_python_over_the_loaded_objects(store: Store) -> None:
    db = store.open()
    _league(db)
    db = store.reopen(db)
    with db.transaction() as tx:
        built = Delta(db)
        q = tx.query(Player).where(copal.field("name") >= "p100")
        got = {"sum": q.sum("score"), "min": q.min("score"), "max": q.max("score"), "avg": q.avg("score"), "first": q.min("joined"), "last": q.max("joined")}
        assert built["cache_misses"] == 0, "no object is built"
        players = q.all()
        scores = _values(players, lambda p: p.score)
        joined = _values(players, lambda p: p.joined)
        expected = {"sum": _sum(scores), "min": min(scores), "max": max(scores), "avg": _avg(scores), "first": min(joined), "last": max(joined)}
        for name in expected:
            assert _close(got[name], expected[name]), (name, got[name], expected[name])


def test_group_by_matches_python_over_the_loaded_objects(store: Store) -> None:
    db = store.open()
    _league(db)
    with db.transaction() as tx:
        players = tx.query(Player).all()
        groups: dict[Any, list[Any]] = defaultdict(list)
        for p in players:
            groups[p.team.name if p.team is not None else None].append(p)
        grouped = tx.query(Player).group_by("team.name")
        assert grouped.count() == {team: len(members) for team, members in groups.items()}
        # Groups come in the order of their first match.
        assert list(grouped.count()) == list(groups)
        for name, aggregate, reference in [("sum", grouped.sum, _sum), ("avg", grouped.avg, _avg), ("min", grouped.min, min), ("max", grouped.max, max)]:
            got = aggregate("score")
            for team, members in groups.items():
                scores = _values(members, lambda p: p.score)
                expected = reference(scores) if scores else None
                assert _close(got[team], expected), (name, team, got[team], expected)


def test_equal_group_values_are_one_group_as_in_a_dict(store: Store) -> None:
    db = store.open()
    _league(db, n=60)
    with db.transaction() as tx:
        levels: dict[Any, int] = defaultdict(int)
        for p in tx.query(Player):
            levels[p.level] += 1
        assert tx.query(Player).group_by("level").count() == dict(levels)
        assert set(tx.query(Player).group_by("level").count()) == {1, 2, None}
        # Objects group by identity: a reference is its object.
        by_team = tx.query(Player).group_by("team").count()
        assert {team.name if team is not None else None: n for team, n in by_team.items()} == tx.query(Player).group_by("team.name").count()


def test_aggregates_see_the_transactions_changes_and_follow_limits(store: Store) -> None:
    db = store.open()
    with db.transaction() as tx:
        red = Team("red")
        tx.root["players"] = PersistentList([Player("a", red, 10, None), Player("b", red, 20, None), Player("c", None, 5, None)])
    with db.transaction() as tx:
        q = tx.query(Player)
        assert (q.sum("score"), q.group_by("team.name").sum("score")) == (35, {"red": 30, None: 5})
        tx.query(Player).where(name="a").one().score = 100
        tx.delete(tx.query(Player).where(name="c").one())
        tx.add(Player("d", Team("blue"), 1.5, None))
        assert q.sum("score") == 121.5
        assert q.group_by("team.name").sum("score") == {"red": 120, "blue": 1.5}
        assert q.group_by("team.name").count() == {"red": 2, "blue": 1}
        # Offset and limit: the aggregate of the results the query returns, in its order.
        assert q.order_by("score", descending=True).limit(2).sum("score") == 120
        assert q.order_by("score").offset(1).limit(1).max("score") == 20
        assert q.order_by("score").limit(2).group_by("team.name").count() == {"blue": 1, "red": 1}


def test_aggregates_of_nothing(store: Store) -> None:
    db = store.open()
    _league(db, n=20)
    with db.transaction() as tx:
        nobody = tx.query(Player).where(name="nobody")
        assert (nobody.sum("score"), nobody.min("score"), nobody.max("score"), nobody.avg("score")) == (None, None, None, None)
        assert nobody.group_by("team").count() == {}
        assert tx.query(Player).sum("missing") is None
        assert tx.query(Team).sum("name.length") is None
        # A class with no stored object yet.
        never = tx.query(Never)
        assert (never.sum("x"), never.min("x"), never.avg("x"), never.group_by("x").count(), never.values("x")) == (None, None, None, {}, [])


def test_ints_are_summed_exactly(store: Store) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["players"] = PersistentList([Player("a", None, 2**62, None), Player("b", None, 2**62, None), Player("c", None, 2**70, None)])
    with db.transaction() as tx:
        assert tx.query(Player).sum("score") == 2**63 + 2**70
        assert tx.query(Player).avg("score") == (2**63 + 2**70) / 3
        tx.add(Player("d", None, 2**126, None))
        tx.add(Player("e", None, 2**126, None))
        with pytest.raises(OverflowError, match="beyond 128 bits"):
            tx.query(Player).sum("score")


def test_values_that_cannot_be_added_or_ordered_are_errors(store: Store) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["players"] = PersistentList([Player("a", None, 1, None), Player("b", None, "many", None), Player("c", None, Decimal("2.5"), None)])
    with db.transaction() as tx:
        with pytest.raises(TypeError, match=r"sum\(\) of a value that is not an int, float or bool: str \"many\""):
            tx.query(Player).sum("score")
        with pytest.raises(TypeError, match=r"avg\(\) of a value that is not an int, float or bool: Decimal 2.5"):
            tx.query(Player).where(name="c").avg("score")
        with pytest.raises(TypeError, match=r"min\(\) of values that cannot be ordered: int 1 and str \"many\""):
            tx.query(Player).min("score")
        # Decimals order with ints and floats, as in Python.
        assert tx.query(Player).where(copal.field("name").in_(["a", "c"])).max("score") == Decimal("2.5")


def test_awaitable_aggregates(store: Store) -> None:
    db = store.open()
    _league(db, n=30)

    async def main() -> tuple[Any, ...]:
        async with db.transaction(readonly=True) as tx:
            q = tx.query(Player)
            return (await q.asum("level"), await q.amin("name"), await q.amax("name"), await q.aavg("level"), await q.group_by("team.name").acount(), await q.group_by("team.name").asum("level"))

    got = asyncio.run(main())
    with db.transaction() as tx:
        q = tx.query(Player)
        assert got == (q.sum("level"), "p000", "p029", q.avg("level"), q.group_by("team.name").count(), q.group_by("team.name").sum("level"))


class Reading(Persistent):
    __copal_indexes__ = [copal.Index("value")]

    def __init__(self, value: Any, where: str = "a") -> None:
        self.value = value
        self.where = where


def test_min_and_max_read_the_ends_of_an_index(store: Store) -> None:
    db = store.open()
    values = [None if i % 50 == 0 else (i * 7919) % 1000 - 300 for i in range(2000)]
    with db.transaction() as tx:
        tx.root["readings"] = PersistentList(Reading(v, "ab"[i % 2]) for i, v in enumerate(values))
    db = store.reopen(db)
    present = [v for v in values if v is not None]
    with db.transaction() as tx:
        read = Delta(db)
        q = tx.query(Reading)
        assert (q.min("value"), q.max("value")) == (min(present), max(present))
        assert read["records_read"] < 200, "the ends of the index, not every record"
        odd = [v for i, v in enumerate(values) if v is not None and i % 2]
        assert (q.where(where="b").min("value"), q.where(where="b").max("value")) == (min(odd), max(odd))
        assert q.where(copal.field("value") > 10_000).min("value") is None
        # The transaction's own changes count.
        tx.add(Reading(-10_000))
        assert q.min("value") == -10_000


def test_min_and_max_through_an_index_decide_as_a_scan_does(store: Store) -> None:
    """Ends of two kinds, or a NaN at an end, leave the answer to the scan: the same TypeError,
    the same NaN rule, as without an index."""
    db = store.open()
    with db.transaction() as tx:
        tx.root["readings"] = PersistentList([Reading(3), Reading(float("nan")), Reading(1.5), Reading(Decimal("7"))])
    with db.transaction() as tx:
        assert (tx.query(Reading).min("value"), tx.query(Reading).max("value")) == (1.5, Decimal("7"))
        tx.add(Reading("text"))
        with pytest.raises(TypeError, match="cannot be ordered"):
            tx.query(Reading).max("value")
