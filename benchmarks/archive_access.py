"""Random access into an archive (docs/STREAM.md section 10): the time to read one value of
100,000 small plain objects with ``archive[k]``, from bytes and from a memory-mapped file, and
the time to open the archive. Best of 5 runs of 200,000 reads.

Usage::

    python benchmarks/archive_access.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import timeit
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

import copal  # noqa: E402


class Row:
    def __init__(self, x: int, y: str) -> None:
        self.x = x
        self.y = y


def per_call(statement: str, scope: dict[str, object], number: int) -> float:
    return min(timeit.repeat(statement, globals=scope, number=number, repeat=5)) / number


def main() -> None:
    rows = [Row(i, f"s{i}") for i in range(100_000)]
    data = copal.pack_many(rows)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.cpa")
        Path(path).write_bytes(data)
        scope = {"copal": copal, "data": data, "a": copal.Archive(data), "m": copal.Archive(path)}
        print(f"read one value (bytes):       {per_call('a[54321]', scope, 200_000) * 1e6:6.2f} us")
        print(f"read one value (mapped file): {per_call('m[54321]', scope, 200_000) * 1e6:6.2f} us")
        print(f"open the archive (bytes):     {per_call('copal.Archive(data)', scope, 1000) * 1e6:6.2f} us")
        del scope
    print(f"archive {len(data):,} bytes; one stream of the list {len(copal.dumps(rows)):,} bytes")


if __name__ == "__main__":
    main()
