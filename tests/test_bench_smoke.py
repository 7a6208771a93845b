"""Smoke test of the white-paper benchmark suite (copal.bench) at a tiny scale.

Runs the real runner in a subprocess, as ``copal bench`` does, with every
operation in its own worker process, and checks the JSON it prints.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from copal.bench.whitepaper import WORKLOADS

REPO = Path(__file__).resolve().parents[1]
SCALE = 20
SYSTEMS = ["copal", "pickle"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    if importlib.util.find_spec("copal") is None:  # pragma: no cover - uninstalled checkout
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO / "python"), env.get("PYTHONPATH", "")) if p
        )
    return env


def test_whitepaper_suite_runs_every_workload(tmp_path: Path) -> None:
    cmd = [
        sys.executable, "-c",
        "import sys; from copal.bench.runner import main; sys.exit(main(sys.argv[1:]))",
        "--scale", str(SCALE), "--reps", "1", "--systems", ",".join(SYSTEMS),
        "--json", "-", "--out", str(tmp_path / "out"), "--no-chart",
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=_env(), cwd=tmp_path, check=False
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # with --json -, stdout holds the JSON only

    assert doc["systems"] == SYSTEMS, doc["meta"]["skipped_systems"]
    assert doc["baseline"] == "copal"
    [result] = doc["results"]
    assert result["scale"] == SCALE

    workloads = {w["id"]: w["results"] for w in result["workloads"]}
    assert list(workloads) == [w.id for w in WORKLOADS]
    for wid, per_system in workloads.items():
        for system in SYSTEMS:
            r = per_system[system]
            assert r["errors"] == [], (wid, system, r["errors"])
            assert all(isinstance(t, float) and t > 0 for t in r["times_s"]), (wid, system)
            assert isinstance(r["median_s"], float) and r["median_s"] > 0, (wid, system)
        assert isinstance(per_system["pickle"]["ratio"], float), wid

    metrics = {m["id"]: m["results"] for m in result["metrics"]}
    for system in SYSTEMS:
        assert metrics["size_after_W3a"][system]["median"] > 0
        assert metrics["size_after_W4"][system]["median"] > metrics["size_after_W3a"][system]["median"]
        assert metrics["rss_W3c"][system]["median"] > 0

    # Every SerTest carries a collection, its relations and 100 PSerTest: 103 objects.
    graph = SCALE * 103
    assert metrics["objects_W3b"]["pickle"]["median"] == graph
    assert metrics["objects_W3c"]["pickle"]["median"] == graph
    # copal loads lazily: the SerTest alone in W3b, the whole graph in W3c.
    assert metrics["objects_W3b"]["copal"]["median"] < graph
    assert metrics["objects_W3c"]["copal"]["median"] >= graph

    assert "## N = 20 SerTest" in proc.stderr  # the table went to stderr


def test_whitepaper_suite_runs_on_postgresql_against_relstorage(tmp_path: Path, pg_server: Any) -> None:
    """copal's PostgreSQL store and ZODB + RelStorage on the same server (issue 5's comparison)."""
    pytest.importorskip("relstorage")
    pytest.importorskip("psycopg2")
    systems = ["copal", "relstorage"]
    cmd = [
        sys.executable, "-c",
        "import sys; from copal.bench.runner import main; sys.exit(main(sys.argv[1:]))",
        "--scale", "5", "--reps", "1", "--systems", ",".join(systems), "--store", pg_server.url("{name}"),
        "--json", "-", "--out", str(tmp_path / "out"), "--no-chart",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(), cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["systems"] == systems, doc["meta"]["skipped_systems"]
    [result] = doc["results"]
    for workload in result["workloads"]:
        for system in systems:
            assert workload["results"][system]["errors"] == [], (workload["id"], system)
    metrics = {m["id"]: m["results"] for m in result["metrics"]}
    for system in systems:
        assert metrics["size_after_W4"][system]["median"] > metrics["size_after_W3a"][system]["median"] > 0


def test_relstorage_is_not_run_by_default_and_needs_a_postgresql_store() -> None:
    from copal.bench.systems import DEFAULT_SYSTEMS, SYSTEMS

    assert "relstorage" in SYSTEMS and "relstorage" not in DEFAULT_SYSTEMS
    if importlib.util.find_spec("relstorage") is not None:
        with pytest.raises(ValueError, match="--store postgresql://"):
            SYSTEMS["relstorage"](store=None)
