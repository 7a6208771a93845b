"""Persistent objects and collections."""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping, SupportsIndex, TypeVar, overload

from . import _core
from .slots import stored_slots

__all__ = ["Persistent", "PersistentList", "PersistentDict", "type_name_of", "registry"]

#: Stored type name (and former names) -> persistent class, filled as classes are defined.
#: Loading resolves type names here first, then in already-imported modules; never by import.
registry: dict[str, type] = {}

#: Grows whenever ``registry`` changes, so that what is derived from it can be cached.
registry_generation = [0]

# The binding finds classes by stored type name here, and knows from the generation when what it
# derived from them is stale; it is handed both (filled, never replaced) and never imports this
# module.
_core.install_hooks(registry=registry, registry_generation=registry_generation)

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


def type_name_of(cls: type) -> str:
    """The name ``cls`` is stored under: its own ``__copal_type__`` or ``module.QualName``."""
    own = cls.__dict__.get("__copal_type__")
    if own is not None:
        return str(own)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


class Persistent(_core.PersistentBase):
    """Base class of objects stored as records of their own.

    Subclass it and use plain attributes; no schema declaration is needed::

        class Account(copal.Persistent):
            def __init__(self, owner, balance=0):
                self.owner = owner
                self.balance = balance

    State machine (``obj._p_status``):

    - ``"unsaved"``: not stored yet (no ``_p_oid``). It becomes stored at the next commit of a
      transaction it was added to (``tx.add``) or from whose stored objects it is reachable.
    - ``"saved"``: loaded and identical to its record.
    - ``"changed"``: an attribute was assigned (or ``_p_changed = True`` was set); the commit
      writes it. Plain lists, dicts and sets mutated in place are found by the commit too.
    - ``"ghost"``: an id without state; touching any attribute loads the record (one read).
      Objects become ghosts when referenced but not yet used, when another transaction changes
      them (invalidation), when a transaction aborts, and when the cache evicts them.

    Attributes starting with ``_p_`` or ``_v_`` are not stored (``_v_`` ones are volatile caches).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if stored_slots(cls):
            # The stored state of a persistent object is its instance dict: it is what loading
            # fills, a ghost empties and a commit writes. Slot values would be lost.
            raise TypeError(
                f"{cls.__qualname__} declares __slots__, which a copal.Persistent cannot store (its state "
                "is its instance __dict__): use plain attributes, or __slots__ on values stored inside it"
            )
        registry[type_name_of(cls)] = cls
        for alias in cls.__dict__.get("__copal_aliases__", ()):
            registry[str(alias)] = cls
        registry_generation[0] += 1

    def __repr__(self) -> str:
        oid = self._p_oid
        where = f" oid={oid:#x}" if oid is not None else ""
        return f"<{type(self).__qualname__}{where} {self._p_status}>"


class PersistentList(Persistent):
    """A list stored as one record; mutating it marks it changed.

    Its items are stored by value unless they are persistent objects, which are stored as
    references (so a list of 100 persistent objects is one small record of 100 ids).

    It has the methods and operators of :class:`list` (``append``, ``extend``, ``insert``,
    ``pop``, ``remove``, ``clear``, ``sort``, ``reverse``, ``index``, ``count``, indexing,
    slicing, ``+=``, ``len``, iteration); each one that changes the list marks it changed
    first, so that a read-only transaction refuses the change before anything changes.
    Items that are themselves mutable plain values (a list in the list) are compared at commit.

    >>> items = PersistentList([1, 2])
    >>> items.append(3)
    >>> list(items)
    [1, 2, 3]
    """

    __copal_type__ = "copal.PersistentList"
    _p_tracks_mutations = True
    data: list[Any]

    def __init__(self, items: Iterable[Any] = ()) -> None:
        self.data = list(items)

    def __len__(self) -> int:
        return len(self.data)

    @overload
    def __getitem__(self, index: SupportsIndex) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: Any) -> Any:
        return self.data[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        self._p_changed = True
        self.data[index] = value

    def __delitem__(self, index: Any) -> None:
        self._p_changed = True
        del self.data[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.data)

    def __reversed__(self) -> Iterator[Any]:
        items: Iterator[Any] = reversed(self.data)
        return items

    def __contains__(self, value: object) -> bool:
        return value in self.data

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PersistentList):
            return self.data == other.data
        return self.data == other

    __hash__ = None  # type: ignore[assignment]

    def __lt__(self, other: object) -> bool:
        result: bool = self.data < _list_data(other)
        return result

    def __le__(self, other: object) -> bool:
        result: bool = self.data <= _list_data(other)
        return result

    def __gt__(self, other: object) -> bool:
        result: bool = self.data > _list_data(other)
        return result

    def __ge__(self, other: object) -> bool:
        result: bool = self.data >= _list_data(other)
        return result

    def __add__(self, other: Iterable[Any]) -> "PersistentList":
        return type(self)(self.data + list(other))

    def __radd__(self, other: Iterable[Any]) -> "PersistentList":
        return type(self)(list(other) + self.data)

    def __mul__(self, n: SupportsIndex) -> "PersistentList":
        return type(self)(self.data * n)

    __rmul__ = __mul__

    def __iadd__(self, other: Iterable[Any]) -> "PersistentList":
        self.extend(other)
        return self

    def __imul__(self, n: SupportsIndex) -> "PersistentList":
        self._p_changed = True
        self.data *= n
        return self

    def copy(self) -> "PersistentList":
        """A new, unsaved PersistentList with the same items."""
        return type(self)(self.data)

    def __repr__(self) -> str:
        return f"PersistentList({self.data!r})"

    def append(self, value: Any) -> None:
        self._p_changed = True
        self.data.append(value)

    def extend(self, values: Iterable[Any]) -> None:
        self._p_changed = True
        self.data.extend(values)

    def insert(self, index: SupportsIndex, value: Any) -> None:
        self._p_changed = True
        self.data.insert(index, value)

    def pop(self, index: SupportsIndex = -1) -> Any:
        self._p_changed = True
        value = self.data.pop(index)
        return value

    def remove(self, value: Any) -> None:
        self._p_changed = True
        self.data.remove(value)

    def clear(self) -> None:
        self._p_changed = True
        self.data.clear()

    def sort(self, *, key: Any = None, reverse: bool = False) -> None:
        self._p_changed = True
        self.data.sort(key=key, reverse=reverse)

    def reverse(self) -> None:
        self._p_changed = True
        self.data.reverse()

    def index(self, value: Any, *args: Any) -> int:
        return self.data.index(value, *args)

    def count(self, value: Any) -> int:
        return self.data.count(value)


def _list_data(other: object) -> Any:
    return other.data if isinstance(other, PersistentList) else other


class PersistentDict(Persistent):
    """A dict stored as one record; mutating it marks it changed. ``tx.root`` is one.

    It has the methods and operators of :class:`dict` (``get``, ``keys``, ``values``,
    ``items``, ``pop``, ``popitem``, ``setdefault``, ``update``, ``clear``, ``d[k]``,
    ``d[k] = v``, ``del d[k]``, ``in``, ``len``, iteration); each one that changes the dict marks
    it changed. Values are stored like the items of a :class:`PersistentList`.

    >>> d = PersistentDict(a=1)
    >>> d["b"] = 2
    >>> sorted(d.items())
    [('a', 1), ('b', 2)]
    """

    __copal_type__ = "copal.PersistentDict"
    _p_tracks_mutations = True
    data: dict[Any, Any]

    def __init__(self, items: Mapping[Any, Any] | Iterable[tuple[Any, Any]] = (), **kwargs: Any) -> None:
        self.data = dict(items, **kwargs)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, key: Any) -> Any:
        return self.data[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._p_changed = True
        self.data[key] = value

    def __delitem__(self, key: Any) -> None:
        self._p_changed = True
        del self.data[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.data)

    def __contains__(self, key: object) -> bool:
        return key in self.data

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PersistentDict):
            return self.data == other.data
        return self.data == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PersistentDict({self.data!r})"

    def __reversed__(self) -> Iterator[Any]:
        items: Iterator[Any] = reversed(self.data)
        return items

    def __or__(self, other: Mapping[Any, Any]) -> "PersistentDict":
        return type(self)(self.data | dict(other))

    def __ior__(self, other: Mapping[Any, Any]) -> "PersistentDict":
        self.update(other)
        return self

    def copy(self) -> "PersistentDict":
        """A new, unsaved PersistentDict with the same items."""
        return type(self)(self.data)

    def get(self, key: Any, default: Any = None) -> Any:
        return self.data.get(key, default)

    def keys(self) -> Any:
        return self.data.keys()

    def values(self) -> Any:
        return self.data.values()

    def items(self) -> Any:
        return self.data.items()

    def pop(self, key: Any, *default: Any) -> Any:
        self._p_changed = True
        value = self.data.pop(key, *default)
        return value

    def popitem(self) -> tuple[Any, Any]:
        self._p_changed = True
        item = self.data.popitem()
        return item

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key in self.data:
            return self.data[key]
        self._p_changed = True
        self.data[key] = default
        return default

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._p_changed = True
        self.data.update(*args, **kwargs)

    def clear(self) -> None:
        self._p_changed = True
        self.data.clear()
