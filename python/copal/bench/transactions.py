"""The transaction-cost benchmark: ``copal bench --suite transactions``, copal against ZODB.

A long-running process keeps the objects it has used loaded, across transactions, so that the
next request finds them in memory. That cache must not make every transaction pay for it: the
cost of a transaction should follow what the transaction touches, not what the cache holds.
This suite measures it. For each cache size C of ``--cached`` (default 0 and 100,000), in one
worker process per (system, C), it builds a database of N = C + 1,000 ``Item`` objects
(:mod:`copal.bench.transaction_models`: an email with a unique index, an int ``value``, a plain
list and a plain dict inside the object's record) reachable from a list in the root, reopens it,
loads C of them into the object cache (the first C of the list, touched in one transaction) and
then times, each transaction on its own (with ``--tx-fixed-size``, every database holds the
largest C + 1,000 objects, so that only what the cache holds differs, not the database's size):

========  ===================================================================================
empty     an empty read-write transaction: copal ``with db.transaction(): pass``, ZODB
          ``transaction.begin(); transaction.commit()``
readonly  a read-only transaction: copal ``with db.transaction(readonly=True) as tx: tx.root``,
          ZODB ``transaction.begin(); conn.root(); transaction.abort()``
lookup    one object by its email in a read-only transaction, then a field of it: copal
          ``tx.query(CopalItem).where(email=e).first().value``, ZODB ``root["by_email"][e].value``
          (then ``abort``); every lookup finds an object not loaded yet, so it reads its record
update    one changed object: ``root["items"][i].value = v`` in a read-write transaction, then
          the commit; ``i`` and ``v`` drawn at random
control   no database: a fixed piece of plain Python (``control_work``), timed the same way;
          when the shared machine slowed a worker down, this row shows it, so a growth of this
          row is the machine's, not the systems'
========  ===================================================================================

Both systems' object caches are sized to hold every object (copal's ``cache_size``, ZODB's
``DB(cache_size=...)``: the largest C + 1,000 + :data:`CACHE_SLACK`), the same at every C, so
that the runs differ only by what the cache holds. The 1,000 objects beyond the cached ones are
split in two: the first :data:`~copal.bench.transaction_systems.LOOKUP_POOL` are the lookups'
targets, each looked up once (a seeded sample), the others the updates' (a seeded draw, with
replacement: each is read by its first update). The sequences are the same at every C, relative
to C, so every run does the same work but for the cache.

Method: the operations run in blocks of :data:`~copal.bench.transaction_systems.BLOCK`, the
four blocks interleaved, until each has run ``--tx-reps`` times, after
:data:`~copal.bench.transaction_systems.WARMUP` untimed runs of each (lookups of an absent
email, so that none of the targets is read early). The whole series repeats ``--reps`` times
(rounds), each worker a fresh process, the cache sizes and the systems interleaved and their
order rotating from one round to the next; the first round builds the databases, the later ones
reuse them. A cell is one operation's median (and p90) in the round where that median is the
least: on a shared machine, the noise (another tenant, a build) slows whole stretches of time
down by up to 1.7x, never speeds anything up, and the control row shows when it struck.
"growth" is the cell at the largest C over the cell at the smallest (the target for copal: at
most :data:`GROWTH_TARGET`); "copal / ZODB" the ratio of the two cells at one C. The JSON also
has every round's figures and the median of the rounds' medians. For copal the worker also
records ``db.stats()`` deltas around each transaction: ``objects_encoded`` (objects whose state
the commit encoded, to write it or to compare it) must not grow with C, and is 0 for the empty
transaction. After the timed runs, the worker checks that the C objects are still loaded
(``held``): otherwise the cache did not hold what the run claims.

This module runs the suite (the workers, the summary, the targets, the table, the chart and
the options); :mod:`copal.bench.transaction_systems` has the operations, each system's adapter
and the worker.
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
from copal.bench.environment import package_versions, run_metadata, usable_systems
from copal.bench.tables import format_duration, problem_lines, target_rows
from copal.bench.transaction_systems import BLOCK, CONTROL, EXTRA, LOOKUP_POOL, OPERATIONS, SEED, WARMUP
from copal.bench.transaction_systems import TX_SYSTEMS as TX_SYSTEMS  # the runner's --systems
from copal.bench.workers import COPAL_DIR, last_line, run_worker, worker_env

#: The cache sizes compared when --cached is not given.
DEFAULT_CACHED = (0, 100_000)
DEFAULT_TX_REPS = LOOKUP_POOL
#: Cache entries beyond the objects (the root, the list, ZODB's BTree nodes).
CACHE_SLACK = 20_000
#: The largest acceptable time at the largest cache size over the time at the smallest.
GROWTH_TARGET = 1.2
#: Seconds one worker (build, load, timed runs of one system at one cache size) may take.
DEFAULT_TIMEOUT = 1800.0
#: The ratio columns: this system's time over that one's.
RATIO = ("copal", "zodb")
#: The module of the workers' entry point.
WORKER = "copal.bench.transaction_systems"


# --------------------------------------------------------------------------- the run


def run_all(
    systems: list[str], cached_sizes: list[int], objects: dict[int, int], rounds: int, reps: int,
    cache_objects: int, work: Path, timeout: float, progress: Any,
) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """Every system at every cache size, a worker each, ``rounds`` times; ``reports[system]
    [cached]`` has a report per round. The first round builds the databases, the later ones
    reuse them. The cache sizes and the systems alternate, their order rotating from one round
    (and cache size) to the next."""
    env = worker_env()
    reports: dict[str, dict[int, list[dict[str, Any]]]] = {s: {c: [] for c in cached_sizes} for s in systems}
    for round_no in range(rounds):
        shift = round_no % len(cached_sizes)
        for position, cached in enumerate(cached_sizes[shift:] + cached_sizes[:shift]):
            turn = (round_no + position) % len(systems)
            for system in systems[turn:] + systems[:turn]:
                label = f"transactions round {round_no + 1}/{rounds} cached={cached:,} {system}"
                progress.show(label)
                store_dir = work / f"cached{cached}" / system
                built = reports[system][cached][0].get("ok") if round_no else None
                if round_no and not built:
                    report: dict[str, Any] = {"ok": False, "error": "skipped: the first round failed"}
                else:
                    if not round_no and store_dir.exists():
                        shutil.rmtree(store_dir)
                    spec = {"system": system, "cached": cached, "objects": objects[cached],
                            "cache_objects": cache_objects,
                            "dir": str(store_dir), "reps": reps, "build": not round_no,
                            "copal_dir": COPAL_DIR}
                    report = run_worker(WORKER, spec, timeout, env)
                    if report.get("ok") and report["held"] != cached:
                        report = {**report, "ok": False, "error": (
                            f"the cache held {report['held']:,} of the {cached:,} objects loaded "
                            "into it: the run does not measure what it says")}
                    if not report.get("ok"):
                        progress.message(f"copal bench: {label} failed: {last_line(str(report.get('error')))}")
                reports[system][cached].append(report)
                progress.step()
    return reports


# --------------------------------------------------------------------------- summary


def _combine(rounds: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """One operation of one system at one cache size over the rounds: the median and p90 of
    the round whose median is the least (the machine's noise only ever slows a worker down),
    the median of the rounds' medians, the counters' mean of means and max of maxima."""
    ok = [r for r in rounds if r is not None]
    if not ok:
        return None
    best = min(ok, key=lambda r: float(r["median_s"]))
    counted = [r["per_transaction"] for r in ok if r.get("per_transaction")]
    counters = {
        c: {"mean": statistics.fmean(p[c]["mean"] for p in counted), "max": max(p[c]["max"] for p in counted)}
        for c in (counted[0] if counted else {})
    }
    return {
        "median_s": best["median_s"],
        "p90_s": best["p90_s"],
        "best_round": rounds.index(best) + 1,
        "median_of_rounds_s": statistics.median(r["median_s"] for r in ok),
        "min_s": min(r["min_s"] for r in ok),
        "runs": sum(r["runs"] for r in ok),
        "per_transaction": counters or None,
        "rounds": rounds,
    }


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    return a["median_s"] / b["median_s"] if a and b and b["median_s"] > 0 else None


def summarize(
    reports: dict[str, dict[int, list[dict[str, Any]]]], systems: list[str], cached_sizes: list[int],
    objects: dict[int, int], cache_objects: int,
) -> dict[str, Any]:
    """The JSON-ready results: per operation and system, each cache size's times and counters,
    the growth from the smallest to the largest cache size; the ratios copal / ZODB; the
    targets. Times, growths and ratios are those of each configuration's best round."""
    low, high = min(cached_sizes), max(cached_sizes)
    ratio_of = RATIO if all(s in systems for s in RATIO) else None
    operations = []
    for op in OPERATIONS:
        per: dict[str, Any] = {}
        for s in systems:
            by_cached: dict[str, Any] = {}
            errors = []
            for cached in cached_sizes:
                rounds = [r["operations"][op.id] if r.get("ok") else None for r in reports[s][cached]]
                by_cached[str(cached)] = _combine(rounds)
                errors += [f"cached={cached} round {i + 1}: {r.get('error')}"
                           for i, r in enumerate(reports[s][cached]) if not r.get("ok")]
            growth = _ratio(by_cached[str(high)], by_cached[str(low)]) if high != low else None
            per[s] = {"by_cached": by_cached, "growth": growth, "errors": errors}
        entry: dict[str, Any] = {"id": op.id, "title": op.title, "results": per}
        if ratio_of is not None:
            a, b = ratio_of
            entry["ratio"] = {
                str(c): _ratio(per[a]["by_cached"][str(c)], per[b]["by_cached"][str(c)]) for c in cached_sizes
            }
        operations.append(entry)
    keys = ("build_s", "open_s", "warm_s", "held", "size_bytes", "rss_kb", "info", "error")
    setup = {
        s: {str(c): [{k: r.get(k) for k in keys} for r in reports[s][c]] for c in cached_sizes}
        for s in systems
    }
    return {
        "cached": cached_sizes,
        "objects": {str(c): objects[c] for c in cached_sizes},
        "cache_objects": cache_objects,
        "ratio_of": list(ratio_of) if ratio_of is not None else None,
        "operations": operations,
        "setup": setup,
        "targets": evaluate_targets(operations, cached_sizes) if "copal" in systems else [],
    }


def _encoded(op: dict[str, Any], cached: int) -> dict[str, Any] | None:
    """copal's objects_encoded per transaction of ``op`` at one cache size (mean, max)."""
    r = op["results"]["copal"]["by_cached"].get(str(cached))
    if not r or not r.get("per_transaction"):
        return None
    encoded: dict[str, Any] = r["per_transaction"]["objects_encoded"]
    return encoded


def evaluate_targets(operations: list[dict[str, Any]], cached_sizes: list[int]) -> list[dict[str, Any]]:
    """The targets, each with ``met`` (None where a run they need is missing)."""
    low, high = min(cached_sizes), max(cached_sizes)
    targets: list[dict[str, Any]] = []
    measured = [op for op in operations if op["id"] != CONTROL]
    for op in measured:
        growth = op["results"]["copal"]["growth"]
        targets.append({
            "target": f"copal {op['id']}: median at cached={high:,} within {GROWTH_TARGET}x of "
                      f"cached={low:,}",
            "result": "-" if growth is None else f"x{growth:.2f}",
            "met": None if growth is None else growth <= GROWTH_TARGET,
        })
    for op in measured:
        counts = [_encoded(op, c) for c in cached_sizes]
        if any(c is None for c in counts):
            met = None
            result = "-"
        else:
            means = [c["mean"] for c in counts if c is not None]
            maxima = [c["max"] for c in counts if c is not None]
            met = all(m <= means[0] for m in means) and all(m <= maxima[0] for m in maxima)
            if op["id"] == "empty":
                met = met and max(maxima) == 0
            result = " / ".join(f"{m:g}" for m in means) + " (mean per transaction at each cached)"
        targets.append({
            "target": f"copal {op['id']}: objects encoded per transaction do not grow with the cache"
                      + (" (0 for the empty transaction)" if op["id"] == "empty" else ""),
            "result": result,
            "met": met,
        })
    return targets


# --------------------------------------------------------------------------- table and chart


def format_table(summary: dict[str, Any], systems: list[str], labels: dict[str, str]) -> str:
    """The Markdown table: per operation, each system's median (p90) at each cache size, its
    growth, the ratios copal / ZODB, copal's objects encoded; then the targets."""

    cached_sizes: list[int] = summary["cached"]
    sizes = set(summary["objects"].values())
    size = (f"N = {sizes.pop():,} objects at every cache size" if len(sizes) == 1
            else f"N = cached + {EXTRA:,} objects")
    ratio_of = summary["ratio_of"]
    head = ["operation"]
    for s in systems:
        head += [f"{labels[s]} @{c:,}" for c in cached_sizes]
        if len(cached_sizes) > 1:
            head.append(f"{labels[s]} growth")
    if ratio_of:
        pair = f"{labels[ratio_of[0]]} / {labels[ratio_of[1]]}"
        head += [f"{pair} @{c:,}" for c in cached_sizes]
    if "copal" in systems:
        head.append("copal objects encoded " + " / ".join(f"@{c:,}" for c in cached_sizes))
    lines = [
        f"## Transaction cost against cache size ({size}; "
        f"object caches of {summary['cache_objects']:,})",
        "",
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * (len(head) - 1),
    ]
    for op in summary["operations"]:
        cells: list[str] = []
        for s in systems:
            r = op["results"][s]
            for c in cached_sizes:
                t = r["by_cached"][str(c)]
                cells.append("error" if t is None else
                             f"{format_duration(t['median_s'])} (p90 {format_duration(t['p90_s'])})")
            if len(cached_sizes) > 1:
                cells.append("-" if r["growth"] is None else f"x{r['growth']:.2f}")
        if ratio_of:
            cells += ["-" if op["ratio"][str(c)] is None else f"{op['ratio'][str(c)]:.2f}" for c in cached_sizes]
        if "copal" in systems and op["id"] == CONTROL:
            cells.append("")
        elif "copal" in systems:
            counts = [_encoded(op, c) for c in cached_sizes]
            cells.append(" / ".join("-" if e is None else f"{e['mean']:g}" for e in counts))
        lines.append(f"| {op['title']} | " + " | ".join(cells) + " |")
    if summary["targets"]:
        lines += target_rows(summary["targets"])
    return "\n".join(lines)


def draw_chart(summary: dict[str, Any], systems: list[str], labels: dict[str, str], path: Path) -> str | None:
    """Save a log-scale bar chart of the medians, a bar per (system, cache size) in each
    operation's group; return why not, or None."""
    plt = pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    operations = summary["operations"]
    series = []
    for s in systems:
        for c in summary["cached"]:
            cells = [op["results"][s]["by_cached"][str(c)] for op in operations]
            series.append((f"{labels[s]}, {c:,} cached", [None if t is None else t["median_s"] for t in cells]))
    fig, ax = plt.subplots(figsize=(max(8.0, 1.8 * len(operations) + 2), 5.0))
    log_bars(ax, [op["id"] for op in operations], series, "median seconds per transaction (log scale)")
    ax.set_title("Transaction cost against what the object cache holds")
    finish(fig, [ax], path)
    return None


# --------------------------------------------------------------------------- entry point


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the transaction-cost suite (``copal bench --suite transactions``)."""
    group = parser.add_argument_group(
        "transaction-cost suite (--suite transactions)",
        "also takes --reps (rounds: a worker per system and cache size each), --systems (copal, "
        "zodb), --json, --out, --no-chart, --keep and --timeout",
    )
    group.add_argument(
        "--cached", type=parse_cached, metavar="A,B,...",
        help="object-cache sizes to compare: objects loaded before the timed transactions; the "
        f"database holds that many + {EXTRA:,} (default: " + ",".join(map(str, DEFAULT_CACHED)) + ")",
    )
    group.add_argument(
        "--tx-reps", type=parse_tx_reps, default=DEFAULT_TX_REPS, metavar="N",
        help=f"timed transactions per operation, system and cache size (1 to {LOOKUP_POOL}: each "
        f"lookup reads an object not yet loaded; default {DEFAULT_TX_REPS})",
    )
    group.add_argument(
        "--tx-fixed-size", action="store_true",
        help=f"every database holds the largest cache size + {EXTRA:,} objects, so that only what "
        "the cache holds differs (default: cache size + 1,000, so the database grows too)",
    )


def parse_cached(value: str) -> list[int]:
    """The cache sizes of ``--cached`` (its argparse type), sorted, each once.

    Example:
        >>> parse_cached("100_000, 0,0")
        [0, 100000]
    """
    sizes: set[int] = set()
    for part in value.split(","):
        part = part.strip().replace("_", "")
        if part:
            n = int(part) if part.isdigit() else -1
            if n < 0:
                raise argparse.ArgumentTypeError(f"takes counts of objects, not {part!r}")
            sizes.add(n)
    if not sizes:
        raise argparse.ArgumentTypeError("needs at least one cache size")
    return sorted(sizes)


def parse_tx_reps(value: str) -> int:
    """The count of ``--tx-reps`` (its argparse type): 1 to LOOKUP_POOL, since each lookup reads
    an object not loaded yet."""
    n = int(value) if value.strip().isdigit() else 0
    if not 1 <= n <= LOOKUP_POOL:
        raise argparse.ArgumentTypeError(
            f"takes a count from 1 to {LOOKUP_POOL} (each lookup reads an object not loaded yet), "
            f"not {value!r}"
        )
    return n


def metadata(
    systems: list[str], skipped: dict[str, str], cached_sizes: list[int], rounds: int, reps: int,
    cache_objects: int, fixed_size: bool,
) -> dict[str, Any]:
    return {
        **run_metadata("transactions", package_versions(TX_SYSTEMS[name].versions for name in systems)),
        "cached": cached_sizes,
        "extra_objects": EXTRA,
        "cache_objects": cache_objects,
        "rounds": rounds,
        "tx_reps": reps,
        "fixed_size": fixed_size,
        "block": BLOCK,
        "warmup": WARMUP,
        "seed": SEED,
        "skipped_systems": skipped,
        "method": (
            "per round (--reps), one worker process per (system, cache size C), the cache sizes and "
            "systems interleaved, their order rotated per round: the first round builds a "
            "database of C + 1,000 items (--tx-fixed-size: the largest C + 1,000; a plain list "
            "and dict inside each; unique index on "
            "email), later rounds reuse it; the worker opens it with an object cache holding "
            "every object, loads C items in one transaction (untimed), then times each "
            "operation's transactions one by one, the operations interleaved in blocks of "
            f"{BLOCK} after {WARMUP} untimed runs each; lookups find each an item not loaded; "
            "cell = the median (and p90) per transaction of the round whose median is the "
            "least; growth = cell at the largest C / cell at the smallest; ratio = copal cell / "
            "ZODB cell at one C; a control row times the same plain Python in every worker; "
            "copal's db.stats() deltas around each transaction"
        ),
    }


def run(
    args: argparse.Namespace, requested: list[str], report: TextIO, progress_factory: Callable[[int], Any],
) -> tuple[int, dict[str, Any] | None]:
    """Run the suite for ``copal bench``; the exit status and the JSON document."""
    cached_sizes: list[int] = args.cached or list(DEFAULT_CACHED)
    reps: int = args.tx_reps
    if args.zodb_cache_size is not None:
        print("copal bench: --zodb-cache-size does not apply to --suite transactions (both caches "
              "hold every object)", file=sys.stderr)
        return 2, None
    systems, skipped = usable_systems(
        requested, lambda name: TX_SYSTEMS[name].unavailable(), "the transaction suite"
    )
    if not systems:
        return 1, None
    labels = {s: TX_SYSTEMS[s].label for s in systems}
    cache_objects = max(cached_sizes) + EXTRA + CACHE_SLACK
    out = Path(args.out)
    work = out / "work" / "transactions"
    timeout = DEFAULT_TIMEOUT if args.timeout is None else args.timeout
    progress = progress_factory(args.reps * len(cached_sizes) * len(systems))
    started = time.monotonic()
    objects = {c: (max(cached_sizes) if args.tx_fixed_size else c) + EXTRA for c in cached_sizes}
    reports = run_all(systems, cached_sizes, objects, args.reps, reps, cache_objects, work, timeout, progress)
    progress.clear()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    summary = summarize(reports, systems, cached_sizes, objects, cache_objects)
    failed = any(not r.get("ok") for per in reports.values() for rounds in per.values() for r in rounds)

    print(
        f"Cells: median (and p90) time per transaction of {reps} timed transactions in a process "
        "per system and cache size, after loading that many objects into the cache; of "
        f"{args.reps} round(s), the round with the least median; growth: the cell at the "
        "largest cache size / at the smallest; copal / ZODB: ratio of the cells (below 1, copal "
        "is faster); control: plain Python, no database (its growth is the machine's); objects "
        "encoded: copal's db.stats()['objects_encoded'] per transaction (mean).",
        file=report,
    )
    print("", file=report)
    print(format_table(summary, systems, labels), file=report)
    failures = {
        f"{system} cached={cached:,}": errors[0]
        for system, per in reports.items() for cached, rounds in per.items()
        if (errors := [r["error"] for r in rounds if not r.get("ok") and not str(r.get("error")).startswith("skipped:")])
    }
    for line in problem_lines(failures, skipped):
        print(line, file=report)
    report.flush()
    print(f"(suite took {time.monotonic() - started:.0f} s)", file=sys.stderr)

    if not args.no_chart:
        chart = out / "transactions.png"
        why_not = draw_chart(summary, systems, labels, chart)
        print(f"chart: {chart}" if why_not is None else f"copal bench: {why_not}", file=sys.stderr)

    document = {
        "meta": metadata(systems, skipped, cached_sizes, args.reps, reps, cache_objects, args.tx_fixed_size),
        "systems": systems,
        "labels": labels,
        "operations": [{"id": op.id, "title": op.title} for op in OPERATIONS],
        "results": summary,
    }
    return (1 if failed else 0), document
