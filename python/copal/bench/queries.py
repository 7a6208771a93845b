"""The query benchmark: queries and secondary indexes on a million objects.

``copal bench --suite queries`` stores N ``Person`` objects (``name``, ``email``, ``age``,
``city``, a reference to their own ``Address``) in every system, then, in one warm process per
system (opened once), times many runs of each query:

====  =========================================================================
Q1    find one by a unique indexed field: ``email == e``
Q2    a range on an indexed int with order and limit: ``age >= a`` by age, first 10
Q3    an unindexed predicate over the whole extent: ``name == n`` (about 5 matches)
Q4a   a count with an indexed predicate: ``a <= age <= a + 9`` (about 14% of N)
Q4b   a count with an unindexed predicate: ``city == c`` (about 1% of N)
Q5    two fields of everyone, as values (``Query.values``); Q5o reads them from the objects
Q6a   a count per city (``group_by``); Q6b the sum of ages
Q7    three columns of everyone into an Arrow table
Q8    a join followed backwards: the zip codes of the addresses of people aged a..a+4
      (``copal.referenced_by``; SQL ``WHERE id IN (SELECT address_id ...)``)
====  =========================================================================

Systems (:mod:`copal.bench.query_systems`, their classes in :mod:`copal.bench.query_models`):

- ``copal``: ``tx.query(CopalPerson)...`` with ``copal.Index("email", unique=True)`` and
  ``copal.Index("age")``; one transaction per round.
- ``sqlite``: the standard library's sqlite3 on tables ``person`` / ``address`` with a unique
  index on ``email`` and an index on ``age``; rows become plain :class:`Person` objects.
- ``sqlalchemy``: SQLAlchemy ORM (declarative classes, one ``Session`` per round) on the
  ``sqlite`` system's file.
- ``zodb``: ZODB FileStorage; the extent is an ``IOBTree`` (id -> person), the indexes are
  ``OOBTree`` (email -> person, (age, id) -> person); the scans loop over the extent in Python.

Every system runs with its defaults (SQLite's page cache, ZODB's 400-object connection cache,
copal's 100,000-object cache) against a warm OS page cache. The parameters of the queries are
drawn from a fixed seed, different for every round (so an object cache does not answer a
lookup twice); a warm-up round (untimed) precedes the timed rounds, and its results are
compared across systems. Each query is timed on its own, including building the Query (or
statement) and the result objects and touching ``.name`` of each; a cell is the median over
the timed rounds' queries. Loading the data (one-time, N people + N addresses in commits of
50,000 people, indexes maintained as they go) is timed separately.

The data is deterministic (:func:`copal.bench.query_data.person_row`): a pure function of the
person's number and N. A worker process (:mod:`copal.bench.query_worker`) loads each store and
another runs each system's queries; this module runs the suite (options, loading the stores,
the workers) and :mod:`copal.bench.query_report` summarizes, checks and tabulates the results.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, TextIO

from copal.bench.environment import dir_size, package_versions, run_metadata, usable_systems
from copal.bench.query_data import DATA_VERSION, QUERIES, SEED
from copal.bench.query_report import draw_chart, format_table, summarize
from copal.bench.query_systems import QUERY_SYSTEMS as QUERY_SYSTEMS  # the runner's --systems
from copal.bench.workers import COPAL_DIR, last_line, run_worker, worker_env

DEFAULT_PEOPLE = 1_000_000
DEFAULT_ROUNDS = 5
DEFAULT_LOOKUPS = 10_000
#: Seconds one worker (a load, or a system's queries) may take.
DEFAULT_TIMEOUT = 7200.0

#: The module of the workers' entry point (:func:`copal.bench.query_worker.worker_main`).
WORKER = "copal.bench.query_worker"

_MARKER = "copal-bench-loaded.json"


def _ensure_store(
    system: str, store_dir: Path, n: int, reuse: bool, timeout: float, env: dict[str, str],
    copal_dir: str,
) -> dict[str, Any]:
    """Load the store (or reuse a complete one); the load report."""
    marker = store_dir / _MARKER
    if reuse and marker.exists():
        try:
            kept = json.loads(marker.read_text())
        except (OSError, ValueError):
            kept = {}
        if kept.get("people") == n and kept.get("data_version") == DATA_VERSION and kept.get("seconds"):
            return {"ok": True, "seconds": float(kept["seconds"]), "reused": True}
    if store_dir.exists():
        shutil.rmtree(store_dir)
    store_dir.mkdir(parents=True)
    spec = {"system": system, "action": "load", "dir": str(store_dir), "people": n,
            "copal_dir": copal_dir}
    report = run_worker(WORKER, spec, timeout, env)
    if report.get("ok"):
        marker.write_text(json.dumps(
            {"people": n, "data_version": DATA_VERSION, "seconds": report["seconds"], "loaded_by": system}
        ))
    return report


def run_suite(
    systems: list[str], n: int, rounds: int, lookups: int, out: Path, timeout: float,
    keep: bool, reuse: bool, options: dict[str, Any], progress: Any,
) -> dict[str, Any]:
    """Load every store and run every system's queries; raw per-system reports."""
    env = worker_env()
    work = out / "work" / "queries" / f"N{n}"
    loads: dict[str, dict[str, Any]] = {}
    per_system: dict[str, dict[str, Any]] = {}
    for name in systems:
        store = QUERY_SYSTEMS[name].store
        store_dir = work / store
        if store not in loads:
            progress.show(f"queries N={n}: loading {store} ({name})")
            loads[store] = _ensure_store(name, store_dir, n, reuse, timeout, env, COPAL_DIR)
            loads[store]["loaded_by"] = name
            if loads[store].get("ok"):
                loads[store]["size_bytes"] = dir_size(store_dir, skip=lambda name: name.endswith((".lock", ".tmp")))
            else:
                progress.message(f"copal bench: loading {store} failed: {last_line(loads[store]['error'])}")
        progress.step()
        load = loads[store]
        if not load.get("ok"):
            per_system[name] = {"ok": False, "error": f"skipped: loading {store} failed"}
            progress.step()
            continue
        progress.show(f"queries N={n}: {name} ({rounds} rounds)")
        spec = {"system": name, "action": "queries", "dir": str(store_dir), "people": n,
                "rounds": rounds, "lookups": lookups, "options": options, "copal_dir": COPAL_DIR}
        per_system[name] = run_worker(WORKER, spec, timeout, env)
        if not per_system[name].get("ok"):
            progress.message(f"copal bench: queries of {name} failed: {last_line(per_system[name]['error'])}")
        progress.step()
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return {"loads": loads, "systems": per_system}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the query suite (``copal bench --suite queries``)."""
    group = parser.add_argument_group("query suite (--suite queries)")
    group.add_argument(
        "--people", type=lambda v: int(v.replace("_", "")), metavar="N",
        help=f"number of Person objects (default {DEFAULT_PEOPLE:,})",
    )
    group.add_argument(
        "--rounds", type=int, default=DEFAULT_ROUNDS, metavar="N",
        help=f"timed rounds per query after a warm-up round (default {DEFAULT_ROUNDS})",
    )
    group.add_argument(
        "--lookups", type=int, default=DEFAULT_LOOKUPS, metavar="N",
        help=f"Q1 lookups per round; Q2 runs N/5, Q4a N/1000, the scans 1 (default {DEFAULT_LOOKUPS:,})",
    )
    group.add_argument(
        "--zodb-cache-size", type=int, metavar="OBJECTS",
        help="ZODB connection cache size for the queries (default: ZODB's own, 400)",
    )
    group.add_argument(
        "--reuse", action="store_true",
        help="reuse the stores a run with --keep left under DIR/work (same N), skipping the load",
    )


def metadata(args: argparse.Namespace, systems: list[str], skipped: dict[str, str], n: int) -> dict[str, Any]:
    return {
        **run_metadata("queries", package_versions(QUERY_SYSTEMS[name].versions for name in systems)),
        "people": n,
        "rounds": args.rounds,
        "lookups": args.lookups,
        "seed": SEED,
        "data_version": DATA_VERSION,
        "zodb_cache_size": args.zodb_cache_size,
        "skipped_systems": skipped,
        "method": (
            "one worker process per system loads the store (timed once; rows generated outside "
            "the clock; commits of 50,000 people), another opens it once and runs each query: "
            "a warm-up round whose results are compared across systems, then the timed rounds "
            "with fresh parameters (fixed seed); each query timed on its own, including building "
            "the result objects and touching .name; cell = median per query over the timed "
            "rounds; ratio = system median / baseline median"
        ),
    }


def run(
    args: argparse.Namespace, requested: list[str], report: TextIO, progress_factory: Callable[[int], Any],
) -> tuple[int, dict[str, Any] | None]:
    """Run the suite for ``copal bench``; the exit status and the JSON document."""
    n = DEFAULT_PEOPLE if args.people is None else args.people
    if n < 1:
        print("copal bench: --people must be at least 1", file=sys.stderr)
        return 2, None
    if args.rounds < 1 or args.lookups < 1:
        print("copal bench: --rounds and --lookups must be at least 1", file=sys.stderr)
        return 2, None
    systems, skipped = usable_systems(requested, lambda name: QUERY_SYSTEMS[name].unavailable(), "the queries")
    if not systems:
        return 1, None
    baseline = args.baseline if args.baseline in systems else ("copal" if "copal" in systems else systems[0])
    labels = {s: QUERY_SYSTEMS[s].label for s in systems}
    options = {"zodb_cache_size": args.zodb_cache_size}

    out = Path(args.out)
    progress = progress_factory(2 * len(systems))
    started = time.monotonic()
    timeout = DEFAULT_TIMEOUT if args.timeout is None else args.timeout
    raw = run_suite(systems, n, args.rounds, args.lookups, out, timeout, args.keep,
                    args.reuse, options, progress)
    progress.clear()
    summary = summarize(raw, systems, baseline, n)
    failed = any(not raw["systems"][s].get("ok") for s in systems)
    failed = failed or not all(q["results_agree"] for q in summary["queries"])

    print(
        f"Cells: median time per query in a warm process ({args.rounds} timed rounds after a "
        f"warm-up; Q1 {args.lookups:,} lookups per round); (xR) = ratio to {labels[baseline]}.",
        file=report,
    )
    print("", file=report)
    print(format_table(summary, systems, labels), file=report)
    for q in summary["queries"]:
        if not q["results_agree"]:
            digests = {s: r.get("digest") for s, r in q["results"].items()}
            print(f"warning: {q['id']} results differ between systems: {digests}", file=report)
    for name in systems:
        error = raw["systems"][name].get("error")
        if error:
            print(f"\n{name} failed:\n{error}", file=report)
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}", file=report)
    print(f"(suite took {time.monotonic() - started:.0f} s)", file=sys.stderr)
    report.flush()

    if not args.no_chart:
        chart = out / f"queries-N{n}.png"
        why_not = draw_chart(summary, systems, labels, chart)
        print(f"chart: {chart}" if why_not is None else f"copal bench: {why_not}", file=sys.stderr)

    document = {
        "meta": metadata(args, systems, skipped, n),
        "systems": systems,
        "labels": labels,
        "baseline": baseline,
        "queries": [{"id": q.id, "title": q.title, "indexed": q.indexed, "scan": q.scan} for q in QUERIES],
        "results": summary,
    }
    return (1 if failed else 0), document
