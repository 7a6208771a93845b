"""Smoke test of the query benchmark (copal bench --suite queries) at a tiny scale.

Runs the real runner in a subprocess, as ``copal bench`` does (a load worker and a query
worker per system), with copal and SQLite only, and checks the JSON it prints.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from copal.bench.query_data import QUERIES, person_row

REPO = Path(__file__).resolve().parents[1]
PEOPLE = 2000
SYSTEMS = ["copal", "sqlite"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    if importlib.util.find_spec("copal") is None:  # pragma: no cover - uninstalled checkout
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO / "python"), env.get("PYTHONPATH", "")) if p
        )
    return env


def _bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable, "-c",
        "import sys; from copal.bench.runner import main; sys.exit(main(sys.argv[1:]))",
        *args, "--json", "-", "--out", str(tmp_path / "out"), "--no-chart",
    ]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=_env(), cwd=tmp_path, check=False
    )


def test_query_suite_runs_every_query(tmp_path: Path) -> None:
    proc = _bench(
        tmp_path, "--suite", "queries", "--people", str(PEOPLE), "--systems", ",".join(SYSTEMS),
        "--rounds", "2", "--lookups", "200",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # with --json -, stdout holds the JSON only

    assert doc["meta"]["suite"] == "queries"
    assert doc["systems"] == SYSTEMS, doc["meta"]["skipped_systems"]
    assert doc["baseline"] == "copal"
    result = doc["results"]
    assert result["people"] == PEOPLE

    queries = {q["id"]: q for q in result["queries"]}
    assert list(queries) == [q.id for q in QUERIES] == ["Q1", "Q2", "Q3", "Q4a", "Q4b", "Q5", "Q5o", "Q6a", "Q6b", "Q7", "Q8"]
    for qid, q in queries.items():
        assert q["results_agree"], (qid, {s: r.get("digest") for s, r in q["results"].items()})
        for system in SYSTEMS:
            r: dict[str, Any] = q["results"][system]
            assert "error" not in r, (qid, system, r.get("error"))
            for key in ("median_s", "mean_s", "min_s", "p90_s"):
                assert isinstance(r[key], float) and r[key] > 0, (qid, system, key)
            assert r["queries"] >= 2
            if q["scan"]:
                assert r["records_per_s"] > 0
        assert isinstance(q["results"]["sqlite"]["ratio"], float), qid

    # Every lookup finds its person; Q2 returns 10; Q3 finds the ~5 namesakes (at least one);
    # Q4a counts about 10/72 of the people.
    copal = {qid: q["results"]["copal"] for qid, q in queries.items()}
    assert copal["Q1"]["mean_result_size"] == 1
    assert copal["Q2"]["mean_result_size"] == 10
    assert 1 <= copal["Q3"]["mean_result_size"] <= 20
    assert PEOPLE * 0.08 < copal["Q4a"]["mean_result_size"] < PEOPLE * 0.2
    # Projections give a row per person, a count per city (at most 100), a sum of ages.
    assert copal["Q5"]["mean_result_size"] == copal["Q5o"]["mean_result_size"] == copal["Q7"]["mean_result_size"] == PEOPLE
    assert 1 < copal["Q6a"]["mean_result_size"] <= 100
    assert 18 * PEOPLE <= copal["Q6b"]["mean_result_size"] <= 89 * PEOPLE
    # The reverse join finds one address per person of five ages of 72.
    assert PEOPLE * 0.04 < copal["Q8"]["mean_result_size"] < PEOPLE * 0.11

    for system in SYSTEMS:
        load = result["load"][system]
        assert load["seconds"] > 0 and load["size_bytes"] > 0, (system, load)
    explain = result["details"]["copal"]["explain"]
    assert "index" in explain["Q1"] and "scan" in explain["Q3"] and "referenced by" in explain["Q8"]
    assert {t["target"] for t in result["targets"]}
    assert "## Queries, N = 2,000 people" in proc.stderr  # the table went to stderr


def test_data_is_deterministic_and_names_repeat() -> None:
    rows = [person_row(i, PEOPLE) for i in range(PEOPLE)]
    assert rows == [person_row(i, PEOPLE) for i in range(PEOPLE)]
    assert len({r[1] for r in rows}) == PEOPLE  # emails are unique
    names: dict[str, int] = {}
    for r in rows:
        names[r[0]] = names.get(r[0], 0) + 1
    assert 3 < PEOPLE / len(names) < 7  # about 5 people per name
    assert {r[2] for r in rows} == set(range(18, 90))


def test_all_suites_write_one_document(tmp_path: Path) -> None:
    proc = _bench(
        tmp_path, "--suite", "all", "--systems", "copal", "--scale", "5", "--reps", "1",
        "--people", "300", "--rounds", "1", "--lookups", "20",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["suite"] == "all"
    assert doc["whitepaper"]["meta"]["suite"] == "whitepaper"
    assert doc["queries"]["meta"]["suite"] == "queries"
    assert doc["whitepaper"]["systems"] == doc["queries"]["systems"] == ["copal"]
