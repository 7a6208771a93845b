"""The class of the transaction-cost benchmark (:mod:`copal.bench.transactions`), one per system.

An ``Item`` holds an ``email`` (unique), an int ``value`` and two plain containers inside its
own record, a list ``tags`` and a dict ``meta``: the kind of object whose in-place changes a
database must find at commit, and so the kind whose cost at commit could grow with the cache.

- ``CopalItem``: :class:`copal.Persistent`, ``email`` with a unique ``copal.Index``;
- ``ZItem``: ``persistent.Persistent`` for ZODB (the email index is an ``OOBTree`` in the root,
  kept by :mod:`copal.bench.transactions`).

Each class is defined only where its package imports: ZODB's worker loads this module under a
stand-in ``copal`` package (no ``copal.Persistent``), so copal's class, and its native core,
exist in the copal worker only. Workers import the classes by module and name, hence this module.
"""

from __future__ import annotations

from typing import Any

from copal.bench.environment import importable


def email_of(i: int) -> str:
    """The email of item ``i``. It starts with a hash of ``i`` (Knuth's multiplicative hash), so
    that the emails of neighbouring items are far apart in an index: a run of lookups finds its
    keys spread over the whole index at every cache size, not in a few leaves."""
    return f"{(i * 2654435761) & 0xFFFFFFFF:08x}.{i}@example.com"


def item_fields(i: int) -> tuple[str, int, list[Any], dict[str, Any]]:
    """Item number ``i``: its email, value, tags and meta (a pure function of ``i``)."""
    return (
        email_of(i),
        i,
        [f"t{i % 7}", f"t{i % 11}", i],
        {"n": i, "kind": f"k{i % 5}", "flags": [i % 2 == 0, i % 3 == 0]},
    )


# --------------------------------------------------------------------------- copal

#: False in a ZODB worker: copal.bench under a stand-in ``copal`` package.
HAVE_COPAL = importable("copal", "Index", "Persistent")

if HAVE_COPAL:
    from copal import Index as _Index
    from copal import Persistent as _CopalPersistent

    class CopalItem(_CopalPersistent):
        """An item; ``email`` has a unique index, ``tags`` and ``meta`` live in its record."""

        __copal_indexes__ = [_Index("email", unique=True)]

        def __init__(self, i: int) -> None:
            self.email, self.value, self.tags, self.meta = item_fields(i)


# --------------------------------------------------------------------------- ZODB

HAVE_ZODB = importable("persistent", "Persistent")

if HAVE_ZODB:
    from persistent import Persistent as _ZPersistent  # type: ignore[import-untyped, import-not-found, unused-ignore]

    class ZItem(_ZPersistent):  # type: ignore[misc, unused-ignore]
        """An item, its own ZODB record; the email index is a BTree in the root."""

        def __init__(self, i: int) -> None:
            self.email, self.value, self.tags, self.meta = item_fields(i)
