"""The garbage-collection benchmark: ``copal bench --suite gc``, copal's ``db.gc()`` against
ZODB's ``db.pack()`` (FileStorage, garbage collection of unreachable objects on: ``pack_gc``).

A database of ``--gc-objects`` nodes (default 1,000,000), of which ``--gc-unreachable`` (default
100,000, evenly spread among the others) are no longer reachable from the root: each node has
four scalar fields and one reference; the live ones sit in lists of 10,000 under
``root["live"]``, the others were stored the same way under ``root["garbage"]`` and then
unlinked, their chain closed into a cycle (:mod:`copal.bench.gc_worker` has the data, the
adapters and the workers). For each system, a worker process builds the database once
(untimed); then, per round (``--reps``), a fresh worker process opens a copy of it, starts a
writer that commits one change of one live node per transaction as fast as it can, lets it run
for :data:`BASELINE_S` s, times the collection (copal ``db.gc(batch=--gc-batch)``, ZODB
``db.pack()``) while the writer goes on, then stops the writer and checks:

- the collection removed exactly the unreachable nodes, their lists and the list that held them,
  and found exactly the objects built (copal: by its report, including the count by type; ZODB:
  by ``len(storage)`` before and after);
- every live node still loads, in order, each referring to the live node before it;
- every commit the writer counted landed: the writes counted in the nodes add up to its commits,
  and each node holds the last value written to it.

copal's writer is another process; ZODB's FileStorage opens in one process only, so its writer is
a thread of the packing process (its own connection and transaction manager), which shares the
interpreter's lock with the pack. The figures: the collection's seconds and objects examined per
second; the writer's commits per second during the collection against the baseline second before
it, and the longest it went without a commit during the collection; the files' size before and
after (copal's file keeps its size, its freed pages are reused: the worker also reports the size
after ``copal.compact``, run after the database is closed); the ratios copal / ZODB. A cell is
the median over the rounds; every round's figures are in the JSON. The targets are copal's:
the collection finishes within :data:`GC_TARGET_S` s, removes exactly the unreachable objects,
keeps every reachable one and every write, and the writer never waits more than
:data:`WAIT_TARGET_S` s for a commit while it runs. A failed check fails the run; a missed time
target does not.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, TextIO

from copal.bench.async_suite import positive
from copal.bench.environment import dir_size, package_versions, run_metadata, usable_systems
from copal.bench.gc_worker import BUCKET, BUILD_BATCH, Layout
from copal.bench.gc_worker import GC_SYSTEMS as GC_SYSTEMS  # the runner's --systems
from copal.bench.tables import format_bytes, format_duration, problem_lines, target_rows
from copal.bench.workers import COPAL_DIR, last_line, run_worker, worker_env

DEFAULT_OBJECTS = 1_000_000
DEFAULT_UNREACHABLE = 100_000
#: copal's removals per commit (``db.gc(batch=...)``'s default).
DEFAULT_BATCH = 10_000
#: Seconds the writer commits before the collection starts: its baseline rate.
BASELINE_S = 1.0
#: The longest acceptable collection by copal, in seconds.
GC_TARGET_S = 10.0
#: The longest acceptable wait of the writer for a commit while copal collects, in seconds.
WAIT_TARGET_S = 1.0
#: Seconds one worker (a build, or a round of one system) may take.
DEFAULT_TIMEOUT = 1800.0
#: The ratio column: this system's figure over that one's.
RATIO = ("copal", "zodb")
#: The module of the workers' entry point.
WORKER = "copal.bench.gc_worker"
#: The checks of each round, and their rows in the table.
CHECKS = (
    ("removed_exactly", "removed exactly the unreachable objects"),
    ("reachable_load", "every reachable object loads"),
    ("writes_landed", "every writer commit landed"),
)


# --------------------------------------------------------------------------- the run


def run_all(
    systems: list[str], layout: Layout, batch: int, rounds: int, work: Path, keep: bool,
    timeout: float, progress: Any,
) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Builds each system's database, then collects a copy of it per round, the systems' order
    rotating from one round to the next; the build reports and each system's round reports."""
    env = worker_env()
    base = {"objects": layout.objects, "unreachable": layout.unreachable, "copal_dir": COPAL_DIR}
    builds: dict[str, dict[str, Any]] = {}
    reports: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for system in systems:
        label = f"gc build {layout.objects:,} objects {system}"
        progress.show(label)
        built = work / "built" / system
        if built.exists():
            shutil.rmtree(built)
        built.parent.mkdir(parents=True, exist_ok=True)
        spec = {**base, "system": system, "role": "build", "dir": str(built)}
        builds[system] = run_worker(WORKER, spec, timeout, env)
        if builds[system].get("ok"):
            builds[system]["size"] = dir_size(built, skip=_scratch)
        else:
            progress.message(f"copal bench: {label} failed: {last_line(str(builds[system].get('error')))}")
        progress.step()
    for round_no in range(rounds):
        shift = round_no % len(systems)
        for system in systems[shift:] + systems[:shift]:
            label = f"gc round {round_no + 1}/{rounds} {system}"
            progress.show(label)
            report: dict[str, Any]
            if not builds[system].get("ok"):
                report = {"ok": False, "error": "skipped: the build failed"}
            else:
                copy = work / f"round{round_no + 1}" / system
                if copy.exists():
                    shutil.rmtree(copy)
                shutil.copytree(work / "built" / system, copy, ignore=lambda _, names: list(filter(_scratch, names)))
                spec = {**base, "system": system, "role": "collect", "dir": str(copy), "batch": batch,
                        "baseline_s": BASELINE_S}
                report = run_worker(WORKER, spec, timeout, env)
                if not keep:
                    shutil.rmtree(copy, ignore_errors=True)
                if not report.get("ok"):
                    progress.message(f"copal bench: {label} failed: {last_line(str(report.get('error')))}")
            reports[system].append(report)
            progress.step()
    return builds, reports


def _scratch(name: str) -> bool:
    """Files a copy of a closed database leaves out: locks and temporary files (copal's LMDB
    lock file and ZODB's are made again on open)."""
    return name == "lock.mdb" or name.endswith((".lock", ".tmp"))


# --------------------------------------------------------------------------- summary


def _median(values: list[float | None]) -> float | None:
    ok = [v for v in values if v is not None]
    return float(statistics.median(ok)) if ok else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b is not None and b > 0 else None


def _system_summary(build: dict[str, Any], rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One system over the rounds: the medians of the figures, the checks of every round."""
    ok = [r for r in rounds if r.get("ok")]
    first = ok[0] if ok else {}

    def writer(window: str, key: str) -> list[float | None]:
        return [r["writer"][window][key] for r in ok]

    before, during = _median(writer("before", "per_s")), _median(writer("during", "per_s"))
    found = first.get("found", {})
    return {
        "gc_s": _median([r["gc_s"] for r in ok]),
        "objects_per_s": _median([r["objects_per_s"] for r in ok]),
        "objects": found.get("objects"),
        "reachable": found.get("reachable"),
        "removed": found.get("removed"),
        "writer_before_per_s": before,
        "writer_during_per_s": during,
        "writer_during_over_before": _ratio(during, before),
        "writer_longest_wait_s": max((w for w in writer("during", "longest_wait_s") if w is not None), default=None),
        "writer_commits": [r["writer"]["commits"] for r in ok],
        "writer_conflicts": [r["writer"]["conflicts"] for r in ok],
        "size_before": first.get("size_before"),
        "size_after": first.get("size_after"),
        "size_compacted": first.get("size_compacted"),
        "checks": {c: bool(ok) and all(r["checks"][c] for r in ok) for c, _ in CHECKS},
        "build_s": build.get("build_s"),
        "errors": [f"round {i + 1}: {r.get('error')}" for i, r in enumerate(rounds) if not r.get("ok")]
        + ([] if build.get("ok") else [f"build: {build.get('error')}"]),
        "rounds": rounds,
    }


def summarize(
    builds: dict[str, dict[str, Any]], reports: dict[str, list[dict[str, Any]]], systems: list[str],
    layout: Layout,
) -> dict[str, Any]:
    """The JSON-ready results: per system the medians, checks and rounds; the ratios copal /
    ZODB; the targets."""
    results = {s: _system_summary(builds[s], reports[s]) for s in systems}
    ratio_of = RATIO if all(s in systems for s in RATIO) else None
    ratios: dict[str, float | None] = {}
    if ratio_of is not None:
        a, b = (results[s] for s in ratio_of)
        for key in ("gc_s", "objects_per_s", "writer_during_per_s", "writer_before_per_s", "size_after"):
            ratios[key] = _ratio(a[key], b[key])
    return {
        "objects": layout.objects,
        "unreachable": layout.unreachable,
        "expected_objects": layout.expected_objects,
        "expected_removed": layout.expected_removed,
        "ratio_of": list(ratio_of) if ratio_of is not None else None,
        "ratios": ratios,
        "results": results,
        "targets": evaluate_targets(results["copal"], layout) if "copal" in systems else [],
    }


def evaluate_targets(copal: dict[str, Any], layout: Layout) -> list[dict[str, Any]]:
    """copal's targets, each with ``met`` (None where the run they need is missing)."""
    ran = copal["gc_s"] is not None
    checks = copal["checks"]
    wait = copal["writer_longest_wait_s"]
    return [
        {"target": f"copal gc of {layout.objects:,} objects ({layout.unreachable:,} unreachable) finishes "
                   f"within {GC_TARGET_S:g} s while a writer commits",
         "result": "-" if not ran else format_duration(copal["gc_s"]),
         "met": None if not ran else copal["gc_s"] <= GC_TARGET_S},
        {"target": f"copal gc removes exactly the unreachable objects ({layout.expected_removed:,})",
         "result": "-" if not ran else f"{copal['removed']:,}",
         "met": None if not ran else checks["removed_exactly"]},
        {"target": "no reachable object removed, no write lost",
         "result": "-" if not ran else ", ".join(
             f"{title}: {'yes' if checks[c] else 'no'}" for c, title in CHECKS[1:]),
         "met": None if not ran else checks["reachable_load"] and checks["writes_landed"]},
        {"target": f"the writer commits throughout: never waits more than {WAIT_TARGET_S:g} s for a "
                   "commit during the collection",
         "result": "-" if wait is None else f"longest wait {format_duration(wait)}",
         "met": None if wait is None else wait <= WAIT_TARGET_S},
    ]


# --------------------------------------------------------------------------- table


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}/s"


def _seconds(v: float | None) -> str:
    return "-" if v is None else format_duration(v)


def _size(v: int | None) -> str:
    return "-" if v is None else format_bytes(v)


def format_table(summary: dict[str, Any], systems: list[str], labels: dict[str, str]) -> str:
    """The Markdown table: a row per figure, a column per system, the ratio copal / ZODB; then
    the targets."""
    results, ratios = summary["results"], summary["ratios"]
    ratio_of = summary["ratio_of"]

    rows: list[tuple[str, Callable[[dict[str, Any]], str], str | None]] = [
        ("collection (copal db.gc, ZODB db.pack)", lambda r: _seconds(r["gc_s"]), "gc_s"),
        ("objects examined per second", lambda r: _rate(r["objects_per_s"]), "objects_per_s"),
        ("objects before / removed",
         lambda r: "-" if r["removed"] is None else f"{r['objects']:,} / {r['removed']:,}", None),
        (f"writer commits/s, {BASELINE_S:g} s before", lambda r: _rate(r["writer_before_per_s"]), "writer_before_per_s"),
        ("writer commits/s during the collection", lambda r: _rate(r["writer_during_per_s"]), "writer_during_per_s"),
        ("writer rate during / before",
         lambda r: "-" if r["writer_during_over_before"] is None else f"{r['writer_during_over_before']:.0%}", None),
        ("writer's longest wait during the collection", lambda r: _seconds(r["writer_longest_wait_s"]), None),
        ("writer commits / conflicts (per round)", lambda r: " ".join(
            f"{c:,}/{k}" for c, k in zip(r["writer_commits"], r["writer_conflicts"])) or "-", None),
        ("disk size before", lambda r: _size(r["size_before"]), None),
        ("disk size after", lambda r: _size(r["size_after"]), "size_after"),
        ("disk size after copal.compact (offline)", lambda r: _size(r["size_compacted"]), None),
        *[(f"check: {title}", (lambda r, c=c: "yes" if r["checks"][c] else "**no**"), None) for c, title in CHECKS],
        ("build (untimed setup)", lambda r: _seconds(r["build_s"]), None),
    ]
    head = ["figure", *(labels[s] for s in systems)]
    if ratio_of:
        head.append(f"{labels[ratio_of[0]]} / {labels[ratio_of[1]]}")
    lines = [
        f"## Garbage collection: {summary['objects']:,} objects, {summary['unreachable']:,} unreachable, "
        "a writer committing throughout",
        "",
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * (len(head) - 1),
    ]
    for title, cell, ratio_key in rows:
        cells = [cell(results[s]) for s in systems]
        if ratio_of:
            ratio = ratios.get(ratio_key) if ratio_key else None
            cells.append("" if ratio is None else f"{ratio:.2f}")
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    if summary["targets"]:
        lines += target_rows(summary["targets"])
    return "\n".join(lines)


# --------------------------------------------------------------------------- entry point


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the garbage-collection suite (``copal bench --suite gc``)."""
    group = parser.add_argument_group(
        "garbage-collection suite (--suite gc)",
        "also takes --reps (rounds: a collection of a fresh copy per system each), --systems "
        "(copal, zodb), --json, --out, --keep and --timeout",
    )
    group.add_argument(
        "--gc-objects", type=positive, metavar="N",
        help=f"nodes in the database, reachable or not (default {DEFAULT_OBJECTS:,})",
    )
    group.add_argument(
        "--gc-unreachable", type=positive, metavar="N",
        help=f"of those, nodes made unreachable before the collection (default {DEFAULT_UNREACHABLE:,})",
    )
    group.add_argument(
        "--gc-batch", type=positive, metavar="N",
        help=f"copal's removals per commit, db.gc(batch=N) (default {DEFAULT_BATCH:,})",
    )


def given(args: argparse.Namespace) -> list[str]:
    """The options of this suite given on the command line (the runner refuses them with
    another suite)."""
    return [f"--gc-{name}" for name in ("objects", "unreachable", "batch") if getattr(args, f"gc_{name}") is not None]


def metadata(systems: list[str], skipped: dict[str, str], layout: Layout, batch: int, rounds: int) -> dict[str, Any]:
    return {
        **run_metadata("gc", package_versions(GC_SYSTEMS[name].versions for name in systems)),
        "objects": layout.objects,
        "unreachable": layout.unreachable,
        "batch": batch,
        "rounds": rounds,
        "baseline_s": BASELINE_S,
        "bucket": BUCKET,
        "build_batch": BUILD_BATCH,
        "skipped_systems": skipped,
        "method": (
            "a worker process per system builds the database once (nodes in lists of "
            f"{BUCKET:,} under root['live']; the unreachable ones stored the same way under "
            "root['garbage'], chained into a cycle, then unlinked; commits of "
            f"{BUILD_BATCH:,} nodes); per round a fresh worker opens a copy, starts a writer (copal: "
            "another process; ZODB FileStorage: a thread, one process only) committing one "
            f"change of one random live node per transaction, waits {BASELINE_S:g} s (baseline), "
            "times the collection (copal db.gc(batch), ZODB db.pack()), stops the writer, walks "
            "every live node and checks the removed count, the order and references of the live "
            "nodes, and that every write landed; cells are medians over the rounds; ratio = "
            "copal / ZODB"
        ),
    }


def run(
    args: argparse.Namespace, requested: list[str], report: TextIO, progress_factory: Callable[[int], Any],
) -> tuple[int, dict[str, Any] | None]:
    """Run the suite for ``copal bench``; the exit status and the JSON document."""
    objects = DEFAULT_OBJECTS if args.gc_objects is None else args.gc_objects
    unreachable = DEFAULT_UNREACHABLE if args.gc_unreachable is None else args.gc_unreachable
    batch = DEFAULT_BATCH if args.gc_batch is None else args.gc_batch
    if unreachable >= objects:
        print(f"copal bench: --gc-unreachable ({unreachable:,}) must be less than --gc-objects "
              f"({objects:,})", file=sys.stderr)
        return 2, None
    layout = Layout(objects, unreachable)
    systems, skipped = usable_systems(requested, lambda name: GC_SYSTEMS[name].unavailable(), "the gc suite")
    if not systems:
        return 1, None
    labels = {s: GC_SYSTEMS[s].label for s in systems}
    out = Path(args.out)
    work = out / "work" / "gc"
    timeout = DEFAULT_TIMEOUT if args.timeout is None else args.timeout
    progress = progress_factory(len(systems) * (1 + args.reps))
    started = time.monotonic()
    builds, reports = run_all(systems, layout, batch, args.reps, work, args.keep, timeout, progress)
    progress.clear()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    summary = summarize(builds, reports, systems, layout)

    print(
        f"Cells: medians over {args.reps} round(s), each a fresh copy of the database collected in a "
        f"fresh process while a writer commits one change per transaction (copal: another process; "
        f"ZODB: a thread of the packing process); writer rates over the collection and over the "
        f"{BASELINE_S:g} s before it; copal / ZODB: ratio of the cells (below 1 for times, copal is "
        "faster).",
        file=report,
    )
    print("", file=report)
    print(format_table(summary, systems, labels), file=report)
    failures: dict[str, str] = {}
    for system, r in summary["results"].items():
        own = [e for e in r["errors"] if not e.partition(": ")[2].startswith("skipped:")]
        if own:
            failures[system] = own[0]
    for line in problem_lines(failures, skipped):
        print(line, file=report)
    report.flush()
    print(f"(suite took {time.monotonic() - started:.0f} s)", file=sys.stderr)

    failed = bool(failures) or any(not all(r["checks"].values()) for r in summary["results"].values())
    document = {
        "meta": metadata(systems, skipped, layout, batch, args.reps),
        "systems": systems,
        "labels": labels,
        "results": summary,
    }
    return (1 if failed else 0), document
