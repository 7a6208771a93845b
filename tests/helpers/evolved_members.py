"""Members of a class stored by two versions of it, for the tests of queries on fields added to
a class after records were written (tests/test_evolution_queries.py, tests/test_projections.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers.versions import load_module

# The first version: members with a name and the year they joined.
V1 = "import copal\nclass Member(copal.Persistent):\n    def __init__(self, name, joined):\n        self.name, self.joined = name, joined\n"

# `level` and `rank` are added with __init__ defaults, `tier` with a class attribute, `note`
# without any default (old records have no `note`: loading leaves the attribute missing), and
# `greeting` is a method, which gives no stored value.
V2 = """
import copal

class Member(copal.Persistent):
    tier = "silver"
    __copal_indexes__ = INDEXES

    def __init__(self, name, joined, note, level=LEVEL, rank=5):
        self.name = name
        self.joined = joined
        self.note = note
        self.level = level
        self.rank = rank

    def greeting(self):
        return "hi " + self.name
"""


def version_2(tmp_path: Path, module: str, level: str = "basic", indexes: str = "[]") -> Any:
    return load_module(tmp_path, module, V2.replace("LEVEL", repr(level)).replace("INDEXES", indexes))


def stored_before_and_after(store: Any, tmp_path: Path, module: str, indexes: str = "[]") -> tuple[Any, Any]:
    """A database with Ann, Bob and Cy stored by version 1, then Dee and Eve by version 2."""
    v1 = load_module(tmp_path, module, V1)
    db = store.open()
    with db.transaction() as tx:
        tx.root["old"] = [v1.Member(name, n) for n, name in enumerate(["Ann", "Bob", "Cy"])]
    db = store.reopen(db)
    v2 = version_2(tmp_path, module, indexes=indexes)
    with db.transaction() as tx:
        tx.add(v2.Member("Dee", 3, None, level="gold", rank=1))
        tx.add(v2.Member("Eve", 4, "hi", level="basic", rank=9))
    return db, v2
