"""Transactions: a consistent snapshot, an identity map, and an atomic commit."""

from __future__ import annotations

import time
import warnings
from types import TracebackType
from typing import TYPE_CHECKING, Any, Iterable, TypeVar

from . import _core
from .aio import ACTIVE, ENDED, PENDING, AsyncTransaction, event_loop_running
from .persistent import Persistent, PersistentDict
from .query import Query

if TYPE_CHECKING:
    from .database import Database

__all__ = ["Transaction"]

T = TypeVar("T")


class Transaction(AsyncTransaction):
    """A unit of work on a :class:`~copal.Database`; use it as a context manager.

    It reads one consistent snapshot of the database (it never sees part of another
    transaction's commit) and commits all its changes atomically, or none of them::

        with db.transaction() as tx:
            tx.root["accounts"] = PersistentList()

    A clean exit from the ``with`` block commits; an exception aborts and propagates.
    A commit raises :class:`~copal.ConflictError` if another transaction changed one of the
    objects this one changed since it read them; then nothing of this transaction is written.

    Without ``with``, end it with :meth:`commit` or :meth:`abort`: until then it keeps its
    snapshot (the embedded store cannot reuse the pages that snapshot reads, and the snapshot
    holds one of its reader slots) and one connection of the database. A transaction dropped
    before its end is aborted, with a ``ResourceWarning``, as an unclosed file is closed. Once
    :meth:`commit` returns or raises, the transaction has ended: after a failed commit nothing
    of it was written, and the next attempt is a new transaction
    (:meth:`Database.run <copal.Database.run>` makes them for you). Its objects then belong to no
    transaction: changing one raises ``RuntimeError``, and reading one works (a loaded object
    reads its state, a ghost loads the latest committed state) until its connection, which the
    database's pool hands to the next transaction, serves another: that transaction uses the
    same objects, in whichever thread it runs. So read what a piece of work needs inside its
    transaction, and hand plain values out of it (``db.run`` returns what its function returns).

    A read-only transaction (``db.transaction(readonly=True)``) reads the same snapshot and
    costs nothing at its end: it never encodes, compares nor commits. Assigning an attribute of
    a persistent object, ``add`` and ``delete`` raise :class:`~copal.ReadOnlyError` there.
    Changes made in place to plain containers (``obj.tags.append(...)``) are not looked for in
    a read-only transaction: make them in a read-write one. It is the transaction to use for
    requests that only read.

    The cost of a commit, a query and an abort follows what the transaction used, not what the
    cache holds: in-place changes of plain containers are looked for among the objects this
    transaction loaded or touched, and an abort turns only those (and the objects it changed)
    back into ghosts; other cached objects stay loaded.

    A transaction made while an event loop runs (in a coroutine) starts when it is entered:
    ``async with`` starts it in a worker thread, a plain ``with`` or its first use starts it
    there and then. Its awaitable methods (:meth:`aget`, :meth:`acommit`, ...) run their work
    in worker threads (docs/howto/async.md).

    Attributes:
        tid_seen: The number of the last transaction committed when this one began: the
            snapshot it reads. A later commit of another transaction is invisible to it.
        readonly: Whether this transaction refuses changes.
    """

    def __init__(self, db: Database, readonly: bool = False) -> None:
        self._db = db
        # PENDING until it starts, ACTIVE from then until its end, then ENDED.
        self._state = PENDING
        self.readonly = readonly
        if not event_loop_running():
            self._start()

    def _start(self) -> None:
        """Takes a connection and begins the snapshot. A transaction that could not start holds
        nothing: its connection goes back to the pool."""
        self._state = ENDED
        conn = self._db._connection()
        try:
            self.tid_seen: int = conn.begin(self.readonly)
        except BaseException:
            self._db._release(conn)
            raise
        self._db._began(self, time.monotonic())
        self._conn: _core.Connection = conn
        self._state = ACTIVE

    # -- reading ---------------------------------------------------------------------------
    @property
    def root(self) -> PersistentDict:
        """The root mapping, whose named entries are the entry points into the object graph."""
        self._check_active()
        root: PersistentDict = self._conn.root()
        return root

    def get(self, oid: int) -> Any:
        """The object with id ``oid`` (raises DanglingReference if there is none)."""
        self._check_active()
        return self._conn.get(oid)

    def load_closure(self, objects: Iterable[Any], depth: int | None = None) -> int:
        """Loads everything reachable from ``objects`` (to ``depth`` levels), in batches.

        Returns the number of objects loaded.
        """
        self._check_active()
        return self._conn.load_closure(list(objects), depth)

    def query(self, cls: type[T]) -> Query[T]:
        """The stored objects of ``cls`` and its subclasses; see :class:`~copal.Query`."""
        self._check_active()
        return Query(self, cls)

    # -- writing ---------------------------------------------------------------------------
    def add(self, obj: Persistent) -> Persistent:
        """Makes ``obj`` persistent at commit even if no stored object references it (a stored
        object too): ``obj`` and what it reaches are kept by :meth:`Database.gc
        <copal.Database.gc>` until ``obj`` is deleted. Returns ``obj``.

        Raises TypeError for an object that is not a :class:`~copal.Persistent` or that belongs
        to another database or connection, and ReadOnlyError in a read-only transaction."""
        self._check_active()
        self._conn.add(obj)
        return obj

    def delete(self, obj: Persistent) -> None:
        """Deletes ``obj`` at commit. References to it elsewhere become dangling; objects only
        it reached are left for :meth:`Database.gc <copal.Database.gc>` to remove.

        Raises TypeError for an object that is not a :class:`~copal.Persistent` or that belongs
        to another database or connection, and ReadOnlyError in a read-only transaction."""
        self._check_active()
        self._conn.delete(obj)

    def commit(self) -> int | None:
        """Commits and ends the transaction; returns its tid (None if nothing changed, and
        always in a read-only transaction)."""
        self._check_active()
        try:
            tid = self._conn.commit()
        except BaseException:
            self._end(aborted=True)
            raise
        self._end(aborted=False)
        return tid

    def abort(self) -> None:
        """Discards every change and ends the transaction."""
        if self._state is ACTIVE:
            self._end(aborted=True)
        self._state = ENDED

    # -- internals -------------------------------------------------------------------------
    def _check_active(self) -> None:
        if self._state is PENDING:
            self._start()
        elif self._state is not ACTIVE:
            raise RuntimeError("this transaction has ended; start a new one with db.transaction()")

    def _end(self, aborted: bool) -> None:
        self._state = ENDED
        try:
            self._conn.end(aborted)
        finally:
            self._db._release(self._conn)
            self._db._ended(self, committed=not aborted)

    def __del__(self) -> None:
        # A transaction dropped before its end would hold its snapshot (an LMDB reader slot, a
        # PostgreSQL connection) and its connection for the rest of the process: it is aborted,
        # with a ResourceWarning, as an unclosed file is closed.
        # Aborted before the warning, which a warnings filter may turn into an exception.
        if getattr(self, "_state", None) is ACTIVE:
            self.abort()
            warnings.warn(
                "a copal transaction was dropped without commit() or abort(); it was aborted. "
                "Use `with db.transaction() as tx:` to end transactions",
                ResourceWarning,
                stacklevel=2,
                source=self,
            )

    def __enter__(self) -> Transaction:
        if self._state is PENDING:
            self._start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._state is not ACTIVE:
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()
