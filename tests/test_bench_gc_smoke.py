"""Smoke test of the garbage-collection benchmark (copal bench --suite gc) at a tiny size.

Runs the real runner in a subprocess, as ``copal bench`` does (a build worker and a collecting
worker per system, copal's writer a process of its own), with copal and, when it is installed,
ZODB, and checks the JSON it prints: the collection removed exactly the unreachable objects,
every reachable one still loads, every commit of the writer landed, the ratios are there.
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

from copal.bench import runner
from copal.bench.gc_worker import BUCKET, Layout, window

REPO = Path(__file__).resolve().parents[1]
OBJECTS = 3_000
UNREACHABLE = 300
HAVE_ZODB = all(importlib.util.find_spec(m) is not None for m in ("ZODB", "persistent", "transaction"))
SYSTEMS = ["copal", "zodb"] if HAVE_ZODB else ["copal"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    if importlib.util.find_spec("copal") is None:  # pragma: no cover - uninstalled checkout
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "python"), env.get("PYTHONPATH", "")) if p)
    return env


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("gc")
    cmd = [
        sys.executable, "-c", "import sys; from copal.bench.runner import main; sys.exit(main(sys.argv[1:]))",
        "--suite", "gc", "--gc-objects", str(OBJECTS), "--gc-unreachable", str(UNREACHABLE),
        "--systems", ",".join(SYSTEMS), "--reps", "1", "--json", "-", "--out", str(tmp / "out"), "--no-chart",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_env(), cwd=tmp, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "## Garbage collection: 3,000 objects, 300 unreachable" in proc.stderr  # the table
    result: dict[str, Any] = json.loads(proc.stdout)  # with --json -, stdout holds the JSON only
    return result


def _system(doc: dict[str, Any], system: str) -> dict[str, Any]:
    result: dict[str, Any] = doc["results"]["results"][system]
    assert not result["errors"], result["errors"]
    return result


def test_the_document_describes_the_run(doc: dict[str, Any]) -> None:
    assert doc["meta"]["suite"] == "gc"
    assert doc["systems"] == SYSTEMS, doc["meta"]["skipped_systems"]
    result = doc["results"]
    layout = Layout(OBJECTS, UNREACHABLE)
    assert (result["objects"], result["unreachable"]) == (OBJECTS, UNREACHABLE)
    assert result["expected_removed"] == UNREACHABLE + 1 + 1  # the nodes, their one list, the outer list
    assert result["expected_objects"] == layout.expected_objects


@pytest.mark.parametrize("system", ["copal", "zodb"])
def test_the_collection_removed_exactly_the_unreachable_objects_and_kept_every_write(
    doc: dict[str, Any], system: str,
) -> None:
    if system == "zodb":
        pytest.importorskip("ZODB")
    result = _system(doc, system)
    expected = doc["results"]["expected_removed"]
    assert result["removed"] == expected
    assert result["objects"] == doc["results"]["expected_objects"]
    assert result["reachable"] == result["objects"] - expected
    assert result["checks"] == {"removed_exactly": True, "reachable_load": True, "writes_landed": True}
    [round_] = result["rounds"]
    walk = round_["walk"]
    assert walk["loaded"] == OBJECTS - UNREACHABLE and walk["error"] is None and walk["problems"] == []
    writer = round_["writer"]
    assert writer["commits"] > 0 and walk["writes"] == writer["commits"]
    assert writer["before"]["commits"] > 0  # it committed during the baseline second
    assert result["gc_s"] > 0 and result["writer_before_per_s"] > 0
    if system == "copal":
        found = round_["found"]
        assert found["removed_nodes"] == UNREACHABLE
        assert found["removed_by_type"]["copal.PersistentList"] == 2
        assert result["size_compacted"] > 0


def test_copal_meets_its_targets_and_the_ratios_are_there(doc: dict[str, Any]) -> None:
    targets = doc["results"]["targets"]
    assert len(targets) == 4 and all(t["met"] for t in targets), targets
    if HAVE_ZODB:
        ratios = doc["results"]["ratios"]
        assert doc["results"]["ratio_of"] == ["copal", "zodb"]
        for key in ("gc_s", "objects_per_s", "writer_before_per_s", "writer_during_per_s", "size_after"):
            assert isinstance(ratios[key], float), key


def test_layout_spreads_the_unreachable_nodes_and_counts_the_lists() -> None:
    layout = Layout(objects=3 * BUCKET + 5, unreachable=BUCKET + 1)
    garbage = [n for n in range(layout.objects) if layout.is_garbage(n)]
    assert len(garbage) == layout.unreachable and garbage[-1] == layout.objects - 1
    assert sum(1 for _ in layout.live_numbers()) == layout.live
    # The nodes, 3 lists of live ones (20,004) and 2 of unreachable ones, the two outer lists, the root.
    assert layout.expected_objects == layout.objects + 3 + 2 + 3
    assert layout.expected_removed == layout.unreachable + 2 + 1


def test_window_counts_the_commits_that_ended_in_it() -> None:
    times = [(0.0, 0.5), (0.5, 1.25), (1.5, 2.0), (2.0, 4.0)]
    assert window(times, 1.0, 3.0) == {"seconds": 2.0, "commits": 2, "per_s": 1.0, "longest_wait_s": 1.0}
    assert window(times, 2.5, 3.0)["commits"] == 0


def test_gc_options_apply_to_the_gc_suite_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        runner.main(["--suite", "transactions", "--gc-objects", "10"])
    assert exited.value.code == 2
    assert "--gc-objects applies to --suite gc" in capsys.readouterr().err
    assert runner.main(["--suite", "gc", "--gc-objects", "10", "--gc-unreachable", "10", "--no-chart"]) == 2
    assert "must be less than --gc-objects" in capsys.readouterr().err
