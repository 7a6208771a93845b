"""Counter deltas of ``db.stats()``."""

from __future__ import annotations

from typing import Any


class Delta:
    """``Delta(db)["records_read"]`` is how much that counter grew since the Delta was made."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.before = dict(db.stats())

    def __getitem__(self, key: str) -> int:
        return int(self.db.stats()[key]) - int(self.before[key])

    def reset(self) -> None:
        self.before = dict(self.db.stats())
