"""Transactions: commit, abort, exceptions, snapshot isolation, cache invalidation between
Database objects, read-your-writes queries, conflicts between connections, db.run, threads."""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import copal
from copal import ConflictError, PersistentList
from helpers.measure import Delta
from helpers.models import Animal, Bird, Counter, Dog, Holder, Item


class Boom(Exception):
    pass


def _seed(db: Any) -> None:
    with db.transaction() as tx:
        tx.root["c"] = Counter(1)
        tx.root["h"] = Holder(items=[1], d={"k": 1})
        tx.root["list"] = PersistentList([1])


# Commit and abort.


def test_clean_exit_commits(store: Any) -> None:
    db = store.open()
    commits = Delta(db)
    with db.transaction() as tx:
        tx.root["x"] = Item("x")
    assert commits["commits"] == 1
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.root["x"].name == "x"


def test_explicit_commit_inside_with(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["x"] = Item("x")
        tx.commit()
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.root["x"].name == "x"


def test_explicit_abort_leaves_nothing(store: Any) -> None:
    db = store.open()
    _seed(db)
    with db.transaction() as tx:
        tx.root["new"] = Item("new")
        tx.add(Item("added"))
        tx.root["c"].value = 99
        tx.root["list"].append(2)
        tx.abort()
    with db.transaction() as tx:
        assert "new" not in tx.root
        assert tx.root["c"].value == 1
        assert list(tx.root["list"]) == [1]
        assert tx.query(Item).count() == 0
    db = store.reopen(db)
    with db.transaction() as tx:
        assert "new" not in tx.root
        assert tx.root["c"].value == 1
        assert list(tx.root["list"]) == [1]
        assert tx.query(Item).count() == 0


def test_exception_inside_with_aborts_and_reraises(store: Any) -> None:
    db = store.open()
    _seed(db)
    commits = Delta(db)
    with pytest.raises(Boom):
        with db.transaction() as tx:
            tx.root["new"] = Item("new")
            tx.root["c"].value = 99
            tx.root["h"].items.append(2)
            tx.root["h"].d["k"] = 2
            raise Boom
    assert commits["commits"] == 0
    with db.transaction() as tx:
        assert "new" not in tx.root
        assert tx.root["c"].value == 1
        assert tx.root["h"].items == [1]
        assert tx.root["h"].d == {"k": 1}
    db = store.reopen(db)
    with db.transaction() as tx:
        assert "new" not in tx.root
        assert tx.root["c"].value == 1
        assert tx.root["h"].items == [1]


def test_objects_kept_across_an_abort_are_reverted(store: Any) -> None:
    """The Python objects a program still holds show the committed state after an abort."""
    db = store.open()
    _seed(db)
    with db.transaction() as tx:
        c, h = tx.root["c"], tx.root["h"]
        c.value  # noqa: B018
    with pytest.raises(Boom):
        with db.transaction() as tx:
            c.value = 50
            h.items.append(3)
            raise Boom
    with db.transaction() as tx:
        assert c.value == 1
        assert h.items == [1]
        assert tx.root["c"] is c or tx.root["c"].value == 1


def test_new_object_from_an_aborted_transaction_can_be_added_again(store: Any) -> None:
    db = store.open()
    item = Item("retry")
    with pytest.raises(Boom):
        with db.transaction() as tx:
            tx.root["item"] = item
            raise Boom
    with db.transaction() as tx:
        tx.root["item"] = item
    oid = item._p_oid
    assert isinstance(oid, int)
    db = store.reopen(db)
    with db.transaction() as tx:
        assert tx.root["item"].name == "retry"
        assert tx.get(oid) is tx.root["item"]
        assert tx.query(Item).count() == 1


def test_stats_counters(store: Any) -> None:
    db = store.open()
    stats = db.stats()
    for key in ("records_read", "records_written", "cache_hits", "cache_misses", "commits", "conflicts"):
        assert isinstance(stats[key], int), key
    delta = Delta(db)
    with db.transaction() as tx:
        tx.root["a"] = Item("a")
    with db.transaction() as tx:
        tx.root["b"] = Item("b")
    assert delta["commits"] == 2
    assert delta["records_written"] >= 2
    assert delta["conflicts"] == 0


def test_stats_count_per_database_object(store: Any) -> None:
    # Two Database objects on one location (on LMDB they share one store) count apart, and a
    # new one starts from zero.
    first = store.open()
    with first.transaction() as tx:
        tx.root["a"] = Item("a")
    second = store.open()
    assert second.stats() == dict.fromkeys(second.stats(), 0)
    with second.transaction() as tx:
        assert tx.root["a"].name == "a"
        tx.root["b"] = Item("b")
    with second.transaction() as tx:
        tx.root["c"] = Item("c")
    assert (first.stats()["commits"], second.stats()["commits"]) == (1, 2)
    assert first.stats()["records_read"] <= 2  # its own transaction's reads (the root), not second's
    assert second.stats()["records_read"] >= 2 and second.stats()["cache_misses"] >= 2


def test_a_second_open_of_a_directory_must_ask_for_the_same_options(tmp_path: Any) -> None:
    path = tmp_path / "db"
    db = copal.open(path, durable=False)
    try:
        for options, named in [
            ({}, "durable=False, and this open asks for durable=True"),
            ({"durable": False, "map_size": 1 << 30}, f"map_size={1 << 40}, and this open asks for map_size={1 << 30}"),
        ]:
            with pytest.raises(copal.StorageError, match=f"already open in this process with {named}.*same options"):
                copal.open(path, **options)
        # The same options share the open store: both see each other's commits at once.
        same = copal.open(path, durable=False)
        with same.transaction() as tx:
            tx.root["x"] = 1
        with db.transaction() as tx:
            assert tx.root["x"] == 1
        same.close()
    finally:
        db.close()
    # Once every Database on the directory is closed, it opens with other options, even while
    # the closed Database objects and their objects still exist.
    with copal.open(path) as reopened, reopened.transaction() as tx:
        assert tx.root["x"] == 1


# Read-your-writes queries.


def test_query_sees_objects_added_in_the_transaction(db: Any) -> None:
    with db.transaction() as tx:
        tx.add(Item("stored", 1))
    with db.transaction() as tx:
        added = Item("added", 2)
        tx.add(added)
        rooted = Item("rooted", 3)
        tx.root["r"] = rooted
        assert tx.query(Item).where(name="added").first() is added
        assert tx.query(Item).where(name="rooted").first() is rooted
        assert tx.query(Item).count() == 3
        assert {i.name for i in tx.query(Item)} == {"stored", "added", "rooted"}
    with db.transaction() as tx:
        assert tx.query(Item).count() == 3


def test_query_sees_objects_changed_in_the_transaction(db: Any) -> None:
    with db.transaction() as tx:
        tx.add(Item("a", 1))
        tx.add(Item("b", 1))
    with db.transaction() as tx:
        a = tx.query(Item).where(name="a").first()
        a.name = "z"
        assert tx.query(Item).where(name="z").first() is a
        assert tx.query(Item).where(name="a").first() is None
        assert tx.query(Item).where(name="a").count() == 0
        assert tx.query(Item).where(value=1).count() == 2
        a.value = 2
        assert tx.query(Item).where(value=1).count() == 1
        assert tx.query(Item).where(name="z", value=2).first() is a
        assert tx.query(Item).where(name="z", value=1).first() is None


def test_query_does_not_see_deleted_objects(db: Any) -> None:
    with db.transaction() as tx:
        for name in "abc":
            tx.add(Item(name))
    with db.transaction() as tx:
        b = tx.query(Item).where(name="b").first()
        tx.delete(b)
        assert tx.query(Item).where(name="b").first() is None
        assert tx.query(Item).count() == 2
        assert sorted(i.name for i in tx.query(Item)) == ["a", "c"]
    with db.transaction() as tx:
        assert tx.query(Item).count() == 2


def test_query_after_abort_does_not_see_the_aborted_objects(db: Any) -> None:
    with db.transaction() as tx:
        tx.add(Item("a"))
        tx.abort()
    with db.transaction() as tx:
        assert tx.query(Item).count() == 0
        assert tx.query(Item).where(name="a").first() is None


def test_query_includes_subclasses_and_returns_identical_objects(db: Any) -> None:
    with db.transaction() as tx:
        tx.add(Animal("cat"))
        tx.add(Dog("rex"))
        tx.add(Bird("tweety"))
    with db.transaction() as tx:
        tx.add(Dog("new dog"))
        assert tx.query(Animal).count() == 4
        assert tx.query(Dog).count() == 2
        assert tx.query(Bird).count() == 1
        assert tx.query(Animal).where(legs=2).first().name == "tweety"
        rex = tx.query(Animal).where(name="rex").first()
        assert type(rex) is Dog
        assert tx.get(rex._p_oid) is rex
        assert tx.query(Dog).where(name="rex").first() is rex
        assert sorted(a.name for a in tx.query(Animal)) == ["cat", "new dog", "rex", "tweety"]
        assert tx.query(Item).count() == 0


# Snapshot isolation and cache invalidation.


def _commit_in_thread(db: Any, fn: Any) -> None:
    """Commits ``fn(tx)`` on ``db`` from a new thread."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with db.transaction() as tx:
                fn(tx)
        except BaseException as error:  # noqa: BLE001 (a Rust panic is a BaseException)
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    if errors:
        raise errors[0]


def _commit_nested(db: Any, fn: Any) -> None:
    """Commits ``fn(tx)`` on ``db`` from this thread, while another transaction is open."""
    with db.transaction() as tx:
        fn(tx)


def _change_everything(tx: Any) -> None:
    tx.root["c"].value = 2
    tx.root["list"].append(2)
    tx.root["h"].items.append(2)
    tx.root["new"] = Item("new")


@pytest.mark.parametrize("commit", [_commit_nested, _commit_in_thread], ids=["nested", "thread"])
@pytest.mark.parametrize("same_db", [True, False], ids=["one_db", "two_dbs"])
def test_snapshot_isolation(store: Any, same_db: bool, commit: Any) -> None:
    db1 = store.open()
    _seed(db1)
    db2 = db1 if same_db else store.open()
    with db2.transaction() as t2:
        assert t2.root["c"].value == 1
        commit(db1, _change_everything)
        # Loaded before the commit, and loaded only after it: both from the old snapshot.
        assert t2.root["c"].value == 1
        assert list(t2.root["list"]) == [1]
        assert t2.root["h"].items == [1]
        assert "new" not in t2.root
        assert t2.query(Item).count() == 0
    with db2.transaction() as t2:
        assert t2.root["c"].value == 2
        assert list(t2.root["list"]) == [1, 2]
        assert t2.root["h"].items == [1, 2]
        assert t2.root["new"].name == "new"
        assert t2.query(Item).count() == 1


def test_cache_invalidation_between_two_databases(store: Any) -> None:
    db1, db2 = store.open(), store.open()
    _seed(db1)
    with db2.transaction() as t2:
        cached_counter = t2.root["c"]
        assert cached_counter.value == 1
        assert list(t2.root["list"]) == [1]
        assert t2.root["h"].items == [1]
    for expected in (2, 3):
        with db1.transaction() as t1:
            t1.root["c"].value = expected
            t1.root["list"].append(expected)
            t1.root["h"].items.append(expected)
        with db2.transaction() as t2:
            assert t2.root["c"].value == expected
            assert cached_counter.value == expected
            assert list(t2.root["list"])[-1] == expected
            assert t2.root["h"].items[-1] == expected
    with db2.transaction() as t2:
        t2.root["c"].value = 10  # db2's cached serial is current: no conflict
    with db1.transaction() as t1:
        assert t1.root["c"].value == 10


def test_cache_invalidation_of_deleted_object(store: Any) -> None:
    db1, db2 = store.open(), store.open()
    with db1.transaction() as t1:
        t1.add(Item("doomed"))
        t1.add(Item("kept"))
    with db2.transaction() as t2:
        assert t2.query(Item).count() == 2
    with db1.transaction() as t1:
        t1.delete(t1.query(Item).where(name="doomed").first())
    with db2.transaction() as t2:
        assert [i.name for i in t2.query(Item)] == ["kept"]


# Conflicts between two connections in one process (test_processes.py does it across processes).


def test_conflict_between_two_databases(store: Any) -> None:
    db1, db2 = store.open(), store.open()
    _seed(db1)
    conflicts = Delta(db2)
    with pytest.raises(ConflictError):
        with db2.transaction() as t2:
            counter = t2.root["c"]
            assert counter.value == 1
            _commit_nested(db1, lambda t1: setattr(t1.root["c"], "value", 100))
            counter.value = 2
            t2.root["other"] = Item("lost with the conflict")
    assert conflicts["conflicts"] == 1
    with db2.transaction() as t2:
        assert t2.root["c"].value == 100
        assert "other" not in t2.root
    db = store.open()
    with db.transaction() as tx:
        assert tx.root["c"].value == 100


def test_reading_without_changing_never_conflicts(store: Any) -> None:
    """A transaction that only reads objects commits even if another one changed them."""
    db1, db2 = store.open(), store.open()
    with db1.transaction() as t1:
        t1.root["h"] = Holder(names={f"name{j}" for j in range(60)}, items=[{"a": {1, 2}}], n=0)
    conflicts = Delta(db2)
    with db2.transaction() as t2:
        h = t2.root["h"]
        assert len(h.names) == 60 and h.items[0]["a"] == {1, 2} and h.n == 0
        _commit_nested(db1, lambda t1: setattr(t1.root["h"], "n", 1))
    assert conflicts["conflicts"] == 0


def test_conflict_error_is_a_copal_error() -> None:
    for cls in (copal.ConflictError, copal.CorruptRecordError, copal.SchemaError, copal.UniqueViolation,
                copal.DanglingReference, copal.StorageError):
        assert issubclass(cls, copal.CopalError)
    assert issubclass(copal.CopalError, Exception)


def test_run_retries_on_conflict(store: Any, caplog: pytest.LogCaptureFixture) -> None:
    db1, db2 = store.open(), store.open()
    _seed(db1)
    calls: list[int] = []

    def increment(tx: Any) -> None:
        counter = tx.root["c"]
        value = counter.value
        calls.append(value)
        if len(calls) == 1:
            _commit_nested(db1, lambda t1: setattr(t1.root["c"], "value", t1.root["c"].value + 10))
        counter.value = value + 1

    conflicts = Delta(db2)
    with caplog.at_level(logging.INFO, logger="copal"):
        db2.run(increment, retries=3)
    assert calls == [1, 11]
    assert (conflicts["conflicts"], conflicts["retries"]) == (1, 1)
    # One log record per retry, naming the function and the conflict.
    [record] = [r for r in caplog.records if r.name == "copal"]
    assert record.levelno == logging.INFO
    with db2.transaction() as tx:
        assert tx.root["c"].value == 12
        oid = hex(tx.root["c"]._p_oid)
    assert f"retry 1 of 3 of test_run_retries_on_conflict.<locals>.increment after a conflict: object {oid}" in record.getMessage()


def test_run_gives_up_after_its_retries(store: Any) -> None:
    db1, db2 = store.open(), store.open()
    _seed(db1)
    calls: list[int] = []

    def always_conflicts(tx: Any) -> None:
        calls.append(1)
        counter = tx.root["c"]
        counter.value  # noqa: B018
        _commit_nested(db1, lambda t1: setattr(t1.root["c"], "value", t1.root["c"].value + 1))
        counter.value = -1

    retried = Delta(db2)
    with pytest.raises(ConflictError):
        db2.run(always_conflicts, retries=2)
    assert len(calls) == 3  # "retries=2": one attempt and two more
    assert (retried["conflicts"], retried["retries"]) == (3, 2)
    with db2.transaction() as tx:
        assert tx.root["c"].value == 1 + len(calls)


def test_run_does_not_retry_other_errors(db: Any) -> None:
    calls: list[int] = []

    def fails(tx: Any) -> None:
        calls.append(1)
        tx.root["x"] = Item("x")
        raise Boom

    with pytest.raises(Boom):
        db.run(fails, retries=5)
    assert calls == [1]
    with db.transaction() as tx:
        assert "x" not in tx.root


def test_run_commits(db: Any) -> None:
    db.run(lambda tx: tx.root.__setitem__("x", Item("x")))
    with db.transaction() as tx:
        assert tx.root["x"].name == "x"


# Threads sharing one Database.


def test_threads_with_their_own_transactions(store: Any) -> None:
    db = store.open()
    n_threads, n_tx = 4, 25
    errors: list[BaseException] = []
    oids: dict[int, list[int]] = {t: [] for t in range(n_threads)}
    start = threading.Barrier(n_threads)

    def work(t: int) -> None:
        try:
            start.wait()
            for i in range(n_tx):
                with db.transaction() as tx:
                    item = Item(f"t{t}-{i}", t, payload=bytes([t]) * i)
                    tx.add(item)
                oids[t].append(item._p_oid)
                with db.transaction() as tx:
                    assert tx.query(Item).where(value=t).count() == i + 1
                    for j, oid in enumerate(oids[t]):
                        got = tx.get(oid)
                        assert got.name == f"t{t}-{j}"
                        assert got.payload == bytes([t]) * j
                    assert tx.query(Item).count() >= i + 1
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)
    if errors:
        raise errors[0]
    expected = {f"t{t}-{i}" for t in range(n_threads) for i in range(n_tx)}
    with db.transaction() as tx:
        assert {i.name for i in tx.query(Item)} == expected
    db = store.reopen(db)
    with db.transaction() as tx:
        assert {i.name for i in tx.query(Item)} == expected
        assert len({i._p_oid for i in tx.query(Item)}) == n_threads * n_tx


def test_threads_sharing_one_counter_with_run(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["c"] = Counter(0)
    errors: list[BaseException] = []

    def increment(tx: Any) -> None:
        tx.root["c"].value += 1

    def work() -> None:
        try:
            for _ in range(25):
                db.run(increment, retries=1000)
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    if errors:
        raise errors[0]
    with db.transaction() as tx:
        assert tx.root["c"].value == 100


# A state machine comparing the database with a plain dict model across commit, abort and reopen.


class DatabaseAgainstModel(RuleBasedStateMachine):
    """Each root key holds a Holder(value=..., log=[...]); the model holds (value, log) pairs.

    ``committed`` is what the database must show outside a transaction, ``pending`` what the
    open transaction must show; ``stored`` counts the Holders that commits made persistent.
    """

    keys = st.sampled_from(["a", "b", "c"])
    values = st.integers() | st.text(max_size=4) | st.none()

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="copal-model-")
        self.db = copal.open(self.dir)
        self.tx: Any = None
        self.committed: dict[str, tuple[Any, list[int]]] = {}
        self.pending: dict[str, tuple[Any, list[int]]] = {}
        self.fresh: set[str] = set()  # keys whose Holder was created in the open transaction
        self.stored = 0

    def _begin(self) -> Any:
        if self.tx is None:
            self.tx = self.db.transaction()
            self.pending = {k: (v, list(log)) for k, (v, log) in self.committed.items()}
            self.fresh = set()
        return self.tx

    @rule(key=keys, value=values)
    def put(self, key: str, value: Any) -> None:
        self._begin().root[key] = Holder(value=value, log=[])
        self.pending[key] = (value, [])
        self.fresh.add(key)

    @rule(key=keys, value=values)
    def change(self, key: str, value: Any) -> None:
        tx = self._begin()
        if key in self.pending:
            tx.root[key].value = value
            self.pending[key] = (value, self.pending[key][1])

    @rule(key=keys, x=st.integers(0, 9))
    def append_in_place(self, key: str, x: int) -> None:
        tx = self._begin()
        if key in self.pending:
            tx.root[key].log.append(x)
            self.pending[key][1].append(x)

    @rule(key=keys)
    def delete_root(self, key: str) -> None:
        tx = self._begin()
        if key in self.pending:
            del tx.root[key]
            del self.pending[key]
            self.fresh.discard(key)

    @precondition(lambda self: self.tx is not None)
    @rule()
    def commit(self) -> None:
        self.tx.commit()
        self.tx = None
        self.committed = self.pending
        self.stored += len(self.fresh)

    @precondition(lambda self: self.tx is not None)
    @rule(by_exception=st.booleans())
    def abort(self, by_exception: bool) -> None:
        if by_exception:
            with pytest.raises(Boom):
                with self.tx:
                    raise Boom
        else:
            self.tx.abort()
        self.tx = None

    @precondition(lambda self: self.tx is None)
    @rule()
    def reopen(self) -> None:
        self.db.close()
        self.db = copal.open(self.dir)

    @invariant()
    def matches_model(self) -> None:
        if self.tx is not None:
            self._check(self.tx, self.pending)
            return
        with self.db.transaction() as tx:
            self._check(tx, self.committed)
            assert tx.query(Holder).count() == self.stored

    @staticmethod
    def _check(tx: Any, expected: dict[str, tuple[Any, list[int]]]) -> None:
        assert sorted(tx.root.keys()) == sorted(expected)
        for key, (value, log) in expected.items():
            holder = tx.root[key]
            assert (holder.value, holder.log) == (value, log), key

    def teardown(self) -> None:
        if self.tx is not None:
            self.tx.abort()
        self.db.close()
        shutil.rmtree(self.dir, ignore_errors=True)


DatabaseAgainstModel.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_database_against_model = DatabaseAgainstModel.TestCase


def test_a_commit_after_anothers_leaves_no_stale_object_in_its_connection(db: Any) -> None:
    with db.transaction() as tx:
        tx.root["a"], tx.root["b"] = Counter(1), Counter(1)
    # Both connections cache a and b.
    first, second = db.transaction(), db.transaction()
    for tx in (first, second):
        assert (tx.root["a"].value, tx.root["b"].value) == (1, 1)
    first.root["a"].value = 5
    first.commit()
    # The second commits after the first, which its snapshot did not see: its connection must
    # still learn that a changed.
    second.root["b"].value = 7
    second.commit()
    for _ in range(3):
        with db.transaction() as tx:
            assert (tx.root["a"].value, tx.root["b"].value) == (5, 7)


def test_changing_a_stored_object_after_its_transaction_ended_is_refused(db: Any) -> None:
    with db.transaction() as tx:
        tx.root["c"] = counter = Counter(1)
    with db.transaction() as tx:
        loaded = tx.root["c"]
    for change in (lambda: setattr(loaded, "value", 5), lambda: delattr(loaded, "value"),
                   lambda: setattr(counter, "value", 6), lambda: setattr(loaded, "_p_changed", True)):
        with pytest.raises(RuntimeError, match="transaction that loaded it has ended"):
            change()
    # Nothing waits on the connection for the next transaction to commit.
    with db.transaction() as tx:
        tx.root["other"] = 1
    with db.transaction() as tx:
        assert tx.root["c"].value == 1
        tx.root["c"].value = 2
    with db.transaction() as tx:
        assert tx.root["c"].value == 2


def test_objects_of_an_ended_transaction_stay_readable_until_their_connection_serves_another(tmp_path: Any) -> None:
    """After its transaction, an object still reads its loaded state, and a ghost loads the
    latest committed state; the next transaction on the same connection uses the same objects
    (so objects are read inside the transaction that uses them, as the docstring says)."""
    with copal.open(tmp_path / "db") as db:
        with db.transaction() as tx:
            tx.root["numbers"] = PersistentList([1, 2, 3])
        with db.transaction() as tx:
            numbers = tx.root["numbers"]
            assert numbers[0] == 1
        assert numbers[1] == 2  # loaded: read without a transaction
        with db.transaction() as tx:
            tx.root["numbers"].append(4)
        numbers._p_deactivate()
        assert list(numbers) == [1, 2, 3, 4]  # a ghost loads the latest committed state
        with db.transaction() as tx:
            assert tx.root["numbers"] is numbers  # the connection's object, given to its next transaction
