"""Several processes on one database: conflicts, non-conflicting concurrent commits, retries,
a multi-process counter, and crash safety under kill -9.

Children are fresh interpreters (``subprocess`` with ``sys.executable``); nothing forks a process
that has a database open.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from copal import ConflictError, PersistentList
from helpers.measure import Delta
from helpers.models import Counter, Item
from helpers.procs import child_env, helper_command, run_helper


def _seed(store: Any) -> Any:
    db = store.open()
    with db.transaction() as tx:
        tx.root["c"] = Counter(0)
        tx.root["A"] = PersistentList()
        tx.root["B"] = PersistentList()
    return db


def child(store: Any, *args: object) -> str:
    return run_helper("child_ops.py", store.path, *args)


def test_conflicting_commit_from_another_process(store: Any) -> None:
    db = _seed(store)
    conflicts = Delta(db)
    with pytest.raises(ConflictError):
        with db.transaction() as tx:
            counter = tx.root["c"]
            assert counter.value == 0
            child(store, "set_counter", 100)  # commits first
            counter.value = 1
            tx.root["A"].append("lost")
            tx.root["new"] = Item("lost")
    assert conflicts["conflicts"] == 1
    with db.transaction() as tx:
        assert tx.root["c"].value == 100
        assert list(tx.root["A"]) == []
        assert "new" not in tx.root
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.root["c"].value == 100
        assert tx.query(Item).count() == 0


def test_after_a_conflict_the_next_transaction_sees_the_winner(store: Any) -> None:
    db = _seed(store)
    with pytest.raises(ConflictError):
        with db.transaction() as tx:
            counter = tx.root["c"]
            counter.value  # noqa: B018
            child(store, "set_counter", 7)
            counter.value += 1
    with db.transaction() as tx:
        tx.root["c"].value += 1
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.root["c"].value == 8


def test_snapshot_isolation_and_invalidation_across_processes(store: Any) -> None:
    db = _seed(store)
    with db.transaction() as tx:
        counter = tx.root["c"]
        assert counter.value == 0
        child(store, "set_counter", 5, "A")  # also appends 5 to root["A"]
        assert counter.value == 0
        assert list(tx.root["A"]) == []  # first loaded after the other commit: from the snapshot
        assert tx.query(Item).count() == 0
    with db.transaction() as tx:
        assert counter.value == 5  # the cached object was invalidated
        assert tx.root["c"].value == 5
        assert list(tx.root["A"]) == [5]


def test_a_class_first_stored_by_another_process_is_found_and_extended(store: Any) -> None:
    db = _seed(store)
    with db.transaction() as tx:
        assert tx.query(Item).count() == 0  # no Item was ever stored: the name has no class yet
    # The child registers the class (and, in the embedded store, creates its record table).
    child(store, "add_items", "x", 3)
    with db.transaction() as tx:
        assert tx.query(Item).count() == 3
        assert sorted(item.value for item in tx.query(Item)) == [0, 1, 2]
    with db.transaction() as tx:
        tx.add(Item("here", 9))
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.query(Item).where(name="here").one().value == 9
        assert tx.query(Item).count() == 4


def test_changing_an_object_another_process_deleted_conflicts(store: Any) -> None:
    db = _seed(store)
    with db.transaction() as tx:
        tx.add(Item("doomed", 1))
    with pytest.raises(ConflictError):
        with db.transaction() as tx:
            doomed = tx.query(Item).where(name="doomed").first()
            assert doomed.value == 1
            child(store, "delete_items", "doomed")
            doomed.value = 2
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.query(Item).count() == 0


def test_adding_objects_of_one_class_concurrently_does_not_conflict(store: Any) -> None:
    db = _seed(store)
    conflicts = Delta(db)
    with db.transaction() as tx:
        for i in range(10):
            tx.add(Item(f"parent-{i}", i))
        child(store, "add_items", "child", 10)
    assert conflicts["conflicts"] == 0
    db = store.reopen(db)
    with db.transaction() as tx:
        names = sorted(i.name for i in tx.query(Item))
        assert names == sorted([f"parent-{i}" for i in range(10)] + [f"child-{i}" for i in range(10)])
        assert len({i._p_oid for i in tx.query(Item)}) == 20


@pytest.mark.parametrize("child_list", ["B", "A"], ids=["different_lists", "same_list"])
def test_appending_to_persistent_lists_concurrently(store: Any, child_list: str) -> None:
    db = _seed(store)
    with db.transaction() as tx:
        tx.root["A"].append("before")
    if child_list == "B":
        with db.transaction() as tx:
            tx.root["A"].append("parent")
            child(store, "append", "B", "child")
        expected_a = ["before", "parent"]
    else:  # the same list: a real conflict, which shows the other case is not vacuous
        with pytest.raises(ConflictError):
            with db.transaction() as tx:
                tx.root["A"].append("parent")
                child(store, "append", "A", "child")
        expected_a = ["before", "child"]
    db = store.reopen(db)
    with db.transaction() as tx:
        assert list(tx.root["A"]) == expected_a
        assert list(tx.root["B"]) == (["child"] if child_list == "B" else [])


def test_run_retries_a_conflict_with_another_process(store: Any) -> None:
    db = _seed(store)
    calls: list[int] = []

    def increment(tx: Any) -> None:
        counter = tx.root["c"]
        value = counter.value
        calls.append(value)
        if len(calls) == 1:
            child(store, "increment", 1)
        counter.value = value + 1

    conflicts = Delta(db)
    db.run(increment, retries=3)
    assert calls == [0, 1]
    assert conflicts["conflicts"] == 1
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.root["c"].value == 2


def test_four_processes_incrementing_one_counter(store: Any, tmp_path: Path) -> None:
    store.close(_seed(store))
    # On PostgreSQL, the shared store's acceptance run: 4 processes x 500 transactions.
    n_procs, n_increments = 4, (500 if store.kind == "postgresql" else 100)
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(helper_command("child_ops.py", store.path, "increment", n_increments, go),
                         env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(n_procs)
    ]
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("go.ready.*"))) < n_procs:
            assert time.monotonic() < deadline, "children did not start"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.01)
        go.touch()
        outputs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err
        assert out.startswith("conflicts"), out
    db = store.open()
    with db.transaction() as tx:
        assert tx.root["c"].value == n_procs * n_increments


# Crash safety: kill -9 a committing child at random moments.


class _Reader(threading.Thread):
    """Collects a child's stdout lines as they arrive."""

    def __init__(self, stream: Any) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: list[str] = []
        self.ready = threading.Event()

    def run(self) -> None:
        for line in self.stream:
            if line.endswith("\n"):  # a line cut by the kill was not fully printed
                self.lines.append(line.strip())
                self.ready.set()


def _check_consistent(store: Any, at_least: int) -> int:
    """Opens the database, walks every object, and checks the invariants of crash_loop."""
    db = store.open()
    try:
        with db.transaction() as tx:
            value = tx.root["c"].value
            log = tx.root["log"]
            tx.load_closure([tx.root["c"], log])
            assert value >= at_least, f"counter {value} lost a commit acknowledged as {at_least}"
            assert len(log) == value, f"counter {value} but {len(log)} log entries: a half commit"
            for i, item in enumerate(log, start=1):
                assert (item.name, item.value) == (f"n{i}", i)
                assert item.payload == bytes([i % 256]) * (i * 37 % 5000)
            assert tx.query(Item).count() == value
            assert {item._p_oid for item in tx.query(Item)} == {item._p_oid for item in log}
        with db.transaction() as tx:  # and the database still takes commits
            tx.root["probe"] = value
        return value
    finally:
        store.close(db)


def test_kill_nine_never_loses_or_tears_a_commit(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["c"] = Counter(0)
        tx.root["log"] = PersistentList()
    store.close(db)
    rng = random.Random(20240517)
    acknowledged = 0
    for round_no in range(20):
        with subprocess.Popen(helper_command("child_ops.py", store.path, "crash_loop"), env=child_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
            reader = _Reader(proc.stdout)
            reader.start()
            try:
                started = reader.ready.wait(30)
                time.sleep(rng.uniform(0.0, 0.25))
                alive = proc.poll() is None
            finally:
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(30)
                reader.join(30)
            errors = proc.stderr.read()
        assert started and alive, f"the child stopped on its own (exit {proc.returncode}):\n{errors}"
        printed = [int(line) for line in reader.lines if line != "ready"]
        if printed:
            acknowledged = printed[-1]
        value = _check_consistent(store, acknowledged)
        assert value >= acknowledged
        acknowledged = value  # whatever is stored now is the floor for the next round
        assert round_no < 3 or value > 0, "the child never committed"
