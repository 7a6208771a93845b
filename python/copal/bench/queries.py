"""The query benchmark: queries and secondary indexes on a million objects.

``copal bench --suite queries`` stores N ``Person`` objects (``name``, ``email``, ``age``,
``city``, a reference to their own ``Address``) in every system, then, in one warm process per
system (opened once), times many runs of each query:

====  =========================================================================
Q1    find one by a unique indexed field: ``email == e``
Q2    a range on an indexed int with order and limit: ``age >= a`` by age, first 10
Q3    an unindexed predicate over the whole extent: ``name == n`` (about 5 matches)
Q4a   a count with an indexed predicate: ``a <= age <= a + 9`` (about 14% of N)
Q4b   a count with an unindexed predicate: ``city == c`` (about 1% of N)
====  =========================================================================

Systems (see :mod:`copal.bench.query_models` for their classes):

- ``copal``: ``tx.query(CopalPerson)...`` with ``copal.Index("email", unique=True)`` and
  ``copal.Index("age")``; one transaction per round.
- ``sqlite``: the standard library's sqlite3 on tables ``person`` / ``address`` with a unique
  index on ``email`` and an index on ``age``; rows become plain :class:`Person` objects.
- ``sqlalchemy``: SQLAlchemy ORM (declarative classes, one ``Session`` per round) on the
  ``sqlite`` system's file.
- ``zodb``: ZODB FileStorage; the extent is an ``IOBTree`` (id -> person), the indexes are
  ``OOBTree`` (email -> person, (age, id) -> person); the scans loop over the extent in Python.

Every system runs with its defaults (SQLite's page cache, ZODB's 400-object connection cache,
copal's 100,000-object cache) against a warm OS page cache. The parameters of the queries are
drawn from a fixed seed, different for every round (so an object cache does not answer a
lookup twice); a warm-up round (untimed) precedes the timed rounds, and its results are
compared across systems. Each query is timed on its own, including building the Query (or
statement) and the result objects and touching ``.name`` of each; a cell is the median over
the timed rounds' queries. Loading the data (one-time, N people + N addresses in commits of
50,000 people, indexes maintained as they go) is timed separately.

The data is deterministic (:func:`person_row`): a pure function of the person's number and N.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from itertools import islice
from pathlib import Path
from time import perf_counter
from typing import Any, Callable, ClassVar, Iterator, Sequence, TextIO

from copal.bench.charts import NO_MATPLOTLIB, finish, log_bars, pyplot
from copal.bench.environment import dir_size, missing_module, package_versions, run_metadata, usable_systems
from copal.bench.tables import target_rows
from copal.bench.whitepaper import peak_rss_kb
from copal.bench.workers import COPAL_DIR, last_line, run_and_report, run_worker, worker_env

DEFAULT_PEOPLE = 1_000_000
DEFAULT_ROUNDS = 5
DEFAULT_LOOKUPS = 10_000
#: Seconds one worker (a load, or a system's queries) may take.
DEFAULT_TIMEOUT = 7200.0
#: People per commit while loading.
LOAD_BATCH = 50_000
#: How many people share a name on average (Q3's expected number of matches).
NAME_MULTIPLICITY = 5
SEED = 20261122
#: Bumped whenever the generated data changes (kept stores carry it).
DATA_VERSION = 1


@dataclass(frozen=True)
class QuerySpec:
    """One query of the suite.

    Attributes:
        id: ``"Q1"`` ... ``"Q4b"``.
        title: the row label of the result table.
        method: the adapter method that runs one query (it takes the parameter).
        per_round: how many queries a round runs, as a function of ``--lookups``.
        indexed: whether the predicate has an index (for the targets).
        scan: whether it reads the whole extent (rate in records/s).
    """

    id: str
    title: str
    method: str
    per_round: Callable[[int], int]
    indexed: bool
    scan: bool


QUERIES: tuple[QuerySpec, ...] = (
    QuerySpec("Q1", "Q1 find one by unique index (email == e)", "q1",
              lambda lookups: lookups, True, False),
    QuerySpec("Q2", "Q2 indexed range, order, limit (age >= a by age, first 10)", "q2",
              lambda lookups: max(1, lookups // 5), True, False),
    QuerySpec("Q3", "Q3 unindexed scan (name == n, ~5 matches)", "q3",
              lambda lookups: 1, False, True),
    QuerySpec("Q4a", "Q4a count, indexed (a <= age <= a+9, ~14% of N)", "q4a",
              lambda lookups: max(1, lookups // 1000), True, False),
    QuerySpec("Q4b", "Q4b count, unindexed scan (city == c, ~1% of N)", "q4b",
              lambda lookups: 1, False, True),
)
QUERIES_BY_ID = {q.id: q for q in QUERIES}


# --------------------------------------------------------------------------- data

_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64 of ``x``: a well-spread 64-bit hash (deterministic, no global state)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


_SYLLABLES = (
    "ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "da", "fe", "go", "ha", "ji", "ko", "le",
    "ma", "no", "pa", "ri", "se", "ta", "ul", "va", "we", "xa", "yo", "ze", "bi", "ce", "du",
    "en", "or",
)


def _word(k: int, syllables: int) -> str:
    parts = []
    for _ in range(syllables):
        parts.append(_SYLLABLES[k % 32])
        k //= 32
    return "".join(parts).capitalize()


FIRST_NAMES = tuple(_word(k, 2) + ("a" if k >= 1024 else "") for k in range(256))
LAST_NAMES = tuple(_word(k, 3) for k in range(1024))
CITIES = tuple(_word(k * 37 + 5, 3) + " City" for k in range(100))
STREETS = tuple(_word(k * 11 + 3, 2) for k in range(64))
MIN_AGE, MAX_AGE = 18, 89

Row = tuple[str, str, int, str, str, str]


def person_row(i: int, n: int) -> Row:
    """Person number ``i`` of ``n``: (name, email, age, city, street, zip_code).

    Names are drawn from ``n // 5`` first+last combinations, so a name matches about 5 people
    at any scale; emails are unique; ages are 18..89, cities one of 100.
    """
    h = _mix(SEED * 1_000_003 + i)
    groups = max(1, n // NAME_MULTIPLICITY)
    k = h % groups
    first = FIRST_NAMES[k % 256]
    last = LAST_NAMES[(k // 256) % 1024]
    h2 = _mix(h)
    age = MIN_AGE + h2 % (MAX_AGE - MIN_AGE + 1)
    city = CITIES[(h2 >> 8) % 100]
    street = f"{(h2 >> 16) % 9999 + 1} {STREETS[(h2 >> 32) % 64]} Street"
    zip_code = f"{(h2 >> 40) % 100000:05d}"
    email = f"{first}.{last}.{i}@example.com".lower()
    return (f"{first} {last}", email, age, city, street, zip_code)


def param_rng(query_id: str, round_no: int) -> random.Random:
    """The random numbers of a query's parameters in one round (0 is the warm-up)."""
    return random.Random(f"{SEED}:{query_id}:{round_no}")


def query_params(query_id: str, round_no: int, count: int, n: int) -> list[Any]:
    """The parameters of ``count`` queries ``query_id`` in round ``round_no``."""
    rng = param_rng(query_id, round_no)
    if query_id == "Q1":
        return [person_row(rng.randrange(n), n)[1] for _ in range(count)]
    if query_id == "Q2":
        return [rng.randint(MIN_AGE, MAX_AGE) for _ in range(count)]
    if query_id == "Q3":
        return [person_row(rng.randrange(n), n)[0] for _ in range(count)]
    if query_id == "Q4a":
        return [rng.randint(MIN_AGE, MAX_AGE - 9) for _ in range(count)]
    if query_id == "Q4b":
        return [CITIES[rng.randrange(len(CITIES))] for _ in range(count)]
    raise KeyError(query_id)


def _batches(n: int) -> Iterator[range]:
    for start in range(0, n, LOAD_BATCH):
        yield range(start, min(n, start + LOAD_BATCH))


# --------------------------------------------------------------------------- systems


def _import(name: str) -> Any:
    import importlib

    return importlib.import_module(name)


def _dist_version(*names: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for name in names:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


class QuerySystem:
    """Base class of the adapters.

    ``load(dir, n)`` fills a store and returns the seconds it took (rows are generated outside
    the clock); ``open(dir, options)`` opens it once for the queries; ``begin``/``end`` frame one
    round (a transaction or session); ``q1`` ... ``q4b`` run one query and return its result
    (objects whose ``.name`` was touched, or a count).
    """

    name: ClassVar[str]
    label: ClassVar[str]
    modules: ClassVar[tuple[str, ...]]
    #: The store it queries (SQLAlchemy shares the sqlite system's file).
    store: ClassVar[str]

    @classmethod
    def unavailable(cls) -> str | None:
        """Why this system cannot run here (a missing package), or None."""
        return missing_module(cls.modules)

    @classmethod
    def versions(cls) -> dict[str, str]:
        return {}

    def load(self, dir: str, n: int) -> float:
        raise NotImplementedError

    def open(self, dir: str, options: dict[str, Any]) -> None:
        raise NotImplementedError

    def begin(self) -> None:
        """Start a round."""

    def end(self) -> None:
        """End a round."""

    def close(self) -> None:
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        """Counters worth keeping in the JSON (after the queries)."""
        return {}

    def explain(self) -> dict[str, str]:
        """How each query runs, where the system can say (inside a round)."""
        return {}

    def q1(self, email: str) -> Any:
        raise NotImplementedError

    def q2(self, age: int) -> list[Any]:
        raise NotImplementedError

    def q3(self, name: str) -> list[Any]:
        raise NotImplementedError

    def q4a(self, age: int) -> int:
        raise NotImplementedError

    def q4b(self, city: str) -> int:
        raise NotImplementedError


# ----- copal


class CopalQueries(QuerySystem):
    """copal, embedded store, declared indexes, ``tx.query``."""

    name = "copal"
    label = "copal"
    modules = ("copal",)
    store = "copal"

    def __init__(self) -> None:
        self.copal: Any = _import("copal")
        self.models: Any = _import("copal.bench.query_models")
        self.P: Any = self.models.CopalPerson
        self.db: Any = None
        self.tx: Any = None

    @classmethod
    def unavailable(cls) -> str | None:
        try:
            module = _import("copal")
        except Exception as exc:  # noqa: BLE001 - any failure means "cannot run"
            return f"copal cannot be imported ({type(exc).__name__}: {exc})"
        missing = [a for a in ("open", "Persistent", "Index", "field") if not hasattr(module, a)]
        if missing:
            return f"copal is incomplete (no {', '.join(missing)})"
        return None

    @classmethod
    def versions(cls) -> dict[str, str]:
        out: dict[str, str] = {}
        v = _dist_version("copaldb", "copal")
        if v:
            out["copal"] = v
        try:  # which build of the native core ran (a checkout is rebuilt often)
            core = Path(_import("copal._core").__file__)
            built = datetime.fromtimestamp(core.stat().st_mtime, timezone.utc)
            out["copal_core_built"] = built.isoformat(timespec="seconds")
        except Exception:  # noqa: BLE001 - metadata only
            pass
        return out

    def load(self, dir: str, n: int) -> float:
        P, A = self.P, self.models.CopalAddress
        seconds = 0.0
        t0 = perf_counter()
        db = self.copal.open(dir)
        seconds += perf_counter() - t0
        for batch in _batches(n):
            rows = [person_row(i, n) for i in batch]
            t0 = perf_counter()
            with db.transaction() as tx:
                for name, email, age, city, street, zip_code in rows:
                    tx.add(P(name, email, age, city, A(street, zip_code)))
            seconds += perf_counter() - t0
        t0 = perf_counter()
        db.close()
        return seconds + perf_counter() - t0

    def open(self, dir: str, options: dict[str, Any]) -> None:
        self.db = self.copal.open(dir)
        self.field = self.copal.field

    def begin(self) -> None:
        self.tx = self.db.transaction()

    def end(self) -> None:
        self.tx.commit()
        self.tx = None

    def close(self) -> None:
        self.db.close()

    def info(self) -> dict[str, Any]:
        return {"stats": dict(self.db.stats())}

    def explain(self) -> dict[str, str]:
        q, f = self.tx.query(self.P), self.field
        return {
            "Q1": q.where(email="x").explain(),
            "Q2": q.where(f("age") >= 40).order_by("age").limit(10).explain(),
            "Q3": q.where(name="x").explain(),
            "Q4a": q.where(f("age") >= 40, f("age") <= 49).explain(),
            "Q4b": q.where(city="x").explain(),
        }

    def q1(self, email: str) -> Any:
        p = self.tx.query(self.P).where(email=email).first()
        if p is not None:
            p.name
        return p

    def q2(self, age: int) -> list[Any]:
        found = self.tx.query(self.P).where(self.field("age") >= age).order_by("age").limit(10).all()
        for p in found:
            p.name
        return list(found)

    def q3(self, name: str) -> list[Any]:
        found = self.tx.query(self.P).where(name=name).all()
        for p in found:
            p.name
        return list(found)

    def q4a(self, age: int) -> int:
        f = self.field
        n: int = self.tx.query(self.P).where(f("age") >= age, f("age") <= age + 9).count()
        return n

    def q4b(self, city: str) -> int:
        n: int = self.tx.query(self.P).where(city=city).count()
        return n


# ----- SQLite

_SQLITE_FILE = "people.sqlite"
_SQLITE_SCHEMA = """
CREATE TABLE address (
    id INTEGER PRIMARY KEY,
    street TEXT NOT NULL,
    zip_code TEXT NOT NULL
);
CREATE TABLE person (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    email TEXT NOT NULL,
    age INTEGER NOT NULL,
    city TEXT NOT NULL,
    address_id INTEGER NOT NULL REFERENCES address(id)
);
CREATE UNIQUE INDEX ix_person_email ON person (email);
CREATE INDEX ix_person_age ON person (age);
"""
_COLUMNS = "name, email, age, city, address_id"


class SqliteQueries(QuerySystem):
    """The standard library's sqlite3, SQLite defaults, rows turned into plain Person objects."""

    name = "sqlite"
    label = "SQLite"
    modules = ("sqlite3",)
    store = "sqlite"

    def __init__(self) -> None:
        self.sqlite3: Any = _import("sqlite3")
        self.Person: Any = _import("copal.bench.query_models").Person
        self.conn: Any = None

    @classmethod
    def versions(cls) -> dict[str, str]:
        return {"sqlite3_lib": str(_import("sqlite3").sqlite_version)}

    def load(self, dir: str, n: int) -> float:
        os.makedirs(dir, exist_ok=True)
        seconds = 0.0
        t0 = perf_counter()
        conn = self.sqlite3.connect(os.path.join(dir, _SQLITE_FILE))
        conn.executescript(_SQLITE_SCHEMA)
        seconds += perf_counter() - t0
        for batch in _batches(n):
            rows = [person_row(i, n) for i in batch]
            t0 = perf_counter()
            with conn:
                conn.executemany(
                    "INSERT INTO address (id, street, zip_code) VALUES (?, ?, ?)",
                    [(i + 1, r[4], r[5]) for i, r in zip(batch, rows)],
                )
                conn.executemany(
                    f"INSERT INTO person (id, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                    [(i + 1, r[0], r[1], r[2], r[3], i + 1) for i, r in zip(batch, rows)],
                )
            seconds += perf_counter() - t0
        t0 = perf_counter()
        conn.execute("ANALYZE")
        conn.close()
        return seconds + perf_counter() - t0

    def open(self, dir: str, options: dict[str, Any]) -> None:
        self.conn = self.sqlite3.connect(os.path.join(dir, _SQLITE_FILE))

    def close(self) -> None:
        self.conn.close()

    def explain(self) -> dict[str, str]:
        def plan(sql: str, *args: Any) -> str:
            rows = self.conn.execute("EXPLAIN QUERY PLAN " + sql, args).fetchall()
            return "; ".join(str(r[-1]) for r in rows)

        return {
            "Q1": plan(f"SELECT {_COLUMNS} FROM person WHERE email = ?", "x"),
            "Q2": plan(f"SELECT {_COLUMNS} FROM person WHERE age >= ? ORDER BY age LIMIT 10", 40),
            "Q3": plan(f"SELECT {_COLUMNS} FROM person WHERE name = ?", "x"),
            "Q4a": plan("SELECT count(*) FROM person WHERE age BETWEEN ? AND ?", 40, 49),
            "Q4b": plan("SELECT count(*) FROM person WHERE city = ?", "x"),
        }

    def q1(self, email: str) -> Any:
        row = self.conn.execute(f"SELECT {_COLUMNS} FROM person WHERE email = ?", (email,)).fetchone()
        if row is None:
            return None
        p = self.Person(*row)
        p.name
        return p

    def _objects(self, sql: str, args: tuple[Any, ...]) -> list[Any]:
        Person = self.Person
        found = [Person(*row) for row in self.conn.execute(sql, args)]
        for p in found:
            p.name
        return found

    def q2(self, age: int) -> list[Any]:
        return self._objects(
            f"SELECT {_COLUMNS} FROM person WHERE age >= ? ORDER BY age LIMIT 10", (age,)
        )

    def q3(self, name: str) -> list[Any]:
        return self._objects(f"SELECT {_COLUMNS} FROM person WHERE name = ?", (name,))

    def q4a(self, age: int) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM person WHERE age BETWEEN ? AND ?", (age, age + 9)
        ).fetchone()
        return int(row[0])

    def q4b(self, city: str) -> int:
        row = self.conn.execute("SELECT count(*) FROM person WHERE city = ?", (city,)).fetchone()
        return int(row[0])


# ----- SQLAlchemy


class SqlAlchemyQueries(QuerySystem):
    """SQLAlchemy ORM (2.x ``select`` API) on the sqlite system's file; one Session per round."""

    name = "sqlalchemy"
    label = "SQLAlchemy ORM"
    modules = ("sqlalchemy",)
    store = "sqlite"

    def __init__(self) -> None:
        self.sa: Any = _import("sqlalchemy")
        self.orm: Any = _import("sqlalchemy.orm")
        models = _import("copal.bench.query_models")
        self.P: Any = models.SAPerson
        self.engine: Any = None
        self.session: Any = None

    @classmethod
    def versions(cls) -> dict[str, str]:
        v = _dist_version("SQLAlchemy", "sqlalchemy")
        return {"SQLAlchemy": v} if v else {}

    def load(self, dir: str, n: int) -> float:
        return SqliteQueries().load(dir, n)

    def open(self, dir: str, options: dict[str, Any]) -> None:
        self.engine = self.sa.create_engine("sqlite:///" + os.path.join(dir, _SQLITE_FILE))

    def begin(self) -> None:
        self.session = self.orm.Session(self.engine)

    def end(self) -> None:
        self.session.close()
        self.session = None

    def close(self) -> None:
        self.engine.dispose()

    def q1(self, email: str) -> Any:
        P = self.P
        p = self.session.scalars(self.sa.select(P).where(P.email == email)).one_or_none()
        if p is not None:
            p.name
        return p

    def _objects(self, stmt: Any) -> list[Any]:
        found = list(self.session.scalars(stmt))
        for p in found:
            p.name
        return found

    def q2(self, age: int) -> list[Any]:
        P = self.P
        return self._objects(self.sa.select(P).where(P.age >= age).order_by(P.age).limit(10))

    def q3(self, name: str) -> list[Any]:
        P = self.P
        return self._objects(self.sa.select(P).where(P.name == name))

    def q4a(self, age: int) -> int:
        P, sa = self.P, self.sa
        stmt = sa.select(sa.func.count()).select_from(P).where(P.age.between(age, age + 9))
        return int(self.session.scalar(stmt))

    def q4b(self, city: str) -> int:
        P, sa = self.P, self.sa
        return int(self.session.scalar(sa.select(sa.func.count()).select_from(P).where(P.city == city)))


# ----- ZODB


class ZODBQueries(QuerySystem):
    """ZODB FileStorage: an IOBTree extent, OOBTree indexes, Python loops for the scans."""

    name = "zodb"
    label = "ZODB"
    modules = ("ZODB", "persistent", "BTrees", "transaction")
    store = "zodb"

    def __init__(self) -> None:
        self.ZODB: Any = _import("ZODB")
        self.FileStorage: Any = _import("ZODB.FileStorage")
        self.transaction: Any = _import("transaction")
        self.IOBTree: Any = _import("BTrees.IOBTree").IOBTree
        self.OOBTree: Any = _import("BTrees.OOBTree").OOBTree
        self.models: Any = _import("copal.bench.query_models")
        self.db: Any = None
        self.conn: Any = None
        self.tm: Any = None

    @classmethod
    def versions(cls) -> dict[str, str]:
        out = {}
        for dist in ("ZODB", "persistent", "BTrees"):
            v = _dist_version(dist)
            if v:
                out[dist] = v
        return out

    def _open_db(self, dir: str, cache_size: int | None) -> None:
        os.makedirs(dir, exist_ok=True)
        storage = self.FileStorage.FileStorage(os.path.join(dir, "Data.fs"))
        kwargs = {} if cache_size is None else {"cache_size": cache_size}
        self.db = self.ZODB.DB(storage, **kwargs)
        self.tm = self.transaction.TransactionManager()
        self.conn = self.db.open(self.tm)

    def load(self, dir: str, n: int) -> float:
        P, A = self.models.ZPerson, self.models.ZAddress
        seconds = 0.0
        t0 = perf_counter()
        self._open_db(dir, None)
        root = self.conn.root()
        root["people"] = people = self.IOBTree()
        root["by_email"] = by_email = self.OOBTree()
        root["by_age"] = by_age = self.OOBTree()
        seconds += perf_counter() - t0
        for batch in _batches(n):
            rows = [person_row(i, n) for i in batch]
            t0 = perf_counter()
            for i, (name, email, age, city, street, zip_code) in zip(batch, rows):
                p = P(name, email, age, city, A(street, zip_code))
                people[i] = p
                by_email[email] = p
                by_age[(age, i)] = p
            self.tm.commit()
            self.conn.cacheMinimize()
            seconds += perf_counter() - t0
        t0 = perf_counter()
        self.close()
        return seconds + perf_counter() - t0

    def open(self, dir: str, options: dict[str, Any]) -> None:
        self._open_db(dir, options.get("zodb_cache_size"))
        root = self.conn.root()
        self.people, self.by_email, self.by_age = root["people"], root["by_email"], root["by_age"]

    def end(self) -> None:
        self.tm.abort()

    def close(self) -> None:
        self.tm.abort()
        self.conn.close()
        self.db.close()

    def info(self) -> dict[str, Any]:
        return {"cache_size": self.db.getCacheSize()}

    def q1(self, email: str) -> Any:
        p = self.by_email.get(email)
        if p is not None:
            p.name
        return p

    def q2(self, age: int) -> list[Any]:
        found = list(islice(self.by_age.values(min=(age,)), 10))
        for p in found:
            p.name
        return found

    def q3(self, name: str) -> list[Any]:
        return [p for p in self.people.values() if p.name == name]

    def q4a(self, age: int) -> int:
        return len(self.by_age.keys(min=(age,), max=(age + 10,), excludemax=True))

    def q4b(self, city: str) -> int:
        return sum(1 for p in self.people.values() if p.city == city)


#: The adapters by ``--systems`` name, in the default column order.
QUERY_SYSTEMS: dict[str, type[QuerySystem]] = {
    cls.name: cls for cls in (CopalQueries, SqliteQueries, SqlAlchemyQueries, ZODBQueries)
}


# --------------------------------------------------------------------------- worker


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _summary_of(result: Any) -> Any:
    """What a result is compared by across systems: emails (in order) or a count."""
    if isinstance(result, int):
        return result
    if isinstance(result, list):
        return [p.email for p in result]
    return None if result is None else result.email


def run_queries(adapter: QuerySystem, n: int, rounds: int, lookups: int) -> dict[str, Any]:
    """Every query: a warm-up round (checked) then ``rounds`` timed rounds."""
    out: dict[str, Any] = {}
    for spec in QUERIES:
        run = getattr(adapter, spec.method)
        count = spec.per_round(lookups)
        times: list[float] = []
        round_means: list[float] = []
        check: list[Any] = []
        sizes: list[int] = []
        for round_no in range(rounds + 1):
            params = query_params(spec.id, round_no, count, n)
            adapter.begin()
            try:
                elapsed: list[float] = []
                for param in params:
                    t0 = perf_counter()
                    result = run(param)
                    elapsed.append(perf_counter() - t0)
                    if round_no == 0:
                        check.append(_summary_of(result))
                        sizes.append(result if isinstance(result, int) else
                                     len(result) if isinstance(result, list) else int(result is not None))
            finally:
                adapter.end()
            if round_no > 0:
                times.extend(elapsed)
                round_means.append(sum(elapsed) / len(elapsed))
        # Q3's matches come back in each system's own order: compare them sorted.
        if spec.id == "Q3":
            check = [sorted(c) for c in check]
        out[spec.id] = {
            "median_s": statistics.median(times),
            "mean_s": statistics.fmean(times),
            "min_s": min(times),
            "p90_s": statistics.quantiles(times, n=10)[-1] if len(times) >= 2 else times[0],
            "queries": len(times),
            "per_query_round_means_s": round_means,
            "mean_result_size": statistics.fmean(sizes) if sizes else 0.0,
            "digest": _digest(check),
        }
    return out


def worker_main(spec: dict[str, Any]) -> int:
    """Load a store or run the queries, as ``spec`` says; print the report
    (:func:`copal.bench.workers.run_and_report`)."""
    import resource

    def work() -> dict[str, Any]:
        adapter = QUERY_SYSTEMS[spec["system"]]()
        n = int(spec["people"])
        if spec["action"] == "load":
            seconds = adapter.load(spec["dir"], n)
            out: dict[str, Any] = {"ok": True, "seconds": seconds, "info": {}}
        else:
            adapter.open(spec["dir"], spec.get("options") or {})
            adapter.begin()
            try:
                explain = adapter.explain()
            finally:
                adapter.end()
            results = run_queries(adapter, n, int(spec["rounds"]), int(spec["lookups"]))
            info = adapter.info()
            adapter.close()
            out = {"ok": True, "queries": results, "explain": explain, "info": info}
        out["rss_kb"] = peak_rss_kb()
        out["ru_maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return out

    return run_and_report(work)


# --------------------------------------------------------------------------- orchestration

#: The module of the workers' entry point (:func:`worker_main`).
WORKER = "copal.bench.queries"

_MARKER = "copal-bench-loaded.json"


def _ensure_store(
    system: str, store_dir: Path, n: int, reuse: bool, timeout: float, env: dict[str, str],
    copal_dir: str,
) -> dict[str, Any]:
    """Load the store (or reuse a complete one); the load report."""
    marker = store_dir / _MARKER
    if reuse and marker.exists():
        try:
            kept = json.loads(marker.read_text())
        except (OSError, ValueError):
            kept = {}
        if kept.get("people") == n and kept.get("data_version") == DATA_VERSION and kept.get("seconds"):
            return {"ok": True, "seconds": float(kept["seconds"]), "reused": True}
    if store_dir.exists():
        shutil.rmtree(store_dir)
    store_dir.mkdir(parents=True)
    spec = {"system": system, "action": "load", "dir": str(store_dir), "people": n,
            "copal_dir": copal_dir}
    report = run_worker(WORKER, spec, timeout, env)
    if report.get("ok"):
        marker.write_text(json.dumps(
            {"people": n, "data_version": DATA_VERSION, "seconds": report["seconds"], "loaded_by": system}
        ))
    return report


def run_suite(
    systems: list[str], n: int, rounds: int, lookups: int, out: Path, timeout: float,
    keep: bool, reuse: bool, options: dict[str, Any], progress: Any,
) -> dict[str, Any]:
    """Load every store and run every system's queries; raw per-system reports."""
    env = worker_env()
    work = out / "work" / "queries" / f"N{n}"
    loads: dict[str, dict[str, Any]] = {}
    per_system: dict[str, dict[str, Any]] = {}
    for name in systems:
        store = QUERY_SYSTEMS[name].store
        store_dir = work / store
        if store not in loads:
            progress.show(f"queries N={n}: loading {store} ({name})")
            loads[store] = _ensure_store(name, store_dir, n, reuse, timeout, env, COPAL_DIR)
            loads[store]["loaded_by"] = name
            if loads[store].get("ok"):
                loads[store]["size_bytes"] = dir_size(store_dir, skip=lambda name: name.endswith((".lock", ".tmp")))
            else:
                progress.message(f"copal bench: loading {store} failed: {last_line(loads[store]['error'])}")
        progress.step()
        load = loads[store]
        if not load.get("ok"):
            per_system[name] = {"ok": False, "error": f"skipped: loading {store} failed"}
            progress.step()
            continue
        progress.show(f"queries N={n}: {name} ({rounds} rounds)")
        spec = {"system": name, "action": "queries", "dir": str(store_dir), "people": n,
                "rounds": rounds, "lookups": lookups, "options": options, "copal_dir": COPAL_DIR}
        per_system[name] = run_worker(WORKER, spec, timeout, env)
        if not per_system[name].get("ok"):
            progress.message(f"copal bench: queries of {name} failed: {last_line(per_system[name]['error'])}")
        progress.step()
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return {"loads": loads, "systems": per_system}


# --------------------------------------------------------------------------- summary


def summarize(raw: dict[str, Any], systems: list[str], baseline: str, n: int) -> dict[str, Any]:
    """The JSON-ready results: per query and system, medians and ratios; load; targets."""
    reports = raw["systems"]
    queries = []
    for spec in QUERIES:
        base_report = reports.get(baseline, {})
        base = base_report["queries"][spec.id] if base_report.get("ok") else None
        digests: dict[str, str] = {}
        per: dict[str, Any] = {}
        for s in systems:
            rep = reports[s]
            if not rep.get("ok"):
                per[s] = {"median_s": None, "ratio": None, "error": rep.get("error")}
                continue
            r = dict(rep["queries"][spec.id])
            r["ratio"] = (
                None if s == baseline or base is None or not base["median_s"]
                else r["median_s"] / base["median_s"]
            )
            if spec.scan:
                r["records_per_s"] = n / r["median_s"] if r["median_s"] else None
            per[s] = r
            digests[s] = r["digest"]
        agree = len(set(digests.values())) <= 1
        queries.append({
            "id": spec.id, "title": spec.title, "indexed": spec.indexed, "scan": spec.scan,
            "results_agree": agree, "results": per,
        })

    loads: dict[str, Any] = {}
    base_store = QUERY_SYSTEMS[baseline].store
    base_load = raw["loads"].get(base_store, {})
    for s in systems:
        load = raw["loads"][QUERY_SYSTEMS[s].store]
        if not load.get("ok"):
            loads[s] = {"seconds": None, "error": load.get("error")}
            continue
        shared = load.get("loaded_by") != s
        loads[s] = {
            "seconds": load["seconds"],
            "shared_with": load.get("loaded_by") if shared else None,
            "reused": bool(load.get("reused")),
            "size_bytes": load.get("size_bytes"),
            "ratio": (
                None if s == baseline or not base_load.get("ok")
                else load["seconds"] / base_load["seconds"]
            ),
            "size_ratio": (
                None if s == baseline or not base_load.get("size_bytes") or not load.get("size_bytes")
                else load["size_bytes"] / base_load["size_bytes"]
            ),
        }
    extra = {
        s: {k: reports[s].get(k) for k in ("explain", "info", "rss_kb")} for s in systems if reports[s].get("ok")
    }
    return {
        "people": n,
        "queries": queries,
        "load": loads,
        "details": extra,
        "targets": evaluate_targets(queries, n),
    }


def evaluate_targets(queries: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The issue's targets, each with ``met`` (None where a system needed did not run)."""
    def median(qid: str, system: str) -> float | None:
        for q in queries:
            if q["id"] == qid:
                value = q["results"].get(system, {}).get("median_s")
                return None if value is None else float(value)
        return None

    targets: list[dict[str, Any]] = []
    cases = []
    for q in queries:
        c, s = median(q["id"], "copal"), median(q["id"], "sqlite")
        if c is not None and s is not None:
            cases.append(f"{q['id']} x{s / c:.2f}")
    all_faster = [median(q["id"], "copal") is not None and median(q["id"], "sqlite") is not None
                  and (median(q["id"], "copal") or 0) <= (median(q["id"], "sqlite") or 0) for q in queries]
    targets.append({
        "target": "copal at least as fast as SQLite in every query",
        "result": "SQLite / copal: " + ", ".join(cases) if cases else "copal or SQLite did not run",
        "met": all(all_faster) if cases and len(cases) == len(queries) else None,
    })
    q1 = median("Q1", "copal")
    targets.append({
        "target": "indexed lookup (Q1) under 20 µs per query",
        "result": "-" if q1 is None else f"{q1 * 1e6:.1f} µs",
        "met": None if q1 is None else q1 < 20e-6,
    })
    for qid in ("Q3", "Q4b"):
        t = median(qid, "copal")
        targets.append({
            "target": f"unindexed scan ({qid}) at least 10 million records/s",
            "result": "-" if t is None else f"{n / t / 1e6:.1f} M records/s",
            "met": None if t is None else n / t >= 10e6,
        })
        z = median(qid, "zodb")
        targets.append({
            "target": f"unindexed scan ({qid}) at least 10x faster than ZODB's loop",
            "result": "-" if t is None or z is None else f"x{z / t:.1f}",
            "met": None if t is None or z is None else z / t >= 10,
        })
    return targets


# --------------------------------------------------------------------------- table


def format_duration(t: float) -> str:
    """A per-query time in µs, ms or s with three significant digits."""
    if t < 1e-3:
        return f"{t * 1e6:.3g} µs"
    if t < 1:
        return f"{t * 1e3:.3g} ms"
    return f"{t:.3g} s"


def _bytes(b: float) -> str:
    return f"{b / 1e6:.1f} MB" if b >= 1e6 else f"{b / 1e3:.1f} kB"


def format_table(summary: dict[str, Any], systems: list[str], labels: dict[str, str]) -> str:
    """The Markdown table of one run, then the targets."""
    lines = [
        f"## Queries, N = {summary['people']:,} people",
        "",
        "| query | " + " | ".join(labels[s] for s in systems) + " |",
        "|---|" + "---:|" * len(systems),
    ]
    for q in summary["queries"]:
        cells = []
        for s in systems:
            r = q["results"][s]
            if r.get("median_s") is None:
                cells.append("error" if r.get("error") else "-")
                continue
            cell = format_duration(r["median_s"])
            if r.get("ratio") is not None:
                cell += f" (x{r['ratio']:.2f})"
            cells.append(cell)
        mark = "" if q["results_agree"] else " **results differ**"
        lines.append(f"| {q['title']}{mark} | " + " | ".join(cells) + " |")
    for q in summary["queries"]:
        if q["scan"]:
            cells = []
            for s in systems:
                rate = q["results"][s].get("records_per_s")
                cells.append("-" if rate is None else f"{rate / 1e6:.1f} M/s")
            lines.append(f"| {q['id']} scan rate (records/s) | " + " | ".join(cells) + " |")
    cells, sizes = [], []
    for s in systems:
        load = summary["load"][s]
        if load.get("seconds") is None:
            cells.append("error")
            sizes.append("-")
            continue
        if load.get("shared_with"):
            cells.append(f"(file of {labels.get(load['shared_with'], load['shared_with'])})")
            sizes.append("(same file)")
            continue
        cell = f"{load['seconds']:.1f} s" if load["seconds"] >= 1 else format_duration(load["seconds"])
        cells.append(cell + (f" (x{load['ratio']:.2f})" if load.get("ratio") is not None else ""))
        size = load.get("size_bytes")
        sizes.append("-" if size is None else _bytes(size) + (
            f" (x{load['size_ratio']:.2f})" if load.get("size_ratio") is not None else ""))
    lines.append("| load N people + N addresses (one-time) | " + " | ".join(cells) + " |")
    lines.append("| on-disk size after load | " + " | ".join(sizes) + " |")
    lines += target_rows(summary["targets"])
    return "\n".join(lines)


def draw_chart(summary: dict[str, Any], systems: list[str], labels: dict[str, str], path: Path) -> str | None:
    """Save a log-scale grouped bar chart of the per-query medians; return why not, or None."""
    plt = pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    queries = summary["queries"]
    fig, ax = plt.subplots(figsize=(max(8.0, 1.6 * len(queries) + 2), 5.0))
    series = [(labels[s], [q["results"][s].get("median_s") for q in queries]) for s in systems]
    log_bars(ax, [q["id"] for q in queries], series, "median seconds per query (log scale)")
    ax.set_title(f"Queries, N = {summary['people']:,} people (warm process, median per query)")
    finish(fig, [ax], path)
    return None


# --------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the query suite (``copal bench --suite queries``)."""
    group = parser.add_argument_group("query suite (--suite queries)")
    group.add_argument(
        "--people", type=lambda v: int(v.replace("_", "")), metavar="N",
        help=f"number of Person objects (default {DEFAULT_PEOPLE:,})",
    )
    group.add_argument(
        "--rounds", type=int, default=DEFAULT_ROUNDS, metavar="N",
        help=f"timed rounds per query after a warm-up round (default {DEFAULT_ROUNDS})",
    )
    group.add_argument(
        "--lookups", type=int, default=DEFAULT_LOOKUPS, metavar="N",
        help=f"Q1 lookups per round; Q2 runs N/5, Q4a N/1000, the scans 1 (default {DEFAULT_LOOKUPS:,})",
    )
    group.add_argument(
        "--zodb-cache-size", type=int, metavar="OBJECTS",
        help="ZODB connection cache size for the queries (default: ZODB's own, 400)",
    )
    group.add_argument(
        "--reuse", action="store_true",
        help="reuse the stores a run with --keep left under DIR/work (same N), skipping the load",
    )


def metadata(args: argparse.Namespace, systems: list[str], skipped: dict[str, str], n: int) -> dict[str, Any]:
    return {
        **run_metadata("queries", package_versions(QUERY_SYSTEMS[name].versions for name in systems)),
        "people": n,
        "rounds": args.rounds,
        "lookups": args.lookups,
        "seed": SEED,
        "data_version": DATA_VERSION,
        "zodb_cache_size": args.zodb_cache_size,
        "skipped_systems": skipped,
        "method": (
            "one worker process per system loads the store (timed once; rows generated outside "
            "the clock; commits of 50,000 people), another opens it once and runs each query: "
            "a warm-up round whose results are compared across systems, then the timed rounds "
            "with fresh parameters (fixed seed); each query timed on its own, including building "
            "the result objects and touching .name; cell = median per query over the timed "
            "rounds; ratio = system median / baseline median"
        ),
    }


def run(
    args: argparse.Namespace, requested: list[str], report: TextIO, progress_factory: Callable[[int], Any],
) -> tuple[int, dict[str, Any] | None]:
    """Run the suite for ``copal bench``; the exit status and the JSON document."""
    n = DEFAULT_PEOPLE if args.people is None else args.people
    if n < 1:
        print("copal bench: --people must be at least 1", file=sys.stderr)
        return 2, None
    if args.rounds < 1 or args.lookups < 1:
        print("copal bench: --rounds and --lookups must be at least 1", file=sys.stderr)
        return 2, None
    systems, skipped = usable_systems(requested, lambda name: QUERY_SYSTEMS[name].unavailable(), "the queries")
    if not systems:
        return 1, None
    baseline = args.baseline if args.baseline in systems else ("copal" if "copal" in systems else systems[0])
    labels = {s: QUERY_SYSTEMS[s].label for s in systems}
    options = {"zodb_cache_size": args.zodb_cache_size}

    out = Path(args.out)
    progress = progress_factory(2 * len(systems))
    started = time.monotonic()
    timeout = DEFAULT_TIMEOUT if args.timeout is None else args.timeout
    raw = run_suite(systems, n, args.rounds, args.lookups, out, timeout, args.keep,
                    args.reuse, options, progress)
    progress.clear()
    summary = summarize(raw, systems, baseline, n)
    failed = any(not raw["systems"][s].get("ok") for s in systems)
    failed = failed or not all(q["results_agree"] for q in summary["queries"])

    print(
        f"Cells: median time per query in a warm process ({args.rounds} timed rounds after a "
        f"warm-up; Q1 {args.lookups:,} lookups per round); (xR) = ratio to {labels[baseline]}.",
        file=report,
    )
    print("", file=report)
    print(format_table(summary, systems, labels), file=report)
    for q in summary["queries"]:
        if not q["results_agree"]:
            digests = {s: r.get("digest") for s, r in q["results"].items()}
            print(f"warning: {q['id']} results differ between systems: {digests}", file=report)
    for name in systems:
        error = raw["systems"][name].get("error")
        if error:
            print(f"\n{name} failed:\n{error}", file=report)
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}", file=report)
    print(f"(suite took {time.monotonic() - started:.0f} s)", file=sys.stderr)
    report.flush()

    if not args.no_chart:
        chart = out / f"queries-N{n}.png"
        why_not = draw_chart(summary, systems, labels, chart)
        print(f"chart: {chart}" if why_not is None else f"copal bench: {why_not}", file=sys.stderr)

    document = {
        "meta": metadata(args, systems, skipped, n),
        "systems": systems,
        "labels": labels,
        "baseline": baseline,
        "queries": [{"id": q.id, "title": q.title, "indexed": q.indexed, "scan": q.scan} for q in QUERIES],
        "results": summary,
    }
    return (1 if failed else 0), document

