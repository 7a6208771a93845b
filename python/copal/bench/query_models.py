"""The classes of the query benchmark (:mod:`copal.bench.queries`), one set per system.

A ``Person`` has ``name``, ``email`` (unique), ``age``, ``city`` and a reference to its own
``Address`` (``street``, ``zip_code``):

- :class:`Person` / :class:`Address`: plain classes; the ``sqlite`` system turns rows into
  them (the person's address stays an id, ``address_id``, as an application loads it on demand);
- ``CopalPerson`` / ``CopalAddress``: :class:`copal.Persistent`, indexes declared with
  ``__copal_indexes__`` (unique ``email``, ``age``);
- ``ZPerson`` / ``ZAddress``: ``persistent.Persistent`` for ZODB (the indexes are BTrees
  kept by :mod:`copal.bench.query_systems`);
- ``SAPerson`` / ``SAAddress``: SQLAlchemy declarative classes mapped onto the same SQLite
  tables as the ``sqlite`` system (``address`` a lazy relationship).

Each set is defined only where its package imports: workers of the other systems load this
module under a stand-in ``copal`` package (no ``copal.Persistent``), so copal's classes, and its
native core, exist in the copal worker only. Workers must be able to import the classes by
module and name, hence this module.
"""

from __future__ import annotations

from typing import Any

from copal.bench.environment import importable

PERSON_TABLE = "person"
ADDRESS_TABLE = "address"


class Address:
    """A plain address."""

    def __init__(self, street: str, zip_code: str) -> None:
        self.street = street
        self.zip_code = zip_code


class Person:
    """A plain person, as an application builds it from a row (``address_id`` unresolved)."""

    def __init__(self, name: str, email: str, age: int, city: str, address_id: int) -> None:
        self.name = name
        self.email = email
        self.age = age
        self.city = city
        self.address_id = address_id


# --------------------------------------------------------------------------- copal

#: False in a worker of another system: copal.bench under a stand-in ``copal`` package.
HAVE_COPAL = importable("copal", "Index", "Persistent")

if HAVE_COPAL:
    from copal import Index as _Index
    from copal import Persistent as _CopalPersistent

    class CopalAddress(_CopalPersistent):
        """An address, its own record."""

        def __init__(self, street: str, zip_code: str) -> None:
            self.street = street
            self.zip_code = zip_code

    class CopalPerson(_CopalPersistent):
        """A person; ``email`` has a unique index, ``age`` an ordinary one."""

        __copal_indexes__ = [_Index("email", unique=True), _Index("age")]

        def __init__(
            self, name: str, email: str, age: int, city: str, address: CopalAddress
        ) -> None:
            self.name = name
            self.email = email
            self.age = age
            self.city = city
            self.address = address


# --------------------------------------------------------------------------- ZODB

HAVE_ZODB = importable("persistent", "Persistent")

if HAVE_ZODB:
    from persistent import Persistent as _ZPersistent  # type: ignore[import-untyped, import-not-found, unused-ignore]

    class ZAddress(_ZPersistent):  # type: ignore[misc, unused-ignore]
        """An address, its own ZODB record."""

        def __init__(self, street: str, zip_code: str) -> None:
            self.street = street
            self.zip_code = zip_code

    class ZPerson(_ZPersistent):  # type: ignore[misc, unused-ignore]
        """A person, its own ZODB record; the indexes are BTrees beside the extent."""

        def __init__(self, name: str, email: str, age: int, city: str, address: Any) -> None:
            self.name = name
            self.email = email
            self.age = age
            self.city = city
            self.address = address


# --------------------------------------------------------------------------- SQLAlchemy

try:
    from sqlalchemy import ForeignKey as _ForeignKey  # type: ignore[import-not-found, unused-ignore]
    from sqlalchemy.orm import (  # type: ignore[import-not-found, unused-ignore]
        DeclarativeBase as _DeclarativeBase,
        Mapped,
        mapped_column,
        relationship,
    )
except ImportError:
    HAVE_SQLALCHEMY = False
else:
    HAVE_SQLALCHEMY = True

if HAVE_SQLALCHEMY:

    class SABase(_DeclarativeBase):  # type: ignore[misc, unused-ignore]
        """The declarative base of the benchmark's tables."""

    class SAAddress(SABase):  # type: ignore[misc, unused-ignore]
        """The ``address`` table."""

        __tablename__ = ADDRESS_TABLE

        id: Mapped[int] = mapped_column(primary_key=True)
        street: Mapped[str]
        zip_code: Mapped[str]

    class SAPerson(SABase):  # type: ignore[misc, unused-ignore]
        """The ``person`` table: unique index on ``email``, index on ``age``."""

        __tablename__ = PERSON_TABLE

        id: Mapped[int] = mapped_column(primary_key=True)
        name: Mapped[str]
        email: Mapped[str] = mapped_column(unique=True)
        age: Mapped[int] = mapped_column(index=True)
        city: Mapped[str]
        address_id: Mapped[int] = mapped_column(_ForeignKey(f"{ADDRESS_TABLE}.id"))
        address: Mapped[SAAddress] = relationship(lazy="select")
