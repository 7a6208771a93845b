"""Class evolution across a real close/reopen, with the class redefined in between."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import copal

from helpers.versions import load_module


V1 = """
import enum
import copal

class Kind(enum.Enum):
    A = "a"
    B = "b"

class Account(copal.Persistent):
    def __init__(self, owner, balance=0):
        self.owner = owner
        self.balance = balance
        self.mail = owner + "@old"
        self.legacy = "drop me"
        self.kind = "b"
"""

V2 = """
import enum
import copal

class Kind(enum.Enum):
    A = "a"
    B = "b"

class Account(copal.Persistent):
    __copal_renamed__ = {"mail": "email"}
    balance: float
    kind: Kind
    currency = "EUR"

    def __init__(self, owner, balance=0, tags=[], limit=100):
        self.owner = owner
        self.balance = balance
        self.email = owner + "@new"
        self.kind = Kind.A
        self.tags = list(tags)
        self.limit = limit
"""


def test_added_renamed_removed_and_retyped_fields(tmp_path: Path) -> None:
    v1 = load_module(tmp_path, "evo_accounts", V1)
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["a"] = v1.Account("ann", 5)
    db.close()

    load_module(tmp_path, "evo_accounts", V2)
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        a = tx.root["a"]
        assert a.email == "ann@old"  # renamed field
        assert not hasattr(a, "mail")
        assert a.limit == 100 and a.tags == [] and a.currency == "EUR"  # added fields
        assert a.legacy == "drop me"  # removed field: kept until purged
        assert a.balance == 5.0 and isinstance(a.balance, float)  # int -> float
        assert a.kind is sys.modules["evo_accounts"].Kind.B  # str -> Enum by value
        a.tags.append("x")
        other = tx.root["a"]
        assert other.tags == ["x"]
    with db.transaction() as tx:
        assert tx.root["a"].tags == ["x"]
    db.close()


def test_lossy_type_change_raises_schema_error_naming_everything(tmp_path: Path) -> None:
    v1 = load_module(tmp_path, "evo_lossy", "import copal\nclass Item(copal.Persistent):\n    def __init__(self):\n        self.qty = 1.5\n")
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["i"] = v1.Item()
        tx.commit()
    db.close()
    load_module(tmp_path, "evo_lossy", "import copal\nclass Item(copal.Persistent):\n    qty: int\n")
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        item = tx.root["i"]
        with pytest.raises(copal.SchemaError) as info:
            item.qty
        message = str(info.value)
        assert "Item.qty" in message and "float" in message and "int" in message and "0x" in message
    db.close()


def test_pinned_type_name_and_aliases_survive_moves_and_renames(tmp_path: Path) -> None:
    old = load_module(tmp_path, "evo_old_place", "import copal\nclass Customer(copal.Persistent):\n    def __init__(self):\n        self.n = 1\n")
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["c"] = old.Customer()
    db.close()
    sys.modules.pop("evo_old_place")
    copal.persistent.registry.pop("evo_old_place.Customer")
    new = load_module(
        tmp_path,
        "evo_new_place",
        "import copal\nclass Client(copal.Persistent):\n    __copal_aliases__ = ('evo_old_place.Customer',)\n",
    )
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        c = tx.root["c"]
        assert isinstance(c, new.Client) and c.n == 1
        assert tx.query(new.Client).count() == 1
    db.close()


ALIAS_OLD = """
import copal

class Customer(copal.Persistent):
    def __init__(self, name, n):
        self.name = name
        self.n = n
"""

ALIAS_MIDDLE = """
import copal

class Patron(copal.Persistent):
    __copal_aliases__ = ("evo_alias_old.Customer",)

    def __init__(self, name, n):
        self.name = name
        self.n = n
"""

ALIAS_NEW = """
import copal

class Client(copal.Persistent):
    __copal_aliases__ = ("evo_alias_old.Customer", "evo_alias_mid.Patron")
    __copal_indexes__ = [copal.Index("name", unique=True), copal.Index("n")]

    def __init__(self, name, n):
        self.name = name
        self.n = n

class VipClient(Client):
    pass
"""


def test_queries_and_indexes_of_a_renamed_class_cover_objects_stored_under_its_aliases(tmp_path: Path) -> None:
    # Renamed twice: objects are stored under both former names before the current one.
    path = tmp_path / "db"
    for module, source, names in [("evo_alias_old", ALIAS_OLD, [("ann", 1), ("bob", 5)]), ("evo_alias_mid", ALIAS_MIDDLE, [("cy", 3)])]:
        loaded = vars(load_module(tmp_path, module, source))
        cls = next(c for c in loaded.values() if isinstance(c, type) and c.__module__ == module)
        db = copal.open(path)
        with db.transaction() as tx:
            tx.root[module] = copal.PersistentList(cls(name, n) for name, n in names)
        db.close()
        sys.modules.pop(module)
        for name in [n for n, c in copal.persistent.registry.items() if c is cls]:
            copal.persistent.registry.pop(name)

    new = load_module(tmp_path, "evo_alias_new", ALIAS_NEW)
    Client, VipClient = new.Client, new.VipClient
    f = copal.field
    db = copal.open(path)
    try:
        with db.transaction() as tx:
            tx.root["new"] = copal.PersistentList([Client("dan", 2), Client("eve", 4), VipClient("fay", 6)])
        with db.transaction() as tx:
            assert tx.query(Client).count() == 6
            assert tx.query(Client).only(Client).count() == 5  # the aliases are Client itself
            assert [c.name for c in tx.query(VipClient)] == ["fay"]
            q = tx.query(Client).where(name="bob")  # an old object, through the new class's index
            assert "index" in q.explain().lower()
            bob = q.one()
            assert isinstance(bob, Client) and bob.n == 5
            assert [c.name for c in tx.query(Client).order_by("n").limit(4)] == ["ann", "dan", "cy", "eve"]
            assert [c.name for c in tx.query(Client).where(f("n") > 4).order_by("n")] == ["bob", "fay"]
            assert sorted(c.name for c in tx.query(Client).where(f("n") < 3)) == ["ann", "dan"]
            bob.name = "rob"  # an old object written by the new class keeps its old oid and extent
            tx.root["new"].append(Client("gus", 0))
            assert tx.query(Client).where(name="rob").one() is bob  # pending changes are seen
            assert tx.query(Client).count() == 7
        with db.transaction() as tx:
            assert tx.query(Client).where(name="rob").one().n == 5
            assert tx.query(Client).where(name="bob").first() is None
            assert tx.query(Client).count() == 7
        with pytest.raises(copal.UniqueViolation):
            with db.transaction() as tx:
                tx.root["dup"] = Client("cy", 9)  # "cy" is stored under the old type name
        assert db.verify()["problems"] == []
        classes = {d["type_name"]: d["class"] for d in db.schema()["descriptors"]}
        stored_as = ["evo_alias_old.Customer", "evo_alias_mid.Patron", "evo_alias_new.Client"]
        assert len({classes[name] for name in stored_as}) == 3  # three extents, one class
    finally:
        db.close()


def _copal(*args: str) -> subprocess.CompletedProcess[str]:
    """The copal command in a fresh process: none of the test's classes are imported there."""
    return subprocess.run([sys.executable, "-m", "copal", *args], capture_output=True, text=True, timeout=120)


REMOVED_V1 = """
import copal

class Account(copal.Persistent):
    __copal_indexes__ = [copal.Index("owner", unique=True)]

    def __init__(self, owner):
        self.owner = owner
        self.legacy = "old " + owner
        self.notes = "kept"
"""

REMOVED_V2 = """
import copal

class Account(copal.Persistent):
    __copal_indexes__ = [copal.Index("owner", unique=True)]
    __copal_removed__ = ("legacy",)

    def __init__(self, owner):
        self.owner = owner
        self.notes = "kept"
"""


def _stored_fields(db: copal.Database, type_name: str) -> dict[tuple[str, ...], int]:
    """Records per field list of `type_name`, from ``Database.schema``."""
    return {tuple(d["fields"]): d["records"] for d in db.schema()["descriptors"] if d["type_name"] == type_name}


def test_removed_fields_stay_in_records_until_written_then_gc_purges_the_rest(tmp_path: Path) -> None:
    v1 = load_module(tmp_path, "evo_removed", REMOVED_V1)
    path = tmp_path / "db"
    db = copal.open(path)
    with db.transaction() as tx:
        tx.root["accounts"] = copal.PersistentList(v1.Account(name) for name in ["ann", "bob", "cy"])
    db.close()

    load_module(tmp_path, "evo_removed", REMOVED_V2)
    db = copal.open(path)
    with db.transaction() as tx:
        ann, bob, cy = tx.root["accounts"]
        assert (ann.owner, ann.notes) == ("ann", "kept")
        assert not hasattr(ann, "legacy")  # rule 9: a declared removed field is not loaded
        raw_bob = db._debug_raw_record(bob._p_oid)
        ann.notes = "changed"  # ann is written, so her record loses the removed value
    with db.transaction() as tx:
        assert db._debug_raw_record(bob._p_oid) == raw_bob  # bob was only read: record untouched
        assert b"old bob" in raw_bob
    assert _stored_fields(db, "evo_removed.Account") == {("owner", "legacy", "notes"): 2, ("owner", "notes"): 1}
    db.close()

    # The command runs in another process, without the application's classes.
    report = _copal("gc", "--schema", str(path))
    assert report.returncode == 0, report.stderr
    assert "evo_removed.Account.legacy: removed, still held by 2 records" in report.stdout
    assert "--purge" in report.stdout
    as_json = json.loads(_copal("gc", "--schema", str(path), "--json").stdout)
    assert as_json["removed"] == [{"type_name": "evo_removed.Account", "field": "legacy", "records": 2}]
    assert as_json["purged"] == 0

    purged = _copal("gc", "--schema", "--purge", str(path))
    assert purged.returncode == 0, purged.stderr
    assert "purged 2 records" in purged.stdout
    verify = _copal("verify", str(path), "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert json.loads(verify.stdout)["index_entries"] == 3

    db = copal.open(path)
    assert _stored_fields(db, "evo_removed.Account") == {("owner", "legacy", "notes"): 0, ("owner", "notes"): 3}
    with db.transaction() as tx:
        assert db._debug_raw_record(bob._p_oid) is not None and b"old bob" not in db._debug_raw_record(bob._p_oid)
        accounts = list(tx.root["accounts"])
        assert [(a.owner, a.notes) for a in accounts] == [("ann", "changed"), ("bob", "kept"), ("cy", "kept")]
        # The unique index still holds every account, purged ones included.
        assert tx.query(type(accounts[0])).where(owner="bob").one() is accounts[1]
        with pytest.raises(copal.UniqueViolation):
            with db.transaction() as tx2:
                tx2.root["dup"] = type(accounts[0])("cy")
    db.close()
    again = _copal("gc", "--schema", str(path))
    assert "no record holds a value of a removed field" in again.stdout


SHARING_V1 = """
import copal

class Doc(copal.Persistent):
    def __init__(self, share):
        self.legacy = [1, 2]
        self.tags = ["a"]
        # Either a kept field shares the removed value, or kept fields share a value that comes
        # after it in the record (its back-reference must be renumbered when the value goes).
        self.alias = self.legacy if share else self.tags
"""

SHARING_V2 = """
import copal

class Doc(copal.Persistent):
    __copal_removed__ = ("legacy",)
"""


def test_purge_keeps_shared_values_intact(tmp_path: Path) -> None:
    v1 = load_module(tmp_path, "evo_sharing", SHARING_V1)
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["docs"] = copal.PersistentList([v1.Doc(share=True), v1.Doc(share=False)])
    with db.transaction() as tx:
        shared_oid, renumbered_oid = (d._p_oid for d in tx.root["docs"])
    db.close()

    load_module(tmp_path, "evo_sharing", SHARING_V2)
    db = copal.open(tmp_path / "db")
    report = db.gc_schema(purge=True)
    assert (report["records"], report["purged"], report["shared"]) == (2, 1, [shared_oid])
    assert db.verify()["problems"] == []
    with db.transaction() as tx:
        shared, renumbered = tx.root["docs"]
        assert renumbered._p_oid == renumbered_oid
        assert renumbered.__dict__ == {"tags": ["a"], "alias": ["a"]} and renumbered.alias is renumbered.tags
        assert shared.alias == [1, 2] and not hasattr(shared, "legacy")
        raw = db._debug_raw_record(shared_oid)
    # Rule 9: an object with mutable state whose record has an old shape is written by a
    # transaction that loaded it and commits, and so loses the removed value.
    with db.transaction() as tx:
        assert db._debug_raw_record(shared_oid) != raw
    assert db.gc_schema()["records"] == 0
    db.close()


def test_withdrawn_removal_keeps_values_and_gc_leaves_them(tmp_path: Path) -> None:
    v1 = load_module(tmp_path, "evo_unremoved", REMOVED_V1)
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["a"] = v1.Account("ann")
    db.close()
    load_module(tmp_path, "evo_unremoved", REMOVED_V2)
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        assert not hasattr(tx.root["a"], "legacy")
    db.close()
    # Version 3 takes the field back: the declaration is withdrawn, the stored value loads again.
    load_module(tmp_path, "evo_unremoved", REMOVED_V1)
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        assert tx.root["a"].legacy == "old ann"
    assert db.schema()["removed"] == []
    assert db.gc_schema(purge=True)["purged"] == 0
    db.close()


def test_removed_fields_must_be_named_by_strings(tmp_path: Path) -> None:
    load_module(tmp_path, "evo_bad_removed", "import copal\nclass Thing(copal.Persistent):\n    __copal_removed__ = 'legacy'\n")
    db = copal.open(tmp_path / "db")
    try:
        with pytest.raises(TypeError, match="__copal_removed__ must be a tuple of field names"):
            db.transaction()
    finally:
        db.close()
        # Other tests' databases would refuse the class too.
        sys.modules.pop("evo_bad_removed")
        copal.persistent.registry.pop("evo_bad_removed.Thing")


def test_queries_and_indexes_see_renamed_fields_of_old_records(tmp_path: Path) -> None:
    v1 = load_module(
        tmp_path,
        "evo_renamed_query",
        "import copal\nclass P(copal.Persistent):\n    def __init__(self, m, n):\n        self.mail = m\n        self.nick = n\n",
    )
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["p"] = [v1.P("x@y", "b"), v1.P("z@y", "a")]
    db.close()
    v2 = load_module(
        tmp_path,
        "evo_renamed_query",
        "import copal\nclass P(copal.Persistent):\n    __copal_renamed__ = {'mail': 'email', 'nick': 'name'}\n"
        "    __copal_indexes__ = [copal.Index('email')]\n",
    )
    db = copal.open(tmp_path / "db")
    try:
        with db.transaction() as tx:
            assert tx.root["p"][0].email == "x@y"  # loading applies the rename
            assert "index" in tx.query(v2.P).where(email="x@y").explain()
            assert tx.query(v2.P).where(email="x@y").count() == 1  # answered by the index alone
            assert [p.email for p in tx.query(v2.P).where(copal.field("email").startswith("z"))] == ["z@y"]
            assert [p.email for p in tx.query(v2.P).where(name="b")] == ["x@y"]  # a scan
            assert [p.name for p in tx.query(v2.P).order_by("name")] == ["a", "b"]
        assert db.verify()["problems"] == []
    finally:
        db.close()


BROKEN_WRITER = """
import sys
import copal
class Gone(copal.Persistent):
    def __init__(self):
        self.v = [1, 2]
class Part:
    def __init__(self):
        self.w = 3
class Holder(copal.Persistent):
    def __init__(self, gone):
        self.gone = gone
        self.part = Part()
        self.n = 0
db = copal.open(sys.argv[1])
with db.transaction() as tx:
    tx.root["h"] = Holder(Gone())
db.close()
"""


def test_unknown_classes_load_as_broken_and_are_written_back_unchanged(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(BROKEN_WRITER)
    subprocess.run([sys.executable, str(script), str(tmp_path / "db")], check=True, timeout=120)

    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        holder = tx.root["h"]  # its class (__main__.Holder of another program) is missing too
        assert isinstance(holder, copal.Broken)
        assert holder.type_name == "__main__.Holder"
        assert repr(holder) == f"<Broken __main__.Holder oid={holder._p_oid:#x}>"
        gone = holder.state["gone"]
        assert isinstance(gone, copal.Broken) and gone.state == {"v": [1, 2]}
        part = holder.state["part"]
        assert isinstance(part, copal.BrokenObject) and part.type_name == "__main__.Part" and part.state == {"w": 3}
        with pytest.raises(copal.SchemaError, match=r"import its class first, or, if the class was renamed or moved, list '__main__.Holder' in the new class's __copal_aliases__"):
            holder.n = 1
        raw_before = db._debug_raw_record(gone._p_oid)
        tx.root["other"] = copal.PersistentList([gone, part])  # the owner of both is saved
    with db.transaction() as tx:
        assert db._debug_raw_record(gone._p_oid) == raw_before
        assert tx.root["other"][1] == part
    db.close()


SAFETY_WRITER = """
import sys
import copal
class A(copal.Persistent):
    __copal_type__ = "os.system"
class B(copal.Persistent):
    __copal_type__ = "subprocess.Popen"
class C(copal.Persistent):
    __copal_type__ = "builtins.eval"
class D(copal.Persistent):
    __copal_type__ = "evo_side_effects.Thing"
class E:
    pass
E.__qualname__ = "system"
E.__module__ = "os"
class Holder(copal.Persistent):
    pass
db = copal.open(sys.argv[1])
with db.transaction() as tx:
    h = Holder()
    h.values = [E()]
    tx.root["all"] = copal.PersistentList([A(), B(), C(), D(), h])
db.close()
"""


def test_loading_never_runs_code_named_by_the_data(tmp_path: Path) -> None:
    (tmp_path / "evo_side_effects.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('x')\nclass Thing: pass\n")
    script = tmp_path / "writer.py"
    script.write_text(SAFETY_WRITER)
    subprocess.run([sys.executable, str(script), str(tmp_path / "db")], check=True, timeout=120)
    sys.path.insert(0, str(tmp_path))
    try:
        db = copal.open(tmp_path / "db")
        with db.transaction() as tx:
            loaded = list(tx.root["all"])
            assert all(isinstance(o, copal.Broken) for o in loaded)
            assert [o.type_name for o in loaded[:4]] == ["os.system", "subprocess.Popen", "builtins.eval", "evo_side_effects.Thing"]
            assert isinstance(loaded[4].state["values"][0], copal.BrokenObject)
        db.close()
    finally:
        sys.path.remove(str(tmp_path))
    assert not (tmp_path / "ran").exists()
    assert "evo_side_effects" not in sys.modules


def test_by_value_classes_with_finalizers_or_setters_are_never_rebuilt(tmp_path: Path) -> None:
    marker = tmp_path / "finalizer-ran"
    v1 = load_module(
        tmp_path,
        "evo_closers",
        "import copal\nclass Closer:\n    def __init__(self, name):\n        self.name = name\n"
        "class Box(copal.Persistent):\n    def __init__(self, item):\n        self.item = item\n",
    )
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["box"] = v1.Box(v1.Closer(str(marker)))
    db.close()
    v2 = load_module(
        tmp_path,
        "evo_closers",
        "import copal, pathlib\nclass Closer:\n    def __del__(self):\n        pathlib.Path(self.name).write_text('x')\n"
        "class Box(copal.Persistent):\n    pass\n",
    )
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        item = tx.root["box"].item
        assert isinstance(item, copal.BrokenObject) and item.state == {"name": str(marker)}
        del item
    db.close()
    import gc

    gc.collect()
    assert not marker.exists()
    closer = v2.Closer.__new__(v2.Closer)
    closer.name = str(tmp_path / "written-by-the-test-itself")
    box = v2.Box()
    box.item = closer
    db = copal.open(tmp_path / "db")
    with pytest.raises(TypeError, match="finalizer"):
        with db.transaction() as tx:
            tx.root["other"] = box
    db.close()


OPTIONS_V1 = """
import copal

class Report(copal.Persistent):
    def __init__(self, title):
        self.title = title
"""

OPTIONS_V2 = """
import copal

class Report(copal.Persistent):
    pages: int

    def __init__(self, title, verbose=False, pages=1, status="draft"):
        self.title = title
        self.status = status
        if verbose:
            print("new report", title)
"""


def test_only_init_parameters_that_are_attributes_fill_added_fields(tmp_path: Path) -> None:
    v1 = load_module(tmp_path, "evo_reports", OPTIONS_V1)
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["r"] = v1.Report("q3")
        tx.root["items"] = copal.PersistentList([1])
    db.close()

    load_module(tmp_path, "evo_reports", OPTIONS_V2)
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        report = tx.root["r"]
        # Assigned by __init__ (status) or declared (pages): added fields with their defaults.
        assert (report.status, report.pages) == ("draft", 1)
        # An option __init__ does not keep is not a field of old records.
        assert not hasattr(report, "verbose")
        tx.root["items"].append(2)
        report.title = "Q3"
    with db.transaction() as tx:
        assert not hasattr(tx.root["items"], "items") and tx.root["items"].data == [1, 2]
    lists = [d for d in db.schema()["descriptors"] if d["type_name"] == "copal.PersistentList"]
    assert [d["fields"] for d in lists] == [["data"]], lists
    db.close()
