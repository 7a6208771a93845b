"""Queries over the objects of a class, evaluated in Rust on raw records."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, Iterator, TypeVar

from .persistent import registry, type_name_of

if TYPE_CHECKING:
    from .transaction import Transaction

__all__ = ["Query"]

T = TypeVar("T")
_MISSING = object()


def _extent_type_names(cls: type) -> list[str]:
    """Stored type names of ``cls`` and of all its subclasses (their objects are in its extent)."""
    names: list[str] = []
    for name, registered in list(registry.items()):
        if isinstance(registered, type) and issubclass(registered, cls):
            names.append(name)
    if type_name_of(cls) not in names:
        names.append(type_name_of(cls))
    return names


class Query(Generic[T]):
    """The stored objects of a class (subclasses included) that satisfy some conditions.

    Queries are immutable; ``where`` returns a new one. Nothing is read until the query is
    iterated or asked for ``first()`` or ``count()``. Conditions are tested in Rust on the raw
    records, so objects that do not match are never built. Objects added or changed by the
    running transaction are seen as they are now (read-your-writes).

    >>> tx.query(Account).where(owner="ann").first()   # doctest: +SKIP
    """

    def __init__(self, tx: Transaction, cls: type[T], equalities: tuple[tuple[str, Any], ...] = ()) -> None:
        self._tx = tx
        self._cls = cls
        self._equalities = equalities

    def where(self, **equalities: Any) -> Query[T]:
        """Only objects whose attributes equal the given values."""
        return Query(self._tx, self._cls, self._equalities + tuple(equalities.items()))

    def _matches_pending(self, obj: Any) -> bool:
        return all(getattr(obj, field, _MISSING) == value for field, value in self._equalities)

    def _run(self, limit: int | None) -> list[T]:
        tx = self._tx
        pending: list[Any] = [o for o in tx._pending_objects() if isinstance(o, self._cls)]
        exclude = {o._p_oid for o in pending if o._p_oid is not None}
        exclude.update(o._p_oid for o in tx._deleted if o._p_oid is not None)
        results: list[T] = [o for o in pending if o not in tx._deleted and self._matches_pending(o)]
        if limit is not None and len(results) >= limit:
            return results[:limit]
        classes = tx._conn.class_numbers(_extent_type_names(self._cls))
        if classes:
            remaining = None if limit is None else limit - len(results)
            results.extend(tx._conn.scan(classes, list(self._equalities), remaining, exclude))
        return results

    def __iter__(self) -> Iterator[T]:
        return iter(self._run(None))

    def all(self) -> list[T]:
        """Every matching object, as a list."""
        return self._run(None)

    def first(self) -> T | None:
        """The first matching object (in object-id order), or None."""
        found = self._run(1)
        return found[0] if found else None

    def count(self) -> int:
        """How many objects match."""
        return len(self._run(None))
