"""Model classes shared by the tests and by the child-process scripts.

They live in an importable module (``helpers.models``) because copal stores a class by its
type name (module and qualified name): a class defined inside a test function, or imported as
``models`` instead of ``helpers.models``, would be a different type to the database.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
from typing import Any, Callable, Iterator

from copal import Persistent, PersistentList


class Item(Persistent):
    """A small persistent object with a name, a value and an optional payload."""

    def __init__(self, name: str, value: Any = 0, payload: bytes = b"") -> None:
        self.name = name
        self.value = value
        self.payload = payload


class Holder(Persistent):
    """A persistent object whose attributes are whatever the test passes."""

    def __init__(self, **attributes: Any) -> None:
        for name, value in attributes.items():
            setattr(self, name, value)


class Counter(Persistent):
    def __init__(self, value: int = 0) -> None:
        self.value = value


class Animal(Persistent):
    def __init__(self, name: str, legs: int = 4) -> None:
        self.name = name
        self.legs = legs


class Dog(Animal):
    def __init__(self, name: str, breed: str = "mutt") -> None:
        super().__init__(name, 4)
        self.breed = breed


class Bird(Animal):
    def __init__(self, name: str) -> None:
        super().__init__(name, 2)


# The graph of the seed white paper: SerTest -> SerCollection -> PersistentList[PSerTest].


class PSerTest(Persistent):
    def __init__(self, attribute: int) -> None:
        self.attribute = attribute


class SerCollection(Persistent):
    def __init__(self, items: PersistentList) -> None:
        self.items = items


class SerTest(Persistent):
    def __init__(self, attribute: int, collection: SerCollection) -> None:
        self.attribute = attribute
        self.collection = collection


# Non-persistent values that are stored by value inside a persistent object's record.


class Point:
    """A plain class (no __slots__, no dataclass)."""

    def __init__(self, x: Any, y: Any) -> None:
        self.x = x
        self.y = y

    def __eq__(self, other: object) -> bool:
        return type(other) is Point and vars(self) == vars(other)

    def __repr__(self) -> str:
        return f"Point({vars(self)!r})"


class Node:
    """A plain class used to build cycles and shared references of embedded objects."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.next: Node | None = None

    def __repr__(self) -> str:
        return f"Node({self.label!r})"


@dataclasses.dataclass
class Vector:
    x: float
    y: float
    tags: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class FrozenKey:
    a: int
    b: str


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Tagged(list):  # type: ignore[type-arg]
    """A list subclass with its own attributes."""


class TaggedDict(dict):  # type: ignore[type-arg]
    """A dict subclass with its own attributes."""


class TaggedSet(set):  # type: ignore[type-arg]
    """A set subclass with its own attributes."""


class TaggedTuple(tuple):  # type: ignore[type-arg]
    """A tuple subclass with its own attributes."""


class TaggedInt(int):
    """An int subclass with its own attributes (binary streams only: docs/STREAM.md section 5)."""


class TaggedFloat(float):
    """A float subclass with its own attributes (binary streams only)."""


class TaggedComplex(complex):
    """A complex subclass with its own attributes (binary streams only)."""


class TaggedStr(str):
    """A str subclass with its own attributes (binary streams only)."""


class TaggedBytes(bytes):
    """A bytes subclass with its own attributes (binary streams only)."""


Pair = collections.namedtuple("Pair", ["left", "right"])


def tagged(cls: type, items: Any, **attributes: Any) -> Any:
    """An instance of the container subclass ``cls`` holding ``items``, with attributes set."""
    obj = cls(items)
    for name, value in attributes.items():
        setattr(obj, name, value)
    return obj


class Hooked(enum.Enum):
    """An enum whose members run ``hook`` when the encoder reads their ``_name_``: a way to run
    Python code in the middle of an encoding (tests of the encoder's caches keyed by address)."""

    ONLY = 1

    def __getattribute__(self, name: str) -> Any:
        if name == "_name_":
            hook = HOOKED_CALLBACKS.pop() if HOOKED_CALLBACKS else None
            if hook is not None:
                hook()
        return super().__getattribute__(name)


#: Callbacks for `Hooked`, each run once, by the next read of a member's ``_name_``.
HOOKED_CALLBACKS: list[Callable[[], None]] = []


@contextlib.contextmanager
def hooked(callback: Callable[[], None]) -> Iterator[None]:
    """Runs `callback` at the next read of a `Hooked` member's ``_name_`` within the block; a
    callback the block did not run is dropped when it ends."""
    HOOKED_CALLBACKS.append(callback)
    try:
        yield
    finally:
        HOOKED_CALLBACKS.clear()


class Watched(type):
    """A metaclass that records every attribute looked up on its classes while ``armed``: copal
    must inspect classes through ``type``'s own slots and descriptors, running no metaclass code."""

    armed = False
    looked_up: list[str] = []

    def __getattribute__(cls, name: str) -> Any:
        if type.__getattribute__(Watched, "armed"):
            Watched.looked_up.append(name)
        return super().__getattribute__(name)


class WatchedPlain(metaclass=Watched):
    def __init__(self, x: Any) -> None:
        self.x = x


class WatchedSlots(metaclass=Watched):
    __slots__ = ("__hidden", "y")

    def __init__(self, y: Any) -> None:
        self.__hidden = 1
        self.y = y
