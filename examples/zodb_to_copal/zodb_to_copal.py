"""Copies a ZODB FileStorage into a new copal database, object by object.

Usage: python zodb_to_copal.py SRC.fs DEST [--module OLD=NEW ...] [--check]

The classes of the stored objects must be importable (run from the application's directory or
set PYTHONPATH), as ZODB needs them to load its records. Starting from the ZODB root, every
reachable object is copied:

- a persistent.Persistent object becomes a copal.Persistent object (one record) with the same
  attributes. Its copal class is, with ``--module zodb_app=library``, the class of the same name
  in module ``library`` (created with ``__new__``: ``__init__`` is not called); for modules not
  mapped, a class made here with the ZODB class's own stored name (``zodb_app.Book``), which a
  copal class of that module and name reads later;
- PersistentMapping, PersistentDict and the BTrees (OOBTree, IOBTree, ...) become a
  copal.PersistentDict (keys in the BTree's order), PersistentList a copal.PersistentList;
  BTrees TreeSets and Sets a plain set;
- plain values (numbers, strings, dates, lists, dicts, tuples, sets, plain objects) are copied
  inside the record of the object holding them.

An object reached twice is copied once: shared references and cycles stay as they were.

Limits: everything is written in one commit, so the whole graph is in memory once (on both
sides); a BTree becomes one record (fine for thousands of entries, not for millions); objects
not reachable from the root are not copied; ``__getstate__``/``__setstate__`` overrides and
``_p_``/``_v_`` attributes are not carried over; blobs (ZODB.blob.Blob) are not supported.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import types
from collections import Counter
from typing import Any

import BTrees.Interfaces
import copal
import persistent
import ZODB
import ZODB.FileStorage
from persistent.list import PersistentList
from persistent.mapping import PersistentMapping


def is_mapping(obj: Any) -> bool:
    return isinstance(obj, PersistentMapping) or any(
        i.providedBy(obj) for i in (BTrees.Interfaces.IBTree, BTrees.Interfaces.IMapping)
    )


def is_tree_set(obj: Any) -> bool:
    return bool(BTrees.Interfaces.ITreeSet.providedBy(obj) or BTrees.Interfaces.ISet.providedBy(obj))


class Converter:
    """Copies ZODB objects into copal objects, remembering each one by its ZODB oid."""

    def __init__(self, modules: dict[str, str]) -> None:
        self.modules = modules
        self.classes: dict[type, type[copal.Persistent]] = {}
        self.copies: dict[bytes, Any] = {}  # ZODB oid -> copal object
        self.pending: list[tuple[Any, Any]] = []  # (ZODB object, its copal copy) to fill
        self.counts: Counter[str] = Counter()
        self.shared = 0  # persistent objects reached more than once

    def copal_class(self, cls: type) -> type[copal.Persistent]:
        if cls not in self.classes:
            target = self.modules.get(cls.__module__)
            if target is not None:
                new = getattr(importlib.import_module(target), cls.__qualname__)
                if not (isinstance(new, type) and issubclass(new, copal.Persistent)):
                    raise TypeError(f"{target}.{cls.__qualname__} is not a copal.Persistent class")
            else:
                name = f"{cls.__module__}.{cls.__qualname__}"
                new = types.new_class(cls.__name__, (copal.Persistent,), exec_body=lambda ns: ns.update(__copal_type__=name, __module__=cls.__module__))
            self.classes[cls] = new
        return self.classes[cls]

    def value(self, obj: Any) -> Any:
        """The copal counterpart of ``obj``; persistent objects are created empty and queued."""
        if isinstance(obj, persistent.Persistent):
            oid = obj._p_oid
            if oid is not None and oid in self.copies:
                self.shared += 1
                return self.copies[oid]
            obj._p_activate()
            if is_mapping(obj):
                copy: Any = copal.PersistentDict()
            elif isinstance(obj, PersistentList):
                copy = copal.PersistentList()
            elif is_tree_set(obj):
                return {self.value(k) for k in obj.keys()}
            else:
                cls = self.copal_class(type(obj))
                copy = cls.__new__(cls)
            self.counts[f"{type(obj).__module__}.{type(obj).__qualname__} -> {type(copy).__module__}.{type(copy).__qualname__}"] += 1
            if oid is not None:
                self.copies[oid] = copy
            self.pending.append((obj, copy))
            return copy
        if isinstance(obj, list):
            return [self.value(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.value(v) for v in obj)
        if isinstance(obj, dict):
            return {self.value(k): self.value(v) for k, v in obj.items()}
        if isinstance(obj, (set, frozenset)):
            return type(obj)(self.value(v) for v in obj)
        return obj

    def fill(self, obj: Any, copy: Any) -> None:
        if isinstance(copy, copal.PersistentDict):
            for key, item in obj.items():
                copy[self.value(key)] = self.value(item)
        elif isinstance(copy, copal.PersistentList):
            copy.extend(self.value(item) for item in obj)
        else:
            state = obj.__getstate__()
            if isinstance(state, tuple):  # (dict, slots)
                state = {**(state[0] or {}), **(state[1] or {})}
            for name, item in state.items():
                setattr(copy, name, self.value(item))

    def run(self, root: Any) -> dict[str, Any]:
        entries = {key: self.value(item) for key, item in root.items()}
        while self.pending:
            self.fill(*self.pending.pop())
        return entries


def compare(zodb_root: Any, copal_root: Any) -> int:
    """Walks both graphs together from their roots and raises AssertionError at the first
    difference, in values or in shape (an object reached twice in ZODB must be one object in
    copal). Returns the number of persistent objects compared. A work list, not recursion, so
    that long chains of objects do not exhaust Python's stack."""
    seen: dict[int, Any] = {}
    work: list[tuple[Any, Any, str]] = [(zodb_root, copal_root, "root")]
    while work:
        old, new, path = work.pop()
        if isinstance(old, persistent.Persistent) and not is_tree_set(old):
            if id(old) in seen:
                assert seen[id(old)] is new, f"{path}: a shared ZODB object is not one copal object"
                continue
            seen[id(old)] = new
            assert isinstance(new, copal.Persistent), f"{path}: {type(new).__name__} is not persistent"
            if is_mapping(old):
                assert isinstance(new, copal.PersistentDict), f"{path}: {type(new).__name__} is not a PersistentDict"
                assert list(old.keys()) == list(new.keys()), f"{path}: keys differ"
                work += [(old[key], new[key], f"{path}[{key!r}]") for key in old.keys()]
            elif isinstance(old, PersistentList):
                assert isinstance(new, copal.PersistentList), f"{path}: {type(new).__name__} is not a PersistentList"
                assert len(old) == len(new), f"{path}: lengths differ"
                work += [(a, b, f"{path}[{i}]") for i, (a, b) in enumerate(zip(old, new))]
            else:
                old._p_activate()
                assert type(old).__name__ == type(new).__name__, f"{path}: class {type(new).__name__}"
                work += [(item, getattr(new, name), f"{path}.{name}") for name, item in old.__getstate__().items()]
        elif isinstance(old, (list, tuple)):
            assert type(old) is type(new) and len(old) == len(new), f"{path}: {new!r} != {old!r}"
            work += [(a, b, f"{path}[{i}]") for i, (a, b) in enumerate(zip(old, new))]
        elif isinstance(old, dict):
            assert isinstance(new, dict) and list(old) == list(new), f"{path}: keys differ"
            work += [(old[key], new[key], f"{path}[{key!r}]") for key in old]
        elif is_tree_set(old):
            assert set(old.keys()) == new, f"{path}: {new!r} != {set(old.keys())!r}"
        else:
            assert old == new and type(old) is type(new), f"{path}: {new!r} != {old!r}"
    # The roots themselves (a PersistentMapping and a PersistentDict) are not counted.
    return len(seen) - 1


def main() -> int:
    parser = argparse.ArgumentParser(description="Copies a ZODB FileStorage into a new copal database.")
    parser.add_argument("source", help="the ZODB FileStorage file (opened read-only)")
    parser.add_argument("dest", help="the new copal database: a directory or a postgresql:// URL")
    parser.add_argument("--module", action="append", default=[], metavar="OLD=NEW",
                        help="store the objects of classes of module OLD as the same-named copal classes of module NEW")
    parser.add_argument("--check", action="store_true", help="compare the two databases after the copy")
    args = parser.parse_args()
    modules = dict(m.split("=", 1) for m in args.module)

    started = time.perf_counter()
    zodb = ZODB.DB(ZODB.FileStorage.FileStorage(args.source, read_only=True))
    conn = zodb.open()
    db = copal.open(args.dest)
    try:
        with db.transaction() as tx:
            if len(tx.root):
                print(f"{args.dest} is not empty: the copy goes into a new database", file=sys.stderr)
                return 2
            converter = Converter(modules)
            for key, value in converter.run(conn.root()).items():
                tx.root[key] = value
        seconds = time.perf_counter() - started
        for what, count in sorted(converter.counts.items()):
            print(f"{count:8}  {what}")
        print(f"copied {sum(converter.counts.values())} persistent objects ({converter.shared} references to an "
              f"object copied already) in {seconds:.2f} s")
        if args.check:
            with db.transaction() as tx:
                compared = compare(conn.root(), tx.root)
            print(f"check: {compared} persistent objects compared, all equal")
    finally:
        db.close()
        conn.close()
        zodb.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
