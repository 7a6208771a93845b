"""The query benchmark's worker: in a fresh process, one system loads its store or runs
every query (a warm-up round whose results are compared across systems, then the timed
rounds); :mod:`copal.bench.queries` starts it.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from time import perf_counter
from typing import Any

from copal.bench.query_data import QUERIES, query_params
from copal.bench.query_systems import QUERY_SYSTEMS, QuerySystem
from copal.bench.whitepaper import peak_rss_kb
from copal.bench.workers import run_and_report


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _summary_of(result: Any) -> Any:
    """What a result is compared by across systems: emails (in order), a count or sum, rows of
    values (sorted: each system gives them in its own order), counts per value (sorted), or a
    summary tuple as is."""
    if isinstance(result, (int, tuple)):
        return list(result) if isinstance(result, tuple) else result
    if isinstance(result, dict):
        return sorted(result.items())
    if hasattr(result, "to_pydict"):  # an Arrow table
        return sorted(zip(*result.to_pydict().values()))
    if isinstance(result, list):
        return sorted(tuple(row) for row in result) if result and isinstance(result[0], tuple) else [p.email for p in result]
    return None if result is None else result.email


def run_queries(adapter: QuerySystem, n: int, rounds: int, lookups: int) -> dict[str, Any]:
    """Every query: a warm-up round (checked) then ``rounds`` timed rounds."""
    out: dict[str, Any] = {}
    for spec in QUERIES:
        run = getattr(adapter, spec.method)
        count = spec.per_round(lookups)
        times: list[float] = []
        round_means: list[float] = []
        check: list[Any] = []
        sizes: list[int] = []
        for round_no in range(rounds + 1):
            params = query_params(spec.id, round_no, count, n)
            adapter.begin()
            try:
                elapsed: list[float] = []
                for param in params:
                    t0 = perf_counter()
                    result = run(param)
                    elapsed.append(perf_counter() - t0)
                    if round_no == 0:
                        check.append(_summary_of(result))
                        sizes.append(result if isinstance(result, int) else
                                     result[0] if isinstance(result, tuple) else
                                     len(result) if isinstance(result, (list, dict)) else
                                     result.num_rows if hasattr(result, "num_rows") else int(result is not None))
            finally:
                adapter.end()
            if round_no > 0:
                times.extend(elapsed)
                round_means.append(sum(elapsed) / len(elapsed))
        # Q3's matches come back in each system's own order: compare them sorted.
        if spec.id == "Q3":
            check = [sorted(c) for c in check]
        out[spec.id] = {
            "median_s": statistics.median(times),
            "mean_s": statistics.fmean(times),
            "min_s": min(times),
            "p90_s": statistics.quantiles(times, n=10)[-1] if len(times) >= 2 else times[0],
            "queries": len(times),
            "per_query_round_means_s": round_means,
            "mean_result_size": statistics.fmean(sizes) if sizes else 0.0,
            "digest": _digest(check),
        }
    return out


def worker_main(spec: dict[str, Any]) -> int:
    """Load a store or run the queries, as ``spec`` says; print the report
    (:func:`copal.bench.workers.run_and_report`)."""
    import resource

    def work() -> dict[str, Any]:
        adapter = QUERY_SYSTEMS[spec["system"]]()
        n = int(spec["people"])
        if spec["action"] == "load":
            seconds = adapter.load(spec["dir"], n)
            out: dict[str, Any] = {"ok": True, "seconds": seconds, "info": {}}
        else:
            adapter.open(spec["dir"], spec.get("options") or {})
            adapter.begin()
            try:
                explain = adapter.explain()
            finally:
                adapter.end()
            results = run_queries(adapter, n, int(spec["rounds"]), int(spec["lookups"]))
            info = adapter.info()
            adapter.close()
            out = {"ok": True, "queries": results, "explain": explain, "info": info}
        out["rss_kb"] = peak_rss_kb()
        out["ru_maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return out

    return run_and_report(work)
