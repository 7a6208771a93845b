"""Reads every object of a database written by ``test_damaged_pages.write_database`` and prints
a digest of their state, or the class of the copal error that stopped the read (``Broken`` for
an object whose stored class name no longer resolves, which copal loads as a
:class:`copal.Broken`).

Usage: read_all.py DB. Exit status 0 with ``digest HEX`` or ``error CLASS ...``; any other outcome
(a signal, an exception that is not a CopalError) is the caller's to count.
"""

from __future__ import annotations

import hashlib
import sys
from typing import TypeVar

import copal
from helpers.models import Animal, Item

T = TypeVar("T")


class BrokenFound(Exception):
    pass


def whole(obj: T) -> T:
    if isinstance(obj, copal.Broken):
        raise BrokenFound(obj.type_name)
    return obj


def digest(path: str) -> str:
    seen = hashlib.sha256()
    with copal.open(path, readonly=True) as db:
        with db.transaction() as tx:
            root = whole(tx.root)
            for item in root["items"]:
                item = whole(item)
                seen.update(repr((item.name, item.value, item.payload)).encode())
            for dog in root["dogs"]:
                dog = whole(dog)
                seen.update(repr((dog.name, dog.legs, dog.breed)).encode())
            for cls in (Item, Animal):
                for obj in tx.query(cls).order_by("name"):
                    seen.update(whole(obj).name.encode())
    return seen.hexdigest()


if __name__ == "__main__":
    try:
        print("digest", digest(sys.argv[1]))
    except copal.CopalError as error:
        print("error", type(error).__name__, error)
    except BrokenFound as broken:
        print("error Broken", broken)
