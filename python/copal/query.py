"""Queries: filters, ordering and paging evaluated in Rust on raw records."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Generic, Iterable, Iterator, TypeVar

from . import _core
from .evolution import field_defaults, renamed_fields
from .persistent import registry, registry_generation, type_name_of

if TYPE_CHECKING:
    from .transaction import Transaction

__all__ = ["Query", "Expr", "Field", "field"]

T = TypeVar("T")
_BATCH = 1000

#: The filter of a query without conditions (filters are typed trees made in Rust:
#: crates/copal-py/src/filter.rs).
_ALL = _core.Filter.everything()


class Expr:
    """A condition on stored objects; combine with ``&``, ``|`` and ``~``."""

    __slots__ = ("node",)

    def __init__(self, node: _core.Filter) -> None:
        self.node = node

    def __and__(self, other: Expr) -> Expr:
        return Expr(_core.Filter.all_of([self.node, _expr(other).node]))

    def __or__(self, other: Expr) -> Expr:
        return Expr(_core.Filter.any_of([self.node, _expr(other).node]))

    def __invert__(self) -> Expr:
        return Expr(_core.Filter.negate(self.node))

    def __bool__(self) -> bool:
        raise TypeError("use & | ~ to combine copal conditions, not and/or/not")

    def __repr__(self) -> str:
        return f"Expr({self.node.describe()})"


def _expr(value: Any) -> Expr:
    if not isinstance(value, Expr):
        raise TypeError(f"expected a copal condition (copal.field(...) == ...), not {type(value).__name__}")
    return value


class Field:
    """A path to a value of stored objects: ``field("address.city")``.

    Segments name attributes of the object, then attributes of embedded objects, keys of dicts,
    or attributes of referenced persistent objects (followed in Rust by object id).

    >>> cond = (field("age") >= 18) & field("name").startswith("A")
    """

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        parts = tuple(path.split("."))
        if "" in parts:
            raise ValueError(f"invalid field path {path!r}")
        self.path = parts

    def _cmp(self, op: str, value: Any) -> Expr:
        return Expr(_core.Filter.compare(list(self.path), op, value))

    def __eq__(self, value: Any) -> Expr:  # type: ignore[override]
        return self._cmp("==", value)

    def __ne__(self, value: Any) -> Expr:  # type: ignore[override]
        return self._cmp("!=", value)

    def __lt__(self, value: Any) -> Expr:
        return self._cmp("<", value)

    def __le__(self, value: Any) -> Expr:
        return self._cmp("<=", value)

    def __gt__(self, value: Any) -> Expr:
        return self._cmp(">", value)

    def __ge__(self, value: Any) -> Expr:
        return self._cmp(">=", value)

    __hash__ = None  # type: ignore[assignment]

    def in_(self, values: Iterable[Any]) -> Expr:
        """The value equals one of ``values``."""
        return Expr(_core.Filter.one_of(list(self.path), values))

    def startswith(self, prefix: str | bytes) -> Expr:
        """The value is a str (or bytes) starting with ``prefix``."""
        return Expr(_core.Filter.starts_with(list(self.path), prefix))

    def is_none(self) -> Expr:
        """The value is None or the attribute is missing."""
        return Expr(_core.Filter.is_none(list(self.path)))

    def __repr__(self) -> str:
        return f"field({'.'.join(self.path)!r})"


def field(path: str) -> Field:
    """The value at ``path`` ("a" or "a.b.c") of the queried objects, for building conditions."""
    return Field(path)


_scopes: dict[tuple[type, bool], tuple[int, _core.QueryScope]] = {}


def _scope(cls: type, only: bool) -> _core.QueryScope:
    """What queries of ``cls`` (of exactly ``cls`` if ``only``) need to know of the program's
    classes, made once per state of the class registry: the stored type names of their objects
    (``cls``'s own, its ``__copal_aliases__``: objects stored under a former name are objects
    of ``cls``, and unless ``only`` those of its subclasses), the renamed fields and the
    defaults of fields."""
    cached = _scopes.get((cls, only))
    if cached is not None and cached[0] == registry_generation[0]:
        return cached[1]
    generation = registry_generation[0]
    names = [type_name_of(cls)]
    for name, registered in list(registry.items()):
        wanted = registered is cls if only else isinstance(registered, type) and issubclass(registered, cls)
        if wanted and name not in names:
            names.append(name)
    scope = _core.QueryScope(names, renamed_fields(), field_defaults)
    _scopes[(cls, only)] = (generation, scope)
    return scope


class Query(Generic[T]):
    """The stored objects of a class (subclasses included) that satisfy conditions.

    Queries are immutable: every method returns a new one. Nothing is read until the query is
    iterated or asked for results. Conditions are evaluated in Rust on the raw records: only
    the fields they test are decoded, and only matching objects are built. Objects added,
    changed or deleted by the running transaction are seen as they are now (read-your-writes).

    >>> adults = tx.query(Person).where(copal.field("age") >= 18).order_by("name")  # doctest: +SKIP
    >>> adults.limit(10).all()                                                      # doctest: +SKIP
    """

    __slots__ = ("_tx", "_cls", "_node", "_order", "_offset", "_limit", "_only")

    def __init__(
        self,
        tx: Transaction,
        cls: type[T],
        node: _core.Filter = _ALL,
        order: tuple[tuple[tuple[str, ...], bool], ...] = (),
        offset: int = 0,
        limit: int | None = None,
        only: bool = False,
    ) -> None:
        self._tx = tx
        self._cls = cls
        self._node = node
        self._order = order
        self._offset = offset
        self._limit = limit
        self._only = only

    def _with(self, **changes: Any) -> Query[T]:
        """A copy with some of the ``_node``, ``_order``, ``_offset``, ``_limit``, ``_only``
        attributes changed (queries are immutable: each builder method returns a new one)."""
        clone: Query[T] = object.__new__(Query)
        for name in Query.__slots__:
            setattr(clone, name, changes.get(name[1:], getattr(self, name)))
        return clone

    # -- building ------------------------------------------------------------------------------
    def where(self, *conditions: Expr, **equalities: Any) -> Query[T]:
        """Only objects satisfying every condition and attribute equality."""
        # Loops rather than comprehensions, and built directly rather than by `_with`: this is
        # the hot path of a point lookup.
        nodes = [] if self._node.is_everything else [self._node]
        for condition in conditions:
            nodes.append(_expr(condition).node)
        for name, value in equalities.items():
            nodes.append(_core.Filter.compare(name.split("."), "==", value))
        if not nodes:
            return self
        node = nodes[0] if len(nodes) == 1 else _core.Filter.all_of(nodes)
        return Query(self._tx, self._cls, node, self._order, self._offset, self._limit, self._only)

    def order_by(self, *paths: str | Field, descending: bool = False) -> Query[T]:
        """Sorts by these paths (appended to any earlier order). Values of different kinds sort
        by kind (None, numbers, str, bytes, dates, ...); missing values come first."""
        keys = tuple((p.path if isinstance(p, Field) else Field(p).path, descending) for p in paths)
        return self._with(order=self._order + keys)

    def limit(self, n: int) -> Query[T]:
        """At most ``n`` results."""
        if n < 0:
            raise ValueError("limit must be >= 0")
        return self._with(limit=n)

    def offset(self, n: int) -> Query[T]:
        """Skips the first ``n`` results."""
        if n < 0:
            raise ValueError("offset must be >= 0")
        return self._with(offset=n)

    def only(self, cls: type[T]) -> Query[T]:
        """Objects of exactly ``cls``, not of its subclasses."""
        return Query(self._tx, cls, self._node, self._order, self._offset, self._limit, True)

    # -- running -------------------------------------------------------------------------------
    def _run(self, mode: str, limit: int | None = None) -> Any:
        """Runs the query in Rust over the stored records of the queried classes and the
        transaction's own changes (a type never stored nor created has no results)."""
        if limit is None or (self._limit is not None and self._limit < limit):
            limit = self._limit
        order = [(list(path), desc) for path, desc in self._order] if self._order else []
        tx = self._tx
        tx._check_active()
        return tx._conn.query(_scope(self._cls, self._only), self._node, order, self._offset, limit, mode)

    def __iter__(self) -> Iterator[T]:
        """The results, built in batches of 1,000 as the iteration goes (a loop that stops early
        builds only what it consumed, plus the rest of its batch)."""
        first: list[T]
        rest: list[int]
        first, rest = self._run("iterate")
        if not rest:
            return iter(first)
        return itertools.chain(first, self._batches(rest))

    def _batches(self, oids: list[int]) -> Iterator[T]:
        for start in range(0, len(oids), _BATCH):
            yield from self._tx._conn.load_many(oids[start : start + _BATCH])

    def all(self) -> list[T]:
        """Every result, as a list."""
        results: list[T] = self._run("objects")
        return results

    def first(self) -> T | None:
        """The first result (in ``order_by`` order, else in object-id order), or None."""
        found = self._run("objects", limit=1)
        return found[0] if found else None

    def one(self) -> T:
        """The only result; raises LookupError unless there is exactly one."""
        found = self._run("objects", limit=2)
        if len(found) != 1:
            raise LookupError(f"expected exactly one {self._cls.__name__}, found {'none' if not found else 'several'}")
        result: T = found[0]
        return result

    def exists(self) -> bool:
        """Whether there is at least one result."""
        return bool(self._run("oids", limit=1))

    def count(self) -> int:
        """How many objects match (ignoring offset and limit)."""
        if self._offset or self._limit is not None:
            return len(self._run("oids"))
        n: int = self._run("count")
        return n

    def oids(self) -> list[int | None]:
        """The object ids of the results, without building the objects (None for an object the
        running transaction created and has not committed yet)."""
        oids: list[int | None] = self._run("oids")
        return oids

    def explain(self) -> str:
        """How the query will run: the index or scan the planner chose, then ordering and paging."""
        access: str = self._run("explain")
        parts = [f"{access}; filter {self._node.describe()}"]
        defaults = _scope(self._cls, self._only).read_defaults(self._node, [list(path) for path, _ in self._order])
        if defaults:
            # Records written before a field was added are read as holding its default.
            read_as = ", ".join(f"{name} = {default!r} ({type_name})" for type_name, name, default in defaults)
            parts.append(f"records without a field read as its default: {read_as}")
        if self._order:
            keys = ", ".join(".".join(p) + (" desc" if d else "") for p, d in self._order)
            parts.append(f"sort by {keys}" + (f" (top {self._offset + self._limit})" if self._limit is not None else ""))
        if self._offset:
            parts.append(f"skip {self._offset}")
        if self._limit is not None:
            parts.append(f"limit {self._limit}")
        return "; ".join(parts)
