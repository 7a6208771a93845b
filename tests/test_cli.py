"""The copal command."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import copal
import pytest
from copal import Index, Persistent, PersistentList

from helpers.versions import load_module


class Entry(Persistent):
    __copal_indexes__ = [Index("n")]

    def __init__(self, n: int) -> None:
        self.n = n


def _copal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "copal", *args], capture_output=True, text=True, timeout=120)


def test_verify_passes_on_a_sound_database_and_fails_on_damage(tmp_path: Path) -> None:
    path = tmp_path / "db"
    db = copal.open(path)
    with db.transaction() as tx:
        tx.root["entries"] = PersistentList(Entry(i) for i in range(10))
    with db.transaction() as tx:
        victim = tx.root["entries"][3]._p_oid
    db.close()
    ok = _copal("verify", str(path), "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    report = json.loads(ok.stdout)
    assert report["records"] == 12 and report["index_entries"] == 10 and report["problems"] == []

    db = copal.open(path)
    db._debug_put_raw_record(victim, b"\x11\x01")
    db.close()
    bad = _copal("verify", str(path))
    assert bad.returncode == 1
    assert "does not decode" in bad.stdout


def test_info_lists_the_roots(tmp_path: Path) -> None:
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["things"] = PersistentList()
    db.close()
    out = _copal("info", str(tmp_path / "db"), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["roots"] == ["things"]


def test_info_shows_what_each_class_and_index_takes(tmp_path: Path) -> None:
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["entries"] = PersistentList(Entry(i) for i in range(25))
        tx.add(Entry(25))
    db.close()
    out = _copal("info", str(tmp_path / "db"), "--json")
    assert out.returncode == 0, out.stderr
    tables = {t["table"]: t for t in json.loads(out.stdout)["tables"]}
    entries, index = tables["records test_cli.Entry"], tables["index test_cli.Entry(n)"]
    assert (entries["entries"], index["entries"], tables["anchors"]["entries"]) == (26, 26, 1)
    # A record holds at least its header and its one int; an entry key its index id and oid.
    assert entries["bytes"] >= 26 * 4 and index["bytes"] >= 26 * (4 + 8)
    assert tables["records copal.PersistentList"]["entries"] == 1
    text = _copal("info", str(tmp_path / "db"))
    assert "tables:\n" in text.stdout and "  records test_cli.Entry: 26 entries, " in text.stdout


def test_schema_lists_descriptor_versions_and_their_records_without_the_classes(tmp_path: Path) -> None:
    path = tmp_path / "db"
    v1 = load_module(tmp_path, "cli_schema_app", "import copal\nclass Pet(copal.Persistent):\n    def __init__(self, name):\n        self.name = name\n")
    db = copal.open(path)
    with db.transaction() as tx:
        tx.root["pets"] = PersistentList(v1.Pet(n) for n in ["rex", "tom", "kit"])
    db.close()
    v2 = load_module(
        tmp_path,
        "cli_schema_app",
        "import copal\nclass Pet(copal.Persistent):\n    def __init__(self, name, age=0):\n        self.name = name\n        self.age = age\n",
    )
    db = copal.open(path)
    with db.transaction() as tx:
        tx.root["pets"].append(v2.Pet("new", 2))
    db.close()

    out = _copal("schema", str(path), "--json")  # a fresh process: cli_schema_app is not imported
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    pet = next(t for t in report["types"] if t["type_name"] == "cli_schema_app.Pet")
    assert [(d["fields"], d["records"]) for d in pet["descriptors"]] == [(["name"], 3), (["name", "age"], 1)]
    assert pet["records"] == 4 and pet["removed"] == []
    ids = [d["id"] for d in pet["descriptors"]]
    assert report["records"] == 4 + 2 and report["unreadable"] == 0  # the root and the list

    table = _copal("schema", str(path))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert f"cli_schema_app.Pet (class {pet['class']}): 4 records" in lines
    assert f"  descriptor {ids[0]:<6}    3 records  name" in lines
    assert f"  descriptor {ids[1]:<6}     1 record  name, age" in lines
    assert lines[-1] == "total: 6 records in 3 types"


def test_schema_and_gc_help_show_examples() -> None:
    for command in (["schema"], ["gc"]):
        out = _copal(*command, "--help")
        assert out.returncode == 0 and "examples:" in out.stdout and "copal " + command[0] in out.stdout


def test_backup_is_a_consistent_compacted_hot_copy(store: Any, tmp_path: Path) -> None:
    """On both stores: an embedded store is copied page by page, a PostgreSQL database object by
    object into a new embedded store."""
    import threading

    db = store.open()
    with db.transaction() as tx:
        tx.root["entries"] = PersistentList(Entry(i) for i in range(20_000))
        tx.root["count"] = 20_000
    for _ in range(5):  # rewrites leave free pages, which the copy leaves out
        with db.transaction() as tx:
            for entry in tx.root["entries"]:
                entry.n += 1
    stop, first = threading.Event(), threading.Event()
    commits = []

    def write() -> None:
        while not stop.is_set():
            with db.transaction() as tx:
                tx.root["entries"].append(Entry(-1))
                tx.root["count"] += 1
            commits.append(1)
            first.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert first.wait(60)
        size = db.backup(tmp_path / "copy")
        assert not stop.is_set()
    finally:
        stop.set()
        writer.join()
    assert len(commits) > 1
    if store.kind == "lmdb":
        assert 0 < size < db.disk_size()
    with db.transaction() as tx:
        originals = {entry._p_oid: entry.n for entry in tx.root["entries"]}
    store.close(db)
    copy = copal.open(tmp_path / "copy")
    assert size == copy.disk_size()
    try:
        with copy.transaction() as tx:
            # One snapshot: the counter and the list agree, whichever commit the copy stopped at.
            assert tx.root["count"] == len(tx.root["entries"]) >= 20_001
            assert tx.query(Entry).where(n=5).count() == 1
            # The same objects under the same ids.
            copied = {entry._p_oid: entry.n for entry in tx.root["entries"]}
            assert copied.items() <= originals.items()
        assert copy.verify()["problems"] == []
    finally:
        copy.close()


def test_backup_command_refuses_a_destination_in_use(tmp_path: Path) -> None:
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["x"] = Entry(1)
    db.close()
    done = _copal("backup", str(tmp_path / "db"), str(tmp_path / "copy"), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["bytes"] > 0
    # The summary names the database as the command line did (a relative path stays relative).
    told = subprocess.run([sys.executable, "-m", "copal", "backup", "db", "copy2"], cwd=tmp_path, capture_output=True, text=True)
    assert told.stdout.startswith("backed up db to copy2 ("), told.stdout + told.stderr
    again = _copal("backup", str(tmp_path / "db"), str(tmp_path / "copy"))
    assert again.returncode != 0
    assert "not empty" in again.stderr
    assert "copal backup" in _copal("backup", "--help").stdout


class Person(Persistent):
    def __init__(self, name: str, age: int, city: str) -> None:
        self.name = name
        self.age = age
        self.city = city
        self.friends: list[Person] = []


def _people(path: Path) -> list[int]:
    """A database of people (test_cli.Person) whose friends refer to each other; returns their
    oids."""
    db = copal.open(path)
    with db.transaction() as tx:
        people = [Person(f"p{i}", 20 + i, "Paris" if i % 2 else "Lyon") for i in range(20)]
        for i, p in enumerate(people):
            p.friends.append(people[(i + 1) % 20])
        tx.root["people"] = PersistentList(people)
        tx.root["answer"] = 42
    with db.transaction() as tx:
        oids = [p._p_oid for p in tx.root["people"]]
    db.close()
    return oids


def test_ls_lists_roots_and_the_objects_of_a_type(tmp_path: Path) -> None:
    oids = _people(tmp_path / "db")
    roots = _copal("ls", str(tmp_path / "db"), "--json")
    assert roots.returncode == 0, roots.stderr
    listed = {r["name"]: r for r in json.loads(roots.stdout)}
    assert listed["people"]["type"] == "copal.PersistentList" and listed["people"]["size"] > 0
    assert listed["answer"] == {"name": "answer", "oid": None, "type": "(value)", "value": "42"}
    extent = _copal("ls", str(tmp_path / "db"), "--type", "test_cli.Person", "--limit", "5", "--json")
    assert [r["oid"] for r in json.loads(extent.stdout)] == [hex(oid) for oid in oids[:5]]
    table = _copal("ls", str(tmp_path / "db"), "--type", "test_cli.Person", "--limit", "3").stdout.splitlines()
    assert table[0].split() == ["OID", "TYPE", "SIZE"] and table[1].startswith(hex(oids[0])) and "--limit" in table[-1]
    missing = _copal("ls", str(tmp_path / "db"), "--type", "app.Nope")
    assert missing.returncode == 3 and missing.stderr.strip() == (
        "copal ls: error: the database stores no objects of type 'app.Nope'; "
        "it stores copal.PersistentDict, copal.PersistentList, test_cli.Person"
    )
    # The same class name in another module is what the user probably meant.
    assert "; it stores test_cli.Person\n" in _copal("query", str(tmp_path / "db"), "app.Person").stderr


def test_a_class_of_a_script_is_found_under_main_with_a_hint(tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(
        "import copal\n"
        "class Person(copal.Persistent):\n"
        "    pass\n"
        "db = copal.open('db')\n"
        "with db.transaction() as tx:\n"
        "    tx.root['p'] = Person()\n"
        "db.close()\n"
    )
    subprocess.run([sys.executable, str(script)], cwd=tmp_path, check=True, timeout=120)
    done = _copal("export", str(tmp_path / "db"), "--format", "json", "--class", "app.Person")
    assert done.returncode == 3 and done.stdout == ""
    assert "it stores __main__.Person (the class of a script that is run is stored under __main__" in done.stderr
    db = copal.open(tmp_path / "db")
    with pytest.raises(copal.SchemaError, match="it stores __main__.Person"):
        db.export(tmp_path / "out.jsonl", format="json", classes=["app.Person"])
    assert not (tmp_path / "out.jsonl").exists()  # refused before the file is made
    db.close()


def test_show_prints_a_record_without_the_classes(tmp_path: Path) -> None:
    oids = _people(tmp_path / "db")
    shown = _copal("show", str(tmp_path / "db"), hex(oids[3]), "--json")
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert record["type"] == "test_cli.Person"
    assert record["fields"] == {"name": "p3", "age": 23, "city": "Paris", "friends": [{"$enum": "copal.Oid", "$member": hex(oids[4])}]}
    lines = _copal("show", str(tmp_path / "db"), str(oids[3])).stdout.splitlines()
    assert lines[0] == f"{hex(oids[3])}  test_cli.Person"
    assert lines[1:] == ["  name     'p3'", "  age      23", "  city     'Paris'", f"  friends  [-> {hex(oids[4])}]"]
    # A record with many references: the JSON form names the Oid class once, then by number.
    people_oid = {r["name"]: r for r in json.loads(_copal("ls", str(tmp_path / "db"), "--json").stdout)}["people"]["oid"]
    people = json.loads(_copal("show", str(tmp_path / "db"), people_oid, "--json").stdout)
    assert people["fields"]["data"] == [{"$enum": "copal.Oid", "$member": hex(oid)} for oid in oids]
    shown_list = _copal("show", str(tmp_path / "db"), people_oid).stdout
    assert "[" + ", ".join(f"-> {hex(oid)}" for oid in oids) + "]" in shown_list, shown_list
    absent = _copal("show", str(tmp_path / "db"), hex(oids[-1] + 100))
    assert absent.returncode == 3 and "there is no object" in absent.stderr and "Traceback" not in absent.stderr
    bad = _copal("show", str(tmp_path / "db"), "zz")
    assert bad.returncode == 2 and "not an object id" in bad.stderr


def test_query_filters_on_raw_records_without_the_classes(tmp_path: Path) -> None:
    _people(tmp_path / "db")
    found = _copal("query", str(tmp_path / "db"), "test_cli.Person", "--where", 'age >= 30 and city == "Paris"', "--json")
    assert found.returncode == 0, found.stderr
    assert [r["fields"]["name"] for r in json.loads(found.stdout)] == ["p11", "p13", "p15", "p17", "p19"]
    count = _copal("query", str(tmp_path / "db"), "test_cli.Person", "--where", "not (city == 'Lyon') or name in ['p0']", "--count")
    assert count.stdout.strip() == "11"
    limited = _copal("query", str(tmp_path / "db"), "test_cli.Person", "--where", "name startswith 'p1'", "--limit", "2")
    lines = limited.stdout.splitlines()
    assert lines[0].split()[:4] == ["OID", "name", "age", "city"] and len(lines) == 4 and "--limit 2 reached" in lines[-1]
    syntax = _copal("query", str(tmp_path / "db"), "test_cli.Person", "--where", "age >= ")
    assert syntax.returncode == 2 and "expected a value" in syntax.stderr
    code = _copal("query", str(tmp_path / "db"), "test_cli.Person", "--where", "__import__('os').system('true')")
    assert code.returncode == 2 and "expected" in code.stderr


def test_export_import_through_a_pipe_and_files(tmp_path: Path) -> None:
    oids = _people(tmp_path / "db")
    export = subprocess.Popen([sys.executable, "-m", "copal", "export", str(tmp_path / "db"), "--format", "json"], stdout=subprocess.PIPE)
    imported = subprocess.run(
        [sys.executable, "-m", "copal", "import", str(tmp_path / "copy"), "--json"], stdin=export.stdout, capture_output=True, text=True, timeout=120
    )
    assert export.stdout is not None
    export.stdout.close()
    assert export.wait(60) == 0 and imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["records"] == 22
    assert _copal("verify", str(tmp_path / "copy")).returncode == 0
    assert _copal("show", str(tmp_path / "copy"), hex(oids[0]), "--json").stdout == _copal("show", str(tmp_path / "db"), hex(oids[0]), "--json").stdout

    to_file = _copal("export", str(tmp_path / "db"), "--compress", "gzip", "--class", "test_cli.Person", "-o", str(tmp_path / "people.gz"))
    assert to_file.returncode == 0, to_file.stderr
    assert re.fullmatch(r"exported 20 objects, \d+ descriptors and (1 index|\d+ indexes) \(snapshot of transaction \d+\)\n",
                        to_file.stdout), to_file.stdout
    assert (tmp_path / "people.gz").read_bytes()[:2] == b"\x1f\x8b"
    for options, message in ((["--level", "5"], "--level needs --compress"), (["--compress", "gzip", "--level", "12"], "outside 0..=9")):
        refused = _copal("export", str(tmp_path / "db"), *options, "-o", str(tmp_path / "x"))
        assert refused.returncode == 2 and message in refused.stderr and "Traceback" not in refused.stderr
    into_new = _copal("import", str(tmp_path / "people"), str(tmp_path / "people.gz"))
    assert re.fullmatch(r"imported 20 objects, \d+ descriptors and (1 index|\d+ indexes) \(exported at transaction \d+\)\n",
                        into_new.stdout), into_new.stdout
    again = _copal("import", str(tmp_path / "copy"), str(tmp_path / "people.gz"))
    assert again.returncode == 3 and again.stderr.count("\n") == 1 and "not empty" in again.stderr
    damaged = tmp_path / "damaged"
    damaged.write_bytes(b"CPLX\x01\x00\x01")
    broken = _copal("import", str(tmp_path / "new"), str(damaged))
    assert broken.returncode == 3 and "truncated" in broken.stderr and "Traceback" not in broken.stderr


def test_every_command_documents_examples_and_exit_codes() -> None:
    top = _copal("--help")
    assert top.returncode == 0 and "exit status:" in top.stdout
    for command in ["info", "ls", "show", "query", "verify", "schema", "gc", "backup", "export", "import", "init",
                    "upgrade"]:
        out = _copal(command, "--help")
        assert out.returncode == 0 and "examples:" in out.stdout and f"copal {command}" in out.stdout, command
        assert "3  database, input or output error" in out.stdout, command
    assert _copal("frobnicate").returncode == 2


def test_commands_refuse_a_database_that_does_not_exist(tmp_path: Path) -> None:
    out = _copal("info", str(tmp_path / "typo"))
    assert out.returncode == 3 and out.stderr.strip() == f"copal info: error: no database at {tmp_path / 'typo'}"
    assert not (tmp_path / "typo").exists()
    (tmp_path / "empty").mkdir()
    for command in ("info", "ls", "verify"):
        out = _copal(command, str(tmp_path / "empty"))
        assert out.returncode == 3 and out.stderr.strip() == f"copal {command}: error: no database at {tmp_path / 'empty'}"
        assert list((tmp_path / "empty").iterdir()) == []


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["show", "-1"], 2, "is not an object id"),
        (["show", str(2**64)], 2, "is not an object id"),
        (["query", "test_cli.Person", "--limit", "-1"], 2, "is not a count from 1 to 2**32"),
        (["ls", "test_cli.Person", "--limit", str(2**64)], 2, "is not a count from 1 to 2**32"),
        (["query", "test_cli.Person", "--where", "age == " + "9" * 4301], 2, "has too many digits"),
        (["query", "test_cli.Person", "--where", "not " * 1000 + "age == 1"], 2, "nested deeper than 128 levels"),
        (["query", "test_cli.Person", "--where", "(" * 400 + "age == 1" + ")" * 400], 2, "nested deeper than 128 levels"),
    ],
)
def test_bad_arguments_are_one_line_usage_errors(tmp_path: Path, args: list[str], status: int, message: str) -> None:
    _people(tmp_path / "db")
    out = subprocess.run([sys.executable, "-m", "copal", args[0], str(tmp_path / "db"), *args[1:]], capture_output=True, text=True, timeout=20)
    # argparse's errors follow the usage line.
    assert out.returncode == status and message in out.stderr.strip().splitlines()[-1], out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(f"copal {args[0]}: error: ") and "Traceback" not in out.stderr


class Huge(Persistent):
    def __init__(self) -> None:
        self.n = 2**20000


def test_an_integer_longer_than_python_prints_is_a_one_line_error(tmp_path: Path) -> None:
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["huge"] = Huge()
    with db.transaction() as tx:
        oid = tx.root["huge"]._p_oid
    db.close()
    for args in (["show", str(tmp_path / "db"), hex(oid)], ["query", str(tmp_path / "db"), "test_cli.Huge"]):
        out = _copal(*args)
        assert out.returncode == 3 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.startswith(f"copal {args[0]}: error: object {hex(oid)} cannot be shown: ")
        assert len(out.stderr.strip().splitlines()) == 1


def test_init_and_upgrade_of_an_embedded_database(tmp_path: Path) -> None:
    path = tmp_path / "db"
    missing = _copal("upgrade", str(path))
    assert missing.returncode == 3 and missing.stderr.strip() == f"copal upgrade: error: no database at {path}"
    created = _copal("init", str(path))
    assert created.returncode == 0 and created.stdout.startswith(f"created {path} in {path} (layout version 2)")
    again = _copal("init", str(path), "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["created"] == []
    current = _copal("upgrade", str(path))
    assert current.returncode == 0 and current.stdout.strip() == f"{path} is at layout version 2: nothing to do"
    old = tmp_path / "old"
    shutil.copytree(Path(__file__).parent / "fixtures" / "store-format-1", old)
    upgraded = _copal("upgrade", str(old))
    assert upgraded.returncode == 0, upgraded.stderr
    assert upgraded.stdout.splitlines() == [
        f"upgraded {old} from layout version 1 to 2:",
        "  moved every record into a table of its class (store format 1 to 2)",
    ]
    assert _copal("verify", str(old)).returncode == 0
