"""Model classes for tests/test_queries.py.

They live in an importable module because copal stores a class by its module and qualified
name (see helpers/models.py).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from copal import Index, Persistent


class Rec(Persistent):
    """A persistent object holding whatever attributes the test passes (some may be absent)."""

    def __init__(self, **attributes: Any) -> None:
        for name, value in attributes.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        return f"Rec({vars(self)!r})"


class IndexedRec(Persistent):
    """Like Rec, with an index on ``a``: the same queries, answered through the planner."""

    __copal_indexes__ = [Index("a")]

    def __init__(self, **attributes: Any) -> None:
        for name, value in attributes.items():
            setattr(self, name, value)


class Owner(Persistent):
    def __init__(self, name: str, boss: Any = None, **attributes: Any) -> None:
        self.name = name
        self.boss = boss
        for key, value in attributes.items():
            setattr(self, key, value)


class Pet(Persistent):
    def __init__(self, name: str, owner: Any = None, **attributes: Any) -> None:
        self.name = name
        self.owner = owner
        for key, value in attributes.items():
            setattr(self, key, value)


class Shape(Persistent):
    def __init__(self, name: str, size: Any = 0) -> None:
        self.name = name
        self.size = size


class Circle(Shape):
    pass


class Square(Shape):
    pass


class SmallSquare(Square):
    pass


class Defaults(Persistent):
    """A class attribute used as a default value: not stored in records, read by queries."""

    status = "new"

    def __init__(self, name: str) -> None:
        self.name = name


class HypoRec(Persistent):
    """Objects of the property-based test (its own extent)."""

    def __init__(self, seq: int, **attributes: Any) -> None:
        self.seq = seq
        for name, value in attributes.items():
            setattr(self, name, value)


class Address:
    """A plain object embedded by value."""

    def __init__(self, city: Any, zip_code: Any = None, **attributes: Any) -> None:
        self.city = city
        self.zip_code = zip_code
        for name, value in attributes.items():
            setattr(self, name, value)


@dataclasses.dataclass
class Geo:
    lat: float
    lon: float
    place: Any = None


class Hue(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Rank(enum.IntEnum):
    LOW = 1
    HIGH = 2
