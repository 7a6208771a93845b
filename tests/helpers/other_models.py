"""Classes with the same unqualified names as classes of helpers.models, in another module: a
document that holds both must tell them apart (docs/TEXT_FORMATS.md section 2.1)."""

from __future__ import annotations

import enum
from typing import Any


class Point:
    """Not helpers.models.Point: one field, and equal only to its own kind."""

    def __init__(self, z: Any) -> None:
        self.z = z

    def __eq__(self, other: object) -> bool:
        return type(other) is Point and vars(self) == vars(other)


class Color(enum.Enum):
    RED = "other red"
