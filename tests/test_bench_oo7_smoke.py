"""Smoke test of the OO7 benchmark (copal bench --suite oo7) on the tiny configuration.

Runs the real runner in a subprocess, as ``copal bench`` does (a worker per system and
operation), with copal and ZODB, and checks the JSON it prints: every operation ran in both
systems, their counts agree with each other and with the generated data, and the ratios are
there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from copal.bench.oo7_data import CONFIGS, expected_counts, generate
from copal.bench.oo7_systems import OPERATIONS

REPO = Path(__file__).resolve().parents[1]
SYSTEMS = ["copal", "zodb"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    if importlib.util.find_spec("copal") is None:  # pragma: no cover - uninstalled checkout
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO / "python"), env.get("PYTHONPATH", "")) if p
        )
    return env


def test_oo7_suite_runs_every_operation_in_both_systems(tmp_path: Path) -> None:
    pytest.importorskip("ZODB")
    pytest.importorskip("BTrees")
    cmd = [
        sys.executable, "-c",
        "import sys; from copal.bench.runner import main; sys.exit(main(sys.argv[1:]))",
        "--suite", "oo7", "--oo7-config", "tiny", "--reps", "1", "--oo7-hot", "2",
        "--systems", ",".join(SYSTEMS), "--json", "-", "--out", str(tmp_path / "out"), "--no-chart",
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=180, env=_env(), cwd=tmp_path, check=False
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # with --json -, stdout holds the JSON only

    assert doc["meta"]["suite"] == "oo7"
    assert doc["meta"]["configs"] == ["tiny"]
    assert doc["systems"] == SYSTEMS, doc["meta"]["skipped_systems"]
    [result] = doc["results"]
    assert result["name"] == "tiny"
    assert result["ratio_of"] == ["copal", "zodb"]

    operations = {op["id"]: op for op in result["operations"]}
    assert list(operations) == [op.id for op in OPERATIONS]
    for op_id, op in operations.items():
        assert op["counts_agree"], (op_id, op["count_mismatches"])
        for system in SYSTEMS:
            r = op["results"][system]
            assert not r["errors"], (op_id, system, r["errors"])
            [counts] = r["counts"]
            assert counts and set(counts) == {op["expected_count"]}, (op_id, system, counts)
            if op_id != "Q1_after_T1":
                assert r["cold_median_s"] > 0, (op_id, system)
            if op_id != "build":
                assert r["hot_median_s"] > 0 and len(r["hot_s"][0]) == 2, (op_id, system)
        assert isinstance(op["ratio"]["cold"], float) or op_id == "Q1_after_T1", op_id
        assert isinstance(op["ratio"]["hot"], float) or op_id == "build", op_id
    size = result["size_after_build"]
    assert all(size["results"][s]["median_bytes"] > 0 for s in SYSTEMS)
    assert isinstance(size["ratio"], float)
    assert "## OO7 tiny:" in proc.stderr  # the table went to stderr


def test_data_is_deterministic_and_counts_follow_the_parameters() -> None:
    config = CONFIGS["tiny"]
    blueprint = generate(config)
    assert blueprint == generate(config)
    parts = [p for c in blueprint.composites for p in c.parts]
    assert [p.id for p in parts] == list(range(1, config.atomic_parts + 1))
    assert all(len(p.connections) == config.connections_per_atomic for p in parts)
    assert all(len(c.document_text) == config.document_size for c in blueprint.composites)
    expected = expected_counts(config, blueprint)
    assert expected["T1"] == config.base_assemblies * config.composites_per_assembly * config.atomic_per_composite
    assert expected["T2c"] == 4 * expected["T1"]
    assert 0 < expected["Q2"] < expected["Q3"] < config.atomic_parts
    small = CONFIGS["small"]
    assert (small.atomic_parts, small.base_assemblies, small.complex_assemblies) == (10_000, 729, 364)
    assert CONFIGS["small-9"].connections_per_atomic == 9
