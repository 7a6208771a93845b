"""Asyncio: the awaitable calls of databases, transactions and queries (docs/howto/async.md).

Each awaitable call hands copal's blocking work to a worker thread and awaits it, so that the
event loop serves other coroutines meanwhile: the start of a transaction, queries, batch loads,
the commit with its fsync, and the end of a transaction (on PostgreSQL each is a round trip to
the server). The Rust core releases the GIL while it waits for the disk or the server.

A transaction's calls run one at a time, each in whichever worker thread is free: its connection
moves between threads and is never used by two at once. Starts run on threads of their own (a
few per Database), because on PostgreSQL a start waits for a free connection when all
``max_connections`` are in use; on the event loop's default executor, which also runs the
commits that give connections back, such waits could take every thread.

Cancellation (``task.cancel()``, ``asyncio.timeout``): a call that no thread has started is
withdrawn and never runs; a call that a thread runs cannot be stopped half-way, so the
cancellation waits for it to finish, then propagates. A commit is thus either not run, or run to
its end, and then it counts. ``async with`` then aborts the transaction if it has not ended, so
a cancelled transaction holds nothing afterwards: no snapshot (LMDB reader slot), no connection.

asyncio is imported by the functions that use it, which run inside an event loop, where it is
imported already: a program that never runs an event loop does not pay for importing it.
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Coroutine, Generic, Iterable, Iterator, TypeVar

from .errors import BlockingReadWarning, ConflictError

if TYPE_CHECKING:
    import asyncio
    from concurrent.futures import Executor
    from typing import Self

    from . import _core
    from .database import Database
    from .query import Query
    from .transaction import Transaction

__all__ = ["AsyncDatabase", "AsyncTransaction", "event_loop_running"]

T = TypeVar("T")
R = TypeVar("R")

# Threads per Database that start transactions.
START_THREADS = 4

# Files of the copal package: warnings name the first frame outside them.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

# The states of a transaction (`Transaction._state`): not started yet, started, ended. They are
# compared by identity; the binding compares `_state` with its own interned "active"
# (query_object.rs), the same object as this literal.
PENDING = "pending"
ACTIVE = "active"
ENDED = "ended"


def event_loop_running() -> bool:
    """Whether an event loop runs in this thread (then a transaction made now starts when it is
    entered, not when it is made). Without asyncio imported, none can."""
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and asyncio._get_running_loop() is not None


class AsyncDatabase:
    """The awaitable calls of :class:`~copal.Database`."""

    if TYPE_CHECKING:  # Defined by Database.
        path: str
        _lock: threading.Lock

        def transaction(self, *, readonly: bool = False) -> Transaction: ...
        def close(self) -> None: ...
        def _retry_after(self, conflict: ConflictError, attempt: int, retries: int, work: Callable[..., Any]) -> None: ...

    # The threads that start this Database's transactions entered with `async with`.
    _start_threads: ThreadPoolExecutor | None = None

    async def arun(self, work: Callable[[Transaction], Awaitable[R]], retries: int = 3, *, readonly: bool = False) -> R:
        """Awaits ``work(tx)`` in a new transaction and commits it; on a conflict, awaits it
        again in another new transaction, which sees the other transaction's changes: the
        awaitable :meth:`run` (same arguments, retries counted and logged alike), for ``work``
        an ``async def`` function of the transaction::

            async def transfer(tx):
                a, b = await tx.query(Account).where(copal.field("owner").in_(["ann", "bob"])).aall()
                a.balance -= 10
                b.balance += 10

            await db.arun(transfer, retries=10)

        The transaction starts, commits and aborts in worker threads. If the awaiting task is
        cancelled, the transaction is aborted, unless its commit already runs: then the commit
        finishes and counts, and the cancellation propagates after it.

        Returns:
            What ``work`` returned in the attempt that committed.

        Raises:
            ConflictError: The last attempt conflicted too.
            Exception: Anything else ``work`` or the commit raises, at once, without a retry.
        """
        attempt = 0
        while True:
            try:
                async with self.transaction(readonly=readonly) as tx:
                    result = await work(tx)
                return result
            except ConflictError as conflict:
                attempt += 1
                self._retry_after(conflict, attempt, retries, work)

    async def aclose(self) -> None:
        """:meth:`close`, in a worker thread (on PostgreSQL, closing a connection is a message
        to the server)."""
        await in_thread(self.close)

    def _start_executor(self) -> Executor:
        with self._lock:
            if self._start_threads is None:
                self._start_threads = ThreadPoolExecutor(START_THREADS, thread_name_prefix=f"copal start {self.path}")
            return self._start_threads

    def _stop_start_threads(self) -> None:
        """Lets the start threads end (when the Database closes); starts still queued are
        cancelled, and their transactions never start."""
        if self._start_threads is not None:
            self._start_threads.shutdown(wait=False, cancel_futures=True)


class AsyncTransaction:
    """The awaitable calls of :class:`~copal.Transaction`.

    ``async with db.transaction() as tx:`` starts the transaction in a worker thread (taking a
    connection, beginning the snapshot and loading the root, so that ``tx.root`` reads nothing
    more) and ends it there: a clean exit awaits :meth:`acommit`, an exception or a cancellation
    :meth:`aabort`. A transaction's awaitable calls, those of its queries included, run one at a
    time, in the order they are awaited.
    """

    if TYPE_CHECKING:  # Defined by Transaction.
        _db: Database
        _conn: _core.Connection
        _state: str

        def _start(self) -> None: ...
        def get(self, oid: int) -> Any: ...
        def load_closure(self, objects: Iterable[Any], depth: int | None = None) -> int: ...
        def commit(self) -> int | None: ...
        def abort(self) -> None: ...

    # Made by the first awaitable call: it runs the transaction's calls one at a time.
    _turn: asyncio.Lock | None = None

    async def __aenter__(self) -> Self:
        async with self._turn_lock():
            await self._start_off_loop()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        # As `__exit__`: a clean exit commits, an exception (a cancellation too) aborts.
        if self._state is ACTIVE:
            await (self.acommit() if exc_type is None else self.aabort())

    async def aget(self, oid: int) -> Any:
        """:meth:`get`, in a worker thread: the object with id ``oid``, loaded."""
        return await self._in_thread(lambda: self.get(oid))

    async def aload_closure(self, objects: Iterable[Any], depth: int | None = None) -> int:
        """:meth:`load_closure`, in a worker thread: loads everything reachable from
        ``objects`` (to ``depth`` levels) in batches, so that touching those objects afterwards
        reads nothing. Returns the number of objects loaded."""
        return await self._in_thread(lambda: self.load_closure(objects, depth))

    async def acommit(self) -> int | None:
        """:meth:`commit`, in a worker thread (where the commit waits for its fsync, or for the
        server). Once a thread runs it, a cancellation waits for it to end: the commit is then
        done, and counts. As :meth:`commit`, it ends the transaction, also when it fails or is
        cancelled before a thread ran it (then the transaction is aborted)."""
        try:
            return await self._in_thread(self.commit)
        except BaseException:
            await self.aabort()
            raise

    async def aabort(self) -> None:
        """:meth:`abort`, in a worker thread (on PostgreSQL, the end of a snapshot is a round
        trip). A cancellation meanwhile propagates once the abort is done."""
        if self._state is ACTIVE:
            await finish(self._in_thread(self.abort))
        else:
            self.abort()

    async def _in_thread(self, call: Callable[[], T]) -> T:
        """Awaits ``call()`` run in a worker thread, after the transaction's earlier calls (and
        after its start, if it has not started)."""
        async with self._turn_lock():
            await self._start_off_loop()
            return await in_thread(call)

    def _aiter(self, query: Query[T]) -> AsyncResults[T]:
        return AsyncResults(self, query)

    def _turn_lock(self) -> asyncio.Lock:
        if self._turn is None:
            import asyncio

            self._turn = asyncio.Lock()
        return self._turn

    async def _start_off_loop(self) -> None:
        """Starts a pending transaction on the Database's start threads; on PostgreSQL, has each
        later read of the store on the event loop's thread warn (:class:`~copal.BlockingReadWarning`)."""
        if self._state is not PENDING:
            return
        try:
            await in_thread(self._start_with_root, self._db._start_executor())
        except BaseException:
            # Cancelled once started, or the root failed to load; or it never started.
            if self._state is ACTIVE:
                await finish(in_thread(self.abort))
            else:
                self.abort()
            raise
        if _waits_for_server(self._db):
            self._conn.guard_reads(_warn_blocking_read)

    def _start_with_root(self) -> None:
        self._start()
        self._conn.root()


class AsyncResults(Generic[T]):
    """``async for`` over a query's results: the transaction runs the query and loads each later
    batch of results in a worker thread; the loop hands out the objects of a batch one by one."""

    def __init__(self, tx: AsyncTransaction, query: Query[T]) -> None:
        self._tx = tx
        self._query = query
        self._results: _core.Results[T] | None = None
        self._batch: Iterator[T] = iter(())

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        for obj in self._batch:
            return obj
        batch = await self._tx._in_thread(self._next_batch)
        if not batch:
            raise StopAsyncIteration
        self._batch = iter(batch)
        return next(self._batch)

    def _next_batch(self) -> list[T]:
        if self._results is None:
            self._results = iter(self._query)
        return self._results.next_batch()


class _Withdrawn(Exception):
    """The outcome of a call withdrawn before a thread started it (which nobody awaits)."""


class _Job(Generic[T]):
    """A call handed to a worker thread: until the thread starts it, it can be withdrawn, and
    then it never runs; once started, it runs to its end."""

    def __init__(self, call: Callable[[], T]) -> None:
        self._call = call
        self._lock = threading.Lock()
        self._started = False
        self._withdrawn = False

    def run(self) -> T:
        with self._lock:
            if self._withdrawn:
                raise _Withdrawn
            self._started = True
        return self._call()

    def withdraw(self) -> bool:
        """Withdraws the call unless a thread has started it; whether it was withdrawn."""
        with self._lock:
            self._withdrawn = not self._started
            return self._withdrawn


async def in_thread(call: Callable[[], T], executor: Executor | None = None) -> T:
    """Awaits ``call()`` run on ``executor`` (default: the event loop's). When the awaiting task
    is cancelled, a call not started yet never runs; a started one is waited for, then the
    cancellation propagates: when this returns or raises, no thread works for the caller."""
    import asyncio

    job = _Job(call)
    done = asyncio.get_running_loop().run_in_executor(executor, contextvars.copy_context().run, job.run)
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        if job.withdraw():
            done.add_done_callback(_drop_outcome)
        else:
            await _outlast(done)
        raise


async def finish(work: Coroutine[Any, Any, T]) -> T:
    """Awaits ``work`` to its end even if the awaiting task is cancelled meanwhile (the
    cancellation propagates afterwards): for the work that releases what a transaction holds."""
    import asyncio

    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await _outlast(task)
        raise


async def _outlast(future: asyncio.Future[Any]) -> None:
    """Waits until ``future`` is done, through cancellations of the awaiting task, and drops its
    outcome: the caller propagates its cancellation instead."""
    import asyncio

    while not future.done():
        try:
            await asyncio.wait([future])
        except asyncio.CancelledError:
            continue
    _drop_outcome(future)


def _drop_outcome(future: asyncio.Future[Any]) -> None:
    # Retrieved, so that asyncio does not log it as an exception nobody retrieved.
    if not future.cancelled():
        future.exception()


def _waits_for_server(db: Database) -> bool:
    # Imported here: copal.database imports this module.
    from .database import _is_postgresql_url

    return _is_postgresql_url(db.path)


def _warn_blocking_read() -> None:
    """What a PostgreSQL transaction entered with ``async with`` does before each read of the
    store, and before a commit or abort, on the event loop's thread (``Connection.guard_reads``)."""
    warnings.warn(
        "copal waited for a round trip to the PostgreSQL server on the event loop's thread: load "
        "the objects a coroutine touches with `await tx.aload_closure(objects)` or `await "
        "tx.aget(oid)`, run queries with `await query.aall()` (or afirst, aone, acount, aexists) or "
        "`async for`, and end the transaction with `async with`, `await tx.acommit()` or `await "
        "tx.aabort()` (docs/howto/async.md)",
        BlockingReadWarning,
        stacklevel=_outside_copal(),
    )


def _outside_copal() -> int:
    """The ``stacklevel`` of a warning raised here that names the first frame outside the copal
    package (the application's line that read, committed or aborted)."""
    level, frame = 1, sys._getframe(1)
    while frame.f_code.co_filename.startswith(_PACKAGE_DIR) and frame.f_back is not None:
        level, frame = level + 1, frame.f_back
    return level
