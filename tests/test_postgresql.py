"""What only the PostgreSQL store has: a server that can go away and come back, several
databases on one server, URLs, and the Rust store tests run against the session's server.

Everything else (the storage behaviour both stores share) runs against PostgreSQL through the
``store`` fixture of conftest.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest

import copal
from copal import PersistentList, StorageError
from helpers.models import Counter
from helpers.pgserver import PgServer, find_binary, free_port, make_certificate, start_server

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
            assert "new" not in tx.root
            assert tx.root["d"].value == 10
        check_counter_then_set(db, 2, 4)
    finally:
        db.close()


def check_counter_then_set(db: copal.Database, expected: int, new: int) -> None:
    """``root["c"]`` of ``db`` holds ``expected``, and a commit setting it to ``new`` goes through."""
    with db.transaction() as tx:
        assert tx.root["c"].value == expected
        tx.root["c"].value = new
    with db.transaction() as tx:
        assert tx.root["c"].value == new


def test_a_server_that_is_down_is_a_storage_error_until_it_is_back(pg_server: PgServer) -> None:
    db = copal.open(pg_server.create_database())
    try:
        with db.transaction() as tx:
            tx.root["c"] = Counter(1)
        pg_server.stop()
        try:
            with pytest.raises(StorageError, match="PostgreSQL"):
                db.transaction()
            # The message names the engine once, then the client's error and its cause; the
            # class already says it is a storage error.
            with pytest.raises(StorageError, match="^PostgreSQL: error connecting to server: .*refused") as refused:
                copal.open(pg_server.url())
            assert "storage error" not in str(refused.value)
        finally:
            pg_server.start()
        check_counter_then_set(db, 1, 2)
    finally:
        db.close()


def test_a_statement_timeout_fails_the_commit_and_writes_nothing(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    db = copal.open(url + "?options=-c%20statement_timeout%3D300")
    try:
        with db.transaction() as tx:
            tx.root["c"] = Counter(1)
        # Another session holds the commit lock (the tid row) for longer than the timeout.
        with holding_meta_row(pg_server, url, "tid", seconds=3):
            with pytest.raises(StorageError, match="statement timeout.*SQLSTATE 57014"):
                with db.transaction() as tx:
                    tx.root["c"].value = 2
        check_counter_then_set(db, 1, 3)
    finally:
        db.close()


def statements_logged_by(pg_server: PgServer, work: Callable[[], None]) -> str:
    """What the server logged while ``work`` ran."""
    start = pg_server.log.stat().st_size
    work()
    with pg_server.log.open() as log:
        log.seek(start)
        return log.read()


def test_a_transaction_that_reads_then_commits_uses_one_server_connection(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    with copal.open(url) as db, db.transaction() as tx:
        tx.root["c"] = Counter(0)
    # Every statement is logged with the process id of its server session (one per connection).
    pg_server.psql(f"ALTER DATABASE {database_name(url)} SET log_statement = 'all'")

    def update_from_a_cold_open() -> None:
        with copal.open(url) as db, db.transaction() as tx:
            tx.root["c"].value += 1

    log = statements_logged_by(pg_server, update_from_a_cold_open)
    sessions = set(re.findall(r"\[(\d+)\] LOG:  (?:statement|execute)", log))
    assert "FOR UPDATE" in log and "COMMIT" in log
    # The open's reads, the snapshot and the commit: one connection (the commit used to open a
    # second, a new server process, while the snapshot held the first).
    assert len(sessions) == 1, log
    with copal.open(url) as db, db.transaction() as tx:
        assert tx.root["c"].value == 1


class Tagged(copal.Persistent):
    """A class with an index and a removed field: declarations stored by maintenance commits."""

    __copal_indexes__ = [copal.Index("tag")]
    __copal_removed__ = ("legacy",)

    def __init__(self, tag: str) -> None:
        self.tag = tag


def test_a_new_process_takes_no_commit_lock_when_its_declarations_are_stored(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    with copal.open(url) as db, db.transaction() as tx:
        tx.root["t"] = Tagged("a")
    # The removal is stored once the class has records: by the next process's first transaction.
    with copal.open(url) as db, db.transaction() as tx:
        assert tx.root["t"].tag == "a"
    settings = pg_server.psql("SELECT encode(key, 'escape') FROM copal_settings", database_name(url))
    assert "removed:test_postgresql.Tagged" in settings
    pg_server.psql(f"ALTER DATABASE {database_name(url)} SET log_statement = 'all'")

    def query_from_a_cold_open() -> None:
        with copal.open(url) as db, db.transaction() as tx:
            assert tx.query(Tagged).where(tag="a").first() is not None

    log = statements_logged_by(pg_server, query_from_a_cold_open)
    # The declarations are compared on a snapshot: no maintenance commit locks the tid row,
    # so a process that only reads never waits behind another's commit.
    assert "copal_index_entries" in log
    assert "FOR UPDATE" not in log, log


def logged_statements(log: str) -> list[str]:
    """The statements (simple-query texts, or executed statements) in a server log."""
    return re.findall(r"LOG:  (?:statement|execute [^:]*): (.*)", log)


def test_a_new_database_gets_its_tables_in_one_round_trip(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    pg_server.psql(f"ALTER DATABASE {database_name(url)} SET log_statement = 'all'")
    log = statements_logged_by(pg_server, lambda: copal.open(url).close())
    creating = [statement for statement in logged_statements(log) if "CREATE TABLE" in statement]
    # One simple-query batch, one transaction: every table, the root, the version, the history.
    assert len(creating) == 1, log
    batch = creating[0]
    assert batch.startswith("BEGIN;") and batch.endswith("COMMIT")
    assert batch.count("CREATE TABLE") == 8 and "copal_schema_history" in batch
    with copal.open(url) as db, db.transaction() as tx:
        assert dict(tx.root) == {}
        tx.root["x"] = 1
    assert pg_server.psql("SELECT version FROM copal_schema_history", database_name(url)).split() == ["1", "2"]


def test_a_commit_sends_its_log_entry_and_tid_with_the_commit(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    pg_server.psql(f"ALTER DATABASE {database_name(url)} SET log_statement = 'all'")
    with copal.open(url) as db, db.transaction() as tx:
        tx.root["c"] = Counter(1)
        log = statements_logged_by(pg_server, tx.commit)
    last = logged_statements(log)[-1]
    # One round trip for the commit's last writes and COMMIT, which the server runs in order
    # and stops at the first failure (then nothing of the transaction stays).
    assert last.startswith("INSERT INTO copal_log") and "copal_meta" in last and last.endswith("COMMIT"), log
    with copal.open(url) as db, db.transaction() as tx:
        assert tx.root["c"].value == 1


def test_new_objects_of_any_size_reach_the_server_through_copy(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    # The records of new objects are sent with binary COPY, encoded by copal in 64 KiB chunks:
    # a record much larger than a chunk, an empty value and many small records in one commit.
    values = [b"", bytes(range(256)) * 12_000, *(i.to_bytes(4, "big") for i in range(5_000))]
    pg_server.psql(f"ALTER DATABASE {database_name(url)} SET log_statement = 'all'")
    with copal.open(url) as db, db.transaction() as tx:
        tx.root["counters"] = PersistentList(Counter(value) for value in values)
        log = statements_logged_by(pg_server, tx.commit)
    assert "COPY copal_records (oid, value) FROM STDIN (FORMAT binary)" in log
    with copal.open(url) as db, db.transaction() as tx:
        assert [counter.value for counter in tx.root["counters"]] == values


def test_durable_false_turns_synchronous_commit_off_and_commits_stay_visible(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    # The server logs every statement of this database's sessions, so the test sees copal's.
    pg_server.psql(f"ALTER DATABASE {database_name(url)} SET log_statement = 'all'")

    def write(durable: bool, value: int) -> None:
        with copal.open(url, durable=durable) as db:
            with db.transaction() as tx:
                tx.root["c"] = Counter(value)
            with copal.open(url) as other, other.transaction() as tx:
                assert tx.root["c"].value == value  # committed, visible to every other session

    durable_log = statements_logged_by(pg_server, lambda: write(True, 1))
    fast_log = statements_logged_by(pg_server, lambda: write(False, 2))
    assert "COMMIT" in durable_log and "COMMIT" in fast_log
    assert "synchronous_commit" not in durable_log
    assert "SET synchronous_commit = off" in fast_log


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


COPAL_TABLES = ["copal_descriptors", "copal_index_defs", "copal_index_entries", "copal_log", "copal_meta",
                "copal_records", "copal_schema_history", "copal_settings"]


def database_name(url: str) -> str:
    return url.rsplit("/", 1)[1]


def test_init_creates_the_tables_once_and_reports_it(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    report = copal.init(url)
    assert report["location"] == url
    assert (report["from_version"], report["to_version"]) == (0, 2)
    assert report["created"] == COPAL_TABLES
    assert len(report["steps"]) == 2
    again = copal.init(url)
    assert again == {"location": url, "from_version": 2, "to_version": 2, "steps": [], "created": []}
    history = pg_server.psql("SELECT version, copal_version FROM copal_schema_history ORDER BY version",
                             database_name(url))
    assert history.split() == [f"1|{copal.__version__}", f"2|{copal.__version__}"]
    with copal.open(url) as db, db.transaction() as tx:
        tx.root["x"] = Counter(1)
    assert copal.init(url)["steps"] == []  # data in the tables changes nothing


def make_version_1(pg_server: PgServer, url: str) -> None:
    """Turns the current schema of ``url`` into version 1's: the tables of migration step 1
    without the history table that step 2 adds."""
    pg_server.psql("DROP TABLE copal_schema_history; UPDATE copal_meta SET value = 1 WHERE key = 'format'::bytea",
                   database_name(url))


def test_upgrade_migrates_version_1_and_keeps_the_data(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    with copal.open(url) as db, db.transaction() as tx:
        tx.root["c"] = Counter(5)
        tx.root["items"] = PersistentList([Counter(i) for i in range(3)])
    make_version_1(pg_server, url)
    with pytest.raises(StorageError, match=f"schema version 1; .*copal upgrade {url}"):
        copal.open(url)
    with pytest.raises(StorageError, match="copal upgrade"):
        copal.init(url)
    report = copal.upgrade(url)
    assert (report["from_version"], report["to_version"]) == (1, 2)
    assert report["created"] == ["copal_schema_history"]
    assert len(report["steps"]) == 1 and "copal_schema_history" in report["steps"][0]
    assert pg_server.psql("SELECT version FROM copal_schema_history", database_name(url)).split() == ["2"]
    assert copal.upgrade(url)["from_version"] == 2
    with copal.open(url) as db:
        with db.transaction() as tx:
            assert tx.root["c"].value == 5
            assert [item.value for item in tx.root["items"]] == [0, 1, 2]
            tx.root["c"].value = 6
        with db.transaction() as tx:
            assert tx.root["c"].value == 6
        assert db.verify()["problems"] == []


def test_upgrade_command_migrates_what_open_refuses(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    with copal.open(url) as db, db.transaction() as tx:
        tx.root["c"] = Counter(5)
    make_version_1(pg_server, url)
    copal_command = [sys.executable, "-m", "copal"]
    refused = subprocess.run([*copal_command, "info", url], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 3 and f"copal upgrade {url}" in refused.stderr, refused.stderr
    upgraded = subprocess.run([*copal_command, "upgrade", url], capture_output=True, text=True, timeout=120)
    assert upgraded.returncode == 0, upgraded.stderr
    lines = upgraded.stdout.splitlines()
    assert lines[0] == f"upgraded {url} from layout version 1 to 2:" and "copal_schema_history" in lines[1]
    with copal.open(url) as db, db.transaction() as tx:
        assert tx.root["c"].value == 5


def test_concurrent_upgrades_migrate_once(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    copal.init(url)
    make_version_1(pg_server, url)
    # A session holds the version row, so both upgrades read version 1, then wait for it; the
    # first to get it migrates, the second finds the work done.
    with holding_meta_row(pg_server, url, "format", seconds=2), ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(copal.upgrade, [url, url]))
    assert sorted(report["from_version"] for report in reports) == [1, 2]
    assert sorted(len(report["steps"]) for report in reports) == [0, 1]


@contextmanager
def holding_meta_row(pg_server: PgServer, url: str, key: str, seconds: float) -> Iterator[None]:
    """Another session (psql) holds the ``copal_meta`` row ``key`` locked for ``seconds``, from
    before the block starts; the block ends by waiting for that session to finish."""
    holder = subprocess.Popen(
        [find_binary("psql") or "psql", "-X", "-q", url, "-c",
         f"BEGIN; SELECT 1 FROM copal_meta WHERE key = '{key}'::bytea FOR UPDATE; SELECT pg_sleep({seconds}); COMMIT;"],
        stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while "pg_sleep" not in pg_server.psql("SELECT query FROM pg_stat_activity WHERE state = 'active'"):
            assert time.monotonic() < deadline, "the session holding the lock did not start"
            time.sleep(0.05)
        yield
    finally:
        holder.wait(timeout=60)


def test_a_failed_upgrade_changes_nothing(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    copal.init(url)
    make_version_1(pg_server, url)
    # Step 2 creates copal_schema_history; a table of that name already there makes it fail.
    pg_server.psql("CREATE TABLE copal_schema_history (x int)", database_name(url))
    with pytest.raises(StorageError, match="copal_schema_history"):
        copal.upgrade(url)
    assert pg_server.psql("SELECT value FROM copal_meta WHERE key = 'format'::bytea", database_name(url)).strip() == "1"


def test_upgrade_needs_a_copal_database_and_newer_schemas_are_refused(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    with pytest.raises(StorageError, match=f"no copal tables to upgrade: `copal init {url}`"):
        copal.upgrade(url)
    assert pg_server.psql("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'copal%'", database_name(url)).strip() == "0"
    copal.open(url).close()
    pg_server.psql("UPDATE copal_meta SET value = 99 WHERE key = 'format'::bytea", database_name(url))
    # StorageError, as the embedded store refuses a newer store format (test_store_format.py).
    for attempt in (copal.open, copal.init, copal.upgrade):
        with pytest.raises(StorageError, match="schema version 99, newer than this copal knows"):
            attempt(url)


def test_a_program_running_during_an_upgrade_cannot_commit_afterwards(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    with copal.open(url) as db:
        with db.transaction() as tx:
            tx.root["c"] = Counter(1)
        # Another copal upgrades the tables while this program runs (simulated by a version
        # this program does not know).
        pg_server.psql("UPDATE copal_meta SET value = 3 WHERE key = 'format'::bytea", database_name(url))
        with pytest.raises(StorageError, match="changed to schema version 3 while this program ran"):
            with db.transaction() as tx:
                tx.root["c"].value = 2
    pg_server.psql("UPDATE copal_meta SET value = 2 WHERE key = 'format'::bytea", database_name(url))
    with copal.open(url) as db, db.transaction() as tx:
        assert tx.root["c"].value == 1


def test_init_and_upgrade_of_the_embedded_store(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with pytest.raises(StorageError, match="holds no copal database to upgrade"):
        copal.upgrade(path)
    assert not path.exists()
    report = copal.init(path)
    assert (report["from_version"], report["created"]) == (0, [str(path)])
    version = report["to_version"]
    assert version >= 1
    with copal.open(path) as db, db.transaction() as tx:
        tx.root["x"] = 1
    assert copal.init(path) == {"location": str(path), "from_version": version, "to_version": version,
                                "steps": [], "created": []}
    assert copal.upgrade(path)["to_version"] == version
    with copal.open(path) as db, db.transaction() as tx:
        assert tx.root["x"] == 1


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
    assert "21 passed" in result.stdout, result.stdout


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


@pytest.fixture(scope="module")
def tls_server(pg_server: PgServer) -> Iterator[PgServer]:
    """A second cluster, with TLS on (the session's has none, so that the other tests keep
    testing plain connections)."""
    try:
        server = start_server(tls=True)
    except FileNotFoundError as error:
        pytest.skip(f"cannot start a TLS cluster: {error}")
    yield server
    server.destroy()


def tls_connections(server: PgServer, url: str) -> set[str]:
    """Whether the connections to the database of ``url`` use TLS ('t' or 'f')."""
    return set(server.psql("SELECT ssl FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) "
                           f"WHERE datname = '{database_name(url)}'").split())


def test_connections_use_tls_as_sslmode_says(tls_server: PgServer) -> None:
    url = tls_server.create_database()
    root = tls_server.certificate
    # prefer (the default): TLS, since the server offers it; the certificate is not checked.
    for query in ("", "?sslmode=require", f"?sslmode=verify-ca&sslrootcert={root}",
                  f"?sslmode=verify-full&sslrootcert={root}"):
        with copal.open(url + query) as db:
            with db.transaction() as tx:
                tx.root["query"] = query
            assert tls_connections(tls_server, url) == {"t"}, query
    with copal.open(url + "?sslmode=disable") as db:
        with db.transaction() as tx:
            assert tx.root["query"].endswith("verify-full&sslrootcert=" + str(root))
        assert tls_connections(tls_server, url) == {"f"}


def test_a_certificate_from_an_untrusted_authority_is_refused(tls_server: PgServer, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    url = tls_server.create_database()
    other_root = tmp_path / "other.crt"
    make_certificate(other_root, tmp_path / "other.key")
    with pytest.raises(StorageError, match="certificate verify failed"):
        copal.open(f"{url}?sslmode=verify-full&sslrootcert={other_root}")
    monkeypatch.setenv("PGSSLMODE", "verify-ca")
    monkeypatch.setenv("PGSSLROOTCERT", str(other_root))
    with pytest.raises(StorageError, match="certificate verify failed"):
        copal.open(url)
    monkeypatch.setenv("PGSSLROOTCERT", str(tmp_path / "missing.crt"))
    with pytest.raises(StorageError, match="missing.crt does not exist"):
        copal.open(url)


def test_tls_demanded_of_a_server_without_it_is_a_storage_error(pg_server: PgServer,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    url = pg_server.create_database()
    with pytest.raises(StorageError, match="server does not support TLS"):
        copal.open(url + "?sslmode=require")
    monkeypatch.setenv("PGSSLMODE", "require")
    with pytest.raises(StorageError, match="server does not support TLS"):
        copal.init(url)
    with copal.open(url + "?sslmode=prefer") as db, db.transaction() as tx:  # the URL's mode wins
        tx.root["x"] = 1


def test_backup_command_names_the_real_restore_command_without_the_password(pg_server: PgServer, tmp_path: Path) -> None:
    url = pg_server.create_database()
    with copal.open(url) as db, db.transaction() as tx:
        tx.root["c"] = Counter(5)
    # The test cluster trusts local connections: the password is ignored, but must not be shown.
    with_password = url.replace("postgres@", "postgres:s3cret@")
    dest = tmp_path / "my copy"
    done = subprocess.run([sys.executable, "-m", "copal", "backup", with_password, str(dest)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "s3cret" not in done.stdout + done.stderr
    restore = done.stdout.split("restore by ", 1)[1].strip()
    assert restore == f"copal export '{dest}' | copal import {url}"
    with copal.open(str(dest)) as copy, copy.transaction() as tx:
        assert tx.root["c"].value == 5


def server_sessions(server: PgServer, url: str) -> int:
    """How many sessions the server has open on the database of ``url`` (copal's connections)."""
    return int(server.psql(f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{database_name(url)}'").strip())


def test_max_connections_caps_the_sessions_and_a_transaction_waits_for_one(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    with copal.open(url, max_connections=2, pool_timeout=60) as db:
        with db.transaction() as tx:
            tx.root["c"] = Counter(0)
        # Eight threads run transactions at once on two connections: each waits for one.
        def increment(_: int) -> None:
            def work(tx: copal.Transaction) -> None:
                tx.root["c"].value += 1
                time.sleep(0.01)  # hold the connection a while, so that others must wait

            db.run(work, retries=1000)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(increment, range(40)))
        assert server_sessions(pg_server, url) <= 2
        with db.transaction() as tx:
            assert tx.root["c"].value == 40


def test_a_transaction_that_finds_no_connection_in_time_raises_storage_error(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    with copal.open(url, max_connections=2, pool_timeout=0.3) as db:
        first, second = db.transaction(), db.transaction()  # each holds a connection
        started = time.monotonic()
        with pytest.raises(StorageError, match=r"^PostgreSQL: all 2 connections of this database \(max_connections\) are in use .* within 0.3 s \(pool_timeout\)"):
            db.transaction()
        assert time.monotonic() - started >= 0.3
        first.abort()
        with db.transaction() as tx:  # the connection given back serves the next transaction
            tx.root["x"] = 1
        second.abort()
    # Closing the Database closed its sessions (the server notices within moments).
    deadline = time.monotonic() + 10
    while server_sessions(pg_server, url) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server_sessions(pg_server, url) == 0


def test_pool_options_are_checked(pg_server: PgServer, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_connections applies to a PostgreSQL database only"):
        copal.open(tmp_path / "db", max_connections=4)
    with pytest.raises(ValueError, match="pool_timeout applies to a PostgreSQL database only"):
        copal.open(tmp_path / "db", pool_timeout=1)
    with pytest.raises(ValueError, match="max_connections must be at least 1, not 0"):
        copal.open(pg_server.url(), max_connections=0)
    for seconds in (-1, float("nan")):
        with pytest.raises(ValueError, match=r"pool_timeout must be seconds >= 0, not"):
            copal.open(pg_server.url(), pool_timeout=seconds)
