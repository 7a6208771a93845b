"""The async web-application benchmark: ``copal bench --suite async``.

A shop's read endpoint (``GET /products/{sku}``) and purchase endpoint (``POST
/products/{sku}/orders``: take one unit from the stock, add an order, retried or locked against
concurrent purchases) in FastAPI, served in process through httpx's ASGI transport to
``--async-clients`` concurrent clients (default 64): ``--async-reads`` reads (default 2,000), then
``--async-buys`` purchases (default 1,000), across ``--async-products`` products (default 100)
with stock enough for every purchase. The systems (:mod:`copal.bench.async_load`):

========================  ============================================================
copal-async               copal's asyncio API in ``async def`` endpoints, embedded store
copal-sync                sync copal in ``def`` endpoints, on FastAPI's thread pool
sqlalchemy-aiosqlite      SQLAlchemy 2's asyncio ORM on SQLite through aiosqlite
copal-async-pg            copal-async on PostgreSQL (``--store postgresql://...``)
sqlalchemy-asyncpg        SQLAlchemy 2's asyncio ORM on PostgreSQL through asyncpg
========================  ============================================================

The PostgreSQL systems run when ``--store`` is a PostgreSQL URL (``{name}`` in it is replaced
by a database name per system; each database is dropped and created again). Each system runs in
a fresh worker process per round (``--reps`` rounds, the systems' order rotating); a cell is a
phase's requests per second in the system's best round (the machine's noise only ever slows a
run down). The event-loop lag is the longest a coroutine sleeping 1 ms waited beyond its 1 ms,
over every round's timed phases; beside it, the longest single step the loop ran, which tells a
loop held by one piece of code from a loop busy with many clients' short steps. The targets: copal async at least 1.5x SQLAlchemy on the same
kind of store, at least the thread-pool app, and a lag under 5 ms on the embedded store.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, TextIO

from copal.bench.async_load import ASYNC_SYSTEMS as ASYNC_SYSTEMS  # the runner's --systems
from copal.bench.systems import is_postgresql
from copal.bench.environment import package_versions, run_metadata, usable_systems
from copal.bench.tables import format_duration, problem_lines, target_rows
from copal.bench.workers import COPAL_DIR, last_line, run_worker, worker_env

DEFAULT_READS = 2_000
DEFAULT_BUYS = 1_000
DEFAULT_CLIENTS = 64
DEFAULT_PRODUCTS = 100
#: Seconds one worker may take.
DEFAULT_TIMEOUT = 600.0
#: copal async's requests/s over SQLAlchemy's, at least.
SQLALCHEMY_TARGET = 1.5
#: The longest acceptable event-loop lag of copal async on the embedded store, in seconds.
LAG_TARGET = 0.005
PHASES = (("read", "read a product"), ("buy", "buy a product"))
#: Each comparison of the table: copal's system, the other, the least acceptable ratio.
COMPARISONS = (
    ("copal-async", "sqlalchemy-aiosqlite", SQLALCHEMY_TARGET),
    ("copal-async-pg", "sqlalchemy-asyncpg", SQLALCHEMY_TARGET),
    ("copal-async", "copal-sync", 1.0),
)
WORKER = "copal.bench.async_load"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the async suite (``copal bench --suite async``)."""
    group = parser.add_argument_group(
        "async suite (--suite async)",
        "also takes --reps (rounds: a worker per system each), --systems (" + ", ".join(ASYNC_SYSTEMS)
        + "), --store postgresql://.../{name} (runs the PostgreSQL systems), --json, --out, --keep "
        "and --timeout",
    )
    for option, default, what in (
        ("--async-reads", DEFAULT_READS, "reads of a product"),
        ("--async-buys", DEFAULT_BUYS, "purchases"),
        ("--async-clients", DEFAULT_CLIENTS, "concurrent clients"),
        ("--async-products", DEFAULT_PRODUCTS, "products the requests name"),
    ):
        group.add_argument(option, type=positive, default=default, metavar="N", help=f"{what} (default {default:,})")


def positive(value: str) -> int:
    """A count of at least 1 (an argparse type).

    Example:
        >>> positive("2_000")
        2000
    """
    try:
        n = int(value.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def default_systems(store: str | None) -> list[str]:
    """The systems run when --systems is not given: the PostgreSQL ones with a PostgreSQL
    --store."""
    return [name for name, s in ASYNC_SYSTEMS.items() if not s.postgresql or (store is not None and is_postgresql(store))]


def why_not(name: str, store: str | None) -> str | None:
    if ASYNC_SYSTEMS[name].postgresql and (store is None or not is_postgresql(store)):
        return "runs on PostgreSQL: pass --store postgresql://user@host:port/{name}"
    return ASYNC_SYSTEMS[name].unavailable()


def database_url(store: str, system: str) -> str:
    """The PostgreSQL database of ``system``: ``{name}`` in ``store`` replaced, else a name
    appended.

    Example:
        >>> database_url("postgresql://pg@db:5432/{name}", "copal-async-pg")
        'postgresql://pg@db:5432/copal_bench_async_copal_async_pg'
    """
    name = "copal_bench_async_" + system.replace("-", "_")
    return store.replace("{name}", name) if "{name}" in store else f"{store}_{name}"


# --------------------------------------------------------------------------- summary


def summarize(reports: dict[str, list[dict[str, Any]]], systems: list[str]) -> dict[str, Any]:
    """Per system and phase: the best round's requests/s, every round's, the worst lag; the
    ratios of :data:`COMPARISONS` and the targets."""
    results: dict[str, Any] = {}
    for s in systems:
        ok = [r for r in reports[s] if r.get("ok")]
        per: dict[str, Any] = {"errors": [r.get("error") for r in reports[s] if not r.get("ok")]}
        for phase, _ in PHASES:
            rounds = [r[phase] for r in ok]
            per[phase] = {
                "rps": max((r["rps"] for r in rounds), default=None),
                "rounds_rps": [r["rps"] for r in rounds],
                "lag_s": max((r["lag_s"] for r in rounds), default=None),
                "longest_step_s": max((r["longest_step_s"] for r in rounds), default=None),
            }
        retries = [r["stats"]["retries"] for r in ok if "retries" in r["stats"]]
        per["retries"] = max(retries, default=None)
        per["lag_s"] = max((per[p]["lag_s"] for p, _ in PHASES if per[p]["lag_s"] is not None), default=None)
        results[s] = per
    ratios = []
    targets: list[dict[str, Any]] = []
    for mine, other, least in COMPARISONS:
        if mine not in systems or other not in systems:
            continue
        for phase, title in PHASES:
            a, b = results[mine][phase]["rps"], results[other][phase]["rps"]
            ratio = a / b if a is not None and b else None
            ratios.append({"system": mine, "other": other, "phase": phase, "ratio": ratio})
            targets.append({
                "target": f"{mine} {title}: at least {least:g}x {other} (requests/s)",
                "result": "-" if ratio is None else f"x{ratio:.2f}",
                "met": None if ratio is None else ratio >= least,
            })
    if "copal-async" in systems:
        lag = results["copal-async"]["lag_s"]
        targets.append({
            "target": f"copal-async event-loop lag under {format_duration(LAG_TARGET)} (embedded store)",
            "result": "-" if lag is None else format_duration(lag),
            "met": None if lag is None else lag < LAG_TARGET,
        })
    return {"results": results, "ratios": ratios, "targets": targets}


def format_table(summary: dict[str, Any], systems: list[str], labels: dict[str, str], args: argparse.Namespace) -> str:
    lines = [
        f"## Async shop: {args.async_clients} concurrent clients, {args.async_reads:,} reads, "
        f"{args.async_buys:,} purchases, {args.async_products} products",
        "",
        "| system | read requests/s | buy requests/s | event-loop lag (read / buy) | longest step (read / buy) "
        "| conflict retries |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in systems:
        r = summary["results"][s]
        if r["read"]["rps"] is None:
            lines.append(f"| {labels[s]} | error | error | - | - | - |")
            continue
        lag, step = (" / ".join(format_duration(r[p][key]) for p, _ in PHASES) for key in ("lag_s", "longest_step_s"))
        retries = "-" if r["retries"] is None else f"{r['retries']:,}"
        lines.append(f"| {labels[s]} | {r['read']['rps']:,.0f} | {r['buy']['rps']:,.0f} | {lag} | {step} | {retries} |")
    if summary["ratios"]:
        lines += ["", "| ratio (requests/s) | read | buy |", "|---|---:|---:|"]
        pairs = dict.fromkeys((r["system"], r["other"]) for r in summary["ratios"])
        for mine, other in pairs:
            cells = [next(r["ratio"] for r in summary["ratios"] if (r["system"], r["other"], r["phase"]) == (mine, other, p))
                     for p, _ in PHASES]
            lines.append(f"| {labels[mine]} / {labels[other]} | "
                         + " | ".join("-" if c is None else f"x{c:.2f}" for c in cells) + " |")
    lines += target_rows(summary["targets"])
    return "\n".join(lines)


# --------------------------------------------------------------------------- the run


def run(
    args: argparse.Namespace, requested: list[str] | None, report: TextIO, progress_factory: Callable[[int], Any],
) -> tuple[int, dict[str, Any] | None]:
    """Run the suite for ``copal bench``; the exit status and the JSON document."""
    systems, skipped = usable_systems(
        requested or default_systems(args.store), lambda name: why_not(name, args.store), "the async suite"
    )
    if not systems:
        return 1, None
    labels = {s: ASYNC_SYSTEMS[s].label for s in systems}
    out = Path(args.out)
    work = out / "work" / "async"
    timeout = DEFAULT_TIMEOUT if args.timeout is None else args.timeout
    progress = progress_factory(args.reps * len(systems))
    env = worker_env()
    started = time.monotonic()
    reports: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for round_no in range(args.reps):
        turn = round_no % len(systems)
        for system in systems[turn:] + systems[:turn]:
            label = f"async round {round_no + 1}/{args.reps} {system}"
            progress.show(label)
            dir = work / f"round{round_no + 1}" / system
            shutil.rmtree(dir, ignore_errors=True)
            spec = {
                "system": system, "dir": str(dir), "copal_dir": COPAL_DIR,
                "url": database_url(args.store, system) if ASYNC_SYSTEMS[system].postgresql else None,
                "reads": args.async_reads, "buys": args.async_buys, "clients": args.async_clients,
                "products": args.async_products,
            }
            result = run_worker(WORKER, spec, timeout, env)
            if not result.get("ok"):
                progress.message(f"copal bench: {label} failed: {last_line(str(result.get('error')))}")
            reports[system].append(result)
            progress.step()
    progress.clear()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    summary = summarize(reports, systems)

    print(
        f"Cells: requests per second of the best of {args.reps} round(s), each system in a fresh "
        "process per round, served in process (httpx ASGI transport); event-loop lag: the longest "
        "a coroutine sleeping 1 ms waited beyond it, over every round; longest step: the longest "
        "single callback the loop ran (a task's step); conflict retries: copal's, in a round's "
        "purchases (the most of any round); ratios: copal's requests/s "
        "over the other's.",
        file=report,
    )
    print("", file=report)
    print(format_table(summary, systems, labels, args), file=report)
    failures = {s: errors[0] for s, rounds in reports.items() if (errors := [r["error"] for r in rounds if not r.get("ok")])}
    for line in problem_lines(failures, skipped):
        print(line, file=report)
    report.flush()
    print(f"(suite took {time.monotonic() - started:.0f} s)", file=sys.stderr)

    document = {
        "meta": {
            **run_metadata("async", package_versions(ASYNC_SYSTEMS[s].versions for s in systems)),
            "reps": args.reps, "reads": args.async_reads, "buys": args.async_buys,
            "clients": args.async_clients, "products": args.async_products,
            "store": args.store, "skipped_systems": skipped,
            "method": (
                "per round, each system in a fresh worker process: the products created (untimed), "
                "the FastAPI app's lifespan entered, httpx.AsyncClient on ASGITransport; "
                f"warm-up reads, then the reads, then the purchases, each from {args.async_clients} "
                "client coroutines; requests/s = requests / wall time of the phase; a 1 ms ticker "
                "coroutine records the event loop's lag; the best round's requests/s per system"
            ),
        },
        "systems": systems,
        "labels": labels,
        **summary,
    }
    failed = any(not r.get("ok") for rounds in reports.values() for r in rounds)
    return (1 if failed else 0), document
