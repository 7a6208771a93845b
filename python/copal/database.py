"""Opening databases and running transactions."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Iterable, TypeVar

from . import _core
from .aio import AsyncDatabase
from .errors import ConflictError, SchemaError
from .evolution import declared_removals
from .indexes import declared_indexes
from .persistent import registry, registry_generation, type_name_of
from .progress import Progress, ProgressBar
from .serialize import DEFAULT_MAX_SIZE, Compression, _compression
from .transaction import Transaction
from .transfer import ExportFormat, Target, opened

__all__ = ["Database", "open", "init", "upgrade", "compact"]

R = TypeVar("R")

_log = logging.getLogger("copal")

DEFAULT_CACHE_SIZE = 100_000
#: Seconds a transaction may stay open before it is logged (``long_transaction_warning``).
DEFAULT_LONG_TRANSACTION = 60.0

_LONG_TRANSACTIONS = (
    "While a transaction is open, what later commits replace cannot be reused (the pages of the "
    "embedded store's file, PostgreSQL's row versions), so the database grows: end transactions "
    "sooner, or raise long_transaction_warning (docs/howto/tune.md)"
)


class Database(AsyncDatabase):
    """An open copal database. Share one per process between threads.

    Made by :func:`copal.open`, which takes the same arguments. Close it with :meth:`close`,
    or use it as a context manager (``with copal.open(path) as db:``), which closes it.

    Each :meth:`transaction` takes a connection from a pool (a connection is an identity map
    and object cache used by one thread at a time), so threads run transactions in parallel;
    the Rust core releases the GIL while it reads, scans and commits.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        cache_size: int = DEFAULT_CACHE_SIZE,
        map_size: int | None = None,
        durable: bool = True,
        progress: Progress | None = None,
        max_connections: int | None = None,
        pool_timeout: float | None = None,
        readonly: bool = False,
        check_pages: bool | None = None,
        long_transaction_warning: float | None = DEFAULT_LONG_TRANSACTION,
    ) -> None:
        self.path = os.fspath(path)
        if long_transaction_warning is not None and not long_transaction_warning > 0:
            raise ValueError(f"long_transaction_warning must be seconds > 0 or None, not {long_transaction_warning!r}")
        embedded_only = (("map_size", map_size is not None), ("readonly", readonly), ("check_pages", check_pages is not None))
        for name, given in embedded_only:
            if given and _is_postgresql_url(self.path):
                raise ValueError(f"{name} applies to the embedded store only, not to a PostgreSQL database")
        for name, value in (("max_connections", max_connections), ("pool_timeout", pool_timeout)):
            if value is not None and not _is_postgresql_url(self.path):
                raise ValueError(f"{name} applies to a PostgreSQL database only, not to the embedded store")
        if max_connections is not None and max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {max_connections}")
        self.cache_size = cache_size
        self._progress: Progress = progress if progress is not None else ProgressBar()
        self._store = _core.Store(self.path, map_size, durable, max_connections, pool_timeout, readonly, check_pages)
        self.readonly = readonly
        self.long_transaction_warning = long_transaction_warning
        # The transactions running, by id: when each began (time.monotonic()) and whether it
        # was reported as long while it ran. Ids only: a dropped transaction must stay
        # collectable, to be aborted by its __del__.
        self._running: dict[int, tuple[float, bool]] = {}
        self._pool: list[_core.Connection] = []
        self._all: list[_core.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        # Indexes are synchronised with the class declarations when classes are (re)defined.
        self._indexes_synced_for = -1
        self._retries = 0

    def transaction(self, *, readonly: bool = False) -> Transaction:
        """Starts a transaction; use it in a ``with`` block (commit on success, abort on error).

        With ``readonly=True``, a transaction that only reads: it refuses every change
        (:class:`~copal.ReadOnlyError`) and its end costs nothing (no state is encoded, compared
        or committed). Use it for requests that only read::

            with db.transaction(readonly=True) as tx:
                names = [p.name for p in tx.query(Person).where(city="Oslo")]

        Every transaction of a Database opened with ``readonly=True`` is read-only.

        In a coroutine, use ``async with db.transaction() as tx:``: made while an event loop
        runs, the transaction starts when it is entered, in a worker thread, so that the loop
        never waits for it (docs/howto/async.md).
        """
        if self._closed:
            raise RuntimeError("the database is closed")
        return Transaction(self, readonly or self.readonly)

    def _connection(self) -> _core.Connection:
        """A connection for a transaction that starts: an idle one of the pool, or a new one."""
        with self._lock:
            if self._pool:
                conn = self._pool.pop()
            else:
                conn = self._store.connect(registry, self.cache_size)
                self._all.append(conn)
        try:
            self._sync_indexes(conn)
        except BaseException:
            self._release(conn)
            raise
        return conn

    def _sync_indexes(self, conn: _core.Connection) -> None:
        # Before the transaction's snapshot is taken, so that its queries see complete indexes.
        # Removed-field declarations are stored alongside, for `copal gc --schema`.
        # A read-only store is left as it is: its queries use the indexes it holds.
        if self._indexes_synced_for == registry_generation[0] or self.readonly:
            return
        declared, removed_indexes = declared_indexes(conn.index_keys)
        removals = declared_removals()
        # Checked on a snapshot first: the maintenance commits take the commit lock even when
        # they find nothing to change, so every new process would wait behind running commits.
        if not self._store.holds_declarations(declared, removed_indexes, removals):
            conn.sync_indexes(declared, removed_indexes, self._progress)
            self._store.sync_removed(removals)
        self._indexes_synced_for = registry_generation[0]

    def run(self, work: Callable[[Transaction], R], retries: int = 3, *, readonly: bool = False) -> R:
        """Runs ``work(tx)`` in a new transaction and commits it; on a conflict, runs it again
        in another new transaction, which sees the other transaction's changes.

        Each retry is counted in ``stats()["retries"]`` and logged at INFO level on the
        ``copal`` logger, with the conflict that caused it (``logging.basicConfig(level=
        logging.INFO)`` shows them).

        Args:
            work: A function of the transaction. It may run several times, so it should change
                nothing outside the database (send the e-mail after ``run`` returns).
            retries: How many times to run ``work`` again after a conflict: ``retries=3`` makes
                at most 4 attempts; 0 makes one.
            readonly: Runs ``work`` in a read-only transaction (see :meth:`transaction`), which
                never conflicts.

        Returns:
            What ``work`` returned in the attempt that committed.

        Raises:
            ConflictError: The last attempt conflicted too.
            Exception: Anything else ``work`` or the commit raises (a
                :class:`~copal.UniqueViolation`, a ``ValueError`` of your own, ...) aborts the
                transaction and propagates at once, without a retry.
        """
        attempt = 0
        while True:
            tx = self.transaction(readonly=readonly)
            try:
                result = work(tx)
                tx.commit()
                return result
            except ConflictError as conflict:
                tx.abort()
                attempt += 1
                self._retry_after(conflict, attempt, retries, work)
            except BaseException:
                tx.abort()
                raise

    def _retry_after(self, conflict: ConflictError, attempt: int, retries: int, work: Callable[..., Any]) -> None:
        """Counts and logs the ``attempt``-th retry of ``work`` after ``conflict`` (:meth:`run`,
        :meth:`arun`); raises the conflict when the ``retries`` are used up."""
        if attempt > retries:
            raise conflict
        with self._lock:
            self._retries += 1
        _log.info("retry %d of %d of %s after a conflict: %s", attempt, retries, _name_of(work), conflict)

    def stats(self) -> dict[str, int]:
        """This Database object's counters since it was opened: records_read,
        records_written, cache_hits, cache_misses, commits, conflicts (commits refused with
        ConflictError), retries (transactions :meth:`run` ran again after a conflict),
        objects_encoded (objects whose state commits encoded, to write it or to compare it with
        the state it was loaded with)."""
        stats: dict[str, int] = self._store.stats()
        with self._lock:
            stats["retries"] = self._retries
        return stats

    def verify(self) -> dict[str, Any]:
        """Checks the whole database: every record decodes, every reference resolves, every
        index holds exactly the entries its objects call for. Returns counts and a list of
        ``problems`` (empty when all is well)."""
        report: dict[str, Any] = self._store.verify()
        return report

    def schema(self) -> dict[str, Any]:
        """The stored schema, readable without the application's classes: ``descriptors``
        (each with ``id``, ``class``, ``type_name``, ``fields`` and the number of ``records``
        written with it), ``unreadable`` (records whose header does not parse) and ``removed``
        (pairs of type name and declared removed fields). See ``copal schema``."""
        self._store.sync_removed(declared_removals())
        schema: dict[str, Any] = self._store.schema()
        return schema

    def gc(self, *, batch: int = 10_000, progress: Progress | None = None) -> dict[str, Any]:
        """Removes the stored objects that nothing reachable refers to, while other transactions
        go on committing; returns what it found and did.

        The roots are the root mapping (``tx.root``) and the objects stored with
        :meth:`Transaction.add <copal.Transaction.add>` (anchors, kept until deleted); every
        object they reach, directly or through other objects, is kept. The rest is removed in
        commits of at most ``batch`` objects each (each one holds the write lock about as long
        as a commit of that many deletions), and an object that another transaction links
        back while the collection runs is kept. A transaction that began before a removal and
        stores a reference to a removed object fails with :class:`~copal.ConflictError`.

        The report: ``objects`` stored when it began, ``reachable``, ``removed``,
        ``removed_bytes`` (their records), ``removed_by_type`` (type name to count),
        ``anchors_derived`` (a database written without anchors has them derived once: every
        object that no other object refers to) and ``commits``. ``progress(what, done, total)``
        is called as it goes (:class:`ProgressBar` draws a bar); an exception it raises, and
        KeyboardInterrupt, stop the collection after its current commit and are raised.
        Raises :class:`~copal.StorageError` while an import into the database is unfinished,
        and :class:`~copal.CorruptRecordError` when a reachable record does not decode (nothing
        is removed then: ``copal verify`` tells more). See ``copal gc``."""
        if batch < 1:
            raise ValueError(f"batch must be at least 1, not {batch!r}")
        report: dict[str, Any] = self._store.collect_garbage(batch, progress)
        return report

    def gc_schema(self, *, purge: bool = False) -> dict[str, Any]:
        """Values of fields declared removed (``__copal_removed__``) that records still hold:
        ``removed`` (type name, field, records), ``records`` holding any. With ``purge``, rewrites
        those records without them in one maintenance commit (``purged``, ``tid``); records
        whose kept fields share a value with a removed one are left (``shared``) and lose it when
        next written. Raises ConflictError if a record changes during the purge (run it again).
        See ``copal gc --schema``. The declarations of the classes imported so far are stored
        first; those of other classes are the ones stored by earlier programs."""
        self._store.sync_removed(declared_removals())
        report: dict[str, Any] = self._store.gc_schema(purge)
        return report

    def backup(self, dest: str | os.PathLike[str]) -> int:
        """Copies the database into the new directory ``dest`` while other transactions go on,
        and returns the copy's size in bytes. The copy holds exactly the commits made before
        the backup started (one consistent snapshot) and is compacted (free space left out), so
        it is often smaller than the original. Open it with :func:`copal.open` to restore.

        The copy is always an embedded database: a PostgreSQL database is copied object by
        object (same ids, descriptors and indexes) from one snapshot, and restored into a new
        PostgreSQL database with ``copal export COPY | copal import URL``. See ``copal backup``."""
        size: int = self._store.backup(os.fspath(dest))
        return size

    def export(
        self,
        out: Target,
        *,
        format: ExportFormat = "copal",
        compress: Compression = None,
        classes: Iterable[type | str] | None = None,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Writes the whole database (or the objects of some classes) to ``out``, a path or a
        binary file, from one snapshot: the export is consistent while other transactions
        commit, and memory stays constant however many objects there are.

        Args:
            out: a path, or a binary file object (``write`` is called a megabyte at a time).
            format: ``"copal"`` (binary, compact), ``"json"`` (JSON Lines: one JSON document
                per line) or ``"xml"``; docs/EXPORT.md specifies all three.
            compress: ``"zstd"``, ``"gzip"``, ``"lz4"`` or ``(codec, level)``: compresses
                the whole export (standard frames that the zstd, gzip and lz4 tools read).
            classes: classes (or stored type names) whose objects alone are exported;
                references to other objects stay as ids. Default: everything, with the root.
            progress: ``progress(what, done, total)``; default: the database's (a bar on a
                terminal for large exports).

        Returns:
            dict: ``records``, ``descriptors``, ``indexes`` written and the ``tid`` of the snapshot.

        >>> db.export("bank.export", compress="zstd")      # doctest: +SKIP
        {'records': 1200, 'descriptors': 4, 'indexes': 1, 'tid': 57}
        """
        codec, level = _compression(compress)
        types = None if classes is None else [c if isinstance(c, str) else type_name_of(c) for c in classes]
        if types:
            stored = self._stored_type_names()
            missing = [name for name in types if name not in stored]
            if missing:
                raise SchemaError(self._no_such_type(missing[0], stored))
        with opened(out, "wb") as file:
            report: dict[str, Any] = _core.export_raw(self._store, file, format, codec, level, types, progress or self._progress)
        return report

    def _stored_type_names(self) -> set[str]:
        return set(self._store.type_names())

    def _no_such_type(self, type_name: str, stored: set[str] | None = None) -> str:
        """The error for a type name the database does not store, with the stored names a user
        probably meant: those of the same class name (a class of a script that is run is stored
        under ``__main__``, which surprises everyone once), else the first few stored names."""
        stored = self._stored_type_names() if stored is None else stored
        message = f"the database stores no objects of type {type_name!r}"
        short = type_name.rpartition(".")[2]
        alike = sorted(name for name in stored if name.rpartition(".")[2] == short)
        if alike:
            message += f"; it stores {', '.join(alike)}"
            if any(name.startswith("__main__.") for name in alike):
                message += " (the class of a script that is run is stored under __main__: define it in a module the script imports)"
        elif stored:
            names = sorted(stored)
            message += f"; it stores {', '.join(names[:8])}" + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        return message

    def import_from(self, source: Target, *, max_size: int = DEFAULT_MAX_SIZE, progress: Progress | None = None) -> dict[str, Any]:
        """Reads an export (any format and compression, detected from its first bytes) into
        this database, which must be new (empty): objects keep their ids, references, indexes
        and removed-field declarations, so that the database is the exported one.

        Args:
            source: a path, or a binary file object.
            max_size: the longest entry (a record, a line of a JSON or XML export) accepted, in
                bytes (256 MiB by default), which also bounds what reading a JSON or XML entry
                takes: the importer's memory stays a small multiple of it, whatever the input
                (docs/EXPORT.md section 1).
            progress: ``progress(what, done, total)``; default: the database's.

        Raises:
            DatabaseNotEmpty: the database already holds objects, classes or indexes (nothing
                is written).
            CorruptRecordError: the input is not a complete, valid export, or an entry is
                longer than ``max_size``. Records are committed in batches (memory stays
                constant): if this happens after the first batch, the message says so and the
                database holds a partial import, which ``copal verify`` reports; delete it and
                import again.

        >>> copal.open("copy.copal").import_from("bank.export")   # doctest: +SKIP
        {'records': 1200, 'descriptors': 4, 'indexes': 1, 'tid': 57}
        """
        with opened(source, "rb") as file:
            report: dict[str, Any] = _core.import_raw(self._store, file, max_size, progress or self._progress)
        return report

    def disk_size(self) -> int:
        """Bytes used by the database files (for PostgreSQL: by copal's tables)."""
        size: int = self._store.disk_size()
        return size

    def close(self) -> None:
        """Closes the database; objects loaded through it must not be used afterwards.

        The store is let go of: once every Database on a directory is closed, it can be opened
        again with other options (``durable``, ``map_size``) in the same process."""
        with self._lock:
            for conn in self._all:
                conn.close()
            self._pool.clear()
            self._all.clear()
            self._store.close()
            self._closed = True
        self._stop_start_threads()

    def _release(self, conn: _core.Connection) -> None:
        with self._lock:
            if not self._closed:
                self._pool.append(conn)

    def _began(self, tx: Transaction, at: float) -> None:
        if self.long_transaction_warning is not None:
            with self._lock:
                self._running[id(tx)] = (at, False)

    def _ended(self, tx: Transaction, committed: bool) -> None:
        """Logs the transaction ``tx`` that just ended if it ran longer than
        ``long_transaction_warning``, and after a commit the transactions still running that
        have by now (each once while it runs)."""
        limit = self.long_transaction_warning
        if limit is None:
            return
        now = time.monotonic()
        with self._lock:
            began, _ = self._running.pop(id(tx))
            still_running = []
            if committed:
                # In the order they began: the first one not open for long ends the search.
                for key, (since, reported) in self._running.items():
                    if now - since <= limit:
                        break
                    if not reported:
                        self._running[key] = (since, True)
                        still_running.append(now - since)
        if now - began > limit:
            _log.warning("a transaction was open for %.1f s (its snapshot: tid %d). %s", now - began, tx.tid_seen, _LONG_TRANSACTIONS)
        for seconds in still_running:
            _log.warning("a transaction of this process has been open for %.1f s and still runs. %s", seconds, _LONG_TRANSACTIONS)

    # Testing and repair hooks (documented in docs/ARCHITECTURE.md; not part of the stable API).
    def _debug_raw_record(self, oid: int) -> bytes | None:
        record: bytes | None = self._store.raw_record(oid)
        return record

    def _debug_put_raw_record(self, oid: int, data: bytes, *, sealed: bool = True) -> None:
        self._store.put_raw_record(oid, data, sealed)

    def _debug_raw_value(self, oid: int) -> bytes | None:
        value: bytes | None = self._store.raw_value(oid)
        return value

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def location(self) -> str:
        """Where the database lives (its directory, or its URL without the password)."""
        location: str = self._store.location()
        return location

    def __repr__(self) -> str:
        return f"<copal.Database {self.location!r}>"


def _name_of(work: Callable[..., Any]) -> str:
    """How a log record names the function ``run`` retries."""
    return getattr(work, "__qualname__", None) or repr(work)


def _is_postgresql_url(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def open(
    path: str | os.PathLike[str],
    *,
    cache_size: int = DEFAULT_CACHE_SIZE,
    map_size: int | None = None,
    durable: bool = True,
    progress: Progress | None = None,
    max_connections: int | None = None,
    pool_timeout: float | None = None,
    readonly: bool = False,
    check_pages: bool | None = None,
    long_transaction_warning: float | None = DEFAULT_LONG_TRANSACTION,
) -> Database:
    """Opens (creating if absent) the embedded database in directory ``path``, or the database
    on a PostgreSQL server when ``path`` is a ``postgresql://`` (or ``postgres://``) URL: copal's
    tables are created on first open, and many processes on many machines can share it with the
    same API and semantics (snapshot reads, optimistic conflicts, cache invalidation).

    Args:
        path: a directory (it holds the LMDB files), or a URL such as
            ``postgresql://user:password@host:5432/dbname``. Server settings such as a
            statement timeout go in its ``options`` parameter
            (``?options=-c%20statement_timeout%3D5000``). As with libpq, what the URL leaves
            out comes from the service named by ``?service=`` or ``PGSERVICE`` (in
            ``PGSERVICEFILE`` or ``~/.pg_service.conf``), then from ``PGHOST``, ``PGPORT``,
            ``PGUSER``, ``PGPASSWORD`` and ``PGDATABASE``, and a missing password from
            ``PGPASSFILE`` or ``~/.pgpass``: ``copal.open("postgresql://")`` connects where
            ``psql`` would.
        cache_size: how many loaded objects each connection keeps before the least recently
            used become ghosts again.
        map_size: bytes of address space reserved for the database (default 1 TiB; the files
            only grow as data is written). Commits that need more raise StorageError.
        durable: fsync at every commit (default). Without it (LMDB's ``MDB_NOSYNC``) a crash
            of the machine may lose the last commits, and LMDB keeps the database intact only
            on a file system that preserves the order of writes; a crash of the process loses
            nothing. On PostgreSQL it sets ``synchronous_commit`` off for copal's sessions: a
            server crash may lose the last commits, never corrupts.
        progress: ``progress(what, done, total)`` is called while long maintenance runs
            (building a newly declared index over existing objects). Default: a progress bar
            on stderr when it is a terminal and the work is large.
        max_connections: PostgreSQL only: how many server connections this Database may have
            open at once (default 20). A running transaction holds one; a transaction that
            starts while all are in use waits for one to be given back.
        pool_timeout: PostgreSQL only: how many seconds a transaction waits for a connection
            when ``max_connections`` are in use (default 30) before it raises StorageError.
        readonly: embedded store only: opens an existing database for reading alone (LMDB's
            ``MDB_RDONLY``), so that it opens on read-only media (a mounted backup, a snapshot).
            Nothing is created or written: the directory must hold a database of this copal's
            format, every transaction is read-only (changes raise
            :class:`~copal.ReadOnlyError`), and declared indexes the database lacks are not
            built. LMDB still records its readers in ``lock.mdb`` where it can write it; on a
            read-only file system it does without.
        check_pages: embedded store only: reads every page of the database's trees with
            ordinary file reads before LMDB reads them through its memory map, so that a damaged
            file (flipped bytes from a failing disk, a bad copy) raises CorruptRecordError
            instead of crashing the process. ``None`` (default) checks files up to 16 MiB
            (a few milliseconds for the largest), ``True`` any file, ``False`` none. ``copal verify``
            always checks.
        long_transaction_warning: seconds after which a transaction is reported as long, on the
            ``copal`` logger at WARNING level: when it ends, and at the first commit of another
            transaction of this Database after that time while it is still open. An open
            transaction keeps what later commits replace from being reused, so the database
            grows (see docs/howto/tune.md). ``None`` reports none.

    Raises:
        StorageError: the directory or the server cannot be used; the directory is open in this
            process with other ``durable`` or ``map_size``; no PostgreSQL connection was free
            within ``pool_timeout``; ``readonly`` and the directory holds no database.
        ReadOnlyError: something was to be written through a Database opened ``readonly``.
        CorruptRecordError: the database is damaged (``check_pages``, or a table it needs is
            missing).
        ValueError: ``map_size``, ``readonly`` or ``check_pages`` given for a PostgreSQL
            database, ``max_connections`` or ``pool_timeout`` for the embedded store, or out of
            range (as ``long_transaction_warning``).

    >>> db = copal.open("bank.copal")   # doctest: +SKIP
    >>> db = copal.open("postgresql://app@db.internal/bank")   # doctest: +SKIP
    """
    return Database(
        path,
        cache_size=cache_size,
        map_size=map_size,
        durable=durable,
        progress=progress,
        max_connections=max_connections,
        pool_timeout=pool_timeout,
        readonly=readonly,
        check_pages=check_pages,
        long_transaction_warning=long_transaction_warning,
    )


def init(location: str | os.PathLike[str]) -> dict[str, Any]:
    """Creates the database at ``location`` (a directory, or a ``postgresql://`` URL whose
    database exists on the server) unless it exists already, in which case it changes nothing.
    :func:`open` creates a missing database too; ``init`` is for creating the tables ahead of
    time (for instance by a deployment step with more privileges than the application).
    See ``copal init``.

    Returns:
        dict: ``location`` (a URL without its password), ``from_version`` (0 when nothing
        was there), ``to_version`` (the layout version now), ``steps`` (what was done, in
        order) and ``created`` (the tables created, or the new directory).

    Raises:
        StorageError: the server or directory cannot be used, or the database has an older
            layout (run :func:`upgrade`) or a newer one (use a newer copal).

    >>> copal.init("postgresql://admin@db.internal/bank")["created"]   # doctest: +SKIP
    ['copal_descriptors', 'copal_index_defs', ..., 'copal_schema_history', 'copal_settings']
    """
    report: dict[str, Any] = _core.Store.init(os.fspath(location))
    return report


def upgrade(location: str | os.PathLike[str]) -> dict[str, Any]:
    """Migrates the database at ``location`` from an older layout version to this copal's, in
    one transaction (on failure it keeps its old version, nothing half-done); a current
    database is left unchanged. Stop the programs using the database first: a program still
    running an older copal gets StorageError at its next commit. The embedded store migrates
    when it opens, so for a directory this opens it and reports its version.
    See ``copal upgrade``.

    Returns:
        dict: The keys of :func:`init`, with ``from_version`` and ``to_version`` (equal when there was
        nothing to do), ``steps`` applied, ``created`` tables.

    Raises:
        StorageError: no copal database at ``location`` (:func:`init` creates one), a layout
            newer than this copal knows, or the server failed (nothing was changed).

    >>> copal.upgrade("postgresql://admin@db.internal/bank")   # doctest: +SKIP
    {'location': 'postgresql://admin@db.internal/bank', 'from_version': 1, 'to_version': 2, ...}
    """
    report: dict[str, Any] = _core.Store.upgrade(os.fspath(location))
    return report


def compact(location: str | os.PathLike[str]) -> dict[str, Any]:
    """Rewrites the embedded database in directory ``location`` without its free pages, in
    place, so that its file shrinks: an LMDB file never shrinks by itself, and grows while
    transactions stay open (docs/howto/tune.md). See ``copal compact``.

    The database must not be open anywhere: replacing its file under a process that has it open
    would lose that process's commits, so compaction is refused while any process (this one
    included) has it open, and a process that opens it during the compaction waits until it is
    done. The file is checked first (as ``copal verify`` checks pages): a damaged one is left
    as it is. It needs free space for the compacted copy, which is written beside the file and
    renamed over it.

    Returns:
        dict: ``location`` (the directory), ``size_before`` and ``size_after`` (of the data
        file, in bytes).

    Raises:
        StorageError: another process (or a Database of this one) has the database open, there
            is no database at ``location``, it is a PostgreSQL URL (VACUUM reclaims space
            there), or the copy failed (nothing was changed).
        CorruptRecordError: the database's file is damaged.

    >>> copal.compact("bank.copal")   # doctest: +SKIP
    {'location': '/srv/bank.copal', 'size_before': 54329344, 'size_after': 827392}
    """
    report: dict[str, Any] = _core.Store.compact(os.fspath(location))
    return report
