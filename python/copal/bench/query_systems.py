"""The query benchmark's systems: one adapter per system, each running the queries of
:data:`copal.bench.query_data.QUERIES` as the system's users write them, on the classes of
:mod:`copal.bench.query_models`.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from itertools import islice
from pathlib import Path
from time import perf_counter
from typing import Any, ClassVar, Iterable

from copal.bench.environment import Adapter, dist_version
from copal.bench.query_data import batches, person_row


def _import(name: str) -> Any:
    import importlib

    return importlib.import_module(name)


class QuerySystem(Adapter):
    """Base class of the adapters.

    ``load(dir, n)`` fills a store and returns the seconds it took (rows are generated outside
    the clock); ``open(dir, options)`` opens it once for the queries; ``begin``/``end`` frame one
    round (a transaction or session); ``q1`` ... ``q4b`` run one query and return its result
    (objects whose ``.name`` was touched, or a count).
    """

    #: The store it queries (SQLAlchemy shares the sqlite system's file).
    store: ClassVar[str]

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

    def q5(self, _: None) -> list[tuple[str, int]]:
        """(name, age) of everyone, as the system reads two fields of every row."""
        raise NotImplementedError

    def q5o(self, _: None) -> list[tuple[str, int]]:
        """(name, age) of everyone, read from the system's objects."""
        raise NotImplementedError

    def q6a(self, _: None) -> dict[str, int]:
        """How many people live in each city."""
        raise NotImplementedError

    def q6b(self, _: None) -> int:
        """The sum of everyone's age."""
        raise NotImplementedError

    def q7(self, _: None) -> Any:
        """A pyarrow Table of everyone's name, age and city, as the system's users make one."""
        raise NotImplementedError

    def q8(self, age: int) -> tuple[int, str, str]:
        """The zip codes of the addresses that people aged ``age`` to ``age + 4`` refer to,
        read from the addresses (a join from the referring side): their count, least and
        greatest."""
        raise NotImplementedError


def _zip_summary(zips: Iterable[str]) -> tuple[int, str, str]:
    """(count, least, greatest) of zip codes: a result every system compares alike."""
    found = list(zips)
    return (len(found), min(found, default=""), max(found, default=""))


def _arrow_table(rows: list[Any]) -> Any:
    """A pyarrow Table of (name, age, city) rows, one array per column (the fastest way from
    Python rows)."""
    pyarrow = _import("pyarrow")
    names, ages, cities = zip(*rows) if rows else ((), (), ())
    return pyarrow.table({"name": pyarrow.array(names, pyarrow.large_string()), "age": pyarrow.array(ages, pyarrow.int64()), "city": pyarrow.array(cities, pyarrow.large_string())})


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
        self.A: Any = self.models.CopalAddress
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
        v = dist_version("copaldb", "copal")
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
        P, A = self.P, self.A
        seconds = 0.0
        t0 = perf_counter()
        db = self.copal.open(dir)
        seconds += perf_counter() - t0
        for batch in batches(n):
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
            "Q8": self.tx.query(self.A).where(self.copal.referenced_by(self.P, "address", where=f("age") >= 40)).explain(),
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

    def q5(self, _: None) -> list[tuple[str, int]]:
        rows: list[tuple[str, int]] = self.tx.query(self.P).values("name", "age")
        return rows

    def q5o(self, _: None) -> list[tuple[str, int]]:
        return [(p.name, p.age) for p in self.tx.query(self.P)]

    def q6a(self, _: None) -> dict[str, int]:
        counts: dict[str, int] = self.tx.query(self.P).group_by("city").count()
        return counts

    def q6b(self, _: None) -> int:
        total: int = self.tx.query(self.P).sum("age")
        return total

    def q7(self, _: None) -> Any:
        return _import("pyarrow").table(self.tx.query(self.P).to_arrow("name", "age", "city"))

    def q8(self, age: int) -> tuple[int, str, str]:
        copal = self.copal
        aged = (copal.field("age") >= age) & (copal.field("age") <= age + 4)
        rows = self.tx.query(self.A).where(copal.referenced_by(self.P, "address", where=aged)).values("zip_code")
        return _zip_summary(zip_code for (zip_code,) in rows)


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
        for batch in batches(n):
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

    def q5(self, _: None) -> list[tuple[str, int]]:
        rows: list[tuple[str, int]] = self.conn.execute("SELECT name, age FROM person").fetchall()
        return rows

    def q5o(self, _: None) -> list[tuple[str, int]]:
        return [(p.name, p.age) for p in self._objects(f"SELECT {_COLUMNS} FROM person", ())]

    def q6a(self, _: None) -> dict[str, int]:
        return dict(self.conn.execute("SELECT city, count(*) FROM person GROUP BY city"))

    def q6b(self, _: None) -> int:
        return int(self.conn.execute("SELECT sum(age) FROM person").fetchone()[0])

    def q7(self, _: None) -> Any:
        return _arrow_table(self.conn.execute("SELECT name, age, city FROM person").fetchall())

    def q8(self, age: int) -> tuple[int, str, str]:
        rows = self.conn.execute(
            "SELECT zip_code FROM address WHERE id IN (SELECT address_id FROM person WHERE age BETWEEN ? AND ?)",
            (age, age + 4),
        )
        return _zip_summary(zip_code for (zip_code,) in rows)


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
        self.A: Any = models.SAAddress
        self.engine: Any = None
        self.session: Any = None

    @classmethod
    def versions(cls) -> dict[str, str]:
        v = dist_version("SQLAlchemy", "sqlalchemy")
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

    def q5(self, _: None) -> list[tuple[str, int]]:
        P = self.P
        return [tuple(row) for row in self.session.execute(self.sa.select(P.name, P.age))]

    def q5o(self, _: None) -> list[tuple[str, int]]:
        return [(p.name, p.age) for p in self._objects(self.sa.select(self.P))]

    def q6a(self, _: None) -> dict[str, int]:
        P, sa = self.P, self.sa
        return {city: n for city, n in self.session.execute(sa.select(P.city, sa.func.count()).group_by(P.city))}

    def q6b(self, _: None) -> int:
        P, sa = self.P, self.sa
        return int(self.session.scalar(sa.select(sa.func.sum(P.age))))

    def q7(self, _: None) -> Any:
        P = self.P
        return _arrow_table(self.session.execute(self.sa.select(P.name, P.age, P.city)).all())

    def q8(self, age: int) -> tuple[int, str, str]:
        P, A, sa = self.P, self.A, self.sa
        aged = sa.select(P.address_id).where(P.age.between(age, age + 4))
        return _zip_summary(self.session.scalars(sa.select(A.zip_code).where(A.id.in_(aged))))


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
            v = dist_version(dist)
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
        for batch in batches(n):
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

    def q5(self, _: None) -> list[tuple[str, int]]:
        return [(p.name, p.age) for p in self.people.values()]

    def q5o(self, _: None) -> list[tuple[str, int]]:
        return self.q5(None)

    def q6a(self, _: None) -> dict[str, int]:
        counts: dict[str, int] = {}
        for p in self.people.values():
            counts[p.city] = counts.get(p.city, 0) + 1
        return counts

    def q6b(self, _: None) -> int:
        return sum(p.age for p in self.people.values())

    def q7(self, _: None) -> Any:
        return _arrow_table([(p.name, p.age, p.city) for p in self.people.values()])

    def q8(self, age: int) -> tuple[int, str, str]:
        aged = self.by_age.values(min=(age,), max=(age + 5,), excludemax=True)
        return _zip_summary(p.address.zip_code for p in aged)


#: The adapters by ``--systems`` name, in the default column order.
QUERY_SYSTEMS: dict[str, type[QuerySystem]] = {
    cls.name: cls for cls in (CopalQueries, SqliteQueries, SqlAlchemyQueries, ZODBQueries)
}
