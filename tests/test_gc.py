"""Garbage collection (``Database.gc``, ``copal gc``): objects that neither the root mapping nor
an added object (an anchor) reaches are removed, online, on both stores."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import copal
from copal import ConflictError, PersistentList
from helpers.models import Item
from helpers.procs import child_env, helper_command
from helpers.query_models import Owner, Pet


def _stored(db: Any, item_type: type = Item) -> set[str]:
    with db.transaction() as tx:
        return {obj.name for obj in tx.query(item_type)}


def _seed_garbage(db: Any) -> None:
    """root["kept"] -> a (-> a.child); tx.add(b) (-> b.child); "gone" and its child unlinked."""
    with db.transaction() as tx:
        a, b = Item("a", Item("a.child")), Item("b", Item("b.child"))
        tx.root["kept"] = a
        tx.add(b)
        tx.root["gone"] = Item("gone", PersistentList([Item("gone.child")]))
    with db.transaction() as tx:
        del tx.root["gone"]


def test_what_no_root_or_added_object_reaches_is_removed(store: Any) -> None:
    db = store.open()
    _seed_garbage(db)
    report = db.gc()
    assert report["removed"] == 3  # "gone", its list and "gone.child"
    assert report["removed_by_type"] == {"copal.PersistentList": 1, "helpers.models.Item": 2}
    assert report["removed_bytes"] > 0 and report["commits"] == 1
    assert report["objects"] == report["reachable"] + 3 and report["anchors_derived"] == 0
    assert _stored(db) == {"a", "a.child", "b", "b.child"}
    assert db.verify()["problems"] == []
    assert db.verify()["anchors"] == 1
    assert db.gc()["removed"] == 0


def test_an_added_object_is_kept_until_deleted_then_what_only_it_reached_goes(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.add(Item("added", Item("its child")))
    assert db.gc()["removed"] == 0
    with db.transaction() as tx:
        tx.delete(tx.query(Item).where(name="added").one())
    assert db.gc()["removed"] == 1
    assert _stored(db) == set()
    assert db.verify()["anchors"] == 0


def test_adding_a_stored_object_anchors_it(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["x"] = Item("x")
    with db.transaction() as tx:
        tx.add(tx.root["x"])
    with db.transaction() as tx:
        del tx.root["x"]
    assert db.gc()["removed"] == 0
    assert _stored(db) == {"x"}


def test_a_transaction_that_read_before_a_collection_cannot_link_a_collected_object(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["holder"] = Item("holder")
        tx.root["doomed"] = Item("doomed")
    stale = db.transaction()
    doomed = stale.root["doomed"]
    assert doomed.name == "doomed"
    other = store.open()
    with other.transaction() as tx:
        del tx.root["doomed"]
    assert other.gc()["removed"] == 1
    stale.root["holder"].value = doomed
    with pytest.raises(ConflictError, match="deleted by another transaction"):
        stale.commit()
    # A later transaction of the same connection still holds the collected object: refused too.
    with pytest.raises(ConflictError):
        with db.transaction() as tx:
            tx.root["holder"].value = doomed
    with db.transaction() as tx:
        assert tx.root["holder"].value == 0
    assert db.verify()["problems"] == []


def test_objects_linked_back_while_a_collection_runs_are_never_removed(store: Any, tmp_path: Path) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["live"] = PersistentList(Item(f"live-{i}") for i in range(40))
        tx.root["garbage"] = PersistentList(Item(f"garbage-{i}") for i in range(3000))
    with db.transaction() as tx:
        del tx.root["garbage"]
    go = tmp_path / "go"
    writer = subprocess.Popen(helper_command("gc_churn.py", store.path, 3, go), env=child_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("go.ready.*")):
        assert writer.poll() is None and time.monotonic() < deadline, writer.stderr.read() if writer.stderr else ""
        time.sleep(0.01)
    go.touch()
    removed = 0
    while writer.poll() is None:
        removed += db.gc(batch=50)["removed"]
    out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    commits, relinked = (int(n) for n in out.split()[1:4:2])
    assert commits > 20 and relinked > 0, out
    removed += db.gc(batch=50)["removed"]
    assert removed >= 3000 + 1
    report = db.verify()
    assert report["problems"] == [], report["problems"][:5]
    with db.transaction() as tx:
        live = tx.root["live"]
        # Every linked item loads (none was removed), and nothing unlinked is left.
        assert all(item.name for item in live)
        assert tx.query(Item).count() == len(live)


def test_progress_is_reported_and_an_exception_stops_after_a_commit(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["garbage"] = PersistentList(Item(f"g{i}") for i in range(10))
    with db.transaction() as tx:
        del tx.root["garbage"]
    seen: list[tuple[str, int, int]] = []

    def stop_after_first_commit(what: str, done: int, total: int) -> None:
        seen.append((what, done, total))
        if what == "gc: removing":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        db.gc(batch=4, progress=stop_after_first_commit)
    assert seen == [("gc: removing", 4, 11)]
    assert len(_stored(db)) == 10 - 3  # the list and three items went in the first commit
    assert db.verify()["problems"] == []
    assert db.gc()["removed"] == 7
    with pytest.raises(ValueError, match="batch"):
        db.gc(batch=0)


def test_a_database_written_without_anchors_keeps_what_nothing_refers_to(tmp_path: Path) -> None:
    """The fixture of tests/test_store_format.py was written before anchors were recorded: its
    objects were stored by add, and nothing refers to most of them."""
    path = tmp_path / "db"
    shutil.copytree(Path(__file__).parent / "fixtures" / "store-format-1", path)
    db = copal.open(path)
    with db.transaction() as tx:
        owners, pets = tx.query(Owner).count(), tx.query(Pet).count()
    report = db.gc()
    assert report["removed"] == 0 and report["anchors_derived"] > 0
    with db.transaction() as tx:
        assert (tx.query(Owner).count(), tx.query(Pet).count()) == (owners, pets)
        tx.delete(tx.query(Pet).first())
    again = db.gc()
    assert again["anchors_derived"] == 0
    assert db.verify()["problems"] == []


def test_copal_gc_prints_what_it_removed(tmp_path: Path) -> None:
    path = tmp_path / "db"
    db = copal.open(path)
    _seed_garbage(db)
    db.close()
    run = lambda *args: subprocess.run([sys.executable, "-m", "copal", "gc", *args], capture_output=True, text=True, timeout=120)  # noqa: E731
    out = run(str(path))
    assert out.returncode == 0, out.stderr
    assert "removed 3 objects" in out.stdout and "helpers.models.Item: 2" in out.stdout
    as_json = json.loads(run(str(path), "--json").stdout)
    assert as_json["removed"] == 0 and as_json["objects"] == 5
    refused = run(str(path), "--purge")
    assert refused.returncode != 0 and "--schema" in refused.stderr


def test_a_collection_waits_for_nobody_but_each_commit(tmp_path: Path) -> None:
    """Between two of the collection's commits, another thread's commit lands: the collection
    holds the write lock one commit at a time, not for its whole run."""
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["garbage"] = PersistentList(Item(f"g{i}") for i in range(20_000))
        tx.root["n"] = 0
    with db.transaction() as tx:
        del tx.root["garbage"]
    stop, commits = threading.Event(), []
    landed_between: list[bool] = []

    def writer() -> None:
        while not stop.is_set():
            with db.transaction() as tx:
                tx.root["n"] += 1
            commits.append(1)

    def between_commits(what: str, done: int, total: int) -> None:
        # Called after a sweep commit: the writer must get a commit in before the next one.
        if what == "gc: removing" and done < total:
            before, deadline = len(commits), time.monotonic() + 10
            while len(commits) == before and time.monotonic() < deadline:
                time.sleep(0.001)
            landed_between.append(len(commits) > before)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        report = db.gc(batch=500, progress=between_commits)
    finally:
        stop.set()
        thread.join()
    assert report["removed"] == 20_001 and report["commits"] == 41
    assert len(landed_between) == 40 and all(landed_between)
    with db.transaction() as tx:
        assert tx.root["n"] == len(commits)
    db.close()
