"""The exceptions copal raises. All derive from :class:`CopalError`."""

from __future__ import annotations

__all__ = [
    "CopalError",
    "ConflictError",
    "CorruptRecordError",
    "SchemaError",
    "UniqueViolation",
    "DanglingReference",
    "StorageError",
    "DatabaseNotEmpty",
]


class CopalError(Exception):
    """Base class of every copal error."""


class ConflictError(CopalError):
    """Another transaction committed a change to an object this transaction changed.

    Nothing of this transaction was written. Retry it (``db.run(fn, retries=N)`` does).
    """


class CorruptRecordError(CopalError):
    """Stored bytes could not be decoded: the record or descriptor is damaged or not copal data."""


class SchemaError(CopalError):
    """Stored data does not fit the application's classes (unknown class, refused type, ...)."""


class UniqueViolation(CopalError):
    """A commit would store two objects with the same key in a unique index."""


class DanglingReference(CopalError):
    """A reference or id names an object that does not exist (deleted or never committed)."""


class StorageError(CopalError):
    """The storage engine failed (I/O error, disk or map full, ...); nothing was half-written."""


class DatabaseNotEmpty(CopalError):
    """An import was asked to fill a database that already holds data; nothing was written.

    Imports recreate a database with the same object ids, so they go into a new database.
    """
