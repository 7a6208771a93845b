"""The package ships type hints, its public API passes ``mypy --strict``, and so do the examples
(users copy them into typed code)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "copal"
# Each directory is one program (the migration's two versions share module names). The ZODB
# example's own application subclasses ZODB's untyped Persistent, which only that directory allows.
EXAMPLE_DIRECTORIES = {
    "sertest": [],
    "bank": [],
    "fastapi_shop": [],
    "migration/v1": [],
    "migration/v2": [],
    "zodb_to_copal": ["--allow-subclassing-any"],
}


def test_package_is_marked_typed() -> None:
    assert (PACKAGE / "py.typed").exists()
    assert (PACKAGE / "_core.pyi").exists()


def mypy_strict(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_mypy_strict_passes_on_the_package() -> None:
    pytest.importorskip("mypy")
    result = mypy_strict(PACKAGE)
    assert result.returncode == 0, result.stdout + result.stderr


# Programs a user writes, each of which must pass mypy --strict as written.
USER_PROGRAMS = {
    "sync": (
        "import copal\n"
        "from copal import Persistent, PersistentList\n"
        "class Account(Persistent):\n"
        "    def __init__(self, owner: str) -> None:\n"
        "        self.owner = owner\n"
        "db = copal.open('x')\n"
        "with db.transaction() as tx:\n"
        "    tx.root['a'] = PersistentList([Account('ann')])\n"
        "    found: Account | None = tx.query(Account).where(owner='ann').first()\n"
        "    n: int = tx.query(Account).count()\n"
        "stats: dict[str, int] = db.stats()\n"
    ),
    "async": """
from typing import Any, assert_type

import copal


class Account(copal.Persistent):
    def __init__(self, owner: str) -> None:
        self.owner = owner


async def work(tx: copal.Transaction) -> str:
    query = tx.query(Account).where(owner="ann")
    assert_type(await query.afirst(), Account | None)
    assert_type(await query.aone(), Account)
    assert_type(await query.aall(), list[Account])
    assert_type(await query.acount(), int)
    assert_type(await query.aexists(), bool)
    async for account in query.order_by("owner"):
        assert_type(account, Account)
    assert_type(await tx.aget(1), Any)
    assert_type(await tx.aload_closure([tx.root], depth=1), int)
    return "done"


async def main(db: copal.Database) -> None:
    async with db.transaction(readonly=True) as tx:
        assert_type(tx, copal.Transaction)
        await tx.aabort()
    async with db.transaction() as tx:
        assert_type(await tx.acommit(), int | None)
    assert_type(await db.arun(work, retries=2), str)
    await db.aclose()
""",
}


@pytest.mark.parametrize("name", sorted(USER_PROGRAMS))
def test_user_code_type_checks_against_the_api(name: str, tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    program = tmp_path / "app.py"
    program.write_text(USER_PROGRAMS[name])
    result = mypy_strict(program)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("directory", sorted(EXAMPLE_DIRECTORIES))
def test_example_passes_mypy_strict(directory: str) -> None:
    pytest.importorskip("mypy")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--config-file", str(ROOT / "pyproject.toml"),
         *EXAMPLE_DIRECTORIES[directory], "."],
        cwd=ROOT / "examples" / directory,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
