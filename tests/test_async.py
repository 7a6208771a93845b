"""The asyncio API (python/copal/aio.py, docs/howto/async.md), on both stores: the awaitable
calls, their work off the event loop's thread, many coroutines sharing one Database,
cancellation that leaks nothing, and what touching a ghost does in an async transaction."""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Coroutine, Iterator, TypeVar

import pytest

import copal
from conftest import Store
from helpers.models import Holder, Item
from helpers.pgserver import PgServer

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T], executor: ThreadPoolExecutor | None = None) -> T:
    """``asyncio.run``, with ``executor`` as the loop's default executor if given."""

    async def main() -> T:
        if executor is not None:
            asyncio.get_running_loop().set_default_executor(executor)
        return await coroutine

    return asyncio.run(main())


def fill(db: copal.Database, n: int) -> list[int]:
    """Stores ``n`` Items (i0, i1, ...) under root["items"]; returns their ids."""
    with db.transaction() as tx:
        items = [Item(f"i{i}", i) for i in range(n)]
        tx.root["items"] = items
    return [item._p_oid for item in items]


@pytest.fixture(autouse=True)
def no_asyncio_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Fails a test after which asyncio logged an error, such as an exception that no one
    retrieved from a future (the outcome of a call that a cancellation left behind)."""
    yield
    gc.collect()
    records = caplog.get_records("call") + caplog.records
    errors = [record.getMessage() for record in records if record.name == "asyncio" and record.levelno >= logging.ERROR]
    assert not errors, errors


def connections_back(db: copal.Database) -> bool:
    """Whether every connection of ``db`` is idle in its pool (no transaction holds one)."""
    return len(db._pool) == len(db._all)


# -- the awaitable calls ------------------------------------------------------------------------


def test_async_with_commits_on_a_clean_exit_and_aborts_on_an_exception(store: Store) -> None:
    db = store.open()

    async def main() -> None:
        async with db.transaction() as tx:
            tx.root["kept"] = Item("kept", 1)
        with pytest.raises(ValueError):
            async with db.transaction() as tx:
                tx.root["dropped"] = Item("dropped")
                raise ValueError("abort")
        async with db.transaction(readonly=True) as tx:
            assert tx.root["kept"].value == 1 and "dropped" not in tx.root
            with pytest.raises(copal.ReadOnlyError):
                tx.root["kept"].value = 2

    run(main())
    assert connections_back(db)


def test_queries_await_every_result_form(store: Store) -> None:
    db = store.open()
    fill(db, 2500)

    async def main() -> None:
        async with db.transaction(readonly=True) as tx:
            query = tx.query(Item)
            assert await query.acount() == 2500
            assert await query.aexists() and not await query.where(name="none").aexists()
            first = await query.afirst()
            assert first is not None and first.name == "i0"
            assert await query.where(name="none").afirst() is None
            one = await query.where(copal.field("value") == 7).aone()
            assert one.name == "i7"
            with pytest.raises(LookupError):
                await query.where(copal.field("value") < 2).aone()
            assert [item.value for item in await query.where(copal.field("value") >= 2490).order_by("value").aall()] == list(range(2490, 2500))
            # More results than one batch of the iteration (1,000): later batches load as it goes.
            seen = [item.value async for item in query.order_by("value")]
            assert seen == list(range(2500))
            assert [item.value async for item in query.where(name="none")] == []

    run(main())


def test_aget_aload_closure_acommit_aabort_and_aclose(store: Store) -> None:
    db = store.open()
    oids = fill(db, 10)
    db = store.reopen(db)  # nothing cached

    async def main() -> None:
        async with db.transaction() as tx:
            item = await tx.aget(oids[3])
            assert item.name == "i3" and item._p_status == "saved"
            with pytest.raises(copal.DanglingReference):
                await tx.aget(oids[-1] + 1000)
        tx = db.transaction()
        async with tx:
            items = tx.root["items"]
            assert await tx.aload_closure([items]) == 9  # the ten items less i3, cached above
            assert all(item._p_status == "saved" for item in items)
            items[0].value = 100
            tid = await tx.acommit()
            assert isinstance(tid, int) and tid > tx.tid_seen
        async with db.transaction() as tx:
            (await tx.aget(oids[0])).value = -1
            await tx.aabort()
            with pytest.raises(RuntimeError, match="ended"):
                await tx.aget(oids[0])
        async with db.transaction(readonly=True) as tx:
            assert (await tx.aget(oids[0])).value == 100
        await db.aclose()
        with pytest.raises(RuntimeError, match="closed"):
            db.transaction()

    def start_threads() -> list[threading.Thread]:
        return [thread for thread in threading.enumerate() if thread.name.startswith(f"copal start {db.path}")]

    run(main())
    for thread in start_threads():
        thread.join(timeout=5)
    assert not start_threads()


def test_arun_returns_what_work_returns_and_propagates_other_errors(store: Store) -> None:
    db = store.open()
    oids = fill(db, 1)

    async def bump(tx: copal.Transaction) -> int:
        item = await tx.aget(oids[0])
        item.value += 1
        value: int = item.value
        return value

    async def fail(tx: copal.Transaction) -> None:
        (await tx.aget(oids[0])).value = 99
        raise KeyError("no")

    async def read(tx: copal.Transaction) -> int:
        value: int = (await tx.aget(oids[0])).value
        return value

    async def main() -> None:
        assert await db.arun(bump) == 1
        with pytest.raises(KeyError):
            await db.arun(fail)
        assert await db.arun(read, readonly=True) == 1

    run(main())
    assert db.stats()["retries"] == 0 and connections_back(db)


def test_a_transaction_made_in_a_coroutine_starts_when_entered(store: Store) -> None:
    db = store.open()
    oids = fill(db, 1)
    loop_thread = threading.get_ident()
    start_threads = []
    connection = db._connection

    def recording_connection() -> Any:
        start_threads.append(threading.get_ident())
        return connection()

    db._connection = recording_connection  # type: ignore[method-assign]

    def commit_elsewhere() -> None:
        with db.transaction() as tx:
            tx.get(oids[0]).value = 5

    async def main() -> None:
        tx = db.transaction()
        # Made, not started: it holds nothing yet, and sees what commits before it is entered.
        assert not start_threads
        await asyncio.to_thread(commit_elsewhere)
        async with tx:
            assert (await tx.aget(oids[0])).value == 5
        assert start_threads[-1] not in (loop_thread, start_threads[0])
        # Aborted before it started, a transaction has ended: it never starts.
        tx = db.transaction()
        await tx.aabort()
        with pytest.raises(RuntimeError, match="ended"):
            tx.root
        # A plain `with` in a coroutine starts at once, on the loop's thread.
        with db.transaction(readonly=True) as tx:
            assert start_threads[-1] == loop_thread
            assert tx.get(oids[0]).value == 5

    run(main())
    assert connections_back(db)


def test_awaitable_calls_of_one_transaction_run_one_at_a_time(store: Store) -> None:
    db = store.open()
    oids = fill(db, 300)

    async def main() -> None:
        async with db.transaction(readonly=True) as tx:
            counts = await asyncio.gather(*(tx.query(Item).where(copal.field("value") < n).acount() for n in range(50)))
            items = await asyncio.gather(*(tx.aget(oid) for oid in oids[:50]))
        assert counts == list(range(50))
        assert [item.value for item in items] == list(range(50))

    run(main())


# -- many coroutines, one Database -------------------------------------------------------------


def test_100_coroutines_transfer_money_between_10_accounts(store: Store) -> None:
    db = store.open()
    with db.transaction() as tx:
        accounts = [Item(f"account {i}", 1000) for i in range(10)]
        tx.root["accounts"] = accounts
    oids = [account._p_oid for account in accounts]
    rng = random.Random(30)
    transfers = [(rng.sample(oids, 2), rng.randint(1, 100)) for _ in range(100)]

    async def transfer(source: int, target: int, amount: int) -> None:
        async def work(tx: copal.Transaction) -> None:
            a, b = await asyncio.gather(tx.aget(source), tx.aget(target))
            a.value -= amount
            await asyncio.sleep(0)  # let the other coroutines interleave
            b.value += amount

        await db.arun(work, retries=1000)

    async def main() -> list[int]:
        await asyncio.gather(*(transfer(source, target, amount) for (source, target), amount in transfers))
        async with db.transaction(readonly=True) as tx:
            return [account.value for account in await tx.query(Item).aall()]

    balances = run(main())
    expected = dict.fromkeys(oids, 1000)
    for (source, target), amount in transfers:
        expected[source] -= amount
        expected[target] += amount
    assert sum(balances) == 10_000 and balances == [expected[oid] for oid in oids]
    stats = db.stats()
    assert stats["commits"] >= 101 and stats["retries"] == stats["conflicts"] > 0
    assert connections_back(db)


def test_the_event_loop_keeps_running_while_20_coroutines_commit(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """20 coroutines each make 10 commits of 200 objects on the embedded store: every commit runs
    in a worker thread, never on the event loop's, and the loop keeps running meanwhile (a ticker
    coroutine runs between them). The longest the loop could not run is printed (run with -s):
    a measure, not a test, on a shared machine (`copal bench --suite async` measures it)."""
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        holders = [Holder() for _ in range(20)]
        tx.root["holders"] = holders
    oids = [holder._p_oid for holder in holders]
    committed_on: list[int] = []
    commit = copal.Transaction.commit

    def recorded_commit(tx: copal.Transaction) -> int | None:
        committed_on.append(threading.get_ident())
        return commit(tx)

    monkeypatch.setattr(copal.Transaction, "commit", recorded_commit)

    async def writer(n: int) -> None:
        for round_ in range(10):
            async with db.transaction() as tx:
                (await tx.aget(oids[n])).items = [Item(f"{n}.{round_}.{i}", i) for i in range(200)]

    async def main() -> tuple[float, int, int]:
        longest, ticks = 0.0, 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal longest, ticks
            last = time.perf_counter()
            while not stop.is_set():
                await asyncio.sleep(0.001)
                now = time.perf_counter()
                longest = max(longest, now - last - 0.001)
                last = now
                ticks += 1

        ticking = asyncio.create_task(ticker())
        await asyncio.gather(*(writer(n) for n in range(20)))
        stop.set()
        await ticking
        return longest, ticks, threading.get_ident()

    longest, ticks, loop_thread = run(main())
    assert db.stats()["commits"] == 201
    db.close()
    print(f"longest event-loop lag while 20 coroutines committed: {longest * 1000:.1f} ms, {ticks} ticks")
    assert len(committed_on) == 200 and loop_thread not in committed_on
    assert ticks >= 10


# -- cancellation -------------------------------------------------------------------------------


class Watched(ThreadPoolExecutor):
    """A default executor that tells when a call starts and how many calls are running."""

    def __init__(self) -> None:
        super().__init__(4)
        self.started = threading.Event()
        self.running = 0
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Any:
        def watched() -> T:
            with self._lock:
                self.running += 1
            self.started.set()
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self.running -= 1

        return super().submit(watched)


async def cancel_once_started(work: Awaitable[Any], executor: Watched) -> None:
    """Runs ``work`` as a task, cancels it once a worker thread has started a call for it, and
    checks that it raises CancelledError only once no thread works for it any more."""
    task = asyncio.ensure_future(work)
    while not executor.started.is_set():
        await asyncio.sleep(0.0005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert executor.running == 0


def test_a_commit_cancelled_while_it_runs_finishes_and_counts(store: Store) -> None:
    db = store.open()
    executor = Watched()

    async def main() -> None:
        async def write() -> None:
            async with db.transaction() as tx:
                tx.root["items"] = [Item(f"i{i}", i, b"x" * 100) for i in range(20_000)]
                executor.started.clear()

        await cancel_once_started(write(), executor)
        async with db.transaction(readonly=True) as tx:
            assert await tx.query(Item).acount() == 20_000

    run(main(), executor)
    assert connections_back(db)
    store.close(db)


def test_a_commit_cancelled_before_a_thread_runs_it_writes_nothing(store: Store) -> None:
    db = store.open()
    gate = threading.Event()

    async def main() -> None:
        async with db.transaction() as tx:
            tx.root["before"] = 1
        # The only worker thread is busy: the commit waits in the queue when the task is cancelled.
        busy = asyncio.get_running_loop().run_in_executor(None, gate.wait)

        async def write() -> None:
            async with db.transaction() as tx:
                tx.root["items"] = [Item(f"i{i}") for i in range(100)]

        task = asyncio.ensure_future(write())
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.sleep(0.05)
        # Cancelled again while its abort waits for the thread: the abort still runs.
        task.cancel()
        await asyncio.sleep(0.05)
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        await busy
        async with db.transaction(readonly=True) as tx:
            assert "items" not in tx.root and await tx.query(Item).acount() == 0

    run(main(), ThreadPoolExecutor(1))
    assert connections_back(db)


def test_a_query_cancelled_while_it_runs_ends_its_transaction(store: Store) -> None:
    db = store.open()
    fill(db, 20_000)
    executor = Watched()

    async def main() -> None:
        async def scan() -> None:
            async with db.transaction(readonly=True) as tx:
                executor.started.clear()
                await tx.query(Item).where(copal.field("payload") == b"none").aall()

        await cancel_once_started(scan(), executor)
        assert connections_back(db)

        async def iterate() -> None:
            async with db.transaction(readonly=True) as tx:
                async for _ in tx.query(Item):
                    executor.started.clear()

        await cancel_once_started(iterate(), executor)
        assert connections_back(db)

    run(main(), executor)
    store.close(db)


def test_2000_cancelled_transactions_leave_no_reader_slot_nor_connection(tmp_path: Any) -> None:
    """LMDB has 1,022 reader slots: cancelled transactions that kept their snapshots would use
    them up. Half the transactions are cancelled as they start, the others once entered."""
    db = copal.open(tmp_path / "db")
    fill(db, 10)

    async def main() -> None:
        for _ in range(20):
            entered = 0

            async def reader() -> None:
                nonlocal entered
                async with db.transaction(readonly=True) as tx:
                    entered += 1
                    len(tx.root["items"])
                    await asyncio.sleep(60)

            starting = [asyncio.ensure_future(reader()) for _ in range(50)]
            await asyncio.sleep(0)
            inside = [asyncio.ensure_future(reader()) for _ in range(50)]
            for task in starting:
                task.cancel()
            while entered < len(inside):
                await asyncio.sleep(0.001)
            for task in inside:
                task.cancel()
            results = await asyncio.gather(*starting, *inside, return_exceptions=True)
            assert all(isinstance(result, asyncio.CancelledError) for result in results)
            assert connections_back(db)
        async with db.transaction(readonly=True) as tx:
            assert len(tx.root["items"]) == 10

    run(main())
    db.close()


def test_cancelled_postgresql_transactions_give_their_connections_back(pg_server: PgServer) -> None:
    db = copal.open(pg_server.create_database(), max_connections=3, pool_timeout=5)
    fill(db, 10)

    async def main() -> None:
        for _ in range(20):
            entered = asyncio.Event()

            async def reader() -> None:
                async with db.transaction(readonly=True) as tx:
                    await tx.aload_closure([tx.root["items"]])
                    entered.set()
                    await asyncio.sleep(60)

            # Ten transactions for three connections: seven wait for one when they are cancelled.
            tasks = [asyncio.ensure_future(reader()) for _ in range(10)]
            await entered.wait()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            assert connections_back(db)
        # Three transactions at once hold all three connections: none was kept by a cancelled one.
        async def hold(tx: copal.Transaction) -> int:
            await asyncio.sleep(0.05)
            return len(tx.root["items"])

        assert await asyncio.gather(*(db.arun(hold) for _ in range(3))) == [10, 10, 10]

    started = time.monotonic()
    run(main())
    assert time.monotonic() - started < 5, "a transaction waited for a connection"
    db.close()


# -- touching a ghost in an async transaction -----------------------------------------------------


def test_touching_a_ghost_on_the_embedded_store_loads_it_without_a_warning(tmp_path: Any) -> None:
    with copal.open(tmp_path / "db") as db:
        fill(db, 3)
    db = copal.open(tmp_path / "db")

    async def main() -> None:
        async with db.transaction(readonly=True) as tx:
            items = tx.root["items"]
            assert items[1]._p_status == "ghost"
            assert items[1].name == "i1"  # a read of memory-mapped pages, on the loop's thread
            assert tx.query(Item).where(name="i2").one().value == 2

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(main())
    db.close()


def test_touching_a_ghost_on_postgresql_warns_and_loads_it(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    with copal.open(url) as db:
        fill(db, 3)
    db = copal.open(url)

    async def main() -> None:
        async with db.transaction(readonly=True) as tx:
            items = tx.root["items"]  # the root is loaded by the start: no read here
            with pytest.warns(copal.BlockingReadWarning, match="aload_closure") as caught:
                assert items[0].name == "i0"
            assert caught[0].filename == __file__
            with pytest.warns(copal.BlockingReadWarning):
                assert tx.query(Item).where(name="i2").one().value == 2
            with warnings.catch_warnings():
                warnings.simplefilter("error", copal.BlockingReadWarning)
                with pytest.raises(copal.BlockingReadWarning):
                    items[1].name
                assert items[1]._p_status == "ghost"
                # Loaded in a worker thread beforehand, the objects are touched without a read.
                await tx.aload_closure([items])
                assert [item.name for item in items] == ["i0", "i1", "i2"]
        # A transaction of plain `with` is not guarded, nor are other threads' transactions.
        with warnings.catch_warnings():
            warnings.simplefilter("error", copal.BlockingReadWarning)
            with db.transaction(readonly=True) as tx:
                assert tx.root["items"][2].name == "i2"

    run(main())
    db.close()


def test_committing_or_aborting_on_the_loop_thread_on_postgresql_warns(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    db = copal.open(url)

    async def main() -> None:
        async with db.transaction() as tx:
            tx.root["n"] = 1
            with pytest.warns(copal.BlockingReadWarning, match="acommit") as caught:
                tx.commit()
            assert caught[0].filename == __file__ and len(caught) == 1
        async with db.transaction(readonly=True) as tx:
            with pytest.warns(copal.BlockingReadWarning, match="aabort"):
                tx.abort()
        # Through the awaitable calls, nothing waits on the loop's thread.
        with warnings.catch_warnings():
            warnings.simplefilter("error", copal.BlockingReadWarning)
            async with db.transaction() as tx:
                tx.root["n"] = 2
                await tx.acommit()
            async with db.transaction(readonly=True) as tx:
                assert tx.root["n"] == 2

    run(main())
    db.close()


def test_guarded_reads_call_the_hook_on_the_guarding_thread_only_until_the_transaction_ends(tmp_path: Any) -> None:
    """The connection's read guard, which PostgreSQL transactions entered with `async with` set
    (python/copal/aio.py), on the embedded store: the hook runs before each read of the store
    made on the thread that set it (and before its commit or abort there), not on another
    thread, and not after the transaction ends."""
    with copal.open(tmp_path / "db") as db:
        [oid] = fill(db, 1)
    with copal.open(tmp_path / "db") as db:  # nothing cached: `get` reads the store
        calls: list[int] = []
        tx = db.transaction()
        tx._conn.guard_reads(lambda: calls.append(threading.get_ident()))
        tx.get(oid)
        assert calls and set(calls) == {threading.get_ident()}
        made = len(calls)
        other = threading.Thread(target=lambda: tx.query(Item).count())
        other.start()
        other.join()
        assert len(calls) == made
        tx.abort()
        assert len(calls) == made + 1
        with db.transaction() as later:
            later.query(Item).count()
        assert len(calls) == made + 1
