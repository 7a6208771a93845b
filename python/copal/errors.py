"""The exceptions copal raises. All derive from :class:`CopalError`.

The classes that carry facts (:class:`ConflictError`, :class:`UniqueViolation`,
:class:`DanglingReference`) take them as constructor arguments after the message, which is what
the Rust binding passes (``crates/copal-py/src/errors.rs``); raised from Python with only a
message, their attributes are empty (``()`` or ``None``). The message alone is the exception's
``args``, so ``str(error)`` is the message; the attributes live in the instance ``__dict__``,
which ``BaseException.__reduce__`` pickles along with ``args``, so a pickled error (sent
to another process, say) keeps them.
"""

from __future__ import annotations

from typing import Iterable
from . import _core

__all__ = [
    "CopalError",
    "ConflictError",
    "CorruptRecordError",
    "SchemaError",
    "UniqueViolation",
    "DanglingReference",
    "StorageError",
    "DatabaseNotEmpty",
    "ReadOnlyError",
    "BlockingReadWarning",
]


class CopalError(Exception):
    """Base class of every copal error."""


class ConflictError(CopalError):
    """Another transaction committed a change to an object this transaction changed.

    Nothing of this transaction was written. Retry it (``db.run(fn, retries=N)`` does).

    Args:
        message: What happened; the message names the objects' ids in hex.
        oids: The ids of the objects that conflicted.

    Attributes:
        oids: The ids (``obj._p_oid``) of the objects that another transaction changed or
            deleted after this one read them; ``()`` when the error was raised without them.
    """

    oids: tuple[int, ...]

    def __init__(self, message: str = "", oids: Iterable[int] = ()) -> None:
        super().__init__(message)
        self.oids = tuple(oids)


class CorruptRecordError(CopalError):
    """Stored bytes could not be decoded: the record or descriptor is damaged or not copal data;
    or the database itself is damaged: a table it needs, or its root's table, is missing."""


class SchemaError(CopalError):
    """Stored data does not fit the application's classes (unknown class, refused type, ...)."""


class UniqueViolation(CopalError):
    """A commit would store two objects with the same key in a unique index.

    Nothing of the transaction was written.

    Args:
        message: What happened; the message names the index and both objects' ids.
        index: The description of the index.
        oids: The two objects' ids, the one being written first.

    Attributes:
        index: The index, as its declaring class's type name and its fields:
            ``"app.Person(email)"``; ``None`` when the error was raised without it.
        oids: The ids of the two objects with the same key: first the one the commit was
            writing, then the one already holding the key; ``()`` when raised without them.
    """

    index: str | None
    oids: tuple[int, ...]

    def __init__(self, message: str = "", index: str | None = None, oids: Iterable[int] = ()) -> None:
        super().__init__(message)
        self.index = index
        self.oids = tuple(oids)


class DanglingReference(CopalError):
    """A reference or id names an object that does not exist (deleted or never committed).

    Args:
        message: What happened; the message names the id in hex.
        oid: The id that names no object.

    Attributes:
        oid: The id that names no object; ``None`` when it is not known.
    """

    oid: int | None

    def __init__(self, message: str = "", oid: int | None = None) -> None:
        super().__init__(message)
        self.oid = oid


class StorageError(CopalError):
    """The storage engine failed (I/O error, disk or map full, ...); nothing was half-written."""


class DatabaseNotEmpty(CopalError):
    """An import was asked to fill a database that already holds data; nothing was written.

    Imports recreate a database with the same object ids, so they go into a new database.
    """


class ReadOnlyError(CopalError):
    """A read-only transaction (``db.transaction(readonly=True)``) was asked to change something:
    an attribute of a persistent object, ``tx.add`` or ``tx.delete``; or something was to be
    written through a Database opened with ``copal.open(path, readonly=True)`` (a commit,
    an import, maintenance). Nothing was changed; make the change in a read-write transaction
    of a Database opened without ``readonly``."""


class BlockingReadWarning(RuntimeWarning):
    """A transaction entered with ``async with`` on a PostgreSQL database read the store on the
    event loop's thread: touching an object not loaded yet (a ghost), or a call without ``await``
    (``tx.get``, ``query.first()``, ``for obj in query``, ``tx.commit()``, ``tx.abort()``). The
    call was made, and the loop waited for its round trip to the server. Load what the coroutine touches with the awaitable
    calls (``await tx.aload_closure(objects)``, ``await tx.aget(oid)``, ``await
    query.aall()``, ``async for``), or make the warning an error to find such reads::

        warnings.simplefilter("error", copal.BlockingReadWarning)

    The embedded store never warns: a read there is a copy from memory-mapped pages, which
    takes microseconds. See docs/howto/async.md.
    """


# The binding raises the error classes; it is handed them here (it takes the ones it names,
# crates/copal-py/src/hooks.rs ERROR_NAMES) and never imports this module.
_core.install_hooks(errors={name: globals()[name] for name in __all__})
