"""Smoke test of the transaction-cost benchmark (copal bench --suite transactions) at a tiny size.

One run of ``copal bench`` in this process (its workers are processes of their own, a system
and cache size each), with copal and, when it is installed, ZODB; the tests read the JSON it
prints: every operation ran at both cache sizes, the cache held what was loaded into it, and
copal's empty and read-only transactions encoded no object whatever the cache held.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Any

import pytest

from copal.bench import runner
from copal.bench.transaction_systems import EXTRA, LOOKUP_POOL, OPERATIONS, lookup_targets, update_targets
from copal.bench.transactions import parse_cached, parse_tx_reps

CACHED = [0, 2000]
TX_REPS = 20
HAVE_ZODB = all(importlib.util.find_spec(m) is not None for m in ("ZODB", "BTrees"))
SYSTEMS = ["copal", "zodb"] if HAVE_ZODB else ["copal"]


@dataclass(frozen=True)
class Run:
    """What one ``copal bench --suite transactions --json -`` printed."""

    doc: dict[str, Any]
    report: str  # the table, on stderr when the JSON goes to stdout

    def cell(self, op_id: str, system: str, cached: int) -> dict[str, Any]:
        op = next(op for op in self.doc["results"]["operations"] if op["id"] == op_id)
        cell: dict[str, Any] = op["results"][system]["by_cached"][str(cached)]
        return cell


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    out = tmp_path_factory.mktemp("transactions") / "out"
    argv = [
        "--suite", "transactions", "--cached", ",".join(map(str, CACHED)), "--tx-reps", str(TX_REPS),
        "--reps", "1", "--systems", ",".join(SYSTEMS), "--json", "-", "--out", str(out), "--no-chart",
    ]
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        status = runner.main(argv)
    assert status == 0, stderr.getvalue()
    return Run(json.loads(stdout.getvalue()), stderr.getvalue())


def test_the_document_describes_the_run(run: Run) -> None:
    doc = run.doc
    assert doc["meta"]["suite"] == "transactions"
    assert doc["meta"]["cached"] == CACHED
    assert doc["systems"] == SYSTEMS, doc["meta"]["skipped_systems"]
    result = doc["results"]
    assert result["cached"] == CACHED
    assert result["objects"] == {str(c): c + EXTRA for c in CACHED}
    assert result["ratio_of"] == (["copal", "zodb"] if HAVE_ZODB else None)
    assert [op["id"] for op in result["operations"]] == [op.id for op in OPERATIONS]
    assert "## Transaction cost against cache size" in run.report


@pytest.mark.parametrize("op_id", [op.id for op in OPERATIONS])
def test_every_operation_ran_in_every_system_at_every_cache_size(run: Run, op_id: str) -> None:
    [op] = [op for op in run.doc["results"]["operations"] if op["id"] == op_id]
    for system in SYSTEMS:
        assert not op["results"][system]["errors"], (system, op["results"][system]["errors"])
        assert isinstance(op["results"][system]["growth"], float), system
        for cached in CACHED:
            cell = run.cell(op_id, system, cached)
            assert 0 < cell["min_s"] <= cell["median_s"] <= cell["p90_s"], (system, cached)
            assert cell["runs"] == TX_REPS
    if HAVE_ZODB:
        assert all(isinstance(op["ratio"][str(c)], float) for c in CACHED)


@pytest.mark.parametrize("cached", CACHED)
def test_copal_encodes_only_what_a_transaction_changed(run: Run, cached: int) -> None:
    # What the suite is for: copal's empty and read-only transactions encode nothing, and a
    # one-change commit encodes the changed object only, whatever the cache holds.
    for op_id, encoded in (("empty", 0), ("readonly", 0), ("lookup", 0), ("update", 1)):
        counts = run.cell(op_id, "copal", cached)["per_transaction"]
        assert counts["objects_encoded"] == {"mean": encoded, "max": encoded}, (op_id, counts)
        assert counts["commits"]["max"] == encoded, op_id
    # Each lookup read an object not loaded yet.
    assert run.cell("lookup", "copal", cached)["per_transaction"]["records_read"]["mean"] >= 1


def test_the_caches_held_what_was_loaded_and_the_encoding_targets_are_met(run: Run) -> None:
    result = run.doc["results"]
    for system in SYSTEMS:
        for cached in CACHED:
            [setup] = result["setup"][system][str(cached)]
            assert setup["held"] == cached, (system, cached)
    encoded = [t for t in result["targets"] if "objects encoded" in t["target"]]
    assert len(encoded) == len(OPERATIONS) - 1  # every operation but the control
    assert all(t["met"] for t in encoded), encoded


def test_lookups_read_distinct_unloaded_objects_and_updates_others() -> None:
    for cached in CACHED:
        lookups = lookup_targets(cached, LOOKUP_POOL)
        assert len(set(lookups)) == LOOKUP_POOL
        assert all(cached <= i < cached + LOOKUP_POOL for i in lookups)
        updates = update_targets(cached, 200)
        assert all(cached + LOOKUP_POOL <= i < cached + EXTRA for i, _ in updates)
    # The same work at every cache size, relative to it.
    assert [i - 2000 for i in lookup_targets(2000, 50)] == lookup_targets(0, 50)


def test_options_take_counts() -> None:
    assert parse_cached("100_000, 0,0") == [0, 100_000]
    for bad in ("-1", "x", ","):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_cached(bad)
    assert parse_tx_reps(str(LOOKUP_POOL)) == LOOKUP_POOL
    for bad in ("0", str(LOOKUP_POOL + 1), "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_tx_reps(bad)
