"""The garbage-collection benchmark's data, how copal and ZODB build, collect, write and check
it, and its workers (:mod:`copal.bench.gc_suite` runs the suite).

The data (:class:`Layout`, :func:`fill`): N ``GcNode`` objects, each with an int ``n``, a str
``name``, an int ``value``, an int ``writes`` and one reference ``ref``. Node ``n`` is
unreachable-to-be when :meth:`Layout.is_garbage` says so (U of the N, evenly spread, so that
their records lie among the others'); the other N - U are live. Both kinds sit in lists of
:data:`BUCKET` nodes, the live ones under ``root["live"]``, the others under
``root["garbage"]``, each list a persistent list of its own (a record). A live node refers to
the live node before it, an unreachable one to the unreachable one before it; the build commits
:data:`BUILD_BATCH` nodes at a time, then a last commit closes the unreachable chain into a
cycle (its first node refers to its last) and deletes ``root["garbage"]``. The collection must
then remove exactly the U nodes, their lists and the outer list (:attr:`Layout.expected_removed`)
and nothing else, while the writer changes live nodes.

The workers (:func:`worker_main`, one fresh process each): ``build`` builds a database;
``collect`` opens a copy of it, starts the writer, lets it commit for a baseline second, times
the collection (copal ``db.gc()``, ZODB ``db.pack()``), stops the writer and checks
(:func:`check_walk`): every live node loads, in order, referring to the live node before it;
each node the writer changed holds the last value it wrote and as many writes as it made, the
others hold their first values. The writer (:func:`write_until`) commits one change of one
live node per transaction (``value`` := the commit's number, ``writes`` += 1), nodes drawn at
random, as fast as it can, and records when each commit began and ended. copal's writer is
another process (role ``writer``); ZODB's FileStorage opens in one process only, so its writer
is a thread of the collecting process with its own connection and transaction manager.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any, Callable, Iterator

from copal.bench.environment import Adapter, copal_unavailable, importable
from copal.bench.whitepaper import peak_rss_kb
from copal.bench.workers import RESULT_PREFIX, bootstrap, run_and_report

#: Nodes per list (a persistent list each, so a record each).
BUCKET = 10_000
#: Nodes per commit while building.
BUILD_BATCH = 50_000
#: The seed of the writer's choice of nodes.
SEED = 20261215
#: What copal's writer process prints on stdout once it is ready to commit.
READY = "COPAL-BENCH-GC-WRITER-READY"
#: Object-cache size of the writer's connection and of the walk (both systems).
CACHE_OBJECTS = 100_000
#: Seconds to wait for the writer to be ready, and for it to stop.
WRITER_TIMEOUT = 600.0


@dataclass(frozen=True)
class Layout:
    """Which of the ``objects`` nodes are live, where each live node sits, what the database
    holds and what a collection must remove.

    Example:
        >>> layout = Layout(objects=100, unreachable=10)
        >>> [n for n in range(20) if layout.is_garbage(n)]
        [9, 19]
        >>> layout.live, layout.expected_objects, layout.expected_removed
        (90, 105, 12)
    """

    objects: int
    unreachable: int

    def is_garbage(self, n: int) -> bool:
        """Whether node ``n`` is made unreachable: U of the N, evenly spread."""
        u, total = self.unreachable, self.objects
        return (n + 1) * u // total > n * u // total

    @property
    def live(self) -> int:
        return self.objects - self.unreachable

    @staticmethod
    def lists(nodes: int) -> int:
        """The lists that hold ``nodes`` nodes."""
        return -(-nodes // BUCKET)

    @property
    def expected_objects(self) -> int:
        """Objects stored before the collection: the nodes, their lists, the two outer lists and
        the root."""
        return self.objects + self.lists(self.live) + self.lists(self.unreachable) + 3

    @property
    def expected_removed(self) -> int:
        """What the collection removes: the unreachable nodes, their lists and the outer list."""
        return self.unreachable + self.lists(self.unreachable) + 1

    def live_numbers(self) -> Iterator[int]:
        """The ``n`` of the live nodes, in the order of their lists."""
        return (n for n in range(self.objects) if not self.is_garbage(n))


def fill(
    layout: Layout, lists: tuple[Any, Any], start: int, stop: int,
    new_list: Callable[[], Any], new_node: Callable[[int, Any], Any],
) -> None:
    """Appends nodes ``start`` to ``stop - 1`` to ``lists`` (the live and the garbage outer
    list), each to the last list of its kind (a new one when that is full), each referring to
    the node of its kind before it."""
    last = [kind[-1][-1] if len(kind) else None for kind in lists]
    for n in range(start, stop):
        kind = int(layout.is_garbage(n))
        node = new_node(n, last[kind])
        last[kind] = node
        buckets = lists[kind]
        if not len(buckets) or len(buckets[-1]) >= BUCKET:
            buckets.append(new_list())
        buckets[-1].append(node)


# --------------------------------------------------------------------------- classes

#: False in a ZODB worker: copal.bench under a stand-in ``copal`` package.
HAVE_COPAL = importable("copal", "Persistent", "PersistentList")

if HAVE_COPAL:
    from copal import Persistent as _CopalPersistent

    class GcNode(_CopalPersistent):
        """A node of the garbage-collection benchmark (copal)."""

        def __init__(self, n: int, ref: Any) -> None:
            self.n, self.name, self.value, self.writes, self.ref = n, f"node-{n}", n, 0, ref


HAVE_ZODB = importable("persistent", "Persistent")

if HAVE_ZODB:
    from persistent import Persistent as _ZPersistent  # type: ignore[import-untyped, import-not-found, unused-ignore]

    class ZGcNode(_ZPersistent):  # type: ignore[misc, unused-ignore]
        """A node of the garbage-collection benchmark (ZODB)."""

        def __init__(self, n: int, ref: Any) -> None:
            self.n, self.name, self.value, self.writes, self.ref = n, f"node-{n}", n, 0, ref


# --------------------------------------------------------------------------- the writer


class WriterSession:
    """A writer's connection: ``warm`` loads the live lists, ``write`` commits one change of
    one live node, raising ``conflict`` (after aborting) when the commit is refused."""

    conflict: type[BaseException]

    def warm(self) -> None:
        raise NotImplementedError

    def write(self, index: int, k: int) -> None:
        """Sets the ``index``-th live node's ``value`` to ``k`` and adds one to its ``writes``,
        in one transaction."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def write_until(session: WriterSession, layout: Layout, stop: threading.Event) -> dict[str, Any]:
    """Commits one change per transaction until ``stop`` is set (a refused commit is counted and
    made again); the commits, the conflicts, each commit's (begin, end) on ``time.monotonic()``
    (one clock for every process of the machine) and, per node changed, ``[index, last value,
    writes]``."""
    rng = random.Random(SEED)
    commits = conflicts = 0
    times: list[tuple[float, float]] = []
    written: dict[int, list[int]] = {}
    index = rng.randrange(layout.live)
    while not stop.is_set():
        k = commits + 1
        began = time.monotonic()
        try:
            session.write(index, k)
        except session.conflict:
            conflicts += 1
            continue
        times.append((began, time.monotonic()))
        commits = k
        entry = written.setdefault(index, [0, 0])
        entry[0] = k
        entry[1] += 1
        index = rng.randrange(layout.live)
    return {
        "commits": commits, "conflicts": conflicts, "times": times,
        "written": [[i, k, c] for i, (k, c) in sorted(written.items())],
    }


class ProcessWriter:
    """copal's writer: a process of its own (:func:`worker_main`, role ``writer``); ready once
    it printed :data:`READY`, stopped by a line on its stdin."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.errors = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", bootstrap(__name__), json.dumps({**spec, "role": "writer"})],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors, text=True,
        )

    def _failure(self, what: str) -> RuntimeError:
        self.errors.seek(0)
        return RuntimeError(f"the writer {what}:\n" + "\n".join(self.errors.read().strip().splitlines()[-15:]))

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != READY:
            self.proc.kill()
            self.proc.wait()
            raise self._failure(f"did not start (it printed {line.strip()!r})")

    def stop(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        try:
            out, _ = self.proc.communicate(timeout=WRITER_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise self._failure("did not stop") from None
        for line in reversed(out.splitlines()):
            if line.startswith(RESULT_PREFIX):
                report: dict[str, Any] = json.loads(line[len(RESULT_PREFIX):])
                if not report.get("ok"):
                    raise RuntimeError(f"the writer failed:\n{report.get('error')}")
                return report
        raise self._failure(f"exited {self.proc.returncode} without a report")


class ThreadWriter:
    """ZODB's writer: a thread of the collecting process (FileStorage opens in one process
    only), with the same interface as :class:`ProcessWriter`."""

    def __init__(self, session: WriterSession, layout: Layout) -> None:
        self.session, self.layout = session, layout
        self.ready, self.stopping = threading.Event(), threading.Event()
        self.report: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="gc-bench-writer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.session.warm()
            self.ready.set()
            self.report = write_until(self.session, self.layout, self.stopping)
            self.session.close()
        except BaseException as exc:  # noqa: BLE001 - handed to the collecting thread
            self.error = exc
            self.ready.set()

    def wait_ready(self) -> None:
        if not self.ready.wait(WRITER_TIMEOUT) or self.error is not None:
            raise RuntimeError("the writer did not start") from self.error

    def stop(self) -> dict[str, Any]:
        self.stopping.set()
        self.thread.join(WRITER_TIMEOUT)
        if self.error is not None or self.report is None:
            raise RuntimeError("the writer failed") from self.error
        return {"ok": True, **self.report}


# --------------------------------------------------------------------------- systems


class GcSystem(Adapter):
    """Base class of the adapters: ``build`` creates the database (open to close); ``open``
    opens it; ``collect`` removes what is unreachable and says what it found; ``live_nodes``
    walks the live lists; ``start_writer`` starts a writer on the open database."""

    @classmethod
    def versions(cls) -> dict[str, str]:
        from copal.bench.query_systems import QUERY_SYSTEMS

        return QUERY_SYSTEMS[cls.name].versions()

    def build(self, dir: str, layout: Layout) -> None:
        raise NotImplementedError

    def open(self, dir: str) -> None:
        raise NotImplementedError

    def size(self) -> int:
        """Bytes of the database's files, now."""
        raise NotImplementedError

    def start_writer(self, spec: dict[str, Any], layout: Layout) -> ProcessWriter | ThreadWriter:
        raise NotImplementedError

    def collect(self, batch: int) -> dict[str, Any]:
        """Removes the unreachable objects; ``objects`` (stored before), ``reachable``,
        ``removed``, and what else the system reports."""
        raise NotImplementedError

    def live_nodes(self) -> Iterator[tuple[int, int, int, int | None]]:
        """Every live node's ``(n, value, writes, ref.n)``, in the order of the lists."""
        raise NotImplementedError

    def close(self) -> dict[str, Any]:
        """Closes the database; what else it measured on the way (copal compacts the file)."""
        raise NotImplementedError


class CopalGc(GcSystem):
    """copal, embedded store: ``copal.PersistentList`` lists, ``db.gc(batch=...)``; the writer
    is another process."""

    name = "copal"
    label = "copal"
    modules = ("copal",)

    def __init__(self) -> None:
        self.copal: Any = import_module("copal")
        self.db: Any = None
        self.dir = ""

    @classmethod
    def unavailable(cls) -> str | None:
        return copal_unavailable()

    def build(self, dir: str, layout: Layout) -> None:
        copal, node = self.copal, GcNode
        db = copal.open(dir)
        with db.transaction() as tx:
            tx.root["live"], tx.root["garbage"] = copal.PersistentList(), copal.PersistentList()
        for start in range(0, layout.objects, BUILD_BATCH):
            with db.transaction() as tx:
                lists = (tx.root["live"], tx.root["garbage"])
                fill(layout, lists, start, min(layout.objects, start + BUILD_BATCH), copal.PersistentList, node)
        with db.transaction() as tx:
            garbage = tx.root["garbage"]
            if len(garbage):
                garbage[0][0].ref = garbage[-1][-1]
            del tx.root["garbage"]
        db.close()

    def open(self, dir: str) -> None:
        self.dir = dir
        self.db = self.copal.open(dir, cache_size=CACHE_OBJECTS)

    def size(self) -> int:
        size: int = self.db.disk_size()
        return size

    def start_writer(self, spec: dict[str, Any], layout: Layout) -> ProcessWriter:
        return ProcessWriter(spec)

    def collect(self, batch: int) -> dict[str, Any]:
        report: dict[str, Any] = self.db.gc(batch=batch)
        node_type = f"{GcNode.__module__}.{GcNode.__qualname__}"
        return {**report, "removed_nodes": report["removed_by_type"].get(node_type, 0)}

    def live_nodes(self) -> Iterator[tuple[int, int, int, int | None]]:
        with self.db.transaction(readonly=True) as tx:
            count = len(tx.root["live"])
        for b in range(count):  # a transaction per list, so that the cache holds one list
            with self.db.transaction(readonly=True) as tx:
                for node in tx.root["live"][b]:
                    ref = node.ref
                    yield node.n, node.value, node.writes, None if ref is None else ref.n

    def close(self) -> dict[str, Any]:
        self.db.close()
        t0 = time.monotonic()
        report = self.copal.compact(self.dir)
        return {"compact_s": time.monotonic() - t0, "size_compacted": report["size_after"]}


class CopalWriterSession(WriterSession):
    def __init__(self, dir: str) -> None:
        copal = import_module("copal")
        self.conflict = copal.ConflictError
        self.db = copal.open(dir, cache_size=CACHE_OBJECTS)

    def warm(self) -> None:
        with self.db.transaction(readonly=True) as tx:
            for bucket in tx.root["live"]:
                len(bucket)

    def write(self, index: int, k: int) -> None:
        b, pos = divmod(index, BUCKET)
        with self.db.transaction() as tx:
            node = tx.root["live"][b][pos]
            node.value = k
            node.writes += 1

    def close(self) -> None:
        self.db.close()


class ZODBGc(GcSystem):
    """ZODB FileStorage (``pack_gc`` on, its default): ``persistent.list.PersistentList``
    lists, ``db.pack()``; the writer is a thread of this process."""

    name = "zodb"
    label = "ZODB"
    modules = ("ZODB", "persistent", "transaction")

    def __init__(self) -> None:
        self.ZODB: Any = import_module("ZODB")
        self.FileStorage: Any = import_module("ZODB.FileStorage")
        self.transaction: Any = import_module("transaction")
        self.PersistentList: Any = import_module("persistent.list").PersistentList
        self.storage: Any = None
        self.db: Any = None
        self.path = ""

    def open(self, dir: str) -> None:
        Path(dir).mkdir(parents=True, exist_ok=True)
        self.path = str(Path(dir) / "Data.fs")
        self.storage = self.FileStorage.FileStorage(self.path)
        self.db = self.ZODB.DB(self.storage, cache_size=CACHE_OBJECTS)

    def build(self, dir: str, layout: Layout) -> None:
        self.open(dir)
        tm = self.transaction.TransactionManager()
        conn = self.db.open(transaction_manager=tm)
        root = conn.root()
        root["live"], root["garbage"] = self.PersistentList(), self.PersistentList()
        tm.commit()
        for start in range(0, layout.objects, BUILD_BATCH):
            lists = (root["live"], root["garbage"])
            fill(layout, lists, start, min(layout.objects, start + BUILD_BATCH), self.PersistentList, ZGcNode)
            tm.commit()
            conn.cacheMinimize()
        garbage = root["garbage"]
        if len(garbage):
            garbage[0][0].ref = garbage[-1][-1]
        del root["garbage"]
        tm.commit()
        conn.close()
        self.db.close()

    def size(self) -> int:
        return os.path.getsize(self.path)

    def start_writer(self, spec: dict[str, Any], layout: Layout) -> ThreadWriter:
        return ThreadWriter(ZODBWriterSession(self), layout)

    def collect(self, batch: int) -> dict[str, Any]:
        objects = len(self.storage)
        self.db.pack()
        reachable = len(self.storage)
        return {"objects": objects, "reachable": reachable, "removed": objects - reachable}

    def live_nodes(self) -> Iterator[tuple[int, int, int, int | None]]:
        tm = self.transaction.TransactionManager()
        conn = self.db.open(transaction_manager=tm)
        tm.begin()
        for bucket in conn.root()["live"]:
            for node in bucket:
                ref = node.ref
                yield node.n, node.value, node.writes, None if ref is None else ref.n
            conn.cacheMinimize()
        tm.abort()
        conn.close()

    def close(self) -> dict[str, Any]:
        self.db.close()
        return {}


class ZODBWriterSession(WriterSession):
    def __init__(self, system: ZODBGc) -> None:
        self.conflict = import_module("ZODB.POSException").ConflictError
        self.tm = system.transaction.TransactionManager()
        self.conn = system.db.open(transaction_manager=self.tm)

    def warm(self) -> None:
        self.tm.begin()
        for bucket in self.conn.root()["live"]:
            len(bucket)
        self.tm.abort()

    def write(self, index: int, k: int) -> None:
        b, pos = divmod(index, BUCKET)
        self.tm.begin()
        try:
            node = self.conn.root()["live"][b][pos]
            node.value = k
            node.writes += 1
            self.tm.commit()
        except BaseException:
            self.tm.abort()
            raise

    def close(self) -> None:
        self.conn.close()


#: The adapters by ``--systems`` name, in column order.
GC_SYSTEMS: dict[str, type[GcSystem]] = {cls.name: cls for cls in (CopalGc, ZODBGc)}


# --------------------------------------------------------------------------- checks


def window(times: list[tuple[float, float]], start: float, end: float) -> dict[str, Any]:
    """The writer's commits that ended in ``[start, end)``: how many, per second, and the
    longest it went without one (from ``start`` to its first commit, between two, from its last
    to ``end``).

    Example:
        >>> window([(0.0, 1.0), (1.0, 1.5), (2.0, 3.5)], 1.0, 3.0)
        {'seconds': 2.0, 'commits': 2, 'per_s': 1.0, 'longest_wait_s': 1.5}
    """
    ends = [t1 for _, t1 in times if start <= t1 < end]
    points = [start, *ends, end]
    span = end - start
    return {
        "seconds": span,
        "commits": len(ends),
        "per_s": len(ends) / span if span > 0 else None,
        "longest_wait_s": max(b - a for a, b in zip(points, points[1:])),
    }


def check_walk(
    layout: Layout, nodes: Iterator[tuple[int, int, int, int | None]], written: list[list[int]],
) -> dict[str, Any]:
    """Walks the live nodes: ``loaded`` (how many), ``order_ok`` (each is the live node
    expected there and refers to the one before it), ``writes`` (their sum) and ``writes_ok``
    (each node the writer changed holds its last value and its count of writes, the others
    their first values); ``problems`` lists the first few that are not; ``error`` is what a
    node that did not load raised."""
    last = {index: (k, count) for index, k, count in written}
    expected = layout.live_numbers()
    loaded = writes = 0
    previous: int | None = None
    order: list[str] = []
    lost: list[str] = []
    error = None
    try:
        for index, (n, value, count, ref) in enumerate(nodes):
            want = next(expected, None)
            if n != want or ref != previous:
                order.append(f"live node {index}: n={n} ref={ref}, expected n={want} ref={previous}")
            want_value, want_count = last.get(index, (n, 0))
            if value != want_value or count != want_count:
                lost.append(f"live node {index}: value={value} writes={count}, expected {want_value}, {want_count}")
            loaded += 1
            writes += count
            previous = n
    except Exception as exc:  # noqa: BLE001 - a node that does not load is the finding
        error = f"{type(exc).__name__}: {exc}"
    return {
        "loaded": loaded, "order_ok": not order and loaded == layout.live and error is None,
        "writes": writes, "writes_ok": not lost and error is None,
        "problems": (order + lost)[:5], "error": error,
    }


# --------------------------------------------------------------------------- workers


def _collect(spec: dict[str, Any]) -> dict[str, Any]:
    """The ``collect`` role: writer, baseline, collection, checks (see the module docstring)."""
    layout = Layout(int(spec["objects"]), int(spec["unreachable"]))
    adapter = GC_SYSTEMS[spec["system"]]()
    adapter.open(spec["dir"])
    out: dict[str, Any] = {"ok": True, "size_before": adapter.size()}
    writer = adapter.start_writer(spec, layout)
    writer.wait_ready()
    baseline = float(spec["baseline_s"])
    time.sleep(baseline)
    began = time.monotonic()
    found = adapter.collect(int(spec["batch"]))
    ended = time.monotonic()
    wrote = writer.stop()
    stopped = time.monotonic()
    out["gc_s"] = ended - began
    out["found"] = found
    out["objects_per_s"] = found["objects"] / out["gc_s"] if out["gc_s"] > 0 else None
    out["size_after"] = adapter.size()
    times = [(float(a), float(b)) for a, b in wrote["times"]]
    out["writer"] = {
        "commits": wrote["commits"], "conflicts": wrote["conflicts"], "nodes_changed": len(wrote["written"]),
        "before": window(times, began - baseline, began),
        "during": window(times, began, ended),
        "after": window(times, ended, stopped),
    }
    t0 = time.monotonic()
    walk = check_walk(layout, adapter.live_nodes(), wrote["written"])
    out["walk_s"] = time.monotonic() - t0
    out["walk"] = walk
    removed_exactly = (
        found["objects"] == layout.expected_objects and found["removed"] == layout.expected_removed
        and found.get("removed_nodes", layout.unreachable) == layout.unreachable
    )
    out["checks"] = {
        "removed_exactly": removed_exactly,
        "reachable_load": walk["order_ok"],
        "writes_landed": walk["writes_ok"] and walk["writes"] == wrote["commits"],
    }
    out.update(adapter.close())
    out["rss_kb"] = peak_rss_kb()
    return out


def _write(spec: dict[str, Any]) -> dict[str, Any]:
    """The ``writer`` role (copal): warm up, say :data:`READY`, commit until a line (or the end)
    arrives on stdin."""
    layout = Layout(int(spec["objects"]), int(spec["unreachable"]))
    session = CopalWriterSession(spec["dir"])
    session.warm()
    stop = threading.Event()

    def wait_for_stop() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=wait_for_stop, daemon=True).start()
    sys.stdout.write(READY + "\n")
    sys.stdout.flush()
    report = write_until(session, layout, stop)
    session.close()
    return {"ok": True, **report}


def _build(spec: dict[str, Any]) -> dict[str, Any]:
    layout = Layout(int(spec["objects"]), int(spec["unreachable"]))
    adapter = GC_SYSTEMS[spec["system"]]()
    t0 = time.monotonic()
    adapter.build(spec["dir"], layout)
    return {"ok": True, "build_s": time.monotonic() - t0, "rss_kb": peak_rss_kb()}


def worker_main(spec: dict[str, Any]) -> int:
    """Run one role of ``spec["role"]`` (``build``, ``collect`` or ``writer``) for one system;
    print the report (:func:`copal.bench.workers.run_and_report`).

    ``spec`` keys: ``system``, ``role``, ``dir``, ``objects``, ``unreachable``; for ``collect``
    also ``batch`` (copal's commits of removals) and ``baseline_s``. The ``collect`` report has
    ``gc_s``, ``objects_per_s``, ``found`` (what the collection reported), ``writer`` (commits,
    conflicts, and per window ``before`` / ``during`` / ``after`` the collection: commits,
    commits per second, the longest wait), ``walk``, ``checks``, ``size_before``,
    ``size_after`` (and for copal ``size_compacted``, ``compact_s``), ``walk_s``, ``rss_kb``.
    """
    role = {"build": _build, "collect": _collect, "writer": _write}[spec["role"]]
    return run_and_report(lambda: role(spec))
