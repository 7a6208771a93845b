"""Runs each program of examples/ as a reader would (a fresh interpreter, in a new directory)
and checks what it printed and what it left in the database.

The databases are read back in a fresh interpreter too, without the examples' classes: their
objects load as copal.Broken, whose ``state`` holds the stored attributes. (In the test process,
classes registered by other tests, such as the doc pages' modules, could claim the same stored
names.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(script: Path, *args: str, cwd: Path, timeout: float = 60) -> str:
    """Runs ``script`` with this interpreter (warnings are errors) and returns its output;
    fails the test unless it exits with 0 and its last line reports a passed check."""
    done = subprocess.run(
        [sys.executable, "-W", "error", str(script), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{script.name} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


READ_BACK = """
import json, sys
import copal
db = copal.open(sys.argv[1])
with db.transaction() as tx:
    result = eval(sys.argv[2], {"tx": tx, "db": db, "copal": copal})
db.close()
print(json.dumps(result))
"""


def read_back(location: Path | str, expression: str) -> Any:
    """The JSON value of ``expression`` (with ``tx``, ``db`` and ``copal``), evaluated in a
    transaction on the database at ``location`` by a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", READ_BACK, str(location), expression], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def stored_counts(location: Path | str) -> dict[str, int]:
    counts: dict[str, int] = read_back(location, '{d["type_name"]: d["records"] for d in db.schema()["descriptors"]}')
    return counts


def test_sertest_stores_reads_lazily_loads_the_closure_and_updates_one(tmp_path: Path) -> None:
    out = run(EXAMPLES / "sertest" / "sertest.py", "sertest.copal", cwd=tmp_path)
    lines = out.splitlines()
    assert lines[-1] == "check: changed objects [(5, 42)]: OK"
    assert "records_written=1032" in lines[0]
    assert any(line.startswith("closure of SerTest 5") and "records_read=102 " in line for line in lines)
    assert any(line.startswith("update one PSerTest") and "records_written=1 " in line for line in lines)
    counts = stored_counts(tmp_path / "sertest.copal")
    assert counts["__main__.SerTest"] == 10 and counts["__main__.PSerTest"] >= 1000


def check_bank(location: Path | str, out: str, workers: int, transfers: int) -> None:
    assert out.splitlines()[-1] == "check: total 5000, expected 5000: OK"
    assert f"{workers * transfers} transfers committed" in out
    stored = read_back(location, """{
        "types": sorted({a.type_name for a in tx.root["accounts"]}),
        "total": sum(a.state["balance"] for a in tx.root["accounts"]),
        "transfers": sum(t.state["transfers"] for t in tx.root["tallies"]),
    }""")
    assert stored == {"types": ["bank.Account"], "total": 5000, "transfers": workers * transfers}


def test_bank_worker_processes_keep_the_total_on_the_embedded_store(tmp_path: Path) -> None:
    out = run(EXAMPLES / "bank" / "bank.py", "bank.copal", "--workers", "3", "--transfers", "30", cwd=tmp_path)
    check_bank(tmp_path / "bank.copal", out, 3, 30)


def test_bank_worker_processes_keep_the_total_on_postgresql(tmp_path: Path, pg_server: Any) -> None:
    url = pg_server.create_database()
    out = run(EXAMPLES / "bank" / "bank.py", url, "--workers", "3", "--transfers", "30", cwd=tmp_path)
    check_bank(url, out, 3, 30)


def test_migration_v2_reads_and_updates_what_v1_wrote(tmp_path: Path) -> None:
    out1 = run(EXAMPLES / "migration" / "v1" / "app.py", "shop.copal", cwd=tmp_path)
    assert "stored class models.Account: fields ['owner', 'balance', 'fax']" in out1
    out2 = run(EXAMPLES / "migration" / "v2" / "app.py", "shop.copal", cwd=tmp_path)
    assert "Account(holder=Client Ann, balance=100, currency=EUR, has fax: False)" in out2
    assert out2.splitlines()[-1] == "check: OK"
    stored = read_back(tmp_path / "shop.copal", """{
        "fields": [sorted(a.state) for a in tx.root["accounts"]],
        "balances": [a.state["balance"] for a in tx.root["accounts"]],
        "shared": tx.root["accounts"][0].state["holder"] is tx.root["accounts"][1].state["owner"],
        "holder": [tx.root["accounts"][0].state["holder"].type_name, tx.root["accounts"][0].state["holder"].state["phone"]],
    }""")
    # Accounts 0 and 2 were written by v2 in its shape; account 1 only lost its removed field to
    # the purge, which rewrites nothing else (v2 reads `owner` as `holder`). The moved class's
    # object keeps its stored name.
    assert stored == {
        "fields": [["balance", "currency", "holder"], ["balance", "owner"], ["balance", "currency", "holder"]],
        "balances": [110, 250, 75],
        "shared": True,
        "holder": ["models.Customer", "+33 6 11 22 33 44"],
    }


def test_zodb_filestorage_moves_to_copal(tmp_path: Path) -> None:
    pytest.importorskip("ZODB", reason="ZODB is not installed (pip install 'copaldb[test]')")
    here = EXAMPLES / "zodb_to_copal"
    assert "wrote library.fs" in run(here / "make_zodb.py", "library.fs", cwd=tmp_path)
    out = run(here / "zodb_to_copal.py", "library.fs", "library.copal", "--module", "zodb_app=library", "--check",
              cwd=tmp_path)
    assert "       5  zodb_app.Book -> library.Book" in out
    assert "copied 14 persistent objects" in out
    assert out.splitlines()[-1] == "check: 14 persistent objects compared, all equal"
    out = run(here / "read_copal.py", "library.copal", cwd=tmp_path)
    assert "the same object as in the library: True" in out and out.splitlines()[-1] == "check: OK"
    counts = stored_counts(tmp_path / "library.copal")
    assert counts["library.Book"] == 5 and counts["library.Author"] == 3
    # Without --module, the objects keep the ZODB classes' names (for copal classes written later).
    out = run(here / "zodb_to_copal.py", "library.fs", "same-names.copal", "--check", cwd=tmp_path)
    assert "       5  zodb_app.Book -> zodb_app.Book" in out
    assert stored_counts(tmp_path / "same-names.copal")["zodb_app.Book"] == 5
