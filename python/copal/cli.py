"""The ``copal`` command."""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["main"]


def _info(args: argparse.Namespace) -> int:
    import copal

    db = copal.open(args.db)
    try:
        with db.transaction() as tx:
            info = {"path": db.path, "disk_bytes": db.disk_size(), "last_tid": tx.tid_seen, "roots": sorted(map(str, tx.root.keys()))}
        print(json.dumps(info, indent=2) if args.json else "\n".join(f"{k}: {v}" for k, v in info.items()))
    finally:
        db.close()
    return 0


def _verify(args: argparse.Namespace) -> int:
    import copal

    db = copal.open(args.db)
    try:
        report = db.verify()
    finally:
        db.close()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['records']} records, {report['references']} references, {report['index_entries']} index entries")
        for problem in report["problems"]:
            print(f"problem: {problem}")
        print("OK" if not report["problems"] else f"{len(report['problems'])} problem(s) found")
    return 0 if not report["problems"] else 1


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
    info = commands.add_parser("info", help="summary of a database", epilog="example: copal info bank.copal --json")
    info.add_argument("db")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    verify = commands.add_parser(
        "verify",
        help="check records, references and indexes; exit status 1 on problems",
        epilog="example: copal verify bank.copal",
    )
    verify.add_argument("db")
    verify.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    if args.command == "info":
        return _info(args)
    if args.command == "verify":
        return _verify(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
