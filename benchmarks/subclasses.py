"""Subclasses of built-ins and the containers of ``collections`` (OrderedDict, defaultdict,
deque): copal's ``dumps``/``loads`` against pickle's, in one process. Each case is a list of
10,000 small instances; each figure is the least thread CPU time of ``--calls`` calls, the two
libraries interleaved call by call, with the collector off (benchmarks/pairing.py).

These values take copal's SUBCLASS path (docs/FORMAT.md section 6.7), which rebuilds each
instance with its built-in base's own functions, so that no method of the class runs: the
per-value cost of that path is what this measures.

    python benchmarks/subclasses.py --calls 20
"""

from __future__ import annotations

import argparse
import collections
import pickle
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import copal  # noqa: E402
from pairing import least_times  # noqa: E402


class ListChild(list):  # type: ignore[type-arg]
    pass


class DictChild(dict):  # type: ignore[type-arg]
    pass


class TupleChild(tuple):  # type: ignore[type-arg]
    pass


COUNT = 10_000

CASES: dict[str, Callable[[], list[Any]]] = {
    "defaultdict": lambda: [collections.defaultdict(list, {"a": [i], "b": [i + 1]}) for i in range(COUNT)],
    "deque": lambda: [collections.deque([i, i + 1, i + 2]) for i in range(COUNT)],
    "OrderedDict": lambda: [collections.OrderedDict(a=i, b=i + 1) for i in range(COUNT)],
    "list subclass": lambda: [ListChild([i, i + 1]) for i in range(COUNT)],
    "dict subclass": lambda: [DictChild(a=i) for i in range(COUNT)],
    "tuple subclass": lambda: [TupleChild((i, i + 1)) for i in range(COUNT)],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    print(f"{'case':16} {'copal dumps':>12} {'pickle':>8} {'ratio':>6} {'copal loads':>12} {'pickle':>8} {'ratio':>6}")
    for name, make in CASES.items():
        value = make()
        streams = {"copal": copal.dumps(value), "pickle": pickle.dumps(value)}
        assert copal.loads(streams["copal"]) == value
        writes = least_times({"copal": lambda: copal.dumps(value), "pickle": lambda: pickle.dumps(value)}, args.calls, gc_on=False)
        reads = least_times(
            {"copal": lambda: copal.loads(streams["copal"]), "pickle": lambda: pickle.loads(streams["pickle"])}, args.calls, gc_on=False
        )
        print(
            f"{name:16} {writes['copal'] * 1e3:9.2f} ms {writes['pickle'] * 1e3:5.2f} ms {writes['copal'] / writes['pickle']:6.2f}"
            f" {reads['copal'] * 1e3:9.2f} ms {reads['pickle'] * 1e3:5.2f} ms {reads['copal'] / reads['pickle']:6.2f}"
        )


if __name__ == "__main__":
    main()
