"""The query benchmark's results: the summary of the workers' reports (medians, ratios,
loads), the target checks, the Markdown table and the chart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from copal.bench.charts import NO_MATPLOTLIB, finish, log_bars, pyplot
from copal.bench.query_data import QUERIES, QUERIES_BY_ID
from copal.bench.query_systems import QUERY_SYSTEMS
from copal.bench.tables import format_bytes, format_duration, target_rows


def summarize(raw: dict[str, Any], systems: list[str], baseline: str, n: int) -> dict[str, Any]:
    """The JSON-ready results: per query and system, medians and ratios; load; targets."""
    reports = raw["systems"]
    queries = []
    for spec in QUERIES:
        base_report = reports.get(baseline, {})
        base = base_report["queries"][spec.id] if base_report.get("ok") else None
        digests: dict[str, str] = {}
        per: dict[str, Any] = {}
        for s in systems:
            rep = reports[s]
            if not rep.get("ok"):
                per[s] = {"median_s": None, "ratio": None, "error": rep.get("error")}
                continue
            r = dict(rep["queries"][spec.id])
            r["ratio"] = (
                None if s == baseline or base is None or not base["median_s"]
                else r["median_s"] / base["median_s"]
            )
            if spec.scan:
                r["records_per_s"] = n / r["median_s"] if r["median_s"] else None
            per[s] = r
            digests[s] = r["digest"]
        agree = len(set(digests.values())) <= 1
        queries.append({
            "id": spec.id, "title": spec.title, "indexed": spec.indexed, "scan": spec.scan,
            "results_agree": agree, "results": per,
        })

    loads: dict[str, Any] = {}
    base_store = QUERY_SYSTEMS[baseline].store
    base_load = raw["loads"].get(base_store, {})
    for s in systems:
        load = raw["loads"][QUERY_SYSTEMS[s].store]
        if not load.get("ok"):
            loads[s] = {"seconds": None, "error": load.get("error")}
            continue
        shared = load.get("loaded_by") != s
        loads[s] = {
            "seconds": load["seconds"],
            "shared_with": load.get("loaded_by") if shared else None,
            "reused": bool(load.get("reused")),
            "size_bytes": load.get("size_bytes"),
            "ratio": (
                None if s == baseline or not base_load.get("ok")
                else load["seconds"] / base_load["seconds"]
            ),
            "size_ratio": (
                None if s == baseline or not base_load.get("size_bytes") or not load.get("size_bytes")
                else load["size_bytes"] / base_load["size_bytes"]
            ),
        }
    extra = {
        s: {k: reports[s].get(k) for k in ("explain", "info", "rss_kb")} for s in systems if reports[s].get("ok")
    }
    return {
        "people": n,
        "queries": queries,
        "load": loads,
        "details": extra,
        "targets": evaluate_targets(queries, n),
    }


def evaluate_targets(queries: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The suite's targets, each with ``met`` (None where a system needed did not run)."""
    def median(qid: str, system: str) -> float | None:
        for q in queries:
            if q["id"] == qid:
                value = q["results"].get(system, {}).get("median_s")
                return None if value is None else float(value)
        return None

    targets: list[dict[str, Any]] = []
    cases = []
    compared = [q for q in queries if QUERIES_BY_ID[q["id"]].against_sqlite]
    for q in compared:
        c, s = median(q["id"], "copal"), median(q["id"], "sqlite")
        if c is not None and s is not None:
            cases.append(f"{q['id']} x{s / c:.2f}")
    all_faster = [median(q["id"], "copal") is not None and median(q["id"], "sqlite") is not None
                  and (median(q["id"], "copal") or 0) <= (median(q["id"], "sqlite") or 0) for q in compared]
    targets.append({
        "target": "copal at least as fast as SQLite in every query (Q5o aside)",
        "result": "SQLite / copal: " + ", ".join(cases) if cases else "copal or SQLite did not run",
        "met": all(all_faster) if cases and len(cases) == len(compared) else None,
    })
    values, objects = median("Q5", "copal"), median("Q5o", "copal")
    targets.append({
        "target": "two fields of everyone (Q5) at least 5x faster than reading them from the objects (Q5o)",
        "result": "-" if values is None or objects is None else f"x{objects / values:.1f}",
        "met": None if values is None or objects is None else objects / values >= 5,
    })
    q1 = median("Q1", "copal")
    targets.append({
        "target": "indexed lookup (Q1) under 20 µs per query",
        "result": "-" if q1 is None else f"{q1 * 1e6:.1f} µs",
        "met": None if q1 is None else q1 < 20e-6,
    })
    for qid in ("Q3", "Q4b"):
        t = median(qid, "copal")
        targets.append({
            "target": f"unindexed scan ({qid}) at least 10 million records/s",
            "result": "-" if t is None else f"{n / t / 1e6:.1f} M records/s",
            "met": None if t is None else n / t >= 10e6,
        })
        z = median(qid, "zodb")
        targets.append({
            "target": f"unindexed scan ({qid}) at least 10x faster than ZODB's loop",
            "result": "-" if t is None or z is None else f"x{z / t:.1f}",
            "met": None if t is None or z is None else z / t >= 10,
        })
    return targets


def format_table(summary: dict[str, Any], systems: list[str], labels: dict[str, str]) -> str:
    """The Markdown table of one run, then the targets."""
    lines = [
        f"## Queries, N = {summary['people']:,} people",
        "",
        "| query | " + " | ".join(labels[s] for s in systems) + " |",
        "|---|" + "---:|" * len(systems),
    ]
    for q in summary["queries"]:
        cells = []
        for s in systems:
            r = q["results"][s]
            if r.get("median_s") is None:
                cells.append("error" if r.get("error") else "-")
                continue
            cell = format_duration(r["median_s"])
            if r.get("ratio") is not None:
                cell += f" (x{r['ratio']:.2f})"
            cells.append(cell)
        mark = "" if q["results_agree"] else " **results differ**"
        lines.append(f"| {q['title']}{mark} | " + " | ".join(cells) + " |")
    for q in summary["queries"]:
        if q["scan"]:
            cells = []
            for s in systems:
                rate = q["results"][s].get("records_per_s")
                cells.append("-" if rate is None else f"{rate / 1e6:.1f} M/s")
            lines.append(f"| {q['id']} scan rate (records/s) | " + " | ".join(cells) + " |")
    cells, sizes = [], []
    for s in systems:
        load = summary["load"][s]
        if load.get("seconds") is None:
            cells.append("error")
            sizes.append("-")
            continue
        if load.get("shared_with"):
            cells.append(f"(file of {labels.get(load['shared_with'], load['shared_with'])})")
            sizes.append("(same file)")
            continue
        cell = f"{load['seconds']:.1f} s" if load["seconds"] >= 1 else format_duration(load["seconds"])
        cells.append(cell + (f" (x{load['ratio']:.2f})" if load.get("ratio") is not None else ""))
        size = load.get("size_bytes")
        sizes.append("-" if size is None else format_bytes(size) + (
            f" (x{load['size_ratio']:.2f})" if load.get("size_ratio") is not None else ""))
    lines.append("| load N people + N addresses (one-time) | " + " | ".join(cells) + " |")
    lines.append("| on-disk size after load | " + " | ".join(sizes) + " |")
    lines += target_rows(summary["targets"])
    return "\n".join(lines)


def draw_chart(summary: dict[str, Any], systems: list[str], labels: dict[str, str], path: Path) -> str | None:
    """Save a log-scale grouped bar chart of the per-query medians; return why not, or None."""
    plt = pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    queries = summary["queries"]
    fig, ax = plt.subplots(figsize=(max(8.0, 1.6 * len(queries) + 2), 5.0))
    series = [(labels[s], [q["results"][s].get("median_s") for q in queries]) for s in systems]
    log_bars(ax, [q["id"] for q in queries], series, "median seconds per query (log scale)")
    ax.set_title(f"Queries, N = {summary['people']:,} people (warm process, median per query)")
    finish(fig, [ax], path)
    return None
