"""The domain classes and seeded data of the codec suite's seed experiments.

Every codec writes these objects and reads them back into them, as an application would. They
are dataclasses at module level so that every library can name them: copal and pickle resolve
them by module and name, msgspec decodes straight into them, pyfory registers them, and the
other codecs' adapters derive their dict, protobuf and XML mappings from the annotations
(:mod:`copal.bench.codecs`).

Data is deterministic: each generator takes a seed for its ``random.Random``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass
class Bar:
    """Seed 001 (Shirazi): the inner object, a float and a string."""

    value: float
    label: str


@dataclass
class Foo:
    """Seed 001 (Shirazi): an int, a string and two ``Bar``."""

    id: int
    name: str
    bars: list[Bar]


@dataclass
class TargetObject:
    """Seed 002 (Llorà): ``n`` ints and ``n`` strings."""

    ints: list[int]
    strs: list[str]


@dataclass
class Phone:
    """Seed 003 (Manocha & Kadian): one phone number of a person."""

    kind: str
    number: str


@dataclass
class Address:
    """Seed 003: a postal address."""

    street: str
    city: str
    postcode: str
    country: str


@dataclass
class Person:
    """Seed 003: an address-book record."""

    id: int
    name: str
    email: str
    phones: list[Phone]
    address: Address


def make_foos(n: int, seed: int = 1) -> list[Foo]:
    """``n`` Foo, each with two Bar. Strings are distinct per object, as in the seed (which forces
    ``new String`` so that Java cannot share them): no codec gains from repeated strings here."""
    rng = random.Random(seed)
    return [
        Foo(i, f"foo-{i}", [Bar(rng.random(), f"bar-{i}-{j}") for j in range(2)])
        for i in range(n)
    ]


#: The seed's string literal: Java shares one String object among all elements, so do we.
DUMMY_TEXT = "Dummy text"


def make_target(n: int) -> TargetObject:
    """The seed's ``TargetObject``: ``n`` zeros and ``n`` times the same string."""
    return TargetObject([0] * n, [DUMMY_TEXT] * n)


def target_raw_bytes(n: int) -> int:
    """The seed's "raw data" size: 4-byte ints and the 10 characters of each string."""
    return 4 * n + len(DUMMY_TEXT) * n


_FIRST = ("Anna", "Ben", "Chloe", "David", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jonas",
          "Kira", "Liam", "Maya", "Noah", "Olga", "Pedro", "Quinn", "Rosa", "Sven", "Tara")
_LAST = ("Smith", "Garcia", "Müller", "Rossi", "Dubois", "Kowalski", "Nowak", "Silva", "Khan",
         "Ivanova", "Jensen", "Novak", "Fischer", "Moreau", "Costa", "Meyer", "Horvat", "Lund")
_STREETS = ("Main Street", "Station Road", "Church Lane", "Park Avenue", "Mill Road",
            "High Street", "Rue de la Paix", "Hauptstraße", "Via Roma", "Calle Mayor")
_CITIES = (("London", "UK"), ("Paris", "France"), ("Berlin", "Germany"), ("Rome", "Italy"),
           ("Madrid", "Spain"), ("Warsaw", "Poland"), ("Lisbon", "Portugal"), ("Oslo", "Norway"),
           ("Vienna", "Austria"), ("Zagreb", "Croatia"))
_PHONE_KINDS = ("home", "work", "mobile")


def make_people(n: int, seed: int = 3) -> list[Person]:
    """``n`` address-book records: one to three phones each; names, streets, cities and phone
    kinds drawn from small vocabularies, as real address books repeat them."""
    rng = random.Random(seed)
    people = []
    for i in range(n):
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        city, country = rng.choice(_CITIES)
        phones = [
            Phone(kind, f"+{rng.randrange(1, 99)} {rng.randrange(10**8, 10**9)}")
            for kind in rng.sample(_PHONE_KINDS, rng.randrange(1, 4))
        ]
        address = Address(
            f"{rng.randrange(1, 300)} {rng.choice(_STREETS)}", city,
            f"{rng.randrange(10000, 99999)}", country,
        )
        email = f"{first}.{last}.{i}@example.org".lower()
        people.append(Person(i, f"{first} {last}", email, phones, address))
    return people
