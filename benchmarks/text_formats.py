"""copal's JSON and XML output against orjson and ElementTree (docs/TEXT_FORMATS.md).

100,000 small dicts (an int, a str, a float and a list of two str; seeded), and the same rows as
dataclasses: ``copal.dumps(rows, format="json")`` against ``orjson.dumps(rows)``, and the reads
(``copal.loads`` against ``orjson.loads``, which returns plain dicts, the same values here).
XML: ``copal.dumps(rows, format="xml")`` against the standard library's ElementTree building one
element per row (attributes for the scalars, a child per tag) and serializing it, and
``ElementTree.tostring`` alone on the prebuilt tree; reads against ``ElementTree.fromstring``
(which returns elements, not the rows).
Medians over the repetitions, codecs interleaved; "x orjson" is the ratio of the medians.
orjson is optional (``pip install orjson``): without it only copal's times are printed.

Usage::

    python benchmarks/text_formats.py            # N = 100,000, 7 repetitions
    python benchmarks/text_formats.py -n 10000 -r 3
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
import time
from pathlib import Path
from xml.etree import ElementTree
from typing import Any, Callable

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

import copal  # noqa: E402

try:
    import orjson
except ImportError:  # optional: only the comparison needs it
    orjson = None


@dataclasses.dataclass
class Row:
    id: int
    name: str
    score: float
    tags: list[str]


def rows(n: int) -> list[dict[str, Any]]:
    rng = random.Random(1)
    return [{"id": i, "name": f"foo-{i}", "score": rng.random(), "tags": ["a", "b"]} for i in range(n)]


def element_tree(rows: list[dict[str, Any]]) -> ElementTree.Element:
    root = ElementTree.Element("rows")
    for row in rows:
        element = ElementTree.SubElement(root, "row", id=str(row["id"]), name=row["name"], score=repr(row["score"]))
        for tag in row["tags"]:
            ElementTree.SubElement(element, "tag").text = tag
    return root


def median_times(cases: dict[str, Callable[[], object]], repetitions: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repetitions):
        for name, run in cases.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100_000)
    parser.add_argument("-r", type=int, default=7)
    args = parser.parse_args()
    dicts = rows(args.n)
    objects = [Row(**row) for row in dicts]
    text = copal.dumps(dicts, format="json")
    xml_text = copal.dumps(dicts, format="xml")
    tree = element_tree(dicts)
    tree_text = ElementTree.tostring(tree, encoding="unicode")
    cases: dict[str, Callable[[], object]] = {
        "write dicts: copal json": lambda: copal.dumps(dicts, format="json"),
        "write dicts: copal binary": lambda: copal.dumps(dicts),
        "write dataclasses: copal json": lambda: copal.dumps(objects, format="json"),
        "read dicts: copal json": lambda: copal.loads(text),
        "write xml: copal xml": lambda: copal.dumps(dicts, format="xml"),
        "write xml: ElementTree": lambda: ElementTree.tostring(element_tree(dicts), encoding="unicode"),
        "write xml: ElementTree tostring only": lambda: ElementTree.tostring(tree, encoding="unicode"),
        "read xml: copal xml": lambda: copal.loads(xml_text),
        "read xml: ElementTree": lambda: ElementTree.fromstring(tree_text),
    }
    if orjson is not None:
        raw = orjson.dumps(dicts)
        cases |= {
            "write dicts: orjson": lambda: orjson.dumps(dicts),
            "write dataclasses: orjson": lambda: orjson.dumps(objects),
            "read dicts: orjson": lambda: orjson.loads(raw),
        }
    medians = median_times(cases, args.r)
    for name, seconds in medians.items():
        line = f"{name:38} {seconds * 1e3:9.1f} ms"
        kind = name.split(":")[0]
        reference_name = "ElementTree" if "xml" in kind else "orjson"
        reference = medians.get(f"{kind}: {reference_name}")
        if reference and reference_name not in name:
            line += f"   {seconds / reference:5.2f}x {reference_name}"
        print(line)


if __name__ == "__main__":
    main()
