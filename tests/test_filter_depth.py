"""Query filters nest as deeply as stored values may (the decoders' limit, 256 levels): a
deeper filter is refused with ValueError as it is built, before any walk of it could overflow
the stack. Chains of one operator stay one level, however long."""

from __future__ import annotations

import functools
import operator
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import copal
from copal import field
from helpers.models import Item

#: Deep enough to overflow the stack of a recursive walk.
DEEP = 15_000


def _run(tmp_path: Path, build: str) -> subprocess.CompletedProcess[str]:
    """Builds a filter by `build` (Python statements that leave it in `e`) and queries with it,
    in a child process, since an overflowing walk kills the process."""
    script = textwrap.dedent(
        """
        import sys
        import copal
        from copal import field
        from helpers.models import Item
        db = copal.open(sys.argv[1])
        with db.transaction() as tx:
            tx.root["item"] = Item("a", 1)
        e = field("value") == 1
        try:
        {build}
            with db.transaction() as tx:
                print(tx.query(Item).where(e).count())
        except ValueError as error:
            print("ValueError:", error)
        """
    ).format(build=textwrap.indent(textwrap.dedent(build), " " * 4))
    tests_dir = str(Path(__file__).resolve().parent)
    return subprocess.run([sys.executable, "-c", script, str(tmp_path / "db")], capture_output=True, text=True,
                          timeout=300, cwd=tests_dir, env={"PYTHONPATH": tests_dir, "PATH": ""})


@pytest.mark.parametrize(
    "build",
    [
        f"for _ in range({DEEP}):\n    e = ~e\n",
        f"for n in range({DEEP}):\n    e = (e & (field('value') == n)) | (field('name') == 'x')\n",
    ],
    ids=["not", "and-or"],
)
def test_a_filter_nested_too_deeply_is_refused_as_it_is_built(tmp_path: Path, build: str) -> None:
    result = _run(tmp_path, build)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "ValueError: query filter nested deeper than 256 levels" in result.stdout, result.stdout + result.stderr[-2000:]


def test_filters_at_the_depth_limit_run(db: Any) -> None:
    with db.transaction() as tx:
        tx.root["item"] = Item("a", 1)
    e = field("value") == 1
    for _ in range(256):
        e = ~e
    with db.transaction() as tx:
        assert tx.query(Item).where(e).count() == 1
    with pytest.raises(ValueError, match="deeper than 256"):
        ~e


def test_long_chains_of_one_operator_are_one_level(db: Any) -> None:
    with db.transaction() as tx:
        tx.root["items"] = [Item(str(n), n) for n in range(3)]
    conditions = [field("value") != n for n in range(100, 100 + DEEP)]
    with db.transaction() as tx:
        assert tx.query(Item).where(functools.reduce(operator.and_, conditions)).count() == 3
        assert tx.query(Item).where(functools.reduce(operator.or_, conditions)).count() == 3
        query = tx.query(Item)
        for condition in conditions[:1000]:
            query = query.where(condition)
        assert query.count() == 3
