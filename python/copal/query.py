"""Queries: filters, ordering and paging evaluated in Rust on raw records.

:class:`Query` is compiled (crates/copal-py/src/query_object.rs); this module makes its conditions
(:func:`field`, :class:`Field`, :class:`Expr`) and the scope it reads classes through.
"""

from __future__ import annotations

from typing import Any, Iterable

from . import _core
from ._core import ArrowStream, GroupedQuery, Query
from .evolution import field_defaults, renamed_fields
from .persistent import registry, registry_generation, type_name_of

__all__ = ["Query", "GroupedQuery", "ArrowStream", "Expr", "Field", "field", "referenced_by"]


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


def referenced_by(cls: type, path: str, where: Expr | None = None) -> Expr:
    """The objects that field ``path`` of at least one stored ``cls`` object (subclasses
    included) matching ``where`` refers to: a join followed backwards, evaluated in Rust.

    ``path`` may lead through embedded objects and references (``"home.address"``); a value
    that holds references (a list of parts) counts each of them. The ``cls`` objects are read as
    the query's transaction sees them, its own changes included. Combine it with other
    conditions as any condition:

    >>> over_60 = copal.referenced_by(Person, "address", where=copal.field("age") > 60)  # doctest: +SKIP
    >>> tx.query(Address).where(over_60 & (copal.field("city") == "Oslo")).count()       # doctest: +SKIP
    """
    if not isinstance(cls, type):
        raise TypeError(f"referenced_by() takes a class, not {type(cls).__name__}")
    node = _core.Filter.everything() if where is None else _expr(where).node
    return Expr(_core.Filter.referenced_by(_scope(cls, False), list(Field(path).path), node))


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


_core.install_hooks(query_scope=_scope)
