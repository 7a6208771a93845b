"""One adapter per persistence system, each running the white-paper workloads.

Every workload method has the signature ``(dir, key, n, target) -> OpResult``:
``dir`` is the local directory of the store (created by the adapter where
the system needs it), ``key`` a name unique to that store (used for remote
stores), ``n`` the number of SerTest and ``target`` the serial W5 updates.
A method times only open + work + commit + close; counting the objects it
loaded happens after the clock stops.

The systems:

- ``copal``: :mod:`copal.bench.copal_models`, named root ``"roots"``; reads
  retrieve the SerTest by ``tx.query(SerTest)``, W3c batch-loads with
  ``tx.load_closure``, W5 uses ``tx.query(SerTest).where(serial=...)``.
- ``zodb``: ZODB FileStorage, :mod:`copal.bench.zodb_models`, the SerTest
  in ``root['by_serial']``, an ``IOBTree`` keyed by serial (W5's index).
- ``pickle``: the whole list of SerTest in one file, protocol 5; every write
  is temp file + fsync + rename.
- ``shelve``: key ``str(serial)``, value the SerTest with its collection
  pickled inside (protocol 5), default dbm backend, no fsync.
- ``sqlitedict``: same keys and values, ``autocommit=False``, one commit per
  workload, SQLite defaults (journal_mode=DELETE, synchronous=FULL).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import pickle
import re
import subprocess
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from types import ModuleType
from typing import Any, ClassVar, Iterable

from copal.bench.environment import Adapter, dir_size, dist_version
from copal.bench.whitepaper import RELATIONS_PER_COLLECTION, psertest_time, sertest_time

PICKLE_PROTOCOL = 5

#: The value W5 assigns to the updated SerTest's attribute.
UPDATED_VALUE = "updated"
#: The value W4 assigns to every SerTest's attribute.
NEW_VALUE = "new_value"


@dataclass
class OpResult:
    """What one timed operation reports."""

    seconds: float
    objects_loaded: int | None = None
    info: dict[str, Any] = field(default_factory=dict)


def count_plain_graph(objs: Iterable[Any]) -> int:
    """Objects a deserializing system materialised for these SerTest.

    Counts each SerTest and, for nested ones, its SerCollection, its
    relations list and every PSerTest in it: what unpickling created.
    """
    total = 0
    for s in objs:
        total += 1
        ref = s.__dict__.get("reference")
        if ref is not None:
            total += 2 + len(ref.relations)
    return total


def touch_closure(roots: Iterable[Any]) -> None:
    """Touch every object of the nested graph below ``roots``."""
    for s in roots:
        s.attribute
        collection = s.reference
        collection.id
        for p in collection.relations:
            p.attribute


def grow(roots: Iterable[Any], pserclass: Any) -> None:
    """W4's change: new attribute and 100 new PSerTest in each collection."""
    for s in roots:
        s.attribute = NEW_VALUE
        collection = s.reference
        serial = s.serial
        for j in range(RELATIONS_PER_COLLECTION, 2 * RELATIONS_PER_COLLECTION):
            collection.add_relation(pserclass(psertest_time(serial, j)))


class System(Adapter):
    """Base class of the adapters.

    Subclasses set ``name`` (the ``--systems`` name), ``label`` (the column
    title), ``modules`` (what must be importable) and implement :meth:`_store`,
    :meth:`_read` (the five store and read workloads call them), the two update workloads and
    :meth:`size`.
    """


    def __init__(self, store: str | None = None) -> None:
        self.store = store

    def size(self, dir: str, key: str) -> int | None:
        """On-disk size in bytes of the store, or None when it cannot be measured."""
        return dir_size(Path(dir))

    def _store(self, dir: str, key: str, n: int, nested: bool) -> OpResult:
        """Stores ``n`` SerTest objects, each with a nested collection when ``nested``."""
        raise NotImplementedError

    def _read(self, dir: str, key: str, closure: bool) -> OpResult:
        """Reads every SerTest object, and everything they reach when ``closure``."""
        raise NotImplementedError

    def store_flat(self, dir: str, key: str, n: int, target: int) -> OpResult:
        return self._store(dir, key, n, nested=False)

    def read_flat(self, dir: str, key: str, n: int, target: int) -> OpResult:
        return self._read(dir, key, closure=False)

    def store_nested(self, dir: str, key: str, n: int, target: int) -> OpResult:
        return self._store(dir, key, n, nested=True)

    def read_nested_lazy(self, dir: str, key: str, n: int, target: int) -> OpResult:
        return self._read(dir, key, closure=False)

    def read_nested_closure(self, dir: str, key: str, n: int, target: int) -> OpResult:
        return self._read(dir, key, closure=True)

    def update_one(self, dir: str, key: str, n: int, target: int) -> OpResult:
        raise NotImplementedError

    def update_all(self, dir: str, key: str, n: int, target: int) -> OpResult:
        raise NotImplementedError


# --------------------------------------------------------------------------- PostgreSQL


def is_postgresql(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def _with_database(url: str, name: str) -> str:
    """``url`` naming database ``name`` instead of its own (its query string kept)."""
    base, _, query = url.partition("?")
    scheme, _, rest = base.partition("://")
    server = rest.split("/", 1)[0]
    return f"{scheme}://{server}/{name}" + (f"?{query}" if query else "")


def _psql(url: str, *commands: str) -> str:
    """Runs SQL commands with ``psql`` (PostgreSQL's client, on PATH) on database ``url``."""
    args = ["psql", "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", url]
    for command in commands:
        args += ["-c", command]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"psql failed: {done.stderr.strip()}")
    return done.stdout


def _fresh_database(url: str) -> None:
    """Drops and creates the database ``url`` names (the benchmark's stores start empty)."""
    name = url.partition("?")[0].rsplit("/", 1)[1]
    admin = _with_database(url, "postgres")
    _psql(admin, f'DROP DATABASE IF EXISTS "{name}"', f'CREATE DATABASE "{name}"')


def _database_size(url: str) -> int:
    name = url.partition("?")[0].rsplit("/", 1)[1]
    return int(_psql(_with_database(url, "postgres"), f"SELECT pg_database_size('{name}')").strip())


# --------------------------------------------------------------------------- copal


class CopalSystem(System):
    """copal, embedded LMDB store by default (``--store`` for another location)."""

    name = "copal"
    label = "copal"
    modules = ("copal",)

    def __init__(self, store: str | None = None) -> None:
        super().__init__(store)
        self.copal: Any = importlib.import_module("copal")
        self.models: Any = importlib.import_module("copal.bench.copal_models")

    @classmethod
    def unavailable(cls) -> str | None:
        # copal.bench itself lives inside the copal package, so find_spec
        # always succeeds: try the real import (the native core may be missing).
        try:
            module = importlib.import_module("copal")
        except Exception as exc:  # noqa: BLE001 - any failure means "cannot run"
            return f"copal cannot be imported ({type(exc).__name__}: {exc})"
        missing = [a for a in ("open", "Persistent", "PersistentList") if not hasattr(module, a)]
        if missing:
            return f"copal is incomplete (no {', '.join(missing)})"
        return None

    @classmethod
    def versions(cls) -> dict[str, str]:
        v = dist_version("copaldb", "copal")
        return {"copal": v} if v else {}

    def location(self, dir: str, key: str) -> str:
        """Where the database of this store lives.

        Without ``--store``: the local directory ``dir``.  With a URL (it
        contains ``://``): ``{name}`` in it is replaced by ``key``, else
        ``_key`` is appended to it.  With a path: ``store/key``.
        """
        if self.store is None:
            return dir
        if "{name}" in self.store:
            return self.store.replace("{name}", key)
        if "://" in self.store:
            return self.store + "_" + re.sub(r"\W", "_", key)
        return os.path.join(self.store, key)

    def size(self, dir: str, key: str) -> int | None:
        location = self.location(dir, key)
        if is_postgresql(location):
            return _database_size(location)
        if "://" in location:
            return None
        return dir_size(Path(location))

    def _finish(self, db: Any, t0: float) -> OpResult:
        stats = dict(db.stats())
        db.close()
        seconds = perf_counter() - t0
        return OpResult(seconds, stats.get("records_read"), {"stats": stats})

    def _store(self, dir: str, key: str, n: int, nested: bool) -> OpResult:
        SerTest = self.models.SerTest
        PersistentList = self.copal.PersistentList
        location = self.location(dir, key)
        if is_postgresql(location):
            _fresh_database(location)
        t0 = perf_counter()
        db = self.copal.open(location)
        with db.transaction() as tx:
            tx.root["roots"] = PersistentList(
                [SerTest(i, sertest_time(i), nested) for i in range(n)]
            )
        return self._finish(db, t0)

    def _read(self, dir: str, key: str, closure: bool) -> OpResult:
        SerTest = self.models.SerTest
        t0 = perf_counter()
        db = self.copal.open(self.location(dir, key))
        with db.transaction() as tx:
            if closure:
                roots = list(tx.query(SerTest))
                tx.load_closure(roots)
                touch_closure(roots)
            else:
                for s in tx.query(SerTest):
                    s.attribute
        return self._finish(db, t0)

    def update_one(self, dir: str, key: str, n: int, target: int) -> OpResult:
        SerTest = self.models.SerTest
        t0 = perf_counter()
        db = self.copal.open(self.location(dir, key))
        with db.transaction() as tx:
            s = tx.query(SerTest).where(serial=target).first()
            if s is None:
                raise LookupError(f"copal: no SerTest with serial {target}")
            s.attribute = UPDATED_VALUE
        return self._finish(db, t0)

    def update_all(self, dir: str, key: str, n: int, target: int) -> OpResult:
        SerTest = self.models.SerTest
        t0 = perf_counter()
        db = self.copal.open(self.location(dir, key))
        with db.transaction() as tx:
            grow(list(tx.query(SerTest)), self.models.PSerTest)
        return self._finish(db, t0)


class CopalEmbeddedSystem(CopalSystem):
    """copal on its embedded store whatever ``--store`` says, so that one run compares the
    PostgreSQL store (``copal`` with ``--store postgresql://...``) with the embedded one."""

    name = "copal-embedded"
    label = "copal (embedded)"

    def __init__(self, store: str | None = None) -> None:
        super().__init__(None)


# --------------------------------------------------------------------------- ZODB


class ZODBSystem(System):
    """ZODB with a FileStorage (fsync on every commit)."""

    name = "zodb"
    label = "ZODB FileStorage"
    modules: ClassVar[tuple[str, ...]] = ("ZODB", "persistent", "BTrees", "transaction")

    #: Files FileStorage keeps beside Data.fs that are not part of its size.
    TRANSIENT_FILES = ("Data.fs.lock", "Data.fs.tmp")

    def __init__(self, store: str | None = None) -> None:
        super().__init__(store)
        self.ZODB: Any = importlib.import_module("ZODB")
        self.FileStorage: Any = importlib.import_module("ZODB.FileStorage")
        self.transaction: Any = importlib.import_module("transaction")
        self.IOBTree: Any = importlib.import_module("BTrees.IOBTree").IOBTree
        self.models: Any = importlib.import_module("copal.bench.zodb_models")

    @classmethod
    def versions(cls) -> dict[str, str]:
        out = {}
        for dist in ("ZODB", "persistent", "BTrees", "transaction"):
            v = dist_version(dist)
            if v:
                out[dist] = v
        return out

    def size(self, dir: str, key: str) -> int | None:
        return dir_size(Path(dir), skip=self.TRANSIENT_FILES.__contains__)

    def _open(self, dir: str) -> tuple[Any, Any, Any]:
        os.makedirs(dir, exist_ok=True)
        storage = self.FileStorage.FileStorage(os.path.join(dir, "Data.fs"))
        db = self.ZODB.DB(storage)
        tm = self.transaction.TransactionManager()
        conn = db.open(tm)
        return db, conn, tm

    def _finish(self, db: Any, conn: Any, tm: Any, t0: float, commit: bool) -> OpResult:
        # Objects loaded = non-ghost objects in the connection's cache at the
        # end of the work, counted before the transaction ends because
        # commit/abort shrink the cache to its target size (400 objects).
        loaded = int(conn._cache.cache_non_ghost_count)
        if commit:
            tm.commit()
        else:
            tm.abort()
        conn.close()
        db.close()
        return OpResult(perf_counter() - t0, loaded)

    def _store(self, dir: str, key: str, n: int, nested: bool) -> OpResult:
        SerTest = self.models.SerTest
        t0 = perf_counter()
        db, conn, tm = self._open(dir)
        tree = self.IOBTree()
        conn.root()["by_serial"] = tree
        for i in range(n):
            tree[i] = SerTest(i, sertest_time(i), nested)
        return self._finish(db, conn, tm, t0, commit=True)

    def _read(self, dir: str, key: str, closure: bool) -> OpResult:
        t0 = perf_counter()
        db, conn, tm = self._open(dir)
        roots = conn.root()["by_serial"].values()
        if closure:
            touch_closure(list(roots))
        else:
            for s in roots:
                s.attribute
        return self._finish(db, conn, tm, t0, commit=False)

    def update_one(self, dir: str, key: str, n: int, target: int) -> OpResult:
        t0 = perf_counter()
        db, conn, tm = self._open(dir)
        s = conn.root()["by_serial"][target]
        s.attribute = UPDATED_VALUE
        return self._finish(db, conn, tm, t0, commit=True)

    def update_all(self, dir: str, key: str, n: int, target: int) -> OpResult:
        t0 = perf_counter()
        db, conn, tm = self._open(dir)
        grow(list(conn.root()["by_serial"].values()), self.models.PSerTest)
        return self._finish(db, conn, tm, t0, commit=True)


class RelStorageSystem(ZODBSystem):
    """ZODB on RelStorage (history-free) on the PostgreSQL server of ``--store``, with
    RelStorage's bulk prefetch for the closure read."""

    name = "relstorage"
    label = "ZODB + RelStorage"
    modules: ClassVar[tuple[str, ...]] = ("ZODB", "persistent", "BTrees", "transaction", "relstorage", "psycopg2")

    def __init__(self, store: str | None = None) -> None:
        super().__init__(store)
        if store is None or not is_postgresql(store):
            raise ValueError("RelStorage runs on PostgreSQL: pass --store postgresql://user@host:port/{name}")
        self.server = store
        self.RelStorage: Any = importlib.import_module("relstorage.storage").RelStorage
        self.Options: Any = importlib.import_module("relstorage.options").Options
        self.Adapter: Any = importlib.import_module("relstorage.adapters.postgresql").PostgreSQLAdapter

    @classmethod
    def versions(cls) -> dict[str, str]:
        out = super().versions()
        v = dist_version("RelStorage")
        if v:
            out["RelStorage"] = v
        return out

    def _url(self, dir: str) -> str:
        # One database per store directory (its operations share it), named after the path.
        name = "relstorage_" + hashlib.sha1(dir.encode()).hexdigest()[:16]
        return _with_database(self.server.replace("{name}", name), name)

    def _dsn(self, dir: str) -> str:
        """The libpq keyword form of :meth:`_url` (RelStorage appends keywords to its DSN)."""
        url = urllib.parse.urlsplit(self._url(dir))
        words = {"host": url.hostname, "port": url.port, "user": url.username, "password": url.password,
                 "dbname": url.path.lstrip("/")}
        return " ".join(f"{key}={value}" for key, value in words.items() if value)

    def size(self, dir: str, key: str) -> int | None:
        return _database_size(self._url(dir))

    def _open(self, dir: str) -> tuple[Any, Any, Any]:
        options = self.Options(keep_history=False)
        storage = self.RelStorage(self.Adapter(dsn=self._dsn(dir), options=options), options=options)
        db = self.ZODB.DB(storage)
        tm = self.transaction.TransactionManager()
        return db, db.open(tm), tm

    def _store(self, dir: str, key: str, n: int, nested: bool) -> OpResult:
        _fresh_database(self._url(dir))
        return super()._store(dir, key, n, nested)

    def _read(self, dir: str, key: str, closure: bool) -> OpResult:
        if not closure:
            return super()._read(dir, key, closure)
        t0 = perf_counter()
        db, conn, tm = self._open(dir)
        roots = list(conn.root()["by_serial"].values())
        # RelStorage's bulk load, level by level (what the 1.7 s reference used).
        conn.prefetch(roots)
        collections = [s.reference for s in roots]
        conn.prefetch(collections)
        conn.prefetch([c.relations for c in collections])
        conn.prefetch([p for c in collections for p in c.relations])
        touch_closure(roots)
        return self._finish(db, conn, tm, t0, commit=False)


# --------------------------------------------------------------------------- serializers


class _PlainSystem(System):
    """Shared parts of the systems that pickle plain objects."""

    def __init__(self, store: str | None = None) -> None:
        super().__init__(store)
        self.models: Any = importlib.import_module("copal.bench.models")

    def _make(self, n: int, nested: bool) -> list[Any]:
        SerTest = self.models.SerTest
        return [SerTest(i, sertest_time(i), nested) for i in range(n)]


class PickleSystem(_PlainSystem):
    """The whole graph in one pickle file, rewritten (temp + fsync + rename) on every write."""

    name = "pickle"
    label = "whole-graph pickle"
    modules = ("pickle",)
    FILE = "graph.pickle"

    def _write(self, dir: str, objs: list[Any]) -> None:
        os.makedirs(dir, exist_ok=True)
        final = os.path.join(dir, self.FILE)
        tmp = final + ".tmp"
        with open(tmp, "wb") as f:
            pickle.dump(objs, f, protocol=PICKLE_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)

    def _load(self, dir: str) -> list[Any]:
        with open(os.path.join(dir, self.FILE), "rb") as f:
            objs: list[Any] = pickle.load(f)
        return objs

    def _store(self, dir: str, key: str, n: int, nested: bool) -> OpResult:
        t0 = perf_counter()
        self._write(dir, self._make(n, nested))
        return OpResult(perf_counter() - t0)

    def _read(self, dir: str, key: str, closure: bool) -> OpResult:
        t0 = perf_counter()
        objs = self._load(dir)
        if closure:
            touch_closure(objs)
        else:
            for s in objs:
                s.attribute
        seconds = perf_counter() - t0
        return OpResult(seconds, count_plain_graph(objs))

    def update_one(self, dir: str, key: str, n: int, target: int) -> OpResult:
        t0 = perf_counter()
        objs = self._load(dir)
        # Serialization keeps no index: scan for the object, as the paper describes.
        for s in objs:
            if s.serial == target:
                s.attribute = UPDATED_VALUE
                break
        else:
            raise LookupError(f"pickle: no SerTest with serial {target}")
        self._write(dir, objs)
        seconds = perf_counter() - t0
        return OpResult(seconds, count_plain_graph(objs))

    def update_all(self, dir: str, key: str, n: int, target: int) -> OpResult:
        t0 = perf_counter()
        objs = self._load(dir)
        grow(objs, self.models.PSerTest)
        self._write(dir, objs)
        seconds = perf_counter() - t0
        return OpResult(seconds, count_plain_graph(objs))


class _KeyValueSystem(_PlainSystem):
    """A mapping str(serial) -> pickled SerTest (shelve, sqlitedict)."""

    def _open(self, dir: str) -> Any:
        raise NotImplementedError

    def _commit(self, kv: Any) -> None:
        """Make the writes durable as far as the system does (before close)."""

    def _items(self, kv: Any) -> list[tuple[str, Any]]:
        return [(k, kv[k]) for k in list(kv.keys())]

    def _store(self, dir: str, key: str, n: int, nested: bool) -> OpResult:
        t0 = perf_counter()
        kv = self._open(dir)
        for s in self._make(n, nested):
            kv[str(s.serial)] = s
        self._commit(kv)
        kv.close()
        return OpResult(perf_counter() - t0)

    def _read(self, dir: str, key: str, closure: bool) -> OpResult:
        t0 = perf_counter()
        kv = self._open(dir)
        objs = [v for _k, v in self._items(kv)]
        if closure:
            touch_closure(objs)
        else:
            for s in objs:
                s.attribute
        kv.close()
        seconds = perf_counter() - t0
        return OpResult(seconds, count_plain_graph(objs))

    def update_one(self, dir: str, key: str, n: int, target: int) -> OpResult:
        t0 = perf_counter()
        kv = self._open(dir)
        s = kv[str(target)]
        s.attribute = UPDATED_VALUE
        kv[str(target)] = s
        self._commit(kv)
        kv.close()
        seconds = perf_counter() - t0
        return OpResult(seconds, count_plain_graph([s]))

    def update_all(self, dir: str, key: str, n: int, target: int) -> OpResult:
        t0 = perf_counter()
        kv = self._open(dir)
        items = self._items(kv)
        grow([v for _k, v in items], self.models.PSerTest)
        for k, v in items:
            kv[k] = v
        self._commit(kv)
        kv.close()
        seconds = perf_counter() - t0
        return OpResult(seconds, count_plain_graph(v for _k, v in items))


class ShelveSystem(_KeyValueSystem):
    """The standard library's shelve on the default dbm backend."""

    name = "shelve"
    label = "shelve"
    modules = ("shelve", "dbm")
    FILE = "shelf"

    def __init__(self, store: str | None = None) -> None:
        super().__init__(store)
        self.shelve: ModuleType = importlib.import_module("shelve")

    @classmethod
    def versions(cls) -> dict[str, str]:
        return {"shelve_dbm": _default_dbm()}

    def _open(self, dir: str) -> Any:
        os.makedirs(dir, exist_ok=True)
        return self.shelve.open(os.path.join(dir, self.FILE), protocol=PICKLE_PROTOCOL)


def _default_dbm() -> str:
    """The dbm module ``dbm.open`` picks for a new file."""
    for name in ("dbm.gnu", "dbm.ndbm", "dbm.dumb"):
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        return name
    return "none"


class SqliteDictSystem(_KeyValueSystem):
    """sqlitedict with autocommit off: one commit per workload."""

    name = "sqlitedict"
    label = "sqlitedict"
    modules = ("sqlitedict",)
    FILE = "db.sqlite"

    def __init__(self, store: str | None = None) -> None:
        super().__init__(store)
        self.SqliteDict: Any = importlib.import_module("sqlitedict").SqliteDict

    @classmethod
    def versions(cls) -> dict[str, str]:
        import sqlite3

        out = {"sqlite3_lib": sqlite3.sqlite_version}
        v = dist_version("sqlitedict")
        if v:
            out["sqlitedict"] = v
        return out

    def _open(self, dir: str) -> Any:
        os.makedirs(dir, exist_ok=True)
        return self.SqliteDict(os.path.join(dir, self.FILE), autocommit=False)

    def _commit(self, kv: Any) -> None:
        kv.commit()

    def _items(self, kv: Any) -> list[tuple[str, Any]]:
        # One SELECT over the table rather than one per key.
        return list(kv.items())


#: The adapters by ``--systems`` name, in the default column order.
SYSTEMS: dict[str, type[System]] = {
    cls.name: cls
    for cls in (CopalSystem, CopalEmbeddedSystem, ZODBSystem, RelStorageSystem, PickleSystem, ShelveSystem, SqliteDictSystem)
}

#: The systems run when ``--systems`` is not given: RelStorage needs a PostgreSQL server
#: (``--systems copal,relstorage --store postgresql://...``).
DEFAULT_SYSTEMS: tuple[str, ...] = tuple(
    name for name in SYSTEMS if name not in (RelStorageSystem.name, CopalEmbeddedSystem.name)
)
