"""copal versions of the white-paper classes.

Every object is a :class:`copal.Persistent` (one record each) and the
relations are a :class:`copal.PersistentList`, as in the ZODB and Versant
versions, so that a read of ``SerTest.attribute`` loads nothing else.
"""

from __future__ import annotations

from datetime import datetime

from copal import Persistent, PersistentList

from copal.bench.whitepaper import collection_times


class PSerTest(Persistent):
    """A leaf object of the nested graph."""

    def __init__(self, time: datetime) -> None:
        self.time = time
        self.attribute = "value"


class SerCollection(Persistent):
    """The collection a nested ``SerTest`` refers to."""

    def __init__(self, serial: int) -> None:
        self.id = "cValue"
        self.relations = PersistentList(
            [PSerTest(t) for t in collection_times(serial)]
        )

    def add_relation(self, obj: PSerTest) -> None:
        self.relations.append(obj)


class SerTest(Persistent):
    """The white paper's root object; flat unless ``nested``."""

    def __init__(self, serial: int, time: datetime, nested: bool = False) -> None:
        self.time = time
        self.attribute = "value"
        self.serial = serial
        if nested:
            self.reference = SerCollection(serial)
