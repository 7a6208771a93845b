"""The OO7 benchmark: ``copal bench --suite oo7``, copal against ZODB.

OO7 (Carey, DeWitt, Naughton, "The OO7 Benchmark", SIGMOD 1993) measures what object databases
are for: traversing a graph of objects, updating it, looking objects up and changing the
structure. The database is a design library (:mod:`copal.bench.oo7_data`: configurations
``small`` and ``small-9``, a seeded generator that gives both systems the same data), the
classes are the paper's, written for each system (:mod:`copal.bench.oo7_models`), and the
operations are written as each system's users write them (:mod:`copal.bench.oo7_systems`):

===========  ================================================================================
build        create the database (one transaction) and close it
T1           traverse the assembly hierarchy; at each base assembly, a depth-first search of
             each composite part's atomic-part graph from its root part (count: parts visited)
T6           the same hierarchy, but only the root part of each composite part
T2a/b/c      T1 swapping ``x`` and ``y`` of each root part / every part / every part 4 times,
             then commit (count: updates)
Q1           10 atomic parts by id, through an index
Q2, Q3       atomic parts built in the last 1% / 10% of the date range, through an index
Q7           every atomic part
Q8           for each document, the atomic parts whose ``doc_id`` is its id (count: pairs)
insert       5 new composite parts (document, 20 atomic parts each) used by 2 random base
             assemblies each, then commit; ``delete`` removes them again
===========  ================================================================================

Method: in each repetition (``--reps``) every system builds its own database, then each
(system, operation) runs in a fresh worker process that opens the database, runs the
operation once (cold) and then ``--oo7-hot`` times more (hot), each in a new transaction, as a
long-running server would; the systems are interleaved operation by operation, their order
rotating from one repetition to the next. A cell is the median over the repetitions of the cold
time, or of each repetition's median hot time; the ratio copal / ZODB is the median of the
repetitions' paired ratios. The row "Q1 right after T1" runs T1 once (untimed) and then the hot
Q1s: it shows what a full cache costs a small lookup. Every count is compared with the other
system's and with what the generated data implies; a difference fails the run (exit status 1).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, TextIO

from copal.bench.charts import NO_MATPLOTLIB, finish, log_bars, pyplot
from copal.bench.environment import dir_size, package_versions, run_metadata, usable_systems
from copal.bench.oo7_data import (
    CONFIGS,
    DATA_VERSION,
    SEED,
    OO7Config,
    config_document,
    expected_counts,
    generate,
    parse_configs,
)
from copal.bench.oo7_systems import OO7_SYSTEMS as OO7_SYSTEMS  # the runner's --systems
from copal.bench.oo7_systems import OPERATIONS
from copal.bench.tables import format_bytes, format_duration
from copal.bench.workers import COPAL_DIR, last_line, run_worker, worker_env

DEFAULT_HOT = 5
#: Hot repetitions and repetitions with --quick.
QUICK_HOT, QUICK_REPS = 2, 1
#: Seconds one worker (one operation of one system, cold and hot) may take.
DEFAULT_TIMEOUT = 1800.0
#: The ratio columns: this system's time over that one's.
RATIO = ("copal", "zodb")

#: The module of the workers' entry point (:func:`copal.bench.oo7_systems.worker_main`).
WORKER = "copal.bench.oo7_systems"


# --------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the OO7 suite (``copal bench --suite oo7``)."""
    group = parser.add_argument_group(
        "OO7 suite (--suite oo7)",
        "also takes --reps, --systems (copal, zodb), --json, --out, --no-chart, --keep, "
        "--timeout and --zodb-cache-size",
    )
    group.add_argument(
        "--oo7-config", metavar="A,B,...",
        help="database configurations, of " + ", ".join(CONFIGS) + " (default: small)",
    )
    group.add_argument(
        "--oo7-hot", type=int, default=DEFAULT_HOT, metavar="N",
        help=f"hot repetitions of each operation after the cold one, in the same process "
        f"(default {DEFAULT_HOT})",
    )
    group.add_argument(
        "--quick", action="store_true",
        help=f"{QUICK_REPS} repetition and {QUICK_HOT} hot repetitions: checks that the suite "
        "runs, does not measure",
    )


def metadata(
    args: argparse.Namespace, configs: list[OO7Config], systems: list[str], skipped: dict[str, str],
    reps: int, hot: int,
) -> dict[str, Any]:
    return {
        **run_metadata("oo7", package_versions(OO7_SYSTEMS[name].versions for name in systems)),
        "configs": [c.name for c in configs],
        "reps": reps,
        "hot": hot,
        "seed": SEED,
        "data_version": DATA_VERSION,
        "zodb_cache_size": args.zodb_cache_size,
        "skipped_systems": skipped,
        "method": (
            "per repetition, each system builds its own database in a worker process (timed: "
            "open, create, commit, close; data generated outside the clock); then each "
            "operation runs in a fresh worker process per system: open (not timed), the "
            "operation once (cold), then N hot repetitions in the same process, each its own "
            "transaction; systems interleaved per operation, order rotated per repetition; "
            "cold cell = median over repetitions, hot cell = median over repetitions of the "
            "repetition's median; ratio = median of per-repetition paired ratios copal / ZODB; "
            "counts checked equal across systems and with the generated data"
        ),
    }


# --------------------------------------------------------------------------- the run


def run_config(
    config: OO7Config, systems: list[str], reps: int, hot: int, work: Path, timeout: float,
    keep: bool, options: dict[str, Any], progress: Any,
) -> dict[str, Any]:
    """Every operation of every system, ``reps`` times; the workers' raw reports and the sizes.

    ``reports[op][system]`` and ``sizes[system]`` hold one entry per repetition.
    """
    env = worker_env()
    reports: dict[str, dict[str, list[dict[str, Any]]]] = {
        op.id: {s: [] for s in systems} for op in OPERATIONS
    }
    sizes: dict[str, list[int | None]] = {s: [] for s in systems}
    for rep in range(reps):
        rep_dir = work / config.name / f"rep{rep + 1}"
        if rep_dir.exists():
            shutil.rmtree(rep_dir)
        shift = rep % len(systems)
        order = systems[shift:] + systems[:shift]
        for op in OPERATIONS:
            for system in order:
                label = f"OO7 {config.name} rep {rep + 1}/{reps} {op.id} {system}"
                progress.show(label)
                store_dir = rep_dir / system
                built = reports["build"][system][rep] if op.id != "build" else {"ok": True}
                if not built.get("ok"):
                    report: dict[str, Any] = {"ok": False, "error": "skipped: the build failed"}
                else:
                    spec = {"system": system, "config": config.name, "op": op.id, "dir": str(store_dir),
                            "hot": hot, "options": options, "copal_dir": COPAL_DIR}
                    report = run_worker(WORKER, spec, timeout, env)
                    if not report.get("ok"):
                        progress.message(f"copal bench: {label} failed: {last_line(report['error'])}")
                reports[op.id][system].append(report)
                if op.id == "build":
                    sizes[system].append(
                        dir_size(store_dir, skip=lambda name: name.endswith((".lock", ".tmp")))
                        if report.get("ok") else None
                    )
                progress.step()
        if not keep:
            shutil.rmtree(rep_dir, ignore_errors=True)
    return {"reports": reports, "sizes": sizes}


# --------------------------------------------------------------------------- summary


def _counts(report: dict[str, Any]) -> list[int] | None:
    if not report.get("ok"):
        return None
    cold = [] if report["cold_count"] is None else [report["cold_count"]]
    return cold + list(report["hot_counts"])


def summarize(config: OO7Config, raw: dict[str, Any], systems: list[str]) -> dict[str, Any]:
    """The JSON-ready results of one configuration: per operation and system, cold and hot
    medians, the counts and whether they agree; the ratios copal / ZODB; the sizes."""
    from copal.bench.runner import _median, _paired_ratio

    expected = expected_counts(config, generate(config))
    ratio_of = RATIO if all(s in systems for s in RATIO) else None
    operations = []
    for op in OPERATIONS:
        per: dict[str, Any] = {}
        cold: dict[str, list[float | None]] = {}
        hot: dict[str, list[float | None]] = {}
        mismatches: list[str] = []
        for s in systems:
            reps = raw["reports"][op.id][s]
            cold[s] = [r["cold_s"] if r.get("ok") else None for r in reps]
            hot[s] = [float(statistics.median(r["hot_s"])) if r.get("ok") and r["hot_s"] else None for r in reps]
            counts = [_counts(r) for r in reps]
            for rep, values in enumerate(counts):
                if values is not None and any(v != expected[op.id] for v in values):
                    mismatches.append(f"{s} rep {rep + 1}: {values}")
            per[s] = {
                "cold_median_s": _median([t for t in cold[s] if t is not None]),
                "hot_median_s": _median([t for t in hot[s] if t is not None]),
                "cold_s": cold[s],
                "hot_s": [r["hot_s"] if r.get("ok") else None for r in reps],
                "counts": counts,
                "open_s": [r.get("open_s") for r in reps],
                "rss_kb": [r.get("rss_kb") for r in reps],
                "info": [r.get("info") for r in reps],
                "errors": [r["error"] for r in reps if not r.get("ok")],
            }
        entry: dict[str, Any] = {
            "id": op.id, "title": op.title, "expected_count": expected[op.id],
            "counts_agree": not mismatches, "count_mismatches": mismatches, "results": per,
        }
        if ratio_of is not None:
            a, b = ratio_of
            entry["ratio"] = {"cold": _paired_ratio(cold[a], cold[b]), "hot": _paired_ratio(hot[a], hot[b])}
        operations.append(entry)

    sizes: dict[str, Any] = {}
    for s in systems:
        values = raw["sizes"][s]
        ok = [v for v in values if v is not None]
        sizes[s] = {"median_bytes": int(statistics.median(ok)) if ok else None, "values": values}
    size_ratio = None
    if ratio_of is not None:
        a, b = ratio_of
        size_ratio = _paired_ratio(
            [None if v is None else float(v) for v in raw["sizes"][a]],
            [None if v is None else float(v) for v in raw["sizes"][b]],
        )
    return {
        **config_document(config),
        "ratio_of": list(ratio_of) if ratio_of is not None else None,
        "operations": operations,
        "size_after_build": {"results": sizes, "ratio": size_ratio},
    }


# --------------------------------------------------------------------------- table and chart


def format_table(summary: dict[str, Any], systems: list[str], labels: dict[str, str]) -> str:
    """The Markdown table of one configuration: cold and hot medians by system, with ratios."""

    config = CONFIGS[summary["name"]]
    ratio_of = summary["ratio_of"]
    ratio_head = [f"{labels[ratio_of[0]]} / {labels[ratio_of[1]]}"] if ratio_of else []
    head = (
        ["operation", "count"]
        + [f"{labels[s]} cold" for s in systems] + ratio_head
        + [f"{labels[s]} hot" for s in systems] + ratio_head
    )
    lines = [
        f"## OO7 {config.name}: {config.describe()}",
        "",
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * (len(head) - 1),
    ]

    def ratio_cell(value: float | None) -> list[str]:
        if not ratio_of:
            return []
        return ["-" if value is None else f"{value:.2f}"]

    for op in summary["operations"]:
        cells: list[str] = [f"{op['expected_count']:,}"]
        for phase in ("cold", "hot"):
            for s in systems:
                r = op["results"][s]
                t = r[f"{phase}_median_s"]
                cells.append(("error" if r["errors"] else "-") if t is None else format_duration(t))
            cells += ratio_cell(op.get("ratio", {}).get(phase))
        mark = "" if op["counts_agree"] else " **counts differ**"
        lines.append(f"| {op['title']}{mark} | " + " | ".join(cells) + " |")
    size = summary["size_after_build"]
    cells = [""]
    for s in systems:
        b = size["results"][s]["median_bytes"]
        cells.append("-" if b is None else format_bytes(b))
    cells += ratio_cell(size["ratio"])
    cells += ["" for _ in systems] + ([""] if ratio_of else [])
    lines.append("| on-disk size after build | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def draw_chart(summary: dict[str, Any], systems: list[str], labels: dict[str, str], path: Path) -> str | None:
    """Save log-scale grouped bar charts of the cold and hot medians; return why not, or None."""
    plt = pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    operations = summary["operations"]
    groups = [op["id"].replace("_after_", "\nafter ") for op in operations]
    fig, axes = plt.subplots(2, 1, figsize=(max(9.0, 0.8 * len(operations) + 2), 8.0))
    for ax, phase in zip(axes, ("cold", "hot")):
        series = [(labels[s], [op["results"][s][f"{phase}_median_s"] for op in operations]) for s in systems]
        log_bars(ax, groups, series, f"{phase}: median seconds (log)", tick_fontsize=8)
    axes[0].set_title(f"OO7 {summary['name']}: cold (first run after the open) and hot (repeated)")
    finish(fig, axes, path)
    return None


# --------------------------------------------------------------------------- entry point


def run(
    args: argparse.Namespace, requested: list[str], report: TextIO, progress_factory: Callable[[int], Any],
) -> tuple[int, dict[str, Any] | None]:
    """Run the suite for ``copal bench``; the exit status and the JSON document."""
    try:
        configs = parse_configs(args.oo7_config)
    except ValueError as exc:
        print(f"copal bench: {exc}", file=sys.stderr)
        return 2, None
    reps = QUICK_REPS if args.quick else args.reps
    hot = QUICK_HOT if args.quick else args.oo7_hot
    if hot < 1:
        print("copal bench: --oo7-hot must be at least 1", file=sys.stderr)
        return 2, None
    systems, skipped = usable_systems(requested, lambda name: OO7_SYSTEMS[name].unavailable(), "OO7")
    if not systems:
        return 1, None
    labels = {s: OO7_SYSTEMS[s].label for s in systems}
    options = {"zodb_cache_size": args.zodb_cache_size}
    out = Path(args.out)
    work = out / "work" / "oo7"
    timeout = DEFAULT_TIMEOUT if args.timeout is None else args.timeout
    progress = progress_factory(len(configs) * reps * len(OPERATIONS) * len(systems))
    started = time.monotonic()
    summaries = []
    for config in configs:
        raw = run_config(config, systems, reps, hot, work, timeout, args.keep, options, progress)
        summaries.append(summarize(config, raw, systems))
    progress.clear()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)

    failed = False
    zodb_cache = "ZODB's default" if args.zodb_cache_size is None else f"{args.zodb_cache_size:,} objects"
    print(
        f"Cells: median over {reps} repetition(s) of the cold time (first run after opening, "
        f"fresh process) and of the median of {hot} hot repetitions (same process, a transaction "
        f"each); copal / ZODB: median of the per-repetition ratios, below 1 means copal is faster. "
        f"ZODB connection cache: {zodb_cache}.",
        file=report,
    )
    for summary in summaries:
        print("", file=report)
        print(format_table(summary, systems, labels), file=report)
        for op in summary["operations"]:
            for system, r in op["results"].items():
                failed = failed or bool(r["errors"])
                errors = [e for e in r["errors"] if not e.startswith("skipped:")]
                if errors:
                    print(f"\n{summary['name']} {op['id']} {system} failed:\n{errors[0]}", file=report)
            if not op["counts_agree"]:
                failed = True
                message = (f"error: OO7 {summary['name']} {op['id']}: counts differ from the expected "
                           f"{op['expected_count']}: " + "; ".join(op["count_mismatches"]))
                print(message, file=report)
                if report is not sys.stderr:
                    print(message, file=sys.stderr)
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}", file=report)
    print(f"(suite took {time.monotonic() - started:.0f} s)", file=sys.stderr)
    report.flush()

    if not args.no_chart:
        for summary in summaries:
            chart = out / f"oo7-{summary['name']}.png"
            why_not = draw_chart(summary, systems, labels, chart)
            print(f"chart: {chart}" if why_not is None else f"copal bench: {why_not}", file=sys.stderr)
            if why_not is not None:
                break

    document = {
        "meta": metadata(args, configs, systems, skipped, reps, hot),
        "systems": systems,
        "labels": labels,
        "operations": [{"id": op.id, "title": op.title} for op in OPERATIONS],
        "results": summaries,
    }
    return (1 if failed else 0), document

