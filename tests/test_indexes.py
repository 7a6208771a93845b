"""Secondary indexes: declaration, build, maintenance at commit, uniqueness, planner choices."""

from __future__ import annotations

import io
from typing import Any

import pytest

import copal
from copal import Index, Persistent, PersistentList, field

from helpers.measure import Delta


class Member(Persistent):
    __copal_indexes__ = [Index("email", unique=True), Index("age"), Index("last", "first")]

    def __init__(self, i: int, **extra: Any) -> None:
        self.email = f"m{i}@example.org"
        self.age = i % 40
        self.last = f"L{i % 7}"
        self.first = f"F{i}"
        self.__dict__.update(extra)


class VipMember(Member):
    pass


def _members(db: Any, n: int = 300) -> None:
    with db.transaction() as tx:
        tx.root["members"] = PersistentList(Member(i) for i in range(n))
        tx.root["vips"] = PersistentList(VipMember(i) for i in range(n, n + 10))


def test_planner_uses_the_indexes(store: Any) -> None:
    db = store.open()
    _members(db)
    with db.transaction() as tx:
        assert "index" in tx.query(Member).where(email="m5@example.org").explain()
        assert "(email)" in tx.query(Member).where(email="m5@example.org").explain()
        assert "(age)" in tx.query(Member).where(field("age") >= 30).explain()
        assert "(last, first)" in tx.query(Member).where(last="L1", first="F8").explain()
        assert "(email)" in tx.query(Member).where(field("email").startswith("m1")).explain()
        assert "(age)" in tx.query(Member).where(field("age").in_([1, 2])).explain()
        assert "top-k" in tx.query(Member).order_by("age").limit(5).explain()
        assert "scan" in tx.query(Member).where(first="F8").explain()


def test_explain_names_how_each_index_field_is_used(store: Any) -> None:
    db = store.open()
    _members(db)
    with db.transaction() as tx:
        members = tx.query(Member)
        assert "(email) [email =], 1 key range(s)" in members.where(email="m5@example.org").explain()
        assert "(last, first) [last =, first =]" in members.where(last="L1", first="F8").explain()
        assert "(last, first) [last =, first range]" in members.where(field("first") > "F8", last="L1").explain()
        assert "(last, first) [last =, first prefix]" in members.where(field("first").startswith("F1"), last="L1").explain()
        assert "(age) [age in (…)], 2 key range(s)" in members.where(field("age").in_([1, 2])).explain()
        assert "(last, first) [last =, order], 1 key range(s)" in members.where(last="L1").order_by("first").explain()
        assert members.where(last="L1").explain().startswith("index test_indexes.Member(last, first) [last =], ")
        assert members.where(email="m5@example.org").explain().startswith("unique index test_indexes.Member(email)")
        assert tx.query(NeverStored).explain().startswith("nothing stored yet; filter")


class NeverStored(Persistent):
    pass


def test_index_results_equal_scan_results(store: Any) -> None:
    db = store.open()
    _members(db)
    with db.transaction() as tx:
        everyone = tx.query(Member).all()

        def expected(pred: Any) -> list[int]:
            return sorted(m._p_oid for m in everyone if pred(m))

        assert sorted(tx.query(Member).where(field("age") > 35).oids()) == expected(lambda m: m.age > 35)
        assert sorted(tx.query(Member).where(field("age") <= 2).oids()) == expected(lambda m: m.age <= 2)
        assert sorted(tx.query(Member).where(field("age").in_([3, 4.0, True])).oids()) == expected(
            lambda m: m.age in (3, 4, 1)
        )
        assert sorted(tx.query(Member).where(last="L3").oids()) == expected(lambda m: m.last == "L3")
        assert sorted(tx.query(VipMember).where(field("age") < 40).oids()) == expected(
            lambda m: isinstance(m, VipMember)
        )
        top = tx.query(Member).order_by("age", descending=True).limit(4).all()
        assert [m.age for m in top] == [39, 39, 39, 39]
        assert tx.query(Member).where(field("age") > "a").all() == []


def test_indexed_lookup_reads_one_record(store: Any) -> None:
    db = store.open()
    _members(db, 2000)
    db = store.reopen(db)
    reads = Delta(db)
    with db.transaction() as tx:
        assert tx.query(Member).where(email="m1234@example.org").one().first == "F1234"
    assert reads["records_read"] <= 2


def test_entries_follow_updates_and_deletes(store: Any) -> None:
    db = store.open()
    _members(db, 50)
    with db.transaction() as tx:
        m = tx.query(Member).where(email="m7@example.org").one()
        m.email = "seven@example.org"
        tx.delete(tx.query(Member).where(email="m8@example.org").one())
    with db.transaction() as tx:
        assert tx.query(Member).where(email="m7@example.org").first() is None
        assert tx.query(Member).where(email="seven@example.org").one().first == "F7"
        assert tx.query(Member).where(email="m8@example.org").count() == 0


def test_unique_violation_writes_nothing(store: Any) -> None:
    db = store.open()
    _members(db, 20)
    commits = Delta(db)
    with pytest.raises(copal.UniqueViolation):
        with db.transaction() as tx:
            tx.root["extra"] = Member(999)
            tx.query(Member).where(email="m1@example.org").one().email = "m2@example.org"
    assert commits["commits"] == 0
    with db.transaction() as tx:
        assert "extra" not in tx.root
        assert tx.query(Member).where(email="m1@example.org").count() == 1
    with db.transaction() as tx:
        tx.add(Member(5000, email=None))
        tx.add(Member(5001, email=None))  # None keys are exempt from uniqueness
    with db.transaction() as tx:
        # A lookup of a key other than None finds at most one entry; of None, every one.
        assert sorted(m.first for m in tx.query(Member).where(email=None)) == ["F5000", "F5001"]
        assert len(tx.query(Member).where(email=None).all()) == 2
        assert [m.first for m in tx.query(Member).where(email="m3@example.org").all()] == ["F3"]


def test_index_declared_on_existing_data_is_built_kept_when_undeclared_and_dropped_when_declared_removed(store: Any) -> None:
    class Late(Persistent):
        def __init__(self, n: int) -> None:
            self.n = n

    db = store.open()
    with db.transaction() as tx:
        tx.root["late"] = PersistentList(Late(i) for i in range(100))
    Late.__copal_indexes__ = [Index("n")]  # type: ignore[attr-defined]
    db = store.reopen(db)

    class Trigger(Persistent):  # a new class makes the database re-read the declarations
        pass

    with db.transaction() as tx:
        assert "index" in tx.query(Late).where(n=42).explain()
        assert [x.n for x in tx.query(Late).where(field("n") >= 98)] == [98, 99]
    # A program whose class does not declare the index (an older version, during a rolling
    # deploy) keeps it, and its commits keep it up to date.
    del Late.__copal_indexes__  # type: ignore[attr-defined]
    db = store.reopen(db)

    class Trigger2(Persistent):
        pass

    with db.transaction() as tx:
        assert "index" in tx.query(Late).where(n=42).explain()
        tx.root["late"][42].n = 1042
        tx.root["late"].append(Late(2042))
    with db.transaction() as tx:
        assert [x.n for x in tx.query(Late).where(field("n") >= 1000)] == [1042, 2042]
        assert tx.query(Late).where(n=42).count() == 0
    assert db.verify()["problems"] == []
    # Only a declared removal drops it.
    Late.__copal_removed_indexes__ = [Index("n")]  # type: ignore[attr-defined]
    db = store.reopen(db)

    class Trigger3(Persistent):
        pass

    with db.transaction() as tx:
        assert "scan" in tx.query(Late).where(n=1042).explain()
        assert tx.query(Late).where(n=1042).count() == 1


def test_an_index_no_longer_declared_unique_stops_refusing_duplicates(store: Any) -> None:
    class Member(Persistent):
        __copal_indexes__ = [Index("email", unique=True)]

        def __init__(self, email: str) -> None:
            self.email = email

    db = store.open()
    with db.transaction() as tx:
        tx.root["members"] = PersistentList([Member("a@x")])
    with pytest.raises(copal.UniqueViolation):
        with db.transaction() as tx:
            tx.root["members"].append(Member("a@x"))
    Member.__copal_indexes__ = [Index("email")]
    db = store.reopen(db)

    class Trigger(Persistent):
        pass

    with db.transaction() as tx:
        tx.root["members"].append(Member("a@x"))
    with db.transaction() as tx:
        assert tx.query(Member).where(email="a@x").count() == 2
        assert "index" in tx.query(Member).where(email="a@x").explain()
    assert db.verify()["problems"] == []


def test_removed_indexes_must_be_index_objects(store: Any) -> None:
    class Odd(Persistent):
        __copal_removed_indexes__ = ["n"]

    db = store.open()
    try:
        with pytest.raises(TypeError, match="Odd.__copal_removed_indexes__ must hold copal.Index objects"):
            db.transaction()
    finally:
        del Odd.__copal_removed_indexes__  # the class stays registered for the later tests


def test_read_your_writes_with_indexes(store: Any) -> None:
    db = store.open()
    _members(db, 30)
    with db.transaction() as tx:
        tx.add(Member(77, email="new@example.org"))
        tx.query(Member).where(email="m3@example.org").one().age = 1000
        assert tx.query(Member).where(email="new@example.org").one().first == "F77"
        assert [m.first for m in tx.query(Member).where(field("age") >= 1000)] == ["F3"]
        assert tx.query(Member).order_by("age", descending=True).first().first == "F3"  # type: ignore[union-attr]


EXACT = "answers the filter from the index alone"


def test_counts_that_an_index_answers_read_no_record(store: Any) -> None:
    db = store.open()
    _members(db)
    with db.transaction() as tx:
        everyone = tx.query(Member).all()
        cases = [
            (field("age") >= 30, lambda m: m.age >= 30),
            ((field("age") > 3) & (field("age") <= 7.5), lambda m: 3 < m.age <= 7.5),
            (field("email") == "m5@example.org", lambda m: m.email == "m5@example.org"),
            (field("age").in_([1, 2, 2.0, 39]), lambda m: m.age in (1, 2, 39)),
            ((field("last") == "L3") & (field("first") >= "F5"), lambda m: m.last == "L3" and m.first >= "F5"),
            (field("email").startswith("m1"), lambda m: m.email.startswith("m1")),
        ]
        for condition, predicate in cases:
            query = tx.query(Member).where(condition)
            assert EXACT in query.explain(), condition
            delta = Delta(db)
            assert query.count() == sum(1 for m in everyone if predicate(m)), condition
            assert delta["records_read"] == 0, condition
        # Only the class asked for: the index also holds the subclass's objects.
        assert tx.query(Member).only(Member).where(field("age") >= 30).count() == sum(
            1 for m in everyone if type(m) is Member and m.age >= 30
        )
        delta = Delta(db)
        assert tx.query(Member).count() == len(everyone) == 310
        assert tx.query(Member).only(Member).count() == 300
        assert delta["records_read"] == 0


def test_counts_the_index_cannot_answer_alone_test_the_records(store: Any) -> None:
    db = store.open()
    _members(db)
    with db.transaction() as tx:
        tx.root["members"][0].age = float("nan")
        tx.root["members"][1].age = "thirty"
    with db.transaction() as tx:
        everyone = tx.query(Member).all()
        # NaN matches no comparison, and a number range never matches a string.
        assert tx.query(Member).where(field("age") >= 0).count() == sum(
            1 for m in everyone if isinstance(m.age, int) and m.age >= 0
        )
        inexact = [
            (field("age") > 3) & (field("age") < "x"),  # bounds of two kinds
            (field("age") >= 30) & (field("first") == "F35"),  # a condition outside the index
            field("age") == float("nan"),
        ]
        for condition in inexact:
            query = tx.query(Member).where(condition)
            assert "index" in query.explain() and EXACT not in query.explain(), condition
        assert tx.query(Member).where(inexact[0]).count() == 0
        assert tx.query(Member).where(inexact[1]).count() == 1
        assert tx.query(Member).where(inexact[2]).count() == 0


def test_counts_see_the_transactions_own_changes(store: Any) -> None:
    db = store.open()
    _members(db)
    with db.transaction() as tx:
        members = tx.root["members"]
        before = tx.query(Member).where(field("age") >= 30).count()
        members[35].age = 1  # leaves the range
        members[1].age = 31  # enters it
        tx.delete(members[36])
        tx.add(Member(1000, age=33))
        assert tx.query(Member).where(field("age") >= 30).count() == before - 2 + 2
        assert tx.query(Member).count() == 310


class Counted(Persistent):
    def __init__(self, n: int) -> None:
        self.n = n


def test_building_an_index_on_existing_objects_reports_progress(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        for i in range(20_000):
            tx.add(Counted(i))
    calls: list[tuple[str, int, int]] = []
    Counted.__copal_indexes__ = [Index("n")]  # type: ignore[attr-defined]
    try:
        db = store.reopen(db, progress=lambda what, done, total: calls.append((what, done, total)))
        with db.transaction() as tx:
            assert tx.query(Counted).where(n=5).count() == 1
    finally:
        del Counted.__copal_indexes__  # type: ignore[attr-defined]
    assert calls, "no progress reported"
    assert {what for what, _, _ in calls} == {f"index {Counted.__module__}.Counted(n)"}
    assert {total for _, _, total in calls} == {20_000}
    done = [d for _, d, _ in calls]
    assert done == sorted(done) and done[-1] == 20_000 and len(done) > 2


def test_a_failing_progress_callback_leaves_the_index_unbuilt(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        for i in range(10_000):
            tx.add(Counted(i))

    def interrupt(what: str, done: int, total: int) -> None:
        raise KeyboardInterrupt

    Counted.__copal_indexes__ = [Index("n")]  # type: ignore[attr-defined]
    try:
        db = store.reopen(db, progress=interrupt)
        with pytest.raises(KeyboardInterrupt):
            db.transaction()
    finally:
        del Counted.__copal_indexes__  # type: ignore[attr-defined]
    db = store.reopen(db)
    with db.transaction() as tx:
        assert "scan" in tx.query(Counted).where(n=5).explain()
        assert tx.query(Counted).count() == 10_000


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_only_large_work_on_a_terminal() -> None:
    terminal = _Terminal()
    bar = copal.ProgressBar(terminal, minimum=100, width=10)
    bar("index app.P(n)", 50, 200)
    bar("index app.P(n)", 200, 200)
    assert terminal.getvalue() == "\rindex app.P(n) [##........] 50/200\rindex app.P(n) [##########] 200/200\n"
    bar("small", 5, 10)
    assert "small" not in terminal.getvalue()
    pipe = io.StringIO()
    copal.ProgressBar(pipe, minimum=0)("index app.P(n)", 50, 200)
    assert pipe.getvalue() == ""


def test_redefining_a_class_with_an_index_syncs_it_in_an_open_database(store: Any) -> None:
    """A class redefined under the same name (a reload) is a change of the registry even though
    the registry has as many entries as before."""

    class Reloaded(Persistent):
        def __init__(self, n: int) -> None:
            self.n = n

    db = store.open()
    with db.transaction() as tx:
        tx.root["r"] = PersistentList(Reloaded(i) for i in range(10))
    with db.transaction() as tx:
        assert "scan" in tx.query(Reloaded).where(n=3).explain()

    class Reloaded(Persistent):  # type: ignore[no-redef]  # the same stored type name
        __copal_indexes__ = [Index("n")]

    with db.transaction() as tx:
        assert "index" in tx.query(Reloaded).where(n=3).explain()
        assert tx.query(Reloaded).where(n=3).count() == 1
