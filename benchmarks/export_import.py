"""Exporting and importing a database of N small objects (docs/EXPORT.md): for each format,
uncompressed and with zstd, the time and peak memory (RSS) of `Database.export` and of
`Database.import_from` into a new database, and the export's size; `Database.backup` (a
compacted LMDB copy) of the same database in the same run, as the baseline. Each operation runs
in a process of its own so that its peak RSS is its own.

Usage::

    python benchmarks/export_import.py --objects 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import copal  # noqa: E402


class Customer(copal.Persistent):
    def __init__(self, name: str, age: int, balance: float, friend: "Customer | None") -> None:
        self.name = name
        self.age = age
        self.balance = balance
        self.tags = ["new", "web"]
        self.friend = friend


def create(where: str, objects: int, per_list: int) -> None:
    """`objects` customers, each referring to the previous one, held by PersistentLists of
    `per_list` customers (one list of all of them when `per_list` is 0)."""
    db = copal.open(where, durable=False)
    batch = 100_000
    with db.transaction() as tx:
        tx.root["customers"] = copal.PersistentList()
    for start in range(0, objects, batch):
        with db.transaction() as tx:
            lists = tx.root["customers"]
            previous = None
            for i in range(start, min(objects, start + batch)):
                if not lists or (per_list and i % per_list == 0):
                    lists.append(copal.PersistentList())
                previous = Customer(f"customer {i}", 20 + i % 60, i * 0.25, previous)
                lists[-1].append(previous)
    db.close()


def run(operation: str, *args: str) -> dict[str, float]:
    """Runs `operation` in a child process; returns its seconds and peak RSS in MiB."""
    out = subprocess.run([sys.executable, __file__, "--child", operation, *args], capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(out.stdout)
    return result


def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM). Not `ru_maxrss`: Linux carries that across
    exec from the forked parent, which held the whole graph."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


def child(operation: str, args: list[str]) -> None:
    started = time.perf_counter()
    if operation == "export":
        source, out, fmt, compress = args
        with copal.open(source) as db:
            db.export(out, format=fmt, compress=None if compress == "none" else compress)  # type: ignore[arg-type]
    elif operation == "import":
        target, source = args
        with copal.open(target, durable=False) as db:
            db.import_from(source)
    elif operation == "backup":
        source, dest = args
        with copal.open(source) as db:
            db.backup(dest)
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "rss_mib": peak_rss_mib()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--per-list", type=int, default=1000, help="customers per PersistentList (0: one list of all)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1:])
        return
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "source")
        started = time.perf_counter()
        create(source, args.objects, args.per_list)
        print(f"{args.objects:,} objects ({args.per_list or args.objects:,} per list) created in {time.perf_counter() - started:.1f} s")
        with copal.open(source) as db:
            disk = db.disk_size()
        backup = run("backup", source, os.path.join(tmp, "backup"))
        backup_size = sum(f.stat().st_size for f in Path(tmp, "backup").iterdir())
        print(f"database {disk / 2**20:.0f} MiB; backup {backup['seconds']:.2f} s, {backup_size / 2**20:.0f} MiB, peak RSS {backup['rss_mib']:.0f} MiB")
        print(f"{'format':<12} {'size MiB':>9} {'export s':>9} {'x backup':>9} {'RSS MiB':>8} {'import s':>9} {'RSS MiB':>8}")
        for fmt in ("copal", "json", "xml"):
            for compress in ("none", "zstd"):
                out = os.path.join(tmp, f"export-{fmt}-{compress}")
                exported = run("export", source, out, fmt, compress)
                target = os.path.join(tmp, f"target-{fmt}-{compress}")
                imported = run("import", target, out)
                size = os.path.getsize(out) / 2**20
                label = fmt if compress == "none" else f"{fmt}+zstd"
                print(
                    f"{label:<12} {size:>9.1f} {exported['seconds']:>9.2f} {exported['seconds'] / backup['seconds']:>9.1f}"
                    f" {exported['rss_mib']:>8.0f} {imported['seconds']:>9.2f} {imported['rss_mib']:>8.0f}"
                )
                os.remove(out)
                subprocess.run(["rm", "-rf", target], check=True)


if __name__ == "__main__":
    main()
