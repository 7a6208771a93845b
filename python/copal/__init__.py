"""copal: an object database for Python with a Rust core.

Each persistent object is one compact record keyed by a stable id; references are ids, loaded
lazily or in batches; changes commit atomically with optimistic conflict checks; queries run
in Rust over the raw records.

>>> import copal                                      # doctest: +SKIP
>>> db = copal.open("bank.copal")                     # doctest: +SKIP
>>> with db.transaction() as tx:                      # doctest: +SKIP
...     tx.root["accounts"] = copal.PersistentList()
"""

from .database import Database, compact, init, open, upgrade
from .errors import (
    BlockingReadWarning,
    ConflictError,
    CopalError,
    CorruptRecordError,
    DanglingReference,
    DatabaseNotEmpty,
    ReadOnlyError,
    SchemaError,
    StorageError,
    UniqueViolation,
)
from .evolution import Broken, BrokenObject
from .indexes import Index
from .persistent import Persistent, PersistentDict, PersistentList
from .progress import ProgressBar
from .query import ArrowStream, Expr, Field, GroupedQuery, Query, field, referenced_by
from .serialize import Archive, dump, dumps, load, loads, pack_many
from .transaction import Transaction

__all__ = [
    "open",
    "init",
    "upgrade",
    "compact",
    "Database",
    "Transaction",
    "Query",
    "GroupedQuery",
    "ArrowStream",
    "Index",
    "Broken",
    "BrokenObject",
    "field",
    "referenced_by",
    "Field",
    "Expr",
    "Persistent",
    "PersistentList",
    "PersistentDict",
    "CopalError",
    "ConflictError",
    "CorruptRecordError",
    "SchemaError",
    "UniqueViolation",
    "DanglingReference",
    "DatabaseNotEmpty",
    "ReadOnlyError",
    "StorageError",
    "BlockingReadWarning",
    "ProgressBar",
    "dumps",
    "loads",
    "dump",
    "load",
    "pack_many",
    "Archive",
]
__version__ = "0.1.0"
