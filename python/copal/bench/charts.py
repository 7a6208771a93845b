"""The suites' charts: log-scale bars, a group per row of a table and a bar per system in it.

matplotlib belongs to the ``bench`` extra: :func:`pyplot` loads it on demand, and a suite without
it prints :data:`NO_MATPLOTLIB` and draws nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

#: What a suite says when it cannot draw.
NO_MATPLOTLIB = "matplotlib is not installed (pip install 'copaldb[bench]'): no chart"


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the file-only Agg backend, or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def log_bars(
    ax: Any, groups: Sequence[str], series: Sequence[tuple[str, Sequence[float | None]]], ylabel: str,
    tick_fontsize: float | None = None,
) -> None:
    """Draw on ``ax`` a group of bars per name of ``groups``, in each a bar per (label, values)
    of ``series`` (``values[j]`` for group j; None or 0 draws no bar), on a log scale, with a
    legend."""
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series):
        xs, ys = [], []
        for j, value in enumerate(values):
            if value is not None and value > 0:
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(value)
        ax.bar(xs, ys, width=width, label=label)
    ax.set_yscale("log")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, **({} if tick_fontsize is None else {"fontsize": tick_fontsize}))
    ax.set_ylabel(ylabel)


def finish(fig: Any, axes: Sequence[Any], path: Path) -> None:
    """Grid and legend on each of ``axes``, then save ``fig`` as ``path`` and close it."""
    import matplotlib.pyplot as plt

    for ax in axes:
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
