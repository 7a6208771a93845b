"""Queries and indexes on fields added to a class after records were written: a record without
the field is read as holding the default that loading gives it, so a query agrees with what
loading returns (on both stores)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

import copal
from copal import field

from conftest import Store
from helpers.evolved_members import V1, V2, stored_before_and_after, version_2
from helpers.versions import load_module

def names(objects: list[Any]) -> list[str]:
    return [o.name for o in objects]


def agrees_with_loading(tx: copal.Transaction, cls: type, condition: copal.Expr, test: Callable[[Any], bool]) -> list[str]:
    """The names the query finds, after checking that they are the loaded objects that pass
    ``test`` (in object-id order), counted alike."""
    found = names(tx.query(cls).where(condition).all())
    loaded = [m for m in tx.query(cls) if test(m)]
    assert found == names(loaded)
    assert tx.query(cls).where(condition).count() == len(loaded)
    return found


def test_queries_read_added_fields_as_their_defaults(store: Store, tmp_path: Path) -> None:
    db, v2 = stored_before_and_after(store, tmp_path, "evo_added_query")
    M = v2.Member
    with db.transaction() as tx:
        ann = tx.root["old"][0]
        assert (ann.level, ann.rank, ann.tier, hasattr(ann, "note")) == ("basic", 5, "silver", False)
        assert agrees_with_loading(tx, M, field("level") == "basic", lambda m: m.level == "basic") == ["Ann", "Bob", "Cy", "Eve"]
        assert tx.query(M).where(level="basic").count() == 4
        assert agrees_with_loading(tx, M, field("level") != "basic", lambda m: m.level != "basic") == ["Dee"]
        assert agrees_with_loading(tx, M, field("rank") >= 5, lambda m: m.rank >= 5) == ["Ann", "Bob", "Cy", "Eve"]
        assert agrees_with_loading(tx, M, field("rank") < 5, lambda m: m.rank < 5) == ["Dee"]
        assert agrees_with_loading(tx, M, field("level").in_(["basic"]), lambda m: m.level == "basic") == ["Ann", "Bob", "Cy", "Eve"]
        assert agrees_with_loading(tx, M, field("level").startswith("go"), lambda m: m.level.startswith("go")) == ["Dee"]
        assert agrees_with_loading(tx, M, field("level").is_none(), lambda m: m.level is None) == []
        # A class attribute is what loading gives too.
        assert agrees_with_loading(tx, M, field("tier") == "silver", lambda m: m.tier == "silver") == ["Ann", "Bob", "Cy", "Dee", "Eve"]
        # No default: the field stays missing (is_none holds, no comparison does), as loading
        # leaves the attribute missing.
        assert names(tx.query(M).where(field("note").is_none()).all()) == ["Ann", "Bob", "Cy", "Dee"]
        assert names(tx.query(M).where(field("note") == "hi").all()) == ["Eve"]
        # A method is no stored value.
        assert tx.query(M).where(field("greeting").is_none()).count() == 5
        # Old records sort as their default.
        assert names(tx.query(M).order_by("rank").all()) == ["Dee", "Ann", "Bob", "Cy", "Eve"]
        assert names(tx.query(M).order_by("rank", descending=True).limit(2).all()) == ["Eve", "Ann"]
        assert names(tx.query(M).order_by("level", "joined").all()) == ["Ann", "Bob", "Cy", "Eve", "Dee"]
        assert "records without a field read as its default: level = 'basic'" in tx.query(M).where(level="basic").explain()


def test_pending_objects_are_read_with_the_same_defaults(store: Store, tmp_path: Path) -> None:
    db, v2 = stored_before_and_after(store, tmp_path, "evo_added_pending")
    M = v2.Member
    with db.transaction() as tx:
        bob = tx.root["old"][1]
        bob.joined = 10  # changed in this transaction: evaluated in Python, with its loaded default
        new = M("Fay", 5, None)
        del new.level  # loading would give it the default; so does the query
        tx.add(new)
        assert names(tx.query(M).where(level="basic").all()) == ["Ann", "Bob", "Cy", "Eve", "Fay"]
        assert tx.query(M).where(level="basic").count() == 5
        assert names(tx.query(M).where(tier="silver").order_by("rank").all()) == ["Dee", "Ann", "Bob", "Cy", "Fay", "Eve"]


def test_indexes_key_old_records_under_the_default(store: Store, tmp_path: Path) -> None:
    indexes = "[copal.Index('level'), copal.Index('rank')]"
    db, v2 = stored_before_and_after(store, tmp_path, "evo_added_index", indexes)
    M = v2.Member
    with db.transaction() as tx:
        explained = tx.query(M).where(level="basic").explain()
        assert "index" in explained and "answers the filter from the index alone" in explained
        assert tx.query(M).where(level="basic").count() == 4  # counted from index entries
        assert names(tx.query(M).where(level="basic").all()) == ["Ann", "Bob", "Cy", "Eve"]
        assert "read in order" in tx.query(M).order_by("rank").limit(2).explain()
        assert names(tx.query(M).order_by("rank").limit(2).all()) == ["Dee", "Ann"]
        assert names(tx.query(M).where(field("rank") > 4).all()) == ["Ann", "Bob", "Cy", "Eve"]
    assert db.verify()["problems"] == []

    # A new version with another default: the index is built again with it, and still agrees.
    db = store.reopen(db)
    v3 = version_2(tmp_path, "evo_added_index", level="standard", indexes=indexes)
    with db.transaction() as tx:
        assert [m.level for m in tx.root["old"]] == ["standard"] * 3
        assert "index" in tx.query(v3.Member).where(level="standard").explain()
        assert names(tx.query(v3.Member).where(level="standard").all()) == ["Ann", "Bob", "Cy"]
        assert tx.query(v3.Member).where(level="basic").count() == 1
    assert db.verify()["problems"] == []


def test_a_unique_index_on_an_added_field_refuses_equal_defaults(store: Store, tmp_path: Path) -> None:
    # Loading gives every old record the same value: a unique index cannot hold them.
    v1 = load_module(tmp_path, "evo_added_unique", V1)
    db = store.open()
    with db.transaction() as tx:
        tx.root["old"] = [v1.Member("Ann", 1), v1.Member("Bob", 2)]
    db = store.reopen(db)
    load_module(tmp_path, "evo_added_unique", V2.replace("LEVEL", "'basic'").replace("INDEXES", "[copal.Index('level', unique=True)]"))
    with pytest.raises(copal.UniqueViolation):
        db.transaction()
