"""Smoke test of the async web-shop benchmark (copal bench --suite async) at a tiny size.

One run of ``copal bench`` in this process (each system's worker is a process of its own), with
copal's asyncio and thread-pool shops and, when aiosqlite and SQLAlchemy's asyncio extra are
installed (the bench extra), SQLAlchemy's; the tests read the JSON it prints: every request was
answered as it should be (the workers check it, and that the units sold are those bought), the
ratios and the targets are there. The PostgreSQL systems need ``--store``: without it they are
skipped, with the reason.
"""

from __future__ import annotations

import importlib.util
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import pytest

from copal.bench import runner
from copal.bench.async_suite import COMPARISONS, PHASES, database_url, default_systems

pytest.importorskip("fastapi", reason="FastAPI is not installed (pip install 'copaldb[test]')")
pytest.importorskip("httpx", reason="httpx is not installed (pip install 'copaldb[test]')")

HAVE_SQLALCHEMY = all(importlib.util.find_spec(m) is not None for m in ("sqlalchemy", "greenlet", "aiosqlite"))
SYSTEMS = ["copal-async", "copal-sync"] + (["sqlalchemy-aiosqlite"] if HAVE_SQLALCHEMY else [])
READS, BUYS = 300, 100


def bench(tmp_path: Any, *options: str) -> tuple[int, dict[str, Any], str]:
    argv = ["--suite", "async", "--reps", "1", "--async-reads", str(READS), "--async-buys", str(BUYS),
            "--async-clients", "16", "--async-products", "10", "--json", "-", "--out", str(tmp_path / "out"),
            *options]
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        status = runner.main(argv)
    return status, json.loads(stdout.getvalue()), stderr.getvalue()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    status, doc, report = bench(tmp_path_factory.mktemp("async"), "--systems", ",".join(SYSTEMS))
    assert status == 0, report
    return doc, report


def test_every_system_served_every_request(run: tuple[dict[str, Any], str]) -> None:
    doc, report = run
    assert doc["meta"]["suite"] == "async"
    assert doc["systems"] == SYSTEMS, doc["meta"]["skipped_systems"]
    for system in SYSTEMS:
        result = doc["results"][system]
        assert not result["errors"], result["errors"]
        for phase, _ in PHASES:
            assert result[phase]["rps"] > 0, (system, phase)
            assert result[phase]["lag_s"] >= 0, (system, phase)
            assert 0 < result[phase]["longest_step_s"], (system, phase)
        # copal's counters: the purchases retried or not, but were counted.
        assert isinstance(result["retries"], int) == system.startswith("copal"), system
    assert "## Async shop: 16 concurrent clients" in report


def test_the_ratios_and_targets_compare_copal_async(run: tuple[dict[str, Any], str]) -> None:
    doc, report = run
    compared = {(r["system"], r["other"]) for r in doc["ratios"]}
    expected = {(a, b) for a, b, _ in COMPARISONS if a in SYSTEMS and b in SYSTEMS}
    assert compared == expected
    assert all(isinstance(r["ratio"], float) for r in doc["ratios"])
    targets = [t["target"] for t in doc["targets"]]
    assert len(targets) == 2 * len(expected) + 1  # both endpoints per comparison, and the lag
    assert any("event-loop lag" in t for t in targets)
    assert all(t["met"] is not None for t in doc["targets"])


def test_postgresql_systems_need_a_postgresql_store(tmp_path: Any) -> None:
    assert default_systems(None) == ["copal-async", "copal-sync", "sqlalchemy-aiosqlite"]
    assert "copal-async-pg" in default_systems("postgresql://pg@db/{name}")
    status, doc, report = bench(tmp_path, "--systems", "copal-async,copal-async-pg", "--async-reads", "20",
                                "--async-buys", "10")
    assert status == 0, report
    assert doc["systems"] == ["copal-async"]
    assert "--store postgresql://" in doc["meta"]["skipped_systems"]["copal-async-pg"]
    assert database_url("postgresql://pg@db/{name}", "sqlalchemy-asyncpg") == "postgresql://pg@db/copal_bench_async_sqlalchemy_asyncpg"
