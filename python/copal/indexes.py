"""Declared secondary indexes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .evolution import field_defaults, renamed_fields
from .persistent import registry, type_name_of

__all__ = ["Index", "declared_indexes"]


@dataclass(frozen=True)
class Index:
    """A secondary index on one or several attributes of a persistent class.

    Declare indexes on the class; copal builds them (from existing objects too), keeps them up to
    date at every commit, and uses them for equality, ranges, prefixes, ``in_`` and ``order_by``
    with ``limit``. Subclasses' objects are in their parent's indexes.

    >>> class Person(copal.Persistent):                        # doctest: +SKIP
    ...     __copal_indexes__ = [copal.Index("email", unique=True), copal.Index("last", "first")]

    Args:
        fields: attribute names, most significant first.
        unique: commits that would give two objects the same key raise UniqueViolation and
            write nothing (objects whose key has a missing or None attribute are exempt).
    """

    fields: tuple[str, ...]
    unique: bool = False

    def __init__(self, *fields: str, unique: bool = False) -> None:
        if not fields or not all(isinstance(f, str) and f and "." not in f for f in fields):
            raise ValueError("an Index needs one or more attribute names (no dotted paths)")
        object.__setattr__(self, "fields", tuple(fields))
        object.__setattr__(self, "unique", unique)


Declaration = tuple[str, list[str], list[str], bool, list[tuple[str, str, str]], list[tuple[str, str, bytes]]]


def declared_indexes(index_keys: Callable[[list[Any]], list[bytes]]) -> tuple[list[Declaration], list[tuple[str, list[str]]]]:
    """The indexes declared by registered classes, as (declaring type, covered types, fields,
    unique, renamed fields, (covered type, field, index key of its default)), and the indexes
    they declare removed (``__copal_removed_indexes__``), as (declaring type, fields). An index
    that no class declares is kept (and maintained) until it is declared removed: a program
    running an older version of a class during a rolling deploy must not drop the index that
    the newer version declares."""
    declared: list[Declaration] = []
    removed: list[tuple[str, list[str]]] = []
    classes = {cls for cls in registry.values() if isinstance(cls, type)}
    for cls in sorted(classes, key=type_name_of):
        for index in _indexes_of(cls, "__copal_removed_indexes__"):
            removed.append((type_name_of(cls), list(index.fields)))
        for index in _indexes_of(cls, "__copal_indexes__"):
            covered = sorted(name for name, c in registry.items() if isinstance(c, type) and issubclass(c, cls))
            # Old records of the covered types may hold an index field under a former name.
            # Sorted, as `covered` is: the declaration must not depend on the order classes were
            # imported in, or two processes would each find the other's index superseded.
            renamed = sorted(r for r in renamed_fields() if r[0] in covered and r[2] in index.fields)
            # Old records without an index field are indexed under the default loading gives it,
            # so that the index answers as a scan does.
            defaults = sorted((d for d in field_defaults(index.fields) if d[0] in covered), key=lambda d: (d[0], d[1]))
            keys = index_keys([value for _, _, value in defaults])
            keyed = [(type_name, name, key) for (type_name, name, _), key in zip(defaults, keys)]
            declared.append((type_name_of(cls), covered, list(index.fields), index.unique, renamed, keyed))
    return declared, removed


def _indexes_of(cls: type, attribute: str) -> list[Index]:
    """The ``copal.Index`` objects of ``cls``'s own ``attribute``."""
    indexes = list(cls.__dict__.get(attribute, ()))
    if not all(isinstance(index, Index) for index in indexes):
        raise TypeError(f"{cls.__qualname__}.{attribute} must hold copal.Index objects")
    return indexes
