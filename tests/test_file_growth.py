"""The embedded store's file grows while transactions stay open: long transactions are logged
(``long_transaction_warning``), and ``copal compact`` shrinks the file in place, refusing while
another process has the database open."""

from __future__ import annotations

import fcntl
import logging
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import copal
from helpers.models import Item
from helpers.procs import child_env

# -- long transactions -------------------------------------------------------------------------


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "copal" and r.levelno == logging.WARNING]


def test_a_long_transaction_is_logged_when_it_ends(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with copal.open(tmp_path / "db", long_transaction_warning=0.05) as db:
        with db.transaction() as tx:
            tx.root["item"] = Item("quick")
        with db.transaction(readonly=True) as tx:
            assert tx.root["item"].name == "quick"
        assert _warnings(caplog) == []
        with db.transaction() as tx:
            tx.root["item"].name = "slow"
            time.sleep(0.1)
        with db.transaction() as tx:
            time.sleep(0.1)
            tx.abort()
    logged = _warnings(caplog)
    assert len(logged) == 2, logged
    for message in logged:
        assert re.match(r"a transaction was open for \d+\.\d s \(its snapshot: tid \d+\)\. While", message), message
        assert "so the database grows" in message and "long_transaction_warning" in message


def test_a_transaction_still_open_is_logged_at_the_next_commit(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with copal.open(tmp_path / "db", long_transaction_warning=0.05) as db:
        reader = db.transaction(readonly=True)
        time.sleep(0.1)
        with db.transaction() as tx:
            tx.root["n"] = 1
        [message] = _warnings(caplog)
        assert re.match(r"a transaction of this process has been open for \d+\.\d s and still runs\. While", message), message
        # Once while it runs: the next commit says nothing more of it.
        with db.transaction() as tx:
            tx.root["n"] = 2
        assert len(_warnings(caplog)) == 1
        reader.abort()
    assert len(_warnings(caplog)) == 2 and _warnings(caplog)[1].startswith("a transaction was open for")


def test_long_transactions_are_not_logged_without_a_threshold(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with copal.open(tmp_path / "db", long_transaction_warning=None) as db:
        reader = db.transaction(readonly=True)
        with db.transaction() as tx:
            time.sleep(0.05)
            tx.root["n"] = 1
        reader.abort()
    assert _warnings(caplog) == []
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="long_transaction_warning must be seconds > 0 or None"):
            copal.open(tmp_path / "db", long_transaction_warning=bad)


# -- copal compact -----------------------------------------------------------------------------


def _copal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "copal", *args], capture_output=True, text=True, timeout=120, env=child_env())


def _grown(path: Path) -> bytes:
    """A database whose file grew to hold 1,000 items of 2 KB, of which 10 remain; returns its
    JSON export."""
    with copal.open(path) as db:
        with db.transaction() as tx:
            tx.root["items"] = [Item(f"item {i}", i, os.urandom(2000)) for i in range(1000)]
        with db.transaction() as tx:
            items = tx.root["items"]
            for item in items[10:]:
                tx.delete(item)
            tx.root["items"] = items[:10]
        db.export(path.parent / "before.jsonl", format="json")
    return (path.parent / "before.jsonl").read_bytes()


def test_compact_shrinks_the_file_and_keeps_the_contents(tmp_path: Path) -> None:
    path = tmp_path / "db"
    before = _grown(path)
    size = (path / "data.mdb").stat().st_size
    assert size > 2_000_000

    done = _copal("compact", str(path))
    assert done.returncode == 0, done
    assert done.stdout.startswith(f"compacted {path}: {size:,} bytes to "), done.stdout
    after = (path / "data.mdb").stat().st_size
    assert after < size / 10
    assert [f.name for f in path.iterdir() if f.name.startswith("data.mdb.")] == []

    verify = _copal("verify", str(path))
    assert verify.returncode == 0 and verify.stdout.endswith("OK\n"), verify
    with copal.open(path) as db:
        db.export(tmp_path / "after.jsonl", format="json")
        assert (tmp_path / "after.jsonl").read_bytes() == before
        # Writing goes on in the compacted file, and reads in the next process see it.
        with db.transaction() as tx:
            tx.root["items"].append(Item("new"))
    with copal.open(path) as db:
        with db.transaction() as tx:
            assert [item.name for item in tx.root["items"]][-2:] == ["item 9", "new"]
    assert copal.compact(path)["size_after"] <= after + 4096 * 4


def test_compact_refuses_while_the_database_is_open(tmp_path: Path) -> None:
    path = tmp_path / "db"
    _grown(path)
    data = (path / "data.mdb").read_bytes()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import copal, sys; db = copal.open(sys.argv[1]); print('open', flush=True); sys.stdin.read()", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env(),
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        done = _copal("compact", str(path))
        assert done.returncode == 3, done
        assert done.stderr.startswith(f"copal compact: error: {path} is open in another process: compacting replaces")
        assert (path / "data.mdb").read_bytes() == data
    finally:
        holder.communicate("", timeout=60)
    with copal.open(path):
        with pytest.raises(copal.StorageError, match="is open in this process: close every Database on it"):
            copal.compact(path)
    assert (path / "data.mdb").read_bytes() == data
    assert copal.compact(path)["size_after"] < len(data) / 10

    url = _copal("compact", "postgresql://nobody@localhost/none")
    assert url.returncode == 2 and "PostgreSQL reclaims space with VACUUM" in url.stderr


@pytest.mark.parametrize("readonly", [False, True])
def test_an_open_during_a_compaction_waits_and_uses_the_new_file(tmp_path: Path, readonly: bool) -> None:
    """The steps of a compaction done by hand (compaction.rs): while this process holds LMDB's
    opener lock exclusively, a child's open waits; the data file is replaced meanwhile, and the
    child reads the new file (a read-only open, which opens the data file before it waits, opens
    again), and its commits land in it."""
    path, other = tmp_path / "db", tmp_path / "other"
    for where, name in ((path, "old"), (other, "new")):
        with copal.open(where) as db:
            with db.transaction() as tx:
                tx.root["name"] = name
    lock = os.open(path / "lock.mdb", os.O_RDWR)
    try:
        fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        child = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent("""
                import sys, copal
                readonly = sys.argv[2] == "True"
                with copal.open(sys.argv[1], readonly=readonly) as db:
                    with db.transaction() as tx:
                        print(tx.root["name"], flush=True)
                        if not readonly:
                            tx.root["child"] = "committed"
                """), str(path), str(readonly)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
        )
        time.sleep(1)
        assert child.poll() is None, child.communicate()
        os.truncate(path / "lock.mdb", 0)
        os.replace(other / "data.mdb", path / "data.mdb")
        # As the first opener, this process sets the lock table up and lets the child in.
        copal.open(path, readonly=True).close()
    finally:
        os.close(lock)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert out == "new\n"
    with copal.open(path, readonly=True) as db:
        with db.transaction() as tx:
            assert tx.root["name"] == "new"
            assert tx.root.get("child") == (None if readonly else "committed")
