"""Pieces of the suites' Markdown tables.

Example:
    >>> print("\\n".join(target_rows([{"target": "lookup within 1.2x", "result": "x1.05", "met": True}])))
    <BLANKLINE>
    | target | result | met |
    |---|---|---|
    | lookup within 1.2x | x1.05 | yes |
"""

from __future__ import annotations

from typing import Any, Iterable


def format_duration(t: float) -> str:
    """A time in µs, ms or s with three significant digits."""
    if t < 1e-3:
        return f"{t * 1e6:.3g} µs"
    if t < 1:
        return f"{t * 1e3:.3g} ms"
    return f"{t:.3g} s"


def format_bytes(b: float) -> str:
    """A size in kB or MB with one decimal."""
    if b >= 1e6:
        return f"{b / 1e6:.1f} MB"
    return f"{b / 1e3:.1f} kB"


def target_rows(targets: Iterable[dict[str, Any]]) -> list[str]:
    """A blank line, then a table of the ``targets``: each one's ``target`` and ``result``, and
    whether it is ``met`` (``n/a`` where a run it needs is missing, a bold **no** where not)."""
    lines = ["", "| target | result | met |", "|---|---|---|"]
    for t in targets:
        met = "n/a" if t["met"] is None else ("yes" if t["met"] else "**no**")
        lines.append(f"| {t['target']} | {t['result']} | {met} |")
    return lines


def problem_lines(failures: dict[str, str], skipped: dict[str, str]) -> list[str]:
    """What a suite prints under its tables: each failed run's error (its first, after a blank
    line), then why each system it skipped could not run.

    Example:
        >>> problem_lines({"zodb": "boom"}, {"x": "not installed"})
        ['', 'zodb failed:', 'boom', 'skipped x: not installed']
    """
    lines: list[str] = []
    for run, error in failures.items():
        lines += ["", f"{run} failed:", error]
    return lines + [f"skipped {name}: {reason}" for name, reason in skipped.items()]
