"""The copal command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import copal
from copal import Index, Persistent, PersistentList


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
