"""A transaction dropped without commit or abort is aborted, with a ResourceWarning: it gives
back its snapshot (an LMDB reader slot) and its connection."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

import copal
from helpers.models import Item

#: More transactions than the embedded store has reader slots (max_readers is 1022).
BEYOND_READER_SLOTS = 1100


def test_a_dropped_transaction_is_aborted_with_a_resource_warning(db: Any) -> None:
    with db.transaction() as tx:
        tx.root["item"] = Item("kept")
    tx = db.transaction()
    tx.root["item"].name = "changed"
    with pytest.warns(ResourceWarning, match="without commit"):
        del tx
        gc.collect()
    with db.transaction() as tx:
        assert tx.root["item"].name == "kept"


def test_dropped_transactions_give_back_their_reader_slots(tmp_path: Path) -> None:
    with copal.open(tmp_path / "db") as db:
        with pytest.warns(ResourceWarning):
            for _ in range(BEYOND_READER_SLOTS):
                db.transaction()
        with db.transaction() as tx:
            tx.root["after"] = Item("after")


def test_running_out_of_reader_slots_says_what_to_do(tmp_path: Path) -> None:
    with copal.open(tmp_path / "db") as db:
        running = []
        try:
            with pytest.raises(copal.StorageError, match="MDB_READERS_FULL.*End each transaction"):
                for _ in range(BEYOND_READER_SLOTS):
                    running.append(db.transaction())
        finally:
            for tx in running:
                tx.abort()
