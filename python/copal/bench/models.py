"""Plain (non-persistent) white-paper classes, used by pickle, shelve and sqlitedict.

These mirror the Java classes of the white paper: ``SerTest`` has a time and
an attribute (plus a ``serial`` so that W5 can find one instance), and in the
nested experiments a ``reference`` to a ``SerCollection`` holding 100
``PSerTest`` in a plain list.  Constructors take their time explicitly so
that the data is deterministic (see :func:`copal.bench.whitepaper.sertest_time`).
"""

from __future__ import annotations

from datetime import datetime

from copal.bench.whitepaper import collection_times


class PSerTest:
    """A leaf object of the nested graph."""

    def __init__(self, time: datetime) -> None:
        self.time = time
        self.attribute = "value"


class SerCollection:
    """The collection a nested ``SerTest`` refers to."""

    def __init__(self, serial: int) -> None:
        self.id = "cValue"
        self.relations: list[PSerTest] = [PSerTest(t) for t in collection_times(serial)]

    def add_relation(self, obj: PSerTest) -> None:
        self.relations.append(obj)


class SerTest:
    """The white paper's root object; flat unless ``nested``."""

    def __init__(self, serial: int, time: datetime, nested: bool = False) -> None:
        self.time = time
        self.attribute = "value"
        self.serial = serial
        if nested:
            self.reference = SerCollection(serial)
