"""The ``copal`` command."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar

if TYPE_CHECKING:
    from .database import Database

__all__ = ["main", "build_parser"]

T = TypeVar("T")

#: Exit statuses (documented in ``copal --help`` and the README).
EXIT_OK = 0
EXIT_PROBLEMS = 1  # the command ran and found problems (verify)
EXIT_USAGE = 2  # bad arguments (argparse's own status)
EXIT_ERROR = 3  # the database, the input or the output failed

EXIT_CODES = """exit status:
  0  success
  1  problems found (copal verify)
  2  usage error (unknown command, bad option or argument)
  3  database, input or output error (the message on stderr says which)"""


class CommandError(Exception):
    """A failure the command reports in one line on stderr, with exit status 3."""


class UsageError(Exception):
    """Arguments that do not go together, reported in one line with exit status 2."""


def _is_url(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def _open(path: str, *, create: bool = False, readonly: bool = False, check_pages: bool | None = None) -> Database:
    """Opens the database at `path`; a directory that holds none (missing, or without LMDB's
    data file) is an error unless the command creates databases (``copal import``), so that a
    typo does not create one. Commands that only read open an embedded store `readonly`, so
    that they work on read-only media and cannot write; `check_pages` is passed to an embedded
    store (see copal.open)."""
    import copal

    if _is_url(path):
        return copal.open(path, progress=copal.ProgressBar())
    if not create and not os.path.isfile(os.path.join(path, "data.mdb")):
        raise CommandError(f"no database at {path}")
    return copal.open(path, progress=copal.ProgressBar(), readonly=readonly, check_pages=check_pages)


def _on_database(
    path: str, work: Callable[[Database], T], *, create: bool = False, readonly: bool = False, check_pages: bool | None = None
) -> T:
    """Opens the database at `path`, runs `work` on it and closes it."""
    db = _open(path, create=create, readonly=readonly, check_pages=check_pages)
    try:
        return work(db)
    finally:
        db.close()


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def _table(rows: list[list[Any]], headers: list[str]) -> None:
    """Prints `rows` as aligned columns under `headers` (numbers right-aligned)."""
    cells = [headers] + [[f"{c:,}" if isinstance(c, int) and not isinstance(c, bool) else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [bool(rows) and all(isinstance(row[i], int) for row in rows) for i in range(len(headers))]
    for row in cells:
        line = "  ".join(c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
        print(line.rstrip())


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {plural or word + 's'}"


def _oid_text(oid: int) -> str:
    return f"{oid:#x}"


def _parse_oid(text: str) -> int:
    try:
        oid = int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        oid = -1
    if not 0 <= oid < 1 << 64:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an object id (0x1000000000003 or a decimal number below 2**64)")
    return oid


def _size(text: str) -> int:
    """A ``--max-size``: a number of bytes."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of bytes")
    return int(text)


def _limit(text: str) -> int:
    """A ``--limit``: a count from 1 to 2**32."""
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if not 1 <= limit <= 1 << 32:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a count from 1 to 2**32")
    return limit


# -- values as `copal show` prints them --------------------------------------------------------


def _reference(value: Any) -> int | None:
    """The oid a value of the export's JSON form refers to, if it is a reference."""
    if isinstance(value, dict) and value.get("$enum") == "copal.Oid":
        return int(value["$member"], 16)
    return None


def _members(value: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The fields or keys of a JSON object of the export form, without its `$` tags."""
    for key, item in value.items():
        if key.startswith("$$"):
            yield key[1:], item
        elif not key.startswith("$"):
            yield key, item


def _render(value: Any) -> str:
    """A short, Python-like text of a value of the JSON form (docs/TEXT_FORMATS.md)."""
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(_render, value)) + "]"
    oid = _reference(value)
    if oid is not None:
        return f"-> {_oid_text(oid)}"
    assert isinstance(value, dict)
    if "$ref" in value:
        return f"<shared value #{value['$ref']}>"
    if "$list" in value:
        return _render(value["$list"])
    for tag, (left, right) in {"$tuple": ("(", ")"), "$set": ("{", "}"), "$frozenset": ("frozenset({", "})")}.items():
        if tag in value:
            return left + ", ".join(map(_render, value[tag])) + right
    if "$dict" in value:
        return "{" + ", ".join(f"{_render(k)}: {_render(v)}" for k, v in value["$dict"]) + "}"
    if "$enum" in value:
        return f"{value['$enum']}.{value['$member']}"
    for tag in ("$type", "$persistent", "$subclass"):
        if tag in value:
            base = [_render(value["$base"])] if "$base" in value else []
            fields = [f"{k}={_render(v)}" for k, v in _members(value)]
            return f"{value[tag]}({', '.join(base + fields)})"
    tags = [k for k in value if k.startswith("$") and not k.startswith("$$") and k != "$id"]
    if tags:
        return f"{tags[0][1:]}({json.dumps(value[tags[0]])})"
    return "{" + ", ".join(f"{k!r}: {_render(v)}" for k, v in _members(value)) + "}"


def _record(db: Database, oid: int) -> dict[str, Any]:
    """The record of `oid` in the export's JSON form: oid, flags and the record object."""
    from . import _core

    text = _core.record_json(db._store, oid)
    if text is None:
        raise CommandError(f"there is no object {_oid_text(oid)}")
    try:
        parsed = json.loads(text)
    except ValueError as e:  # an integer longer than Python converts (sys.set_int_max_str_digits)
        raise CommandError(f"object {_oid_text(oid)} cannot be shown: {e}") from None
    document: dict[str, Any] = _with_class_names(parsed)["value"]
    return document


#: The members of the JSON form that name a class: by its name the first time in a document,
#: then by its number (docs/TEXT_FORMATS.md section 2.1).
_CLASS_TAGS = ("$type", "$persistent", "$subclass", "$enum")


def _with_class_names(document: Any) -> Any:
    """``document`` with every class number replaced by the class's name. Classes are numbered
    in the order the text first names them, which is the order of a depth-first walk of the
    parsed document (JSON objects keep their members' order)."""
    names: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for key, item in value.items():
                if key in _CLASS_TAGS and isinstance(item, str):
                    names.append(item)
                elif key in _CLASS_TAGS and isinstance(item, int) and 0 <= item < len(names):
                    value[key] = names[item]
                else:
                    walk(item)

    walk(document)
    return document


# -- commands ----------------------------------------------------------------------------------


def _info(args: argparse.Namespace) -> int:
    def work(db: Database) -> dict[str, Any]:
        from . import _core

        with db.transaction() as tx:
            info = {"location": db.location, "disk_bytes": db.disk_size(), "last_tid": tx.tid_seen, "roots": sorted(map(str, tx.root.keys()))}
        info["tables"] = [{"table": table, "entries": entries, "bytes": size} for table, entries, size in _core.table_space(db._store)]
        return info

    info = _on_database(args.db, work, readonly=True)
    if args.json:
        _print_json(info)
        return EXIT_OK
    tables = info.pop("tables")
    print("\n".join(f"{k}: {v}" for k, v in info.items()))
    # What each class's records and each index's entries take, the largest first.
    print("tables:")
    for t in sorted(tables, key=lambda t: -t["bytes"]):
        print(f"  {t['table']}: {t['entries']} entries, {t['bytes']} bytes")
    return EXIT_OK


def _extent(db: Database, type_name: str, limit: int) -> list[dict[str, Any]]:
    """The first `limit` objects of a stored type: oid, type and record size."""
    from . import _core

    listed = _core.extent_summaries(db._store, type_name, limit)
    if listed is None:
        raise CommandError(db._no_such_type(type_name))
    return [{"oid": _oid_text(oid), "type": name, "size": size} for oid, name, size in listed]


def _roots(db: Database) -> list[dict[str, Any]]:
    """The entries of the root mapping: for a stored object, its oid, type and size; for a
    plain value, the value."""
    from . import _core

    data = _record(db, _core.ROOT_OID)["record"]["data"]
    pairs = list(data["$dict"]) if "$dict" in data else list(_members(data))
    oids = [oid for _, v in pairs if (oid := _reference(v)) is not None]
    summaries = {s[0]: s for s in _core.record_summaries(db._store, oids) if s is not None}
    out = []
    for key, value in pairs:
        name = key if isinstance(key, str) else _render(key)
        oid = _reference(value)
        if oid is not None and oid in summaries:
            out.append({"name": name, "oid": _oid_text(oid), "type": summaries[oid][1], "size": summaries[oid][2]})
        else:
            out.append({"name": name, "oid": None, "type": "(value)", "value": _render(value)})
    return out


def _ls(args: argparse.Namespace) -> int:
    if args.type_name is None:
        roots = _on_database(args.db, _roots, readonly=True)
        if args.json:
            _print_json(roots)
        else:
            _table([[r["name"], r["oid"] or "-", r["type"], r.get("size", r.get("value"))] for r in roots], ["ROOT", "OID", "TYPE", "SIZE/VALUE"])
        return EXIT_OK
    objects = _on_database(args.db, lambda db: _extent(db, args.type_name, args.limit), readonly=True)
    if args.json:
        _print_json(objects)
        return EXIT_OK
    _table([[r["oid"], r["type"], r["size"]] for r in objects], ["OID", "TYPE", "SIZE"])
    if len(objects) == args.limit:
        print(f"(the first {args.limit:,}; --limit N lists more)")
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    document = _on_database(args.db, lambda db: _record(db, args.oid), readonly=True)
    record = document["record"]
    type_name = record["$persistent"]
    fields = dict(_members(record))
    if args.json:
        _print_json({"oid": document["oid"], "type": type_name, "flags": document["flags"], "fields": fields})
        return EXIT_OK
    print(f"{document['oid']}  {type_name}")
    width = max((len(name) for name in fields), default=0)
    for name, value in fields.items():
        print(f"  {name.ljust(width)}  {_render(value)}")
    return EXIT_OK


def _query(args: argparse.Namespace) -> int:
    from . import _core
    from .cli_query import FilterSyntaxError, parse_filter

    try:
        node = parse_filter(args.where or "")
    except FilterSyntaxError as e:
        print(f"copal query: error: --where: {e}", file=sys.stderr)
        return EXIT_USAGE

    def work(db: Database) -> Any:
        conn = db._store.connect({}, 0)
        try:
            conn.begin()
            try:
                if not conn.class_numbers([args.type_name]):
                    raise CommandError(db._no_such_type(args.type_name))
                # Without the application's classes: stored fields only (no renames, no defaults).
                scope = _core.QueryScope([args.type_name], [])
                if args.count:
                    return conn.query(scope, node, [], 0, None, "count")
                oids = conn.query(scope, node, [], 0, args.limit, "oids")
            finally:
                conn.end(True)
        finally:
            conn.close()
        return [_record(db, oid) for oid in oids]

    found = _on_database(args.db, work, readonly=True)
    if args.count:
        print(json.dumps({"count": found}) if args.json else found)
        return EXIT_OK
    rows = [{"oid": d["oid"], "type": d["record"]["$persistent"], "fields": dict(_members(d["record"]))} for d in found]
    if args.json:
        _print_json(rows)
        return EXIT_OK
    names: list[str] = []
    for row in rows:
        names.extend(n for n in row["fields"] if n not in names)
    _table([[row["oid"]] + [_render(row["fields"][n]) if n in row["fields"] else "" for n in names] for row in rows], ["OID"] + names)
    print(f"({_plural(len(rows), 'object')}{'' if len(rows) < args.limit else f'; --limit {args.limit:,} reached'})")
    return EXIT_OK


def _verify(args: argparse.Namespace) -> int:
    from .errors import CorruptRecordError

    try:
        # The pages of an embedded store are checked before LMDB reads any (copal.open's
        # check_pages), whatever the size of its file.
        report = _on_database(args.db, lambda db: db.verify(), readonly=True, check_pages=True)
    except CorruptRecordError as damaged:
        # A store too damaged to open (damaged pages, a table or its root missing) is what verify
        # looks for: a problem found, reported as the others are.
        report = {"problems": [str(damaged)]}
    if args.json:
        _print_json(report)
    else:
        if "records" in report:
            print(f"{report['records']} records, {report['references']} references, {report['index_entries']} index entries, {report['anchors']} anchors")
        for problem in report["problems"]:
            print(f"problem: {problem}")
        print("OK" if not report["problems"] else f"{len(report['problems'])} problem(s) found")
    return EXIT_OK if not report["problems"] else EXIT_PROBLEMS


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
        _print_json({"types": listed, "records": total, "unreadable": raw["unreadable"]})
        return EXIT_OK
    for t in listed:
        gone = f"; removed fields: {', '.join(t['removed'])}" if t["removed"] else ""
        print(f"{t['type_name']} (class {t['class']}): {_plural(t['records'], 'record')}{gone}")
        for d in t["descriptors"]:
            print(f"  descriptor {d['id']:<6} {_plural(d['records'], 'record'):>12}  {', '.join(d['fields']) or '(no fields)'}")
    print(f"total: {_plural(total, 'record')} in {_plural(len(listed), 'type')}")
    if raw["unreadable"]:
        print(f"{_plural(raw['unreadable'], 'record')} with an unreadable header (run copal verify)")
    return EXIT_OK


def _gc(args: argparse.Namespace) -> int:
    if args.schema:
        return _gc_schema(args)
    if args.purge:
        raise UsageError("--purge goes with --schema (it rewrites records holding removed fields)")
    from copal.progress import ProgressBar

    report = _on_database(args.db, lambda db: db.gc(batch=args.batch, progress=ProgressBar()))
    if args.json:
        _print_json(report)
        return EXIT_OK
    print(
        f"{_plural(report['objects'], 'object')} stored, {report['reachable']:,} reachable: removed "
        f"{_plural(report['removed'], 'object')} ({report['removed_bytes']:,} bytes of records) "
        f"in {_plural(report['commits'], 'commit')}"
    )
    for type_name, count in report["removed_by_type"].items():
        print(f"  {type_name}: {count:,}")
    if report["anchors_derived"]:
        print(f"anchored {_plural(report['anchors_derived'], 'object')} that nothing referred to (the database had no anchors recorded)")
    return EXIT_OK


def _gc_schema(args: argparse.Namespace) -> int:
    report = _on_database(args.db, lambda db: db.gc_schema(purge=args.purge))
    if args.json:
        _print_json(report)
        return EXIT_OK
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
    return EXIT_OK


def _backup(args: argparse.Namespace) -> int:
    # The location, not the argument: a URL's password stays out of the terminal and the logs.
    location, size = _on_database(args.db, lambda db: (db.location, db.backup(args.dest)), readonly=True)
    if args.json:
        print(json.dumps({"dest": args.dest, "bytes": size}))
    else:
        if args.db.startswith(("postgresql://", "postgres://")):
            source, restore = location, f"copal export {shlex.quote(args.dest)} | copal import {shlex.quote(location)}"
        else:
            source, restore = args.db, "opening it"
        print(f"backed up {source} to {args.dest} ({size:,} bytes, compacted); restore by {restore}")
    return EXIT_OK


def _summary(report: dict[str, Any], verb: str) -> str:
    # An import reports the transaction its source was exported at, not one of its own.
    source = "snapshot of" if verb == "exported" else "exported at"
    return (
        f"{verb} {_plural(report['records'], 'object')}, {_plural(report['descriptors'], 'descriptor')} and "
        f"{_plural(report['indexes'], 'index', 'indexes')} ({source} transaction {report['tid']})"
    )


def _export(args: argparse.Namespace) -> int:
    if args.level is not None and args.compress is None:
        raise UsageError("--level needs --compress")
    compress = None if args.compress is None else (args.compress if args.level is None else (args.compress, args.level))
    if args.output is None and args.format == "copal" and args.compress is None and sys.stdout.isatty():
        raise CommandError("a binary export would be written to the terminal: redirect it (> FILE) or use -o FILE")

    def work(db: Database) -> dict[str, Any]:
        out = args.output if args.output is not None else sys.stdout.buffer
        try:
            return db.export(out, format=args.format, compress=compress, classes=args.type_names)
        except ValueError as e:  # a compression level out of range
            raise UsageError(str(e)) from None

    report = _on_database(args.db, work, readonly=True)
    if args.json:
        print(json.dumps(report), file=sys.stderr if args.output is None else sys.stdout)
    elif args.output is not None:
        print(_summary(report, "exported"))
    return EXIT_OK


def _import(args: argparse.Namespace) -> int:
    source = args.input if args.input is not None else sys.stdin.buffer
    max_size: int | None = args.max_size

    def work(db: Database) -> dict[str, Any]:
        return db.import_from(source) if max_size is None else db.import_from(source, max_size=max_size)

    report = _on_database(args.db, work, create=True)
    if args.json:
        print(json.dumps(report))
    else:
        print(_summary(report, "imported"))
    return EXIT_OK


def _init(args: argparse.Namespace) -> int:
    import copal

    report = copal.init(args.db)
    if args.json:
        _print_json(report)
    elif report["created"]:
        print(f"created {', '.join(report['created'])} in {report['location']} (layout version {report['to_version']})")
    else:
        print(f"{report['location']} already holds a copal database (layout version {report['to_version']}): nothing to do")
    return EXIT_OK


def _upgrade(args: argparse.Namespace) -> int:
    import copal

    if not _is_url(args.db) and not os.path.exists(args.db):
        raise CommandError(f"no database at {args.db}")
    report = copal.upgrade(args.db)
    if args.json:
        _print_json(report)
    elif report["steps"]:
        print(f"upgraded {report['location']} from layout version {report['from_version']} to {report['to_version']}:")
        for step in report["steps"]:
            print(f"  {step}")
    else:
        print(f"{report['location']} is at layout version {report['to_version']}: nothing to do")
    return EXIT_OK


def _compact(args: argparse.Namespace) -> int:
    import copal

    if _is_url(args.db):
        raise UsageError("compact applies to the embedded store; PostgreSQL reclaims space with VACUUM")
    if not os.path.isfile(os.path.join(args.db, "data.mdb")):
        raise CommandError(f"no database at {args.db}")
    report = copal.compact(args.db)
    if args.json:
        _print_json(report)
    else:
        before, after = report["size_before"], report["size_after"]
        print(f"compacted {report['location']}: {before:,} bytes to {after:,} ({before - after:,} freed)")
    return EXIT_OK


# -- the parser --------------------------------------------------------------------------------


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
        epilog="examples:\n" + "\n".join(f"  {example}" for example in examples) + "\n\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("db", help="database directory, or postgresql://user:password@host/dbname")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The parser of the ``copal`` command and its subcommands (docs/reference/cli.md is made
    from it). ``copal bench`` has its own parser, ``copal.bench.runner.build_parser()``."""
    parser = argparse.ArgumentParser(
        prog="copal",
        description="copal object database tools. Every command works without the application's classes.",
        epilog="run copal COMMAND --help for a command's options and examples\n\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("bench", help="run the white-paper benchmark suite (copal bench --help)")
    _command(commands, "info", "summary of a database: location, size, last transaction, roots, and what each class's records and each index take", "copal info bank.copal", "copal info bank.copal --json")
    ls = _command(
        commands,
        "ls",
        "list the roots, or the objects of a type (oid, type, size)",
        "copal ls bank.copal",
        "copal ls bank.copal --type bank.Account --limit 20",
        "copal ls bank.copal --type bank.Account --json",
        description="Without --type: the entries of the root mapping, with the oid, type and record size "
        "of each stored object they name. With --type: the objects of that stored type name (its "
        "extent, in oid order): oid, type and record size in bytes.",
    )
    ls.add_argument("--type", dest="type_name", metavar="TYPE", help="a stored type name (copal schema lists them)")
    ls.add_argument("--limit", type=_limit, default=100, help="list at most this many objects (default 100)")
    show = _command(
        commands,
        "show",
        "print one stored object: type, fields and values, references as oids",
        "copal show bank.copal 0x2000000000005",
        "copal show bank.copal 0x2000000000005 --json",
        description="Prints the record of one object without the application's classes: its type name, "
        "then each field and its value; a reference to another stored object is shown as -> OID "
        "(copal show that OID to follow it). --json prints the fields in the JSON mapping of "
        "docs/TEXT_FORMATS.md, references as {\"$enum\": \"copal.Oid\", \"$member\": OID}.",
    )
    show.add_argument("oid", type=_parse_oid, help="the object id, 0x... (as copal ls prints it) or decimal")
    query = _command(
        commands,
        "query",
        "find objects of a type with a filter, evaluated in Rust on the stored records",
        "copal query people.copal app.Person --where 'age >= 30 and city == \"Paris\"' --limit 10",
        "copal query people.copal app.Person --where 'name startswith \"A\" or tags is None' --json",
        "copal query people.copal app.Person --where 'address.zip in [\"75001\", \"75002\"]' --count",
        description="Evaluates a filter on the objects of one stored type name (not of its subclasses: "
        "without the classes, copal does not know them) and prints the matches as a table (--json: "
        "a list of {oid, type, fields}). The filter is parsed, never evaluated as Python: comparisons "
        "(==, !=, <, <=, >, >=) of a field path with a literal (numbers, 'strings', True, False, None), "
        "PATH in [v1, v2], PATH is None, PATH is not None, PATH startswith 'text', combined with and, "
        "or, not and parentheses. A path is field names separated by dots; it goes into embedded "
        "objects, dict keys and referenced objects, as copal.field does.",
    )
    query.add_argument("type_name", metavar="TYPE", help="a stored type name (copal schema lists them)")
    query.add_argument("--where", metavar="FILTER", help="the filter (default: every object)")
    query.add_argument("--limit", type=_limit, default=100, help="print at most this many objects (default 100)")
    query.add_argument("--count", action="store_true", help="print how many objects match instead")
    _command(commands, "verify", "check records, references and indexes; exit status 1 on problems", "copal verify bank.copal", "copal verify bank.copal --json")
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
        "remove objects nothing reachable refers to (--schema: values of removed fields)",
        "copal gc bank.copal",
        "copal gc --schema --purge bank.copal",
        description="Removes the stored objects that neither the root mapping nor an object stored "
        "with Transaction.add reaches, while other programs keep committing; prints what it "
        "removed. It works in commits of at most --batch removals, and draws a progress bar on a "
        "terminal. Works without the application's classes. With --schema instead: reports the "
        "values of fields declared removed (__copal_removed__ on the class) that records still "
        "hold, and with --purge rewrites those records without them in one maintenance commit.",
    )
    gc.add_argument("--schema", action="store_true", help="collect values of removed fields instead of objects")
    gc.add_argument("--batch", type=int, default=10_000, help="the most objects removed per commit (default 10000)")
    gc.add_argument("--purge", action="store_true", help="rewrite the records without them (default: report only)")
    backup = _command(
        commands,
        "backup",
        "consistent hot copy of a database into a new directory",
        "copal backup bank.copal /backups/bank-2026-11-22",
        "copal backup postgresql://app@db1/bank /backups/bank-2026-11-22",
        description="Copies the database while other processes keep committing: the copy holds "
        "exactly the commits made before it started, compacted (free space left out). The "
        "destination must be a new or empty directory, and the copy is an embedded database "
        "(a PostgreSQL database is copied object by object from one snapshot, with the same "
        "object ids). To restore, open the copy (or move it into place while no process has the "
        "database open); into PostgreSQL: copal export COPY | copal import URL (a new database).",
    )
    backup.add_argument("dest", help="new directory for the copy")
    export = _command(
        commands,
        "export",
        "write a database (or some types' objects) to a file or stdout",
        "copal export bank.copal > bank.export",
        "copal export bank.copal --format json --compress zstd -o bank.jsonl.zst",
        "copal export bank.copal --format xml --type bank.Account > accounts.xml",
        "copal export bank.copal | copal import copy.copal",
        "copal export postgresql://app@db/bank -o bank.export   # PostgreSQL to a file",
        description="Streams the database from one snapshot (consistent while writers commit; memory "
        "stays constant): descriptors, removed-field declarations, index definitions and every "
        "record with its oid. copal import recreates it exactly. Formats (docs/EXPORT.md): copal "
        "(binary, compact), json (JSON Lines, one document per line) and xml. --compress wraps the "
        "whole export in standard zstd, gzip or LZ4. With --type, only those types' objects are "
        "exported, and references to other objects stay as ids (copal verify reports them after "
        "an import). A progress bar is drawn on a terminal; --json prints the counts (on stderr "
        "when the export goes to stdout).",
    )
    export.add_argument("--format", choices=["copal", "json", "xml"], default="copal", help="encoding (default copal, binary)")
    export.add_argument("--compress", choices=["zstd", "gzip", "lz4"], help="compress the export")
    export.add_argument("--level", type=int, help="compression level (zstd 1-22, default 3; gzip 0-9, default 6)")
    export.add_argument("--class", "--type", dest="type_names", metavar="TYPE", action="append",
                        help="export only this class's objects, by stored type name (repeatable)")
    export.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    imp = _command(
        commands,
        "import",
        "read an export into a new database",
        "copal import copy.copal < bank.export",
        "copal import copy.copal bank.jsonl.zst",
        "copal import postgresql://app@db/bank bank.export   # a file into PostgreSQL",
        description="Reads an export (format and compression detected from its first bytes) into a "
        "database that must be new (created if it does not exist, or empty): objects keep their "
        "ids, references, indexes and removed-field declarations. Records are committed in batches "
        "so memory stays constant; if the input turns out damaged or truncated after the first "
        "batch, the database holds a partial import, which the error says and copal verify reports: "
        "delete it and import again.",
    )
    imp.add_argument("input", nargs="?", help="the export file (default: stdin)")
    imp.add_argument("--max-size", type=_size, help="the longest entry accepted, in bytes (default 256 MiB)")
    _command(
        commands,
        "init",
        "create copal's tables (PostgreSQL) or directory (embedded) ahead of the first open",
        "copal init postgresql://app@db.example.com/bank",
        "copal init bank.copal --json",
        description="Creates an empty copal database and says what it created; a database that "
        "already exists at the current layout version is left as it is (exit status 0). Opening a "
        "database creates it too: init is for deployments that create the tables ahead of time, for "
        "example with a role allowed to create tables that the application's role is not.",
    )
    _command(
        commands,
        "upgrade",
        "migrate a database written by an older copal to this copal's layout",
        "copal upgrade postgresql://app@db.example.com/bank",
        "copal upgrade bank.copal --json",
        description="Applies the layout migrations between the database's version and this copal's, "
        "in one transaction, and lists them; a current database is left as it is (exit status 0). "
        "A PostgreSQL database of an older layout is refused by copal.open until it is upgraded; "
        "stop the programs of the older copal first (their next commit fails instead of writing). "
        "An embedded database is migrated by its first open; upgrade reports what that did.",
    )
    _command(
        commands,
        "compact",
        "shrink an embedded database's file to the pages in use, in place",
        "copal compact bank.copal",
        description="Rewrites the data file without its free pages (an LMDB file never shrinks; it "
        "grows while transactions stay open, docs/howto/tune.md). Refused while any process has the "
        "database open, since that process would go on using the old file and lose its commits; a "
        "process that opens the database meanwhile waits until compaction is done. The file is "
        "checked first, as copal verify checks its pages, and needs free space for its compacted copy.",
    )
    return parser


_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "info": _info,
    "ls": _ls,
    "show": _show,
    "query": _query,
    "verify": _verify,
    "schema": _schema,
    "gc": _gc,
    "backup": _backup,
    "export": _export,
    "import": _import,
    "init": _init,
    "upgrade": _upgrade,
    "compact": _compact,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``copal`` command; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        from .bench.runner import main as bench_main

        result = bench_main(argv[1:])
        return int(result or 0)
    args = build_parser().parse_args(argv)
    from .errors import CopalError

    try:
        return _HANDLERS[args.command](args)
    except BrokenPipeError:
        # The reader went away (copal ls ... | head): stop quietly, and keep Python from
        # complaining when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except UsageError as e:
        print(f"copal {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (CommandError, CopalError, OSError) as e:
        print(f"copal {args.command}: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
