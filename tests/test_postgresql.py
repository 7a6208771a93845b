"""What only the PostgreSQL store has: a server that can go away and come back, several
databases on one server, URLs, and the Rust store tests run against the session's server.

Everything else (the storage behaviour both stores share) runs against PostgreSQL through the
``store`` fixture of conftest.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import copal
from copal import PersistentList, SchemaError, StorageError
from helpers.models import Counter
from helpers.pgserver import PgServer, free_port

REPO = Path(__file__).resolve().parents[1]


def test_server_restart_is_a_storage_error_then_the_next_transaction_reconnects(pg_server: PgServer) -> None:
    db = copal.open(pg_server.create_database())
    try:
        with db.transaction() as tx:
            tx.root["c"] = Counter(1)
            tx.root["d"] = Counter(10)
        # A restart between transactions: the pooled connections are dead; the next
        # transaction starts on a fresh one.
        pg_server.restart()
        with db.transaction() as tx:
            assert tx.root["c"].value == 1
            tx.root["c"].value = 2
        # A restart in the middle of a transaction: its snapshot is gone, so its next read of the
        # store (a query) fails with StorageError and it writes nothing; the next transaction
        # reconnects.
        with pytest.raises(StorageError, match="PostgreSQL"):
            with db.transaction() as tx:
                tx.root["c"].value = 3
                tx.root["new"] = PersistentList([1])
                pg_server.restart()
                tx.root["d"].value += tx.query(Counter).count()
        with db.transaction() as tx:
            assert tx.root["c"].value == 2
            assert "new" not in tx.root
            assert tx.root["d"].value == 10
            tx.root["c"].value = 4
        with db.transaction() as tx:
            assert tx.root["c"].value == 4
    finally:
        db.close()


def test_two_databases_on_one_server_are_independent(pg_server: PgServer) -> None:
    first, second = copal.open(pg_server.create_database()), copal.open(pg_server.create_database())
    try:
        with first.transaction() as tx:
            tx.root["where"] = "first"
        with second.transaction() as tx:
            assert "where" not in tx.root
            tx.root["where"] = "second"
        with first.transaction() as tx:
            assert tx.root["where"] == "first"
    finally:
        first.close()
        second.close()


def test_url_forms_and_bad_locations(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    db = copal.open(url.replace("postgresql://", "postgres://", 1))
    with db.transaction() as tx:
        tx.root["x"] = 1
    db.close()
    db = copal.open(url)
    with db.transaction() as tx:
        assert tx.root["x"] == 1
    assert repr(db).startswith("<copal.Database 'postgresql://postgres@")
    assert db.disk_size() > 0
    db.close()
    with pytest.raises(ValueError, match="map_size"):
        copal.open(url, map_size=1 << 20)
    with pytest.raises(StorageError, match="PostgreSQL"):
        copal.open(f"postgresql://postgres@127.0.0.1:{free_port()}/nothing")
    with pytest.raises(StorageError, match="PostgreSQL"):
        copal.open(pg_server.url("no_such_database"))


def test_a_schema_of_another_version_is_refused(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    copal.open(url).close()
    database = url.rsplit("/", 1)[1]
    pg_server.psql("UPDATE copal_meta SET value = 99 WHERE key = 'format'::bytea", database)
    with pytest.raises(SchemaError, match="version 99"):
        copal.open(url)


def test_passwords_stay_out_of_repr(pg_server: PgServer) -> None:
    # Trust authentication ignores the password; the repr must not show it anyway.
    url = pg_server.create_database().replace("postgres@", "postgres:s3cret@", 1)
    db = copal.open(url)
    try:
        assert "s3cret" not in repr(db)
    finally:
        db.close()


@pytest.mark.skipif(shutil.which("cargo") is None, reason="needs the Rust toolchain (cargo)")
def test_rust_store_tests_pass_against_the_session_server(pg_server: PgServer) -> None:
    env = dict(os.environ, COPAL_TEST_POSTGRES_URL=pg_server.url())
    result = subprocess.run(["cargo", "test", "-q", "-p", "copal-core", "--test", "store"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "skipped" not in result.stderr, result.stderr
    assert "19 passed" in result.stdout, result.stdout


def test_libpq_environment_variables_and_services_complete_the_url(
    pg_server: PgServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = pg_server.create_database()
    dbname = url.rsplit("/", 1)[1]
    for variable in ("PGHOST", "PGPORT", "PGUSER", "PGPASSWORD", "PGDATABASE", "PGSERVICE", "PGSERVICEFILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PGHOST", "127.0.0.1")
    monkeypatch.setenv("PGPORT", str(pg_server.port))
    monkeypatch.setenv("PGUSER", "postgres")
    db = copal.open(f"postgresql:///{dbname}")  # host, port and user from the environment
    try:
        with db.transaction() as tx:
            tx.root["c"] = Counter(7)
    finally:
        db.close()
    services = tmp_path / "pg_service.conf"
    services.write_text(f"[copal-test]\nhost=127.0.0.1\nport={pg_server.port}\ndbname={dbname}\n")
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    monkeypatch.setenv("PGPORT", "1")  # the service's port comes before the environment's

    def counter_at(url: str) -> int:
        db = copal.open(url)
        try:
            with db.transaction() as tx:
                value: int = tx.root["c"].value
                return value
        finally:
            db.close()

    assert counter_at("postgresql://?service=copal-test") == 7
    monkeypatch.setenv("PGSERVICE", "copal-test")
    assert counter_at("postgresql://") == 7
    with pytest.raises(StorageError, match="no \\[absent\\] section"):
        copal.open("postgresql://?service=absent")


def test_info_names_a_postgresql_database_without_its_password(pg_server: PgServer) -> None:
    url = pg_server.create_database().replace("postgres@", "postgres:s3cret@")
    info = subprocess.run(
        [sys.executable, "-m", "copal", "info", url, "--json"], capture_output=True, text=True, timeout=120
    )
    assert info.returncode == 0, info.stderr
    assert "s3cret" not in info.stdout
    assert json.loads(info.stdout)["location"].startswith("postgresql://postgres")
