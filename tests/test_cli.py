"""The copal command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import copal
from copal import Index, Persistent, PersistentList

from helpers.versions import load_module


class Entry(Persistent):
    __copal_indexes__ = [Index("n")]

    def __init__(self, n: int) -> None:
        self.n = n


def _copal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "copal", *args], capture_output=True, text=True, timeout=120)


def test_verify_passes_on_a_sound_database_and_fails_on_damage(tmp_path: Path) -> None:
    path = tmp_path / "db"
    db = copal.open(path)
    with db.transaction() as tx:
        tx.root["entries"] = PersistentList(Entry(i) for i in range(10))
    with db.transaction() as tx:
        victim = tx.root["entries"][3]._p_oid
    db.close()
    ok = _copal("verify", str(path), "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    report = json.loads(ok.stdout)
    assert report["records"] == 12 and report["index_entries"] == 10 and report["problems"] == []

    db = copal.open(path)
    db._debug_put_raw_record(victim, b"\x11\x01")
    db.close()
    bad = _copal("verify", str(path))
    assert bad.returncode == 1
    assert "does not decode" in bad.stdout


def test_info_lists_the_roots(tmp_path: Path) -> None:
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["things"] = PersistentList()
    db.close()
    out = _copal("info", str(tmp_path / "db"), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["roots"] == ["things"]


def test_schema_lists_descriptor_versions_and_their_records_without_the_classes(tmp_path: Path) -> None:
    path = tmp_path / "db"
    v1 = load_module(tmp_path, "cli_schema_app", "import copal\nclass Pet(copal.Persistent):\n    def __init__(self, name):\n        self.name = name\n")
    db = copal.open(path)
    with db.transaction() as tx:
        tx.root["pets"] = PersistentList(v1.Pet(n) for n in ["rex", "tom", "kit"])
    db.close()
    v2 = load_module(
        tmp_path,
        "cli_schema_app",
        "import copal\nclass Pet(copal.Persistent):\n    def __init__(self, name, age=0):\n        self.name = name\n        self.age = age\n",
    )
    db = copal.open(path)
    with db.transaction() as tx:
        tx.root["pets"].append(v2.Pet("new", 2))
    db.close()

    out = _copal("schema", str(path), "--json")  # a fresh process: cli_schema_app is not imported
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    pet = next(t for t in report["types"] if t["type_name"] == "cli_schema_app.Pet")
    assert [(d["fields"], d["records"]) for d in pet["descriptors"]] == [(["name"], 3), (["name", "age"], 1)]
    assert pet["records"] == 4 and pet["removed"] == []
    ids = [d["id"] for d in pet["descriptors"]]
    assert report["records"] == 4 + 2 and report["unreadable"] == 0  # the root and the list

    table = _copal("schema", str(path))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert f"cli_schema_app.Pet (class {pet['class']}): 4 records" in lines
    assert f"  descriptor {ids[0]:<6}    3 records  name" in lines
    assert f"  descriptor {ids[1]:<6}     1 record  name, age" in lines
    assert lines[-1] == "total: 6 records in 3 types"


def test_schema_and_gc_help_show_examples() -> None:
    for command in (["schema"], ["gc"]):
        out = _copal(*command, "--help")
        assert out.returncode == 0 and "examples:" in out.stdout and "copal " + command[0] in out.stdout


def test_gc_needs_a_kind_of_garbage(tmp_path: Path) -> None:
    out = _copal("gc", str(tmp_path / "db"))
    assert out.returncode == 2 and "--schema" in out.stderr


def test_backup_is_a_consistent_compacted_hot_copy(tmp_path: Path) -> None:
    import threading

    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["entries"] = PersistentList(Entry(i) for i in range(20_000))
        tx.root["count"] = 20_000
    for _ in range(5):  # rewrites leave free pages, which the copy leaves out
        with db.transaction() as tx:
            for entry in tx.root["entries"]:
                entry.n += 1
    stop, first = threading.Event(), threading.Event()
    commits = []

    def write() -> None:
        while not stop.is_set():
            with db.transaction() as tx:
                tx.root["entries"].append(Entry(-1))
                tx.root["count"] += 1
            commits.append(1)
            first.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert first.wait(60)
        size = db.backup(tmp_path / "copy")
        assert not stop.is_set()
    finally:
        stop.set()
        writer.join()
    assert len(commits) > 1
    assert 0 < size < db.disk_size()
    db.close()
    copy = copal.open(tmp_path / "copy")
    try:
        with copy.transaction() as tx:
            # One snapshot: the counter and the list agree, whichever commit the copy stopped at.
            assert tx.root["count"] == len(tx.root["entries"]) >= 20_001
            assert tx.query(Entry).where(n=5).count() == 1
        assert copy.verify()["problems"] == []
    finally:
        copy.close()


def test_backup_command_refuses_a_destination_in_use(tmp_path: Path) -> None:
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["x"] = Entry(1)
    db.close()
    done = _copal("backup", str(tmp_path / "db"), str(tmp_path / "copy"), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["bytes"] > 0
    again = _copal("backup", str(tmp_path / "db"), str(tmp_path / "copy"))
    assert again.returncode != 0
    assert "not empty" in again.stderr
    assert "copal backup" in _copal("backup", "--help").stdout
