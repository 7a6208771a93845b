"""The transaction-cost benchmark's operations, how copal and ZODB run each of them, and the
worker that times them (:mod:`copal.bench.transactions` runs the suite).

:func:`worker_main` runs in a fresh process per (system, cache size C): it builds the database
(the first round only), opens it again with an object cache that holds every object, loads the
first C items (:meth:`TxSystem.warm`), then times each operation's transactions one by one
(:func:`_time_operations`): :data:`WARMUP` untimed runs of each operation, then the timed ones
in interleaved blocks of :data:`BLOCK`. For copal it also reads ``db.stats()`` around each
transaction (outside the clock), and at the end it counts how many of the C items the cache
still holds (:meth:`TxSystem.held`).

The adapters (:class:`CopalTx`, :class:`ZODBTx`) write each operation as the system's users
write it; the items are :mod:`copal.bench.transaction_models`'s. Which items the lookups and
the updates touch (:func:`lookup_targets`, :func:`update_targets`) is drawn from a fixed seed,
relative to C, so that every run does the same work but for what the cache holds.
"""

from __future__ import annotations

import gc
import random
import statistics
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from time import perf_counter
from typing import Any, Callable

from copal.bench.environment import Adapter, copal_unavailable, dir_size
from copal.bench.whitepaper import peak_rss_kb
from copal.bench.workers import run_and_report

#: Objects in the database beyond the cached ones.
EXTRA = 1_000
#: Of the EXTRA objects, those the lookups find (each once); the others are the updates'.
LOOKUP_POOL = 500
#: Consecutive runs of one operation before the next operation's block.
BLOCK = 50
#: Untimed runs of each operation before the timed ones.
WARMUP = 20
#: Objects per commit while building.
BUILD_BATCH = 20_000
#: The seed of the lookups' and updates' draws.
SEED = 20261201
#: The ``db.stats()`` counters recorded per operation (copal).
COUNTERS = ("objects_encoded", "records_read", "records_written", "cache_misses", "commits")


@dataclass(frozen=True)
class TxOperation:
    """One row of the table (:func:`_time_operations` says how each system runs it)."""

    id: str
    title: str


OPERATIONS: tuple[TxOperation, ...] = (
    TxOperation("empty", "empty read-write transaction"),
    TxOperation("readonly", "read-only transaction (root)"),
    TxOperation("lookup", "unique-index lookup of an unloaded object, read a field"),
    TxOperation("update", "change one object's int attribute, commit"),
    TxOperation("control", "control: the same Python work in every worker, no database"),
)
#: The row that times no database: its growth is the process's and machine's, not a system's.
CONTROL = "control"


def control_work(k: int) -> int:
    """A fixed piece of plain Python (allocations, a dict per element, a sort), timed like
    the transactions: a worker that runs slower as a whole shows it here too."""
    rows = [{"n": str(i), "s": str(i + k)} for i in range(40)]
    rows.sort(key=lambda row: row["s"])
    return len(rows)


def lookup_targets(cached: int, count: int) -> list[int]:
    """The items the lookups find, in order: ``count`` distinct ones among the first
    LOOKUP_POOL after the cached ones (the same sample at every cache size)."""
    rng = random.Random(f"{SEED}:lookup")
    return [cached + k for k in rng.sample(range(LOOKUP_POOL), count)]


def update_targets(cached: int, count: int) -> list[tuple[int, int]]:
    """The (item, new value) pairs of the updates: items among the last EXTRA - LOOKUP_POOL
    after the cached ones, drawn with replacement."""
    rng = random.Random(f"{SEED}:update")
    return [
        (cached + LOOKUP_POOL + rng.randrange(EXTRA - LOOKUP_POOL), rng.randrange(1 << 30))
        for _ in range(count)
    ]


# --------------------------------------------------------------------------- systems


class TxSystem(Adapter):
    """Base class of the adapters. ``build`` creates the database (open to close), ``open``
    opens it again with an object cache of ``cache_objects``, ``warm`` loads the first
    ``cached`` items; each operation is one transaction."""


    @classmethod
    def versions(cls) -> dict[str, str]:
        from copal.bench.query_systems import QUERY_SYSTEMS

        return QUERY_SYSTEMS[cls.name].versions()

    def build(self, dir: str, n: int, cache_objects: int) -> None:
        raise NotImplementedError

    def open(self, dir: str, cache_objects: int) -> None:
        raise NotImplementedError

    def warm(self, cached: int) -> None:
        """Loads the first ``cached`` items, in a transaction that ends without a change."""
        raise NotImplementedError

    def held(self, cached: int) -> int:
        """How many of the first ``cached`` items are loaded (not ghosts); loads none."""
        raise NotImplementedError

    def stats(self) -> dict[str, int] | None:
        """The database's counters (copal's ``db.stats()``), or None."""
        return None

    def info(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        raise NotImplementedError

    def empty(self) -> None:
        raise NotImplementedError

    def readonly(self) -> None:
        raise NotImplementedError

    def lookup(self, email: str) -> Any:
        """The ``value`` of the item with this email (None if there is none)."""
        raise NotImplementedError

    def update(self, index: int, value: int) -> None:
        raise NotImplementedError


class CopalTx(TxSystem):
    """copal, embedded store: the items in a ``PersistentList`` at ``tx.root["items"]``, found
    by email through their unique ``copal.Index``."""

    name = "copal"
    label = "copal"
    modules = ("copal",)

    def __init__(self) -> None:
        self.copal: Any = import_module("copal")
        self.Item: Any = import_module("copal.bench.transaction_models").CopalItem
        self.db: Any = None

    @classmethod
    def unavailable(cls) -> str | None:
        return copal_unavailable()

    def build(self, dir: str, n: int, cache_objects: int) -> None:
        db = self.copal.open(dir, cache_size=cache_objects)
        with db.transaction() as tx:
            tx.root["items"] = self.copal.PersistentList()
        for start in range(0, n, BUILD_BATCH):
            with db.transaction() as tx:
                items = tx.root["items"]
                for i in range(start, min(n, start + BUILD_BATCH)):
                    item = self.Item(i)
                    tx.add(item)
                    items.append(item)
        db.close()

    def open(self, dir: str, cache_objects: int) -> None:
        self.db = self.copal.open(dir, cache_size=cache_objects)

    def warm(self, cached: int) -> None:
        with self.db.transaction(readonly=True) as tx:
            for item in tx.root["items"][:cached]:
                item.value

    def held(self, cached: int) -> int:
        with self.db.transaction(readonly=True) as tx:
            return sum(1 for item in tx.root["items"][:cached] if item._p_status != "ghost")

    def stats(self) -> dict[str, int]:
        stats: dict[str, int] = self.db.stats()
        return stats

    def info(self) -> dict[str, Any]:
        return {"stats": dict(self.db.stats()), "cache_size": self.db.cache_size}

    def close(self) -> None:
        self.db.close()

    def empty(self) -> None:
        with self.db.transaction():
            pass

    def readonly(self) -> None:
        with self.db.transaction(readonly=True) as tx:
            tx.root

    def lookup(self, email: str) -> Any:
        with self.db.transaction(readonly=True) as tx:
            item = tx.query(self.Item).where(email=email).first()
            return None if item is None else item.value

    def update(self, index: int, value: int) -> None:
        with self.db.transaction() as tx:
            tx.root["items"][index].value = value


class ZODBTx(TxSystem):
    """ZODB FileStorage: the items in a ``PersistentList`` at ``root["items"]``, an ``OOBTree``
    email -> item at ``root["by_email"]``, the global ``transaction`` manager."""

    name = "zodb"
    label = "ZODB"
    modules = ("ZODB", "persistent", "BTrees", "transaction")

    def __init__(self) -> None:
        self.ZODB: Any = import_module("ZODB")
        self.FileStorage: Any = import_module("ZODB.FileStorage")
        self.transaction: Any = import_module("transaction")
        self.PersistentList: Any = import_module("persistent.list").PersistentList
        self.OOBTree: Any = import_module("BTrees.OOBTree").OOBTree
        self.Item: Any = import_module("copal.bench.transaction_models").ZItem
        self.db: Any = None
        self.conn: Any = None

    def open(self, dir: str, cache_objects: int) -> None:
        Path(dir).mkdir(parents=True, exist_ok=True)
        storage = self.FileStorage.FileStorage(str(Path(dir) / "Data.fs"))
        self.db = self.ZODB.DB(storage, cache_size=cache_objects)
        self.conn = self.db.open()

    def build(self, dir: str, n: int, cache_objects: int) -> None:
        self.open(dir, cache_objects)
        root = self.conn.root()
        root["items"] = items = self.PersistentList()
        root["by_email"] = by_email = self.OOBTree()
        self.transaction.commit()
        for start in range(0, n, BUILD_BATCH):
            for i in range(start, min(n, start + BUILD_BATCH)):
                item = self.Item(i)
                items.append(item)
                by_email[item.email] = item
            self.transaction.commit()
            self.conn.cacheMinimize()
        self.close()

    def warm(self, cached: int) -> None:
        self.transaction.begin()
        for item in self.conn.root()["items"][:cached]:
            item.value
        self.transaction.abort()

    def held(self, cached: int) -> int:
        self.transaction.begin()
        loaded = sum(1 for item in self.conn.root()["items"][:cached] if item._p_status != "ghost")
        self.transaction.abort()
        return loaded

    def info(self) -> dict[str, Any]:
        return {"cache_size": self.db.getCacheSize(), "cache_non_ghosts": self.conn._cache.cache_non_ghost_count}

    def close(self) -> None:
        self.transaction.abort()
        self.conn.close()
        self.db.close()

    def empty(self) -> None:
        self.transaction.begin()
        self.transaction.commit()

    def readonly(self) -> None:
        self.transaction.begin()
        self.conn.root()
        self.transaction.abort()

    def lookup(self, email: str) -> Any:
        self.transaction.begin()
        item = self.conn.root()["by_email"].get(email)
        value = None if item is None else item.value
        self.transaction.abort()
        return value

    def update(self, index: int, value: int) -> None:
        self.transaction.begin()
        self.conn.root()["items"][index].value = value
        self.transaction.commit()


#: The adapters by ``--systems`` name, in column order.
TX_SYSTEMS: dict[str, type[TxSystem]] = {cls.name: cls for cls in (CopalTx, ZODBTx)}


# --------------------------------------------------------------------------- worker


def _time_operations(adapter: TxSystem, cached: int, reps: int) -> dict[str, Any]:
    """The timed runs: each operation ``reps`` times, in interleaved blocks; per operation the
    times' summary and, where the system counts them, the counters' deltas per transaction."""
    from copal.bench.transaction_models import email_of

    emails = [email_of(i) for i in lookup_targets(cached, reps)]
    expected = lookup_targets(cached, reps)  # an item's value is its number until updated
    updates = update_targets(cached, reps)
    runs: dict[str, Callable[[int], Any]] = {
        "empty": lambda k: adapter.empty(),
        "readonly": lambda k: adapter.readonly(),
        "lookup": lambda k: adapter.lookup(emails[k]),
        "update": lambda k: adapter.update(*updates[k]),
        "control": control_work,
    }
    warmups: dict[str, Callable[[int], Any]] = {
        **runs, "lookup": lambda k: adapter.lookup("absent@example.com"),
    }
    for op in OPERATIONS:
        for k in range(WARMUP):
            warmups[op.id](k)

    times: dict[str, list[float]] = {op.id: [] for op in OPERATIONS}
    deltas: dict[str, dict[str, list[int]]] = {op.id: {c: [] for c in COUNTERS} for op in OPERATIONS}
    wrong: list[str] = []
    done = 0
    while done < reps:
        block = min(BLOCK, reps - done)
        for op in OPERATIONS:
            run = runs[op.id]
            for k in range(done, done + block):
                before = adapter.stats()
                t0 = perf_counter()
                result = run(k)
                elapsed = perf_counter() - t0
                after = adapter.stats()
                times[op.id].append(elapsed)
                if before is not None and after is not None:
                    for counter in COUNTERS:
                        deltas[op.id][counter].append(after[counter] - before[counter])
                if op.id == "lookup" and result != expected[k]:
                    wrong.append(f"{emails[k]}: {result!r}, expected {expected[k]}")
        done += block

    out: dict[str, Any] = {}
    for op in OPERATIONS:
        ts = sorted(times[op.id])
        counters = {
            c: {"mean": statistics.fmean(v), "max": max(v)} for c, v in deltas[op.id].items() if v
        }
        out[op.id] = {
            "median_s": statistics.median(ts),
            "p90_s": statistics.quantiles(ts, n=10)[-1] if len(ts) >= 2 else ts[0],
            "mean_s": statistics.fmean(ts),
            "min_s": ts[0],
            "runs": len(ts),
            "per_transaction": counters or None,
        }
    if wrong:
        raise AssertionError(f"{len(wrong)} lookup(s) found the wrong object: " + "; ".join(wrong[:3]))
    return out


def worker_main(spec: dict[str, Any]) -> int:
    """Build, open, warm and time one system at one cache size, as ``spec`` says; print the
    report (:func:`copal.bench.workers.run_and_report`).

    ``spec`` keys: ``system``, ``cached``, ``objects`` (in the database, at least ``cached`` +
    EXTRA), ``cache_objects``, ``dir``, ``reps``, ``build`` (whether to build the database
    first; later rounds reuse it). The report has ``operations`` (see
    :func:`_time_operations`), ``build_s`` (None when it did not build), ``open_s``, ``warm_s``,
    ``held``, ``size_bytes``, ``rss_kb`` and ``info``.
    """

    def work() -> dict[str, Any]:
        adapter = TX_SYSTEMS[spec["system"]]()
        cached, cache_objects = int(spec["cached"]), int(spec["cache_objects"])
        out: dict[str, Any] = {"ok": True, "build_s": None}
        if spec["build"]:
            t0 = perf_counter()
            adapter.build(spec["dir"], int(spec["objects"]), cache_objects)
            out["build_s"] = perf_counter() - t0
            gc.collect()
        out["size_bytes"] = dir_size(Path(spec["dir"]), skip=lambda name: name.endswith((".lock", ".tmp")))
        t0 = perf_counter()
        adapter.open(spec["dir"], cache_objects)
        out["open_s"] = perf_counter() - t0
        t0 = perf_counter()
        adapter.warm(cached)
        out["warm_s"] = perf_counter() - t0
        out["operations"] = _time_operations(adapter, cached, int(spec["reps"]))
        out["held"] = adapter.held(cached)
        out["info"] = adapter.info()
        adapter.close()
        out["rss_kb"] = peak_rss_kb()
        return out

    return run_and_report(work)
