"""The ``copal`` command."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, Callable, TypeVar

if TYPE_CHECKING:
    from .database import Database

__all__ = ["main"]

T = TypeVar("T")


def _info(args: argparse.Namespace) -> int:
    import copal

    db = copal.open(args.db)
    try:
        with db.transaction() as tx:
            info = {"location": db.location, "disk_bytes": db.disk_size(), "last_tid": tx.tid_seen, "roots": sorted(map(str, tx.root.keys()))}
        print(json.dumps(info, indent=2) if args.json else "\n".join(f"{k}: {v}" for k, v in info.items()))
    finally:
        db.close()
    return 0


def _on_database(path: str, work: Callable[[Database], T]) -> T:
    """Opens the database at `path`, runs `work` on it and closes it."""
    import copal

    db = copal.open(path)
    try:
        return work(db)
    finally:
        db.close()


def _verify(args: argparse.Namespace) -> int:
    report = _on_database(args.db, lambda db: db.verify())
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['records']} records, {report['references']} references, {report['index_entries']} index entries")
        for problem in report["problems"]:
            print(f"problem: {problem}")
        print("OK" if not report["problems"] else f"{len(report['problems'])} problem(s) found")
    return 0 if not report["problems"] else 1


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _schema(args: argparse.Namespace) -> int:
    raw = _on_database(args.db, lambda db: db.schema())
    removed = dict(raw["removed"])
    types: dict[str, dict[str, Any]] = {}
    for d in raw["descriptors"]:
        name = d["type_name"]
        entry = types.setdefault(
            name, {"type_name": name, "class": d["class"], "records": 0, "removed": removed.get(name, []), "descriptors": []}
        )
        entry["descriptors"].append({"id": d["id"], "fields": d["fields"], "records": d["records"]})
        entry["records"] += d["records"]
    listed = sorted(types.values(), key=lambda t: (t["class"], t["type_name"]))
    total = sum(t["records"] for t in listed)
    if args.json:
        print(json.dumps({"types": listed, "records": total, "unreadable": raw["unreadable"]}, indent=2))
        return 0
    for t in listed:
        gone = f"; removed fields: {', '.join(t['removed'])}" if t["removed"] else ""
        print(f"{t['type_name']} (class {t['class']}): {_plural(t['records'], 'record')}{gone}")
        for d in t["descriptors"]:
            print(f"  descriptor {d['id']:<6} {_plural(d['records'], 'record'):>12}  {', '.join(d['fields']) or '(no fields)'}")
    print(f"total: {_plural(total, 'record')} in {_plural(len(listed), 'type')}")
    if raw["unreadable"]:
        print(f"{_plural(raw['unreadable'], 'record')} with an unreadable header (run copal verify)")
    return 0


def _gc_schema(args: argparse.Namespace) -> int:
    report = _on_database(args.db, lambda db: db.gc_schema(purge=args.purge))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for values in report["removed"]:
        print(f"{values['type_name']}.{values['field']}: removed, still held by {_plural(values['records'], 'record')}")
    if not report["records"]:
        print("no record holds a value of a removed field")
    elif args.purge:
        print(f"purged {_plural(report['purged'], 'record')} in transaction {report['tid']}")
        for oid in report["shared"]:
            print(f"kept object {oid:#x}: a kept field shares a value with a removed one (dropped when it is next written)")
    else:
        holds = "holds" if report["records"] == 1 else "hold"
        print(f"{_plural(report['records'], 'record')} {holds} removed values; run with --purge to drop them")
    return 0


def _backup(args: argparse.Namespace) -> int:
    size = _on_database(args.db, lambda db: db.backup(args.dest))
    if args.json:
        print(json.dumps({"dest": args.dest, "bytes": size}))
    else:
        print(f"backed up {args.db} to {args.dest} ({size:,} bytes, compacted); restore by opening it")
    return 0


def _command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help: str,
    *examples: str,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """A subcommand taking a database path and --json, with its examples in --help."""
    parser = commands.add_parser(
        name,
        help=help,
        description=description or help,
        epilog="examples:\n" + "\n".join(f"  {example}" for example in examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("db")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``copal`` command; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        from .bench.runner import main as bench_main

        result = bench_main(argv[1:])
        return int(result or 0)
    parser = argparse.ArgumentParser(prog="copal", description="copal object database tools")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("bench", help="run the white-paper benchmark suite (copal bench --help)")
    _command(commands, "info", "summary of a database", "copal info bank.copal --json")
    _command(
        commands, "verify", "check records, references and indexes; exit status 1 on problems", "copal verify bank.copal"
    )
    _command(
        commands,
        "schema",
        "stored classes, their descriptor versions and how many records use each",
        "copal schema bank.copal",
        "copal schema bank.copal --json",
        description="Lists every stored type name with its class number, each of its descriptors "
        "(field lists) and the number of records (persistent objects) written with each; works "
        "without the application's classes. Types stored only by value inside records (plain "
        "objects, enums) have descriptors but no records of their own.",
    )
    gc = _command(
        commands,
        "gc",
        "garbage-collect stored data (--schema: values of removed fields)",
        "copal gc --schema bank.copal",
        "copal gc --schema --purge bank.copal",
        description="With --schema: reports the values of fields declared removed "
        "(__copal_removed__ on the class) that records still hold, and with --purge rewrites "
        "those records without them in one maintenance commit. Works without the application's "
        "classes: the declarations are stored in the database.",
    )
    gc.add_argument("--schema", action="store_true", required=True, help="collect values of removed fields")
    gc.add_argument("--purge", action="store_true", help="rewrite the records without them (default: report only)")
    backup = _command(
        commands,
        "backup",
        "consistent hot copy of a database into a new directory",
        "copal backup bank.copal /backups/bank-2026-11-22",
        description="Copies the database while other processes keep committing: the copy holds "
        "exactly the commits made before it started, compacted (free space left out). The "
        "destination must be a new or empty directory; to restore, open the copy (or move it "
        "into place while no process has the database open).",
    )
    backup.add_argument("dest", help="new directory for the copy")
    args = parser.parse_args(argv)
    if args.command == "backup":
        return _backup(args)
    if args.command == "info":
        return _info(args)
    if args.command == "verify":
        return _verify(args)
    if args.command == "schema":
        return _schema(args)
    if args.command == "gc":
        return _gc_schema(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
