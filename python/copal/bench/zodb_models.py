"""ZODB versions of the white-paper classes: every object is ``persistent.Persistent``.

Like the Versant ``VVector`` of the paper, the relations are a
``PersistentList`` (its own database record), so reading a ``SerTest``
does not load its collection until the collection is touched.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from persistent import Persistent  # type: ignore[import-untyped, import-not-found, unused-ignore]
from persistent.list import PersistentList  # type: ignore[import-untyped, import-not-found, unused-ignore]

from copal.bench.whitepaper import collection_times


class PSerTest(Persistent):  # type: ignore[misc, unused-ignore]
    """A leaf object of the nested graph."""

    def __init__(self, time: datetime) -> None:
        self.time = time
        self.attribute = "value"


class SerCollection(Persistent):  # type: ignore[misc, unused-ignore]
    """The collection a nested ``SerTest`` refers to."""

    def __init__(self, serial: int) -> None:
        self.id = "cValue"
        self.relations: Any = PersistentList(
            [PSerTest(t) for t in collection_times(serial)]
        )

    def add_relation(self, obj: PSerTest) -> None:
        self.relations.append(obj)


class SerTest(Persistent):  # type: ignore[misc, unused-ignore]
    """The white paper's root object; flat unless ``nested``."""

    def __init__(self, serial: int, time: datetime, nested: bool = False) -> None:
        self.time = time
        self.attribute = "value"
        self.serial = serial
        if nested:
            self.reference = SerCollection(serial)
