"""Queries: filters, ordering and paging evaluated in Rust on raw records."""

from __future__ import annotations

import datetime
import decimal
import enum
import math
import uuid
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Iterator, TypeVar

from .errors import CopalError
from .evolution import NO_DEFAULT, BrokenObject, field_default, field_defaults, renamed_fields
from .persistent import Persistent, registry, registry_generation, type_name_of
from .slots import stored_state

if TYPE_CHECKING:
    from .transaction import Transaction

__all__ = ["Query", "Expr", "Field", "field"]

T = TypeVar("T")
_MISSING: Any = object()
_BATCH = 1000

# A filter travels to Rust as nested tuples (see crates/copal-py/src/query.rs).
Node = tuple[Any, ...]
#: The filter of a query without conditions.
_ALL: Node = ("true",)


class Expr:
    """A condition on stored objects; combine with ``&``, ``|`` and ``~``."""

    __slots__ = ("node",)

    def __init__(self, node: Node) -> None:
        self.node = node

    def __and__(self, other: Expr) -> Expr:
        return Expr(("and", [self.node, _expr(other).node]))

    def __or__(self, other: Expr) -> Expr:
        return Expr(("or", [self.node, _expr(other).node]))

    def __invert__(self) -> Expr:
        return Expr(("not", self.node))

    def __bool__(self) -> bool:
        raise TypeError("use & | ~ to combine copal conditions, not and/or/not")

    def __repr__(self) -> str:
        return f"Expr({self.node!r})"


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
        if not path or any(not part for part in path.split(".")):
            raise ValueError(f"invalid field path {path!r}")
        self.path = tuple(path.split("."))

    def _cmp(self, op: str, value: Any) -> Expr:
        return Expr(("cmp", self.path, op, value))

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
        return Expr(("in", self.path, list(values)))

    def startswith(self, prefix: str | bytes) -> Expr:
        """The value is a str (or bytes) starting with ``prefix``."""
        return Expr(("prefix", self.path, prefix))

    def is_none(self) -> Expr:
        """The value is None or the attribute is missing."""
        return Expr(("none", self.path))

    def __repr__(self) -> str:
        return f"field({'.'.join(self.path)!r})"


def field(path: str) -> Field:
    """The value at ``path`` ("a" or "a.b.c") of the queried objects, for building conditions."""
    return Field(path)


_extents: dict[tuple[type, bool], tuple[int, list[str]]] = {}
def _extent_type_names(cls: type, only: bool) -> list[str]:
    """Stored type names of ``cls`` (its own and its ``__copal_aliases__``: objects stored under
    a former name are objects of ``cls``) and, unless ``only``, of its subclasses."""
    cached = _extents.get((cls, only))
    if cached is not None and cached[0] == registry_generation[0]:
        return cached[1]
    generation = registry_generation[0]
    names = [type_name_of(cls)]
    for name, registered in list(registry.items()):
        wanted = registered is cls if only else isinstance(registered, type) and issubclass(registered, cls)
        if wanted and name not in names:
            names.append(name)
    _extents[(cls, only)] = (generation, names)
    return names


# -- evaluation of conditions on live objects (objects pending in the running transaction) ------
# Mirrors crates/copal-core/src/query: comparisons between values of different kinds are false,
# missing values fail every test but != and is_none.

_KINDS: list[tuple[tuple[type, ...], int]] = [
    ((type(None),), 0),
    ((bool, int, float, decimal.Decimal), 1),
    ((str,), 2),
    ((bytes, bytearray), 3),
    ((datetime.datetime,), 5),
    ((datetime.date,), 4),
    ((datetime.time,), 6),
    ((datetime.timedelta,), 7),
    ((uuid.UUID,), 8),
    ((list, tuple), 9),
]


def _kind(value: Any) -> int:
    for types, rank in _KINDS:
        if isinstance(value, types):
            return rank
    return 10


def _resolve(obj: Any, path: tuple[str, ...], deleted: frozenset[int] = frozenset()) -> Any:
    """The value at ``path``, following what the Rust evaluator follows: instance attributes,
    dict keys, and references; anything else is missing. So is a referenced object deleted by
    the running transaction (``deleted`` holds their ``id()``). An attribute a persistent object
    lacks has the default that loading would give it (``evolution.field_default``), as in Rust."""
    value = obj
    for segment in path:
        if isinstance(value, dict):
            value = value.get(segment, _MISSING)
        elif isinstance(value, Persistent):
            if id(value) in deleted:
                return _MISSING
            try:
                value._p_activate()
            except CopalError:
                return _MISSING  # a reference to a deleted object
            found = value.__dict__.get(segment, _MISSING)
            if found is _MISSING:
                found = field_default(type(value), segment)
                found = _MISSING if found is NO_DEFAULT else found
            value = found
        elif isinstance(value, BrokenObject):
            value = value.state.get(segment, _MISSING)
        elif type(value).__module__ != "builtins" and not isinstance(value, (enum.Enum, uuid.UUID)):
            value = stored_state(value).get(segment, _MISSING)
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


def _utc(value: Any) -> Any:
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        return value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return value


def _compare(found: Any, op: str, expected: Any) -> bool:
    if op == "!=":
        return not _compare(found, "==", expected)
    if _kind(found) != _kind(expected) or (isinstance(found, (list, tuple)) and type(found) is not type(expected)):
        return False
    if isinstance(found, datetime.datetime) and (found.tzinfo is None) != (expected.tzinfo is None):
        return False  # naive and aware datetimes are never equal nor ordered
    if found is None and op != "==":
        return False
    found, expected = _utc(found), _utc(expected)
    try:
        if op == "==":
            return bool(found == expected)
        if op == "<":
            return bool(found < expected)
        if op == "<=":
            return bool(found <= expected)
        if op == ">":
            return bool(found > expected)
        return bool(found >= expected)
    except TypeError:
        return False


def _evaluate(node: Node, obj: Any, deleted: frozenset[int] = frozenset()) -> bool:
    kind = node[0]
    if kind == "true":
        return True
    if kind == "and":
        return all(_evaluate(n, obj, deleted) for n in node[1])
    if kind == "or":
        return any(_evaluate(n, obj, deleted) for n in node[1])
    if kind == "not":
        return not _evaluate(node[1], obj, deleted)
    value = _resolve(obj, node[1], deleted)
    if kind == "none":
        return value is _MISSING or value is None
    if value is _MISSING:
        return bool(kind == "cmp" and node[2] == "!=")
    if kind == "cmp":
        return _compare(value, node[2], node[3])
    if kind == "in":
        return any(_compare(value, "==", v) for v in node[2])
    prefix = node[2]
    if isinstance(value, str) and isinstance(prefix, str):
        return value.startswith(prefix)
    return isinstance(value, (bytes, bytearray)) and isinstance(prefix, bytes) and value.startswith(prefix)


def _sort_key(value: Any) -> tuple[Any, ...]:
    """The total order of order_by (missing first, then by kind, NaN last in its kind)."""
    if value is _MISSING:
        return (0,)
    nan = isinstance(value, float) and math.isnan(value)
    comparable = _utc(value) if _kind(value) < 10 else repr(value)
    return (1, _kind(value), nan, 0 if nan else comparable)


def _sort_key_at(path: tuple[str, ...], deleted: frozenset[int]) -> Callable[[Any], tuple[Any, ...]]:
    return lambda obj: _sort_key(_resolve(obj, path, deleted))


class Query(Generic[T]):
    """The stored objects of a class (subclasses included) that satisfy conditions.

    Queries are immutable: every method returns a new one. Nothing is read until the query is
    iterated or asked for results. Conditions are evaluated in Rust on the raw records: only
    the fields they test are decoded, and only matching objects are built. Objects added,
    changed or deleted by the running transaction are seen as they are now (read-your-writes).

    >>> adults = tx.query(Person).where(copal.field("age") >= 18).order_by("name")  # doctest: +SKIP
    >>> adults.limit(10).all()                                                      # doctest: +SKIP
    """

    def __init__(
        self,
        tx: Transaction,
        cls: type[T],
        node: Node = _ALL,
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
        clone.__dict__.update(self.__dict__)
        for name, value in changes.items():
            setattr(clone, "_" + name, value)
        return clone

    # -- building ------------------------------------------------------------------------------
    def where(self, *conditions: Expr, **equalities: Any) -> Query[T]:
        """Only objects satisfying every condition and attribute equality."""
        nodes = [_expr(c).node for c in conditions] if conditions else []
        for name, value in equalities.items():
            nodes.append(("cmp", tuple(name.split(".")), "==", value))
        if self._node != _ALL:
            nodes.insert(0, self._node)
        if not nodes:
            return self
        # Built directly rather than by `_with`: this is the hot path of a point lookup.
        node = nodes[0] if len(nodes) == 1 else ("and", nodes)
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
    def _pending(self) -> tuple[list[Any], set[int]]:
        """Matching pending objects, and the ids to leave out of the stored scan."""
        tx = self._tx
        # Checked first without building the lists: most queries run with nothing pending.
        if not tx._added and not tx._deleted and not tx._conn.has_pending():
            return [], set()
        pending_objects = tx._pending_objects()
        if not pending_objects and not tx._deleted:
            return [], set()
        deleted = frozenset(id(o) for o in tx._deleted)
        matches: Callable[[Any], bool] = (
            (lambda o: type(o) is self._cls) if self._only else (lambda o: isinstance(o, self._cls))
        )
        candidates = [o for o in pending_objects if matches(o)]
        overridden = [o for o in [*pending_objects, *tx._deleted] if o._p_oid is not None]
        candidates += self._through(overridden, {o._p_oid for o in candidates})
        exclude = {o._p_oid for o in candidates if o._p_oid is not None}
        exclude.update(o._p_oid for o in tx._deleted if o._p_oid is not None)
        found = [o for o in candidates if id(o) not in deleted and _evaluate(self._node, o, deleted)]
        return found, exclude

    def _through(self, overridden: list[Any], skip: set[int | None]) -> list[Any]:
        """Stored objects whose paths (in the filter or the order) pass through a reference to
        an object the transaction changed or deleted. Rust reads the stored state of referenced
        records, which is stale for those: such objects are evaluated in Python instead."""
        if not overridden:
            return []
        hops = {path[:i] for path in self._paths() for i in range(1, len(path))}
        if not hops:
            return []
        node: Node = ("or", [("in", hop, overridden) for hop in sorted(hops)])
        oids = [oid for oid in self._ask(node, [], 0, None, set(), "oids") if oid not in skip]
        found: list[Any] = self._tx._conn.load_many(oids)
        return found

    def _ask(self, node: Node, order: Any, offset: int, limit: int | None, exclude: set[int], mode: str) -> Any:
        """Runs a query in Rust over the stored records of the queried classes (Rust resolves
        their type names to class numbers; a type never stored has no results)."""
        names = _extent_type_names(self._cls, self._only)
        defaults = field_defaults({segment for path in self._paths() for segment in path})
        return self._tx._conn.query(names, node, order, offset, limit, exclude, mode, renamed_fields(), defaults)

    def _paths(self) -> list[tuple[str, ...]]:
        paths = [path for path, _ in self._order]
        stack = [self._node]
        while stack:
            node = stack.pop()
            if node[0] in ("and", "or"):
                stack.extend(node[1])
            elif node[0] == "not":
                stack.append(node[1])
            elif node[0] != "true":
                paths.append(node[1])
        return paths

    def _classes(self) -> list[int]:
        classes: list[int] = self._tx._conn.class_numbers(_extent_type_names(self._cls, self._only))
        return classes

    def _run(self, mode: str, limit: int | None = None) -> Any:
        tx = self._tx
        tx._check_active()
        pending, exclude = self._pending()
        limit = self._limit if limit is None else (limit if self._limit is None else min(limit, self._limit))
        order = [(list(path), desc) for path, desc in self._order]
        if not pending:
            return self._ask(self._node, order, self._offset, limit, exclude, mode)
        if mode == "count":
            # The stored versions of pending objects are excluded: the two sets are disjoint.
            stored_count: int = self._ask(self._node, [], 0, None, exclude, "count")
            return stored_count + len(pending)
        # The first `wanted` results of the union are among the first `wanted` stored results and
        # the pending matches, so only those stored results are read (and built, if ordered).
        wanted = None if limit is None else self._offset + limit
        if not self._order:
            stored_oids: list[int] = self._ask(self._node, [], 0, wanted, exclude, "oids")
            merged: list[tuple[int | None, Any]] = sorted(
                [(oid, None) for oid in stored_oids] + [(o._p_oid, o) for o in pending],
                key=lambda entry: (entry[0] is None, entry[0] or 0),
            )[self._offset : wanted]
            if mode == "oids":
                return [oid for oid, _ in merged]
            # Entries without an object are stored results: they all have an oid.
            loaded = iter(tx._conn.load_many([oid for oid, obj in merged if obj is None and oid is not None]))
            return [obj if obj is not None else next(loaded) for _, obj in merged]
        stored: list[Any] = self._ask(self._node, order, 0, wanted, exclude, "objects")
        # Stored results come in object-id order; merged results keep that order, new objects last.
        combined = sorted(stored + pending, key=lambda o: (o._p_oid is None, o._p_oid or 0))
        for path, desc in reversed(self._order):
            combined.sort(key=_sort_key_at(path, frozenset(id(o) for o in tx._deleted)), reverse=desc)
        combined = combined[self._offset : wanted]
        if mode == "oids":
            return [o._p_oid for o in combined]
        return combined

    def __iter__(self) -> Iterator[T]:
        """The results, built in batches of 1,000 as the iteration goes (a loop that stops early
        builds only what it consumed, plus the rest of its batch)."""
        if self._pending()[0]:
            yield from self._run("objects")
            return
        oids: list[int] = self._run("oids")
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

    def oids(self) -> list[int]:
        """The object ids of the results, without building the objects."""
        oids: list[int] = self._run("oids")
        return oids

    def explain(self) -> str:
        """How the query will run: the index or scan the planner chose, then ordering and paging."""
        classes = self._classes()
        order = [(list(path), desc) for path, desc in self._order]
        access: str = (
            self._ask(self._node, order, self._offset, self._limit, set(), "explain")
            if classes
            else "nothing stored yet"
        )
        parts = [f"{access}; filter {self._describe(self._node)}"]
        defaults = field_defaults({segment for path in self._paths() for segment in path})
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

    @classmethod
    def _describe(cls, node: Node) -> str:
        kind = node[0]
        if kind == "true":
            return "nothing (all objects)"
        if kind in ("and", "or"):
            return "(" + f" {kind} ".join(cls._describe(n) for n in node[1]) + ")"
        if kind == "not":
            return f"not {cls._describe(node[1])}"
        path = ".".join(node[1])
        if kind == "cmp":
            return f"{path} {node[2]} {node[3]!r}"
        if kind == "in":
            return f"{path} in {node[2]!r}"
        if kind == "prefix":
            return f"{path} startswith {node[2]!r}"
        return f"{path} is None"
