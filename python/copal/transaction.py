"""Transactions: a consistent snapshot, an identity map, and an atomic commit."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any, Iterable, TypeVar

from . import _core
from .persistent import Persistent, PersistentDict
from .query import Query

if TYPE_CHECKING:
    from .database import Database

__all__ = ["Transaction"]

T = TypeVar("T")


class Transaction:
    """A unit of work on a :class:`~copal.Database`; use it as a context manager.

    It reads one consistent snapshot of the database (it never sees part of another
    transaction's commit) and commits all its changes atomically, or none of them::

        with db.transaction() as tx:
            tx.root["accounts"] = PersistentList()

    A clean exit from the ``with`` block commits; an exception aborts and propagates.
    A commit raises :class:`~copal.ConflictError` if another transaction changed one of the
    objects this one changed since it read them; then nothing of this transaction is written.

    Without ``with``, end it with :meth:`commit` or :meth:`abort`: until then it keeps its
    snapshot (the embedded store cannot reuse the pages that snapshot reads) and one connection
    of the database. Once :meth:`commit` returns or raises, the transaction has ended: after a
    failed commit nothing of it was written, and the next attempt is a new transaction
    (:meth:`Database.run <copal.Database.run>` makes them for you). Its objects then belong to no
    transaction: reading them still works, changing one raises ``RuntimeError``.

    Attributes:
        tid_seen: The number of the last transaction committed when this one began: the
            snapshot it reads. A later commit of another transaction is invisible to it.
    """

    def __init__(self, db: Database, conn: _core.Connection) -> None:
        self._db = db
        self._conn: _core.Connection = conn
        self._added: list[Persistent] = []
        self._deleted: list[Persistent] = []
        self._active = True
        self.tid_seen: int = conn.begin()

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
        """Makes ``obj`` persistent at commit even if no stored object references it."""
        self._check_active()
        if not isinstance(obj, Persistent):
            raise TypeError(f"only copal.Persistent objects can be added, not {type(obj).__name__}")
        self._added.append(obj)
        return obj

    def delete(self, obj: Persistent) -> None:
        """Deletes ``obj`` at commit. References to it elsewhere become dangling."""
        self._check_active()
        if obj._p_oid is None:
            if obj in self._added:
                self._added.remove(obj)
            return
        self._deleted.append(obj)

    def commit(self) -> int | None:
        """Commits and ends the transaction; returns its tid (None if nothing changed)."""
        self._check_active()
        try:
            tid = self._conn.commit(self._added, self._deleted)
        except BaseException:
            self._end(aborted=True)
            raise
        self._end(aborted=False)
        return tid

    def abort(self) -> None:
        """Discards every change and ends the transaction."""
        if self._active:
            self._end(aborted=True)

    # -- internals -------------------------------------------------------------------------
    def _pending_objects(self) -> list[Any]:
        """Objects whose current state may differ from the snapshot (for read-your-writes)."""
        pending: dict[int, Any] = {}
        touched = [*self._added, *self._conn.changed_objects(), *self._conn.watched_objects()]
        if not touched:
            return []
        for obj in [*touched, *self._conn.unsaved_reachable(touched)]:
            pending[id(obj)] = obj
        return list(pending.values())

    def _check_active(self) -> None:
        if not self._active:
            raise RuntimeError("this transaction has ended; start a new one with db.transaction()")

    def _end(self, aborted: bool) -> None:
        self._active = False
        try:
            self._conn.end(aborted)
        finally:
            self._db._release(self._conn)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._active:
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()
