"""Run the white-paper suite: fresh-process orchestration, result table, JSON, chart.

Every operation runs in its own ``python -c`` worker (cold object cache,
GC on, warm OS page cache), which times open + work + commit + close and
reports on stdout (see :func:`copal.bench.whitepaper.worker_main`).  Within
a repetition the systems are interleaved workload by workload (their order
rotates from one repetition to the next), so a ratio to the baseline is the
median of per-repetition paired ratios.

Entry point: :func:`main` (``copal bench``, ``python benchmarks/whitepaper.py``).
``--suite queries`` runs the query benchmark instead (:mod:`copal.bench.queries`),
``--suite codecs`` the serialization seed experiments (:mod:`copal.bench.codec_report`),
``--suite oo7`` the OO7 benchmark against ZODB (:mod:`copal.bench.oo7`),
``--suite transactions`` transaction costs against the cache size (:mod:`copal.bench.transactions`),
``--suite async`` a FastAPI shop under concurrent clients against SQLAlchemy asyncio and a thread pool
(:mod:`copal.bench.async_suite`),
``--suite gc`` garbage collection under a concurrent writer against ZODB's pack (:mod:`copal.bench.gc_suite`),
``--suite all`` the white-paper workloads and the queries (the codec suite, in-process and
long at full size, runs only when asked for).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence, TextIO

from copal.bench import async_suite, codec_report, gc_suite, oo7, queries, transactions
from copal.bench.charts import NO_MATPLOTLIB, finish, log_bars, pyplot
from copal.bench.environment import package_versions, run_metadata, usable_systems
from copal.bench.systems import DEFAULT_SYSTEMS, SYSTEMS, System
from copal.bench.tables import format_bytes
from copal.bench.whitepaper import WORKLOADS, Workload, target_serial
from copal.bench.workers import COPAL_DIR, last_line, run_worker, worker_env

DEFAULT_SCALE = 1000
DEFAULT_REPS = 3
DEFAULT_OUT = "bench-results"
DEFAULT_TIMEOUT = 1800.0
SUITES = ("whitepaper", "queries", "codecs", "oo7", "transactions", "async", "gc", "all")

#: The module of the workers' entry point (:func:`copal.bench.whitepaper.worker_main`).
WORKER = "copal.bench.whitepaper"


@dataclass(frozen=True)
class Metric:
    """A non-time row of the table: a size, a count or a peak RSS."""

    id: str
    title: str
    unit: str  # "bytes" (store size, with a ratio), "objects" or "MB" (peak RSS)
    workload: str  # the workload it is measured after or in


METRICS: tuple[Metric, ...] = (
    Metric("size_after_W3a", "on-disk size after W3a", "bytes", "W3a"),
    Metric("size_after_W4", "on-disk size after W4", "bytes", "W4"),
    Metric("objects_W3b", "objects loaded in W3b", "objects", "W3b"),
    Metric("objects_W3c", "objects loaded in W3c", "objects", "W3c"),
    Metric("objects_W5", "objects loaded in W5", "objects", "W5"),
    Metric("rss_W3a", "peak RSS of W3a worker", "MB", "W3a"),
    Metric("rss_W3c", "peak RSS of W3c worker", "MB", "W3c"),
)
SIZE_METRICS = {m.workload: m.id for m in METRICS if m.unit == "bytes"}


@dataclass
class OpOutcome:
    """The result of one worker run (or why there is none)."""

    seconds: float | None = None
    objects_loaded: int | None = None
    rss_kb: int | None = None
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


# --------------------------------------------------------------------------- progress


class Progress:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    WIDTH = 28

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self.started = time.monotonic()
        self._shown = False

    def show(self, label: str) -> None:
        """Redraw the bar with ``label`` as the operation now running."""
        if not self.enabled:
            return
        filled = self.WIDTH * self.done // self.total
        bar = "#" * filled + "." * (self.WIDTH - filled)
        elapsed = time.monotonic() - self.started
        line = f"[{bar}] {self.done}/{self.total} {elapsed:5.0f}s {label}"
        columns = shutil.get_terminal_size((100, 20)).columns
        self.stream.write("\r" + line[: columns - 1].ljust(columns - 1))
        self.stream.flush()
        self._shown = True

    def step(self) -> None:
        self.done += 1

    def message(self, text: str) -> None:
        """Print a line without garbling the bar."""
        self.clear()
        self.stream.write(text + "\n")
        self.stream.flush()

    def clear(self) -> None:
        if self._shown:
            columns = shutil.get_terminal_size((100, 20)).columns
            self.stream.write("\r" + " " * (columns - 1) + "\r")
            self.stream.flush()
            self._shown = False


# --------------------------------------------------------------------------- workers


def run_operation(spec: dict[str, Any], timeout: float, env: dict[str, str]) -> OpOutcome:
    """Run one operation in a fresh interpreter and parse its report."""
    report = run_worker(WORKER, spec, timeout, env)
    if not report.get("ok"):
        return OpOutcome(error=str(report["error"]))
    return OpOutcome(
        seconds=float(report["seconds"]),
        objects_loaded=report.get("objects_loaded"),
        rss_kb=report.get("rss_kb"),
        info={**(report.get("info") or {}), "ru_maxrss": report.get("ru_maxrss")},
    )


# --------------------------------------------------------------------------- the run


@dataclass
class ScaleResults:
    """Raw per-repetition results of one scale."""

    scale: int
    reps: int
    systems: list[str]
    # ops[workload id][system] = one OpOutcome per repetition
    ops: dict[str, dict[str, list[OpOutcome]]] = field(default_factory=dict)
    # sizes[metric id][system] = one size (or None) per repetition
    sizes: dict[str, dict[str, list[int | None]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for w in WORKLOADS:
            self.ops[w.id] = {s: [OpOutcome() for _ in range(self.reps)] for s in self.systems}
        for metric_id in SIZE_METRICS.values():
            self.sizes[metric_id] = {s: [None] * self.reps for s in self.systems}


def run_scale(
    scale: int,
    reps: int,
    systems: list[str],
    adapters: dict[str, System],
    work: Path,
    store: str | None,
    timeout: float,
    keep: bool,
    progress: Progress,
    run_id: str,
) -> ScaleResults:
    """Run every workload of every system ``reps`` times at one scale."""
    results = ScaleResults(scale, reps, systems)
    target = target_serial(scale)
    env = worker_env()
    for rep in range(reps):
        rep_dir = work / f"N{scale}" / f"rep{rep + 1}"
        if rep_dir.exists():
            shutil.rmtree(rep_dir)
        shift = rep % len(systems)
        order = systems[shift:] + systems[:shift]
        for workload in WORKLOADS:
            for name in order:
                label = f"N={scale} rep {rep + 1}/{reps} {workload.id} {name}"
                progress.show(label)
                outcome = _run_one(
                    results, workload, name, rep, rep_dir, store, scale, target,
                    timeout, env, run_id,
                )
                results.ops[workload.id][name][rep] = outcome
                if outcome.error is not None:
                    progress.message(f"copal bench: {label} failed: {last_line(outcome.error)}")
                elif workload.id in SIZE_METRICS:
                    store_dir, key = _store_location(rep_dir, name, workload.store, scale, rep, run_id)
                    metric_id = SIZE_METRICS[workload.id]
                    results.sizes[metric_id][name][rep] = adapters[name].size(str(store_dir), key)
                progress.step()
        if not keep:
            shutil.rmtree(rep_dir, ignore_errors=True)
    return results


def _store_location(
    rep_dir: Path, system: str, store: str, scale: int, rep: int, run_id: str
) -> tuple[Path, str]:
    key = f"copal_bench_{run_id}_N{scale}_rep{rep + 1}_{system}_{store}"
    return rep_dir / system / store, key


def _run_one(
    results: ScaleResults,
    workload: Workload,
    system: str,
    rep: int,
    rep_dir: Path,
    store: str | None,
    scale: int,
    target: int,
    timeout: float,
    env: dict[str, str],
    run_id: str,
) -> OpOutcome:
    if workload.needs is not None:
        needed = results.ops[workload.needs][system][rep]
        if needed.error is not None:
            return OpOutcome(error=f"skipped: {workload.needs} failed")
    store_dir, key = _store_location(rep_dir, system, workload.store, scale, rep, run_id)
    store_dir.parent.mkdir(parents=True, exist_ok=True)
    spec = {
        "system": system,
        "workload": workload.id,
        "dir": str(store_dir),
        "key": key,
        "scale": scale,
        "target": target,
        "store": store,
        "copal_dir": COPAL_DIR,
    }
    return run_operation(spec, timeout, env)


# --------------------------------------------------------------------------- summary


def _median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def _paired_ratio(values: Sequence[float | None], base: Sequence[float | None]) -> float | None:
    """Median over repetitions of value / baseline, using reps where both exist."""
    ratios = [
        v / b for v, b in zip(values, base) if v is not None and b is not None and b > 0
    ]
    return _median(ratios)


def summarize(results: ScaleResults, baseline: str) -> dict[str, Any]:
    """The JSON-ready summary of one scale."""
    workloads: list[dict[str, Any]] = []
    for w in WORKLOADS:
        per_system: dict[str, Any] = {}
        base_times = [o.seconds for o in results.ops[w.id].get(baseline, [])]
        for s in results.systems:
            outs = results.ops[w.id][s]
            times = [o.seconds for o in outs]
            ok = [t for t in times if t is not None]
            loaded = [o.objects_loaded for o in outs if o.objects_loaded is not None]
            rss = [o.rss_kb for o in outs if o.rss_kb is not None]
            per_system[s] = {
                "median_s": _median(ok),
                "times_s": times,
                "ratio": None if s == baseline else _paired_ratio(times, base_times),
                "objects_loaded": int(statistics.median_low(loaded)) if loaded else None,
                "peak_rss_mb": round(statistics.median(rss) / 1024, 1) if rss else None,
                "errors": [o.error for o in outs if o.error is not None],
                "info": [o.info for o in outs],
            }
        workloads.append({"id": w.id, "name": w.name, "title": w.title, "results": per_system})

    by_id = {w["id"]: w["results"] for w in workloads}
    metrics = []
    for m in METRICS:
        per: dict[str, Any] = {}
        for s in results.systems:
            if m.unit == "bytes":
                values: list[float | None] = [
                    None if v is None else float(v) for v in results.sizes[m.id][s]
                ]
                base = [None if v is None else float(v) for v in results.sizes[m.id].get(baseline, [])]
                ok = [v for v in values if v is not None]
                per[s] = {
                    "median": int(statistics.median(ok)) if ok else None,
                    "values": [None if v is None else int(v) for v in values],
                    "ratio": None if s == baseline else _paired_ratio(values, base),
                }
            elif m.unit == "objects":
                per[s] = {"median": by_id[m.workload][s]["objects_loaded"]}
            else:
                per[s] = {"median": by_id[m.workload][s]["peak_rss_mb"]}
        metrics.append({"id": m.id, "title": m.title, "unit": m.unit, "results": per})

    return {
        "scale": results.scale,
        "target_serial": target_serial(results.scale),
        "reps": results.reps,
        "workloads": workloads,
        "metrics": metrics,
    }


# --------------------------------------------------------------------------- table


def format_seconds(t: float) -> str:
    """Seconds with two or three significant digits, as in the reference tables."""
    if t >= 1:
        return f"{t:.2f} s"
    if t >= 0.01:
        return f"{t:.3f} s"
    return f"{t:.2g} s"


def _cell(value: str | None, ratio: float | None) -> str:
    if value is None:
        return "-"
    return value if ratio is None else f"{value} (x{ratio:.2f})"


def format_table(summary: dict[str, Any], systems: list[str], labels: dict[str, str]) -> str:
    """A Markdown table of one scale: workloads and metrics by system."""
    lines = [
        f"## N = {summary['scale']} SerTest",
        "",
        "| workload | " + " | ".join(labels[s] for s in systems) + " |",
        "|---|" + "---:|" * len(systems),
    ]
    for w in summary["workloads"]:
        cells = []
        for s in systems:
            r = w["results"][s]
            if r["median_s"] is None:
                cells.append("error" if r["errors"] else "-")
            else:
                cells.append(_cell(format_seconds(r["median_s"]), r["ratio"]))
        lines.append(f"| {w['title']} | " + " | ".join(cells) + " |")
    for m in summary["metrics"]:
        cells = []
        for s in systems:
            r = m["results"][s]
            v = r["median"]
            if v is None:
                cells.append("-")
            elif m["unit"] == "bytes":
                cells.append(_cell(format_bytes(v), r.get("ratio")))
            elif m["unit"] == "MB":
                cells.append(f"{v:.0f} MB")
            else:
                cells.append(str(v))
        lines.append(f"| {m['title']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- chart


def draw_chart(
    summary: dict[str, Any], systems: list[str], labels: dict[str, str], path: Path
) -> str | None:
    """Save a log-scale grouped bar chart of the median times; return why not, or None."""
    plt = pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    workloads = summary["workloads"]
    fig, ax = plt.subplots(figsize=(max(8.0, 1.5 * len(workloads) + 2), 5.0))
    series = [(labels[s], [w["results"][s]["median_s"] for w in workloads]) for s in systems]
    log_bars(ax, [f"{w['id']}\n{w['name']}" for w in workloads], series, "median seconds (log scale)",
             tick_fontsize=8)
    ax.set_title(
        f"White-paper workloads, N = {summary['scale']} SerTest "
        f"(fresh process per op, median of {summary['reps']})"
    )
    finish(fig, [ax], path)
    return None


# --------------------------------------------------------------------------- CLI


def _parse_scales(values: list[str] | None) -> list[int]:
    if not values:
        return [DEFAULT_SCALE]
    scales: list[int] = []
    for value in values:
        for part in value.split(","):
            part = part.strip().replace("_", "")
            if not part:
                continue
            n = int(part)
            if n < 1:
                raise ValueError(f"scale must be at least 1, not {n}")
            if n not in scales:
                scales.append(n)
    return scales


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="copal bench",
        description=(
            "Run the white-paper workloads (store/read flat and nested SerTest graphs, "
            "update one, update all) against copal and the alternatives, each operation "
            "in a fresh process; print a table with ratios to copal. With --suite queries: "
            "the query benchmark (indexed lookups, ranges, scans and counts on N people) "
            "against SQLite, SQLAlchemy and ZODB; with --suite codecs: the serialization seed "
            "experiments (copal.dumps against pickle, msgspec, protobuf, pyfory, ...); with "
            "--suite oo7: the OO7 benchmark (traversals, updates, queries and structural "
            "changes of a CAD design library, cold and hot) against ZODB; with --suite "
            "transactions: the cost of empty, read-only, lookup and one-change transactions with "
            "an empty and a full object cache, against ZODB; with --suite async: a FastAPI "
            "shop's read and purchase endpoints under concurrent clients, copal's asyncio API "
            "against SQLAlchemy asyncio (aiosqlite, asyncpg) and sync copal on a thread pool; "
            "with --suite gc: garbage collection of unreachable objects while a writer commits, "
            "copal's db.gc() against ZODB's pack; --suite all runs the white-paper "
            "workloads and the queries."
        ),
    )
    parser.add_argument(
        "--suite", choices=SUITES, default="whitepaper",
        help="which benchmark: the white-paper workloads (default), the queries, the codecs, "
        "OO7, transaction costs against the cache size, the async web shop, garbage collection, or all (white paper and queries)",
    )
    parser.add_argument(
        "--scale", action="append", metavar="N",
        help=f"number of SerTest; repeatable or a comma list (default {DEFAULT_SCALE})",
    )
    parser.add_argument(
        "--reps", type=int, default=DEFAULT_REPS, metavar="N",
        help=f"repetitions per operation; medians are reported (default {DEFAULT_REPS})",
    )
    parser.add_argument(
        "--json", metavar="PATH",
        help="write the results as JSON to PATH ('-' for stdout; the table then goes to stderr)",
    )
    parser.add_argument(
        "--out", default=DEFAULT_OUT, metavar="DIR",
        help=f"work directory and where the chart is saved (default ./{DEFAULT_OUT})",
    )
    parser.add_argument(
        "--systems", metavar="A,B,...",
        help="systems to run, in column order (default: " + ",".join(DEFAULT_SYSTEMS)
        + "; also: relstorage, with --store postgresql://..., and copal-embedded, copal on its "
        "embedded store whatever --store says)",
    )
    parser.add_argument(
        "--store", metavar="URL_OR_PATH_PREFIX",
        help="where copal's databases live: a directory prefix, or a URL where {name} is "
        "replaced by a per-store name (default: embedded, under --out)",
    )
    parser.add_argument(
        "--baseline", metavar="SYSTEM",
        help="system the ratios refer to (default copal, or the first system run)",
    )
    parser.add_argument(
        "--timeout", type=float, metavar="SECONDS",
        help=f"limit for one operation (default {DEFAULT_TIMEOUT:g}; for the query suite, one "
        f"worker: a load or a system's queries, default {queries.DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the databases under DIR/work after the run",
    )
    parser.add_argument(
        "--no-chart", action="store_true", help="do not draw the PNG chart",
    )
    queries.add_arguments(parser)
    codec_report.add_arguments(parser)
    oo7.add_arguments(parser)
    transactions.add_arguments(parser)
    async_suite.add_arguments(parser)
    gc_suite.add_arguments(parser)
    return parser


def _metadata(
    args: argparse.Namespace, scales: list[int], systems: list[str], skipped: dict[str, str]
) -> dict[str, Any]:
    return {
        **run_metadata("whitepaper", package_versions(SYSTEMS[name].versions for name in systems)),
        "scales": scales,
        "reps": args.reps,
        "store": args.store,
        "skipped_systems": skipped,
        "method": (
            "each op in a fresh python worker process (cold object cache, GC on, warm OS "
            "page cache); time = open + work + commit + close inside the worker; systems "
            "interleaved per workload within each rep (order rotated per rep); medians over "
            "reps; ratio = median of per-rep paired ratios to the baseline"
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite(s); return 0 when every operation succeeded, 1 otherwise, 2 on bad usage."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        scales = _parse_scales(args.scale)
    except ValueError as exc:
        parser.error(str(exc))
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    if args.suite in ("whitepaper", "codecs", "oo7", "transactions", "async", "gc") and args.people is not None:
        parser.error("--people applies to --suite queries or all")
    if args.suite in ("queries", "codecs", "oo7", "transactions", "async", "gc") and args.scale:
        parser.error("--scale applies to --suite whitepaper or all")
    if args.suite != "gc" and gc_suite.given(args):
        parser.error(f"{gc_suite.given(args)[0]} applies to --suite gc")
    codec_report.validate(args, parser)

    named = [s.strip() for s in (args.systems or "").split(",") if s.strip()]
    known = {
        "whitepaper": list(SYSTEMS),
        "queries": list(queries.QUERY_SYSTEMS),
        "codecs": [],  # the codec suite chooses with --codecs
        "oo7": list(oo7.OO7_SYSTEMS),
        "transactions": list(transactions.TX_SYSTEMS),
        "async": list(async_suite.ASYNC_SYSTEMS),
        "gc": list(gc_suite.GC_SYSTEMS),
        "all": list(dict.fromkeys([*SYSTEMS, *queries.QUERY_SYSTEMS])),
    }[args.suite]
    unknown = [s for s in named if s not in known]
    if unknown:
        parser.error(f"unknown system(s) {', '.join(unknown)}; known: {', '.join(known)}")

    json_to_stdout = args.json == "-"
    report: TextIO = sys.stderr if json_to_stdout else sys.stdout

    documents: dict[str, dict[str, Any]] = {}
    status = 0
    if args.suite in ("whitepaper", "all"):
        requested = list(dict.fromkeys(s for s in named if s in SYSTEMS)) if named else list(DEFAULT_SYSTEMS)
        if requested:
            code, document = _whitepaper(args, parser, scales, requested, report)
            status = max(status, code)
            if document is not None:
                documents["whitepaper"] = document
        else:
            print("copal bench: no white-paper system among --systems: suite skipped", file=sys.stderr)
    if args.suite in ("queries", "all"):
        if args.suite == "all" and "whitepaper" in documents:
            print("", file=report)
        requested = (
            list(dict.fromkeys(s for s in named if s in queries.QUERY_SYSTEMS))
            if named else list(queries.QUERY_SYSTEMS)
        )
        if args.suite == "queries" and args.baseline and args.baseline not in requested:
            parser.error(f"baseline {args.baseline} is not among the systems run ({', '.join(requested)})")
        if requested:
            code, document = queries.run(args, requested, report, Progress)
            status = max(status, code)
            if document is not None:
                documents["queries"] = document
        else:
            print("copal bench: no query system among --systems: suite skipped", file=sys.stderr)
    if args.suite == "codecs":
        code, document = codec_report.run(args, report, Progress)
        status = max(status, code)
        documents["codecs"] = document
    if args.suite == "oo7":
        code, document = oo7.run(args, list(dict.fromkeys(named)) or list(oo7.OO7_SYSTEMS), report, Progress)
        status = max(status, code)
        if document is not None:
            documents["oo7"] = document
    if args.suite == "transactions":
        requested = list(dict.fromkeys(named)) or list(transactions.TX_SYSTEMS)
        code, document = transactions.run(args, requested, report, Progress)
        status = max(status, code)
        if document is not None:
            documents["transactions"] = document
    if args.suite == "async":
        code, document = async_suite.run(args, list(dict.fromkeys(named)) or None, report, Progress)
        status = max(status, code)
        if document is not None:
            documents["async"] = document
    if args.suite == "gc":
        code, document = gc_suite.run(args, list(dict.fromkeys(named)) or list(gc_suite.GC_SYSTEMS), report, Progress)
        status = max(status, code)
        if document is not None:
            documents["gc"] = document
    if args.suite == "all" and documents:
        _write_json(args, {"suite": "all", **documents})
    elif args.suite in documents:
        _write_json(args, documents[args.suite])
    return status


def _write_json(args: argparse.Namespace, document: dict[str, Any]) -> None:
    if args.json:
        text = json.dumps(document, indent=2)
        if args.json == "-":
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        else:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(text + "\n")
            print(f"json: {args.json}", file=sys.stderr)


def _whitepaper(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    scales: list[int],
    requested: list[str],
    report: TextIO,
) -> tuple[int, dict[str, Any] | None]:
    """Run the white-paper suite; the exit status and the JSON document (None if nothing ran)."""
    adapters: dict[str, System] = {}

    def cannot_run(name: str) -> str | None:
        reason = SYSTEMS[name].unavailable()
        if reason is None:
            try:
                adapters[name] = SYSTEMS[name](store=args.store)
            except Exception as exc:  # noqa: BLE001 - skip, never crash
                reason = f"{type(exc).__name__}: {exc}"
        return reason

    systems, skipped = usable_systems(requested, cannot_run)
    if not systems:
        return 1, None

    baseline = args.baseline or ("copal" if "copal" in systems else systems[0])
    if baseline not in systems and args.suite == "all":
        baseline = "copal" if "copal" in systems else systems[0]
    if baseline not in systems:
        parser.error(f"baseline {baseline} is not among the systems run ({', '.join(systems)})")
    labels = {s: SYSTEMS[s].label for s in systems}

    out = Path(args.out)
    work = out / "work"
    run_id = datetime.now().strftime("%Y%m%d%H%M%S") + f"_{os.getpid()}"
    progress = Progress(len(scales) * args.reps * len(WORKLOADS) * len(systems))
    summaries = []
    failed = False
    for scale in scales:
        results = run_scale(
            scale, args.reps, systems, adapters, work, args.store,
            DEFAULT_TIMEOUT if args.timeout is None else args.timeout,
            args.keep, progress, run_id,
        )
        summary = summarize(results, baseline)
        summaries.append(summary)
        failed = failed or any(
            r["errors"] for w in summary["workloads"] for r in w["results"].values()
        )
    progress.clear()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"Cells: median wall seconds over {args.reps} rep(s) (open + work + commit + close, "
        f"fresh process per op, cold object cache); (xR) = ratio to {labels[baseline]}, "
        "median of per-rep paired ratios.",
        file=report,
    )
    for summary in summaries:
        print("", file=report)
        print(format_table(summary, systems, labels), file=report)
    if skipped:
        print("", file=report)
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}", file=report)
    report.flush()

    if not args.no_chart:
        for summary in summaries:
            chart = out / f"whitepaper-N{summary['scale']}.png"
            why_not = draw_chart(summary, systems, labels, chart)
            if why_not is None:
                print(f"chart: {chart}", file=sys.stderr)
            else:
                print(f"copal bench: {why_not}", file=sys.stderr)
                break

    document = {
        "meta": _metadata(args, scales, systems, skipped),
        "systems": systems,
        "labels": labels,
        "baseline": baseline,
        "workloads": [{"id": w.id, "name": w.name, "title": w.title} for w in WORKLOADS],
        "results": summaries,
    }
    return (1 if failed else 0), document

