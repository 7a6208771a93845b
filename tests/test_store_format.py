"""Embedded stores written by earlier copal versions keep opening (docs/ARCHITECTURE.md,
"Storage layout (embedded store)").

``fixtures/store-format-1`` was written by copal with store format 1 (every record in one LMDB
table): 120 each of Owner, Pet (the pets with ``legs == 0`` then deleted), IndexedRec (index on
``a``) and Shape/Circle, added in three interleaved commits, plus ``root["batch N"] = N``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import copal
from helpers.query_models import Circle, IndexedRec, Owner, Pet, Shape

FIXTURE = Path(__file__).parent / "fixtures" / "store-format-1"


def _copy(tmp_path: Path) -> str:
    path = tmp_path / "db"
    shutil.copytree(FIXTURE, path)
    return str(path)


def test_a_format_1_store_is_migrated_with_everything_kept(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    db = copal.open(path)
    report = db.verify()
    assert report["problems"] == []
    assert report["records"] == 1 + 120 + 96 + 120 + 120  # root, owners, pets left, recs, shapes
    with db.transaction() as tx:
        assert [tx.root[f"batch {b}"] for b in range(3)] == [0, 1, 2]
        assert tx.query(Owner).count() == 120
        assert tx.query(Pet).where(legs=0).count() == 0
        assert sorted(p.legs for p in tx.query(Pet).where(copal.field("owner.name") == "owner 7")) == [2]
        assert tx.query(IndexedRec).where(a=77).one().b == "b2"
        assert "index" in tx.query(IndexedRec).where(a=77).explain()
        assert tx.query(Shape).count() == 120 and tx.query(Circle).count() == 60
        # New objects go after the migrated ones of their class.
        newest = max(tx.query(Owner).oids())
        added = tx.add(Owner("new"))
    assert added._p_oid is not None and added._p_oid > newest
    db.close()
    reopened = copal.open(path)
    with reopened.transaction() as tx:
        assert tx.query(Owner).where(name="new").one()._p_oid == added._p_oid
    reopened.close()


def test_copal_upgrade_reports_the_migration_of_a_format_1_store(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    report = copal.upgrade(path)
    assert (report["from_version"], report["to_version"]) == (1, 2)
    assert report["steps"] == ["moved every record into a table of its class (store format 1 to 2)"]
    with copal.open(path) as db:
        assert db.verify()["problems"] == []


def test_a_store_of_a_newer_format_is_refused_with_storage_error_as_on_postgresql(tmp_path: Path) -> None:
    # A newer copal's store format is written here by patching the `format` meta value of the
    # format 1 fixture (LMDB's leaf node: the key, then the u32 big-endian value) in every page
    # copy. The PostgreSQL store refuses a newer schema version with the same class
    # (tests/test_postgresql.py).
    path = Path(_copy(tmp_path))
    data = (path / "data.mdb").read_bytes()
    assert data.count(b"format\x00\x00\x00\x01") >= 1
    (path / "data.mdb").write_bytes(data.replace(b"format\x00\x00\x00\x01", b"format\x00\x00\x00\x63"))
    with pytest.raises(copal.StorageError, match="has store format 99, which this copal .format 2. cannot read: use"):
        copal.open(path)
