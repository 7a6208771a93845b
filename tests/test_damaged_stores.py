"""A damaged database is reported as damaged, never taken for an empty one: opening it raises
CorruptRecordError and ``copal verify`` reports the damage (exit status 1), and neither writes
to it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import copal
from helpers.models import Item
from helpers.pgserver import PgServer


def _copal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "copal", *args], capture_output=True, text=True, timeout=120)


def _damage(path: Path, name: bytes, damaged: bytes) -> bytes:
    """Replaces every copy of the table name ``name`` in the LMDB file by ``damaged`` (one
    byte differs), as a flipped byte in LMDB's list of tables does; returns the damaged file."""
    data_file = path / "data.mdb"
    data = data_file.read_bytes()
    assert name in data
    data = data.replace(name, damaged)
    data_file.write_bytes(data)
    return data


@pytest.mark.parametrize("name, damaged", [(b"records/1", b"4ecords/1"), (b"meta", b"neta"), (b"log", b"lof")])
def test_a_damaged_table_name_is_reported_and_nothing_is_written(tmp_path: Path, name: bytes, damaged: bytes) -> None:
    path = tmp_path / "db"
    with copal.open(path) as db:
        with db.transaction() as tx:
            tx.root["item"] = Item("kept")
    data = _damage(path, name, damaged)

    with pytest.raises(copal.CorruptRecordError, match="damaged database"):
        copal.open(path)
    verify = _copal("verify", str(path))
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert "damaged database" in verify.stdout
    assert (path / "data.mdb").read_bytes() == data

    # Repaired, the store holds its data again: nothing was initialised over it.
    (path / "data.mdb").write_bytes(data.replace(damaged, name))
    with copal.open(path) as db:
        with db.transaction() as tx:
            assert tx.root["item"].name == "kept"


def _pg_database(pg_server: PgServer) -> tuple[str, str]:
    """A PostgreSQL database holding one committed Item: its URL and its name."""
    url = pg_server.create_database()
    with copal.open(url) as db:
        with db.transaction() as tx:
            tx.root["item"] = Item("kept")
    return url, url.rsplit("/", 1)[1]


def test_verify_reports_a_dropped_postgresql_table_and_open_refuses_it(pg_server: PgServer) -> None:
    url, name = _pg_database(pg_server)
    with copal.open(url) as db:
        pg_server.psql("DROP TABLE copal_log", name)
        # The open Database checks the tables again.
        problems = db.verify()["problems"]
        assert len(problems) == 1 and "lacks copal_log" in problems[0]
    with pytest.raises(copal.CorruptRecordError, match="lacks copal_log"):
        copal.open(url)
    verify = _copal("verify", url)
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert "lacks copal_log" in verify.stdout


def test_verify_reports_a_missing_root_record(pg_server: PgServer) -> None:
    url, name = _pg_database(pg_server)
    pg_server.psql("DELETE FROM copal_records WHERE oid = (SELECT min(oid) FROM copal_records)", name)
    verify = _copal("verify", url)
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert "root record" in verify.stdout


def test_a_dropped_copal_meta_is_reported_not_created_again(pg_server: PgServer) -> None:
    url, name = _pg_database(pg_server)
    pg_server.psql("DROP TABLE copal_meta", name)
    with pytest.raises(copal.CorruptRecordError, match="no copal_meta"):
        copal.open(url)
    assert pg_server.psql("SELECT count(*) FROM copal_records", name).strip() == "2"


def test_a_last_tid_behind_the_commit_log_is_reported(pg_server: PgServer) -> None:
    url, name = _pg_database(pg_server)
    pg_server.psql("UPDATE copal_meta SET value = 0 WHERE key = 'tid'::bytea", name)
    with copal.open(url) as db:
        assert "past the last tid" in db.verify()["problems"][0]
        with pytest.raises(copal.CorruptRecordError, match="last tid in copal_meta is behind the commit log"):
            with db.transaction() as tx:
                tx.root["item"].name = "changed"


@pytest.mark.parametrize(
    "table, column, alter",
    [
        ("copal_records", "value", "ALTER TABLE copal_records ALTER COLUMN value TYPE text USING encode(value, 'hex')"),
        ("copal_meta", "value", "ALTER TABLE copal_meta ALTER COLUMN value TYPE text"),
    ],
)
def test_a_changed_postgresql_column_type_is_a_storage_error_naming_it(
    pg_server: PgServer, table: str, column: str, alter: str
) -> None:
    url, name = _pg_database(pg_server)
    pg_server.psql(alter, name)
    with pytest.raises(copal.StorageError, match=f"column {column} of {table} has type text"):
        with copal.open(url) as db:
            with db.transaction() as tx:
                tx.root["item"]
