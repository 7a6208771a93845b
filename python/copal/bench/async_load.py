"""The async suite's systems, and the worker that serves their shop to concurrent clients.

:func:`worker_main` runs in a fresh process per system and round: it creates the system's
database with the products (untimed), starts the shop application (its lifespan, as uvicorn
does) and an ``httpx.AsyncClient`` on ``httpx.ASGITransport`` (in process, no sockets), then
sends the reads, then the purchases, each phase from ``clients`` coroutines that take the next
request as soon as their last one is answered; a phase's figure is its requests over its wall
time. A :class:`Ticker` coroutine sleeps 1 ms over and over throughout, recording how late it
wakes: the event loop's lag, the longest time the loop could run nothing else; :class:`Steps`
records the longest single step the loop ran (a lag made of one step is one piece of code
holding the loop). For copal, ``db.stats()`` counts the phases' conflict retries. At the end the
worker reads every product back and checks that the units sold are the units bought.
"""

from __future__ import annotations

import asyncio
import random
from importlib import import_module
from pathlib import Path
from time import perf_counter
from typing import Any, ClassVar

from copal.bench.environment import Adapter, copal_unavailable, dist_version, missing_module
from copal.bench.workers import run_and_report

#: The quantity of each purchase.
QUANTITY = 1
#: Reads sent before the ticker starts, to warm the application up (untimed).
WARMUP = 200
#: The ticker's sleep, in seconds.
TICK = 0.001
#: The seed of the products the requests name.
SEED = 20261129


def shop_skus(products: int) -> list[str]:
    """The SKUs of the ``products`` products.

    Example:
        >>> shop_skus(2)
        ['P0000', 'P0001']
    """
    return [f"P{i:04d}" for i in range(products)]


# --------------------------------------------------------------------------- systems


class AsyncSystem(Adapter):
    """A shop of the suite: where its database lives (``postgresql``: on the server of
    ``--store``, else in the worker's directory), how it is filled and the application."""

    postgresql: ClassVar[bool] = False
    #: The module of the shop, and its function that makes the application.
    shop: ClassVar[str] = "copal.bench.async_apps"
    factory: ClassVar[str] = "async_app"

    @classmethod
    def versions(cls) -> dict[str, str]:
        return {m: v for m in ("fastapi", "httpx", *cls.modules) if (v := dist_version(m)) is not None}

    @classmethod
    def location(cls, dir: str, url: str | None) -> str:
        """The system's database: in ``dir``, or on PostgreSQL at ``url`` (made empty)."""
        raise NotImplementedError

    @classmethod
    def populate(cls, location: str, skus: list[str], stock: int) -> None:
        """Creates the products ``skus``, each with ``stock`` units."""
        import_module(cls.shop).populate(location, skus, stock)

    @classmethod
    def app(cls, location: str, clients: int) -> Any:
        """The shop's application, with a connection per client where connections are pooled."""
        return getattr(import_module(cls.shop), cls.factory)(location, clients)


class CopalAsync(AsyncSystem):
    name = "copal-async"
    label = "copal async"
    modules = ("copal", "fastapi", "httpx")

    @classmethod
    def unavailable(cls) -> str | None:
        return copal_unavailable() or missing_module(cls.modules)

    @classmethod
    def versions(cls) -> dict[str, str]:
        copal = dist_version("copaldb")
        return {**super().versions(), **({"copal": copal} if copal else {})}

    @classmethod
    def location(cls, dir: str, url: str | None) -> str:
        if url is None:
            return str(Path(dir) / "shop.copal")
        from copal.bench.systems import _fresh_database

        _fresh_database(url)
        return url


class CopalAsyncPostgreSQL(CopalAsync):
    name = "copal-async-pg"
    label = "copal async (PostgreSQL)"
    postgresql = True


class CopalThreadPool(CopalAsync):
    name = "copal-sync"
    label = "copal sync, thread pool"
    factory = "thread_pool_app"


class SQLAlchemyAiosqlite(AsyncSystem):
    name = "sqlalchemy-aiosqlite"
    label = "SQLAlchemy + aiosqlite"
    modules = ("sqlalchemy", "greenlet", "aiosqlite", "fastapi", "httpx")
    shop = "copal.bench.async_sqlalchemy"
    factory = "app"

    @classmethod
    def location(cls, dir: str, url: str | None) -> str:
        return f"sqlite+aiosqlite:///{Path(dir) / 'shop.sqlite'}"


class SQLAlchemyAsyncpg(SQLAlchemyAiosqlite):
    name = "sqlalchemy-asyncpg"
    label = "SQLAlchemy + asyncpg"
    modules = ("sqlalchemy", "greenlet", "asyncpg", "fastapi", "httpx")
    postgresql = True

    @classmethod
    def location(cls, dir: str, url: str | None) -> str:
        assert url is not None, "a PostgreSQL system runs with a URL"
        from copal.bench.systems import _fresh_database

        _fresh_database(url)
        return "postgresql+asyncpg://" + url.split("://", 1)[1]


ASYNC_SYSTEMS: dict[str, type[AsyncSystem]] = {
    s.name: s for s in (CopalAsync, CopalThreadPool, SQLAlchemyAiosqlite, CopalAsyncPostgreSQL, SQLAlchemyAsyncpg)
}


# --------------------------------------------------------------------------- the load


class Ticker:
    """A coroutine that sleeps :data:`TICK` over and over and records how late it wakes."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.running = True

    async def run(self) -> None:
        while self.running:
            started = perf_counter()
            await asyncio.sleep(TICK)
            self.worst = max(self.worst, perf_counter() - started - TICK)

    def take(self) -> float:
        """The longest lag since the last call."""
        worst, self.worst = self.worst, 0.0
        return worst


class Steps:
    """The longest step the event loop ran (one callback: a task's step, a timer), while
    entered: where the lag comes from. A long step is one piece of code holding the loop; many
    short ones make a long lag only together, when many clients are ready at once."""

    def __init__(self) -> None:
        self.worst = 0.0

    def __enter__(self) -> Steps:
        run = self._run = asyncio.events.Handle._run
        steps = self

        def timed(handle: asyncio.events.Handle) -> None:
            started = perf_counter()
            run(handle)
            steps.worst = max(steps.worst, perf_counter() - started)

        asyncio.events.Handle._run = timed  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.events.Handle._run = self._run  # type: ignore[method-assign]

    def take(self) -> float:
        """The longest step since the last call."""
        worst, self.worst = self.worst, 0.0
        return worst


async def send_all(client: Any, requests: list[tuple[str, str, Any]], clients: int) -> dict[str, Any]:
    """Sends ``requests`` (method, path, JSON body) from ``clients`` coroutines; the seconds
    taken and how many answers had each status."""
    statuses: dict[str, int] = {}
    queue = iter(requests)

    async def one_client() -> None:
        for method, path, body in queue:
            response = await client.request(method, path, json=body)
            statuses[str(response.status_code)] = statuses.get(str(response.status_code), 0) + 1

    started = perf_counter()
    await asyncio.gather(*(one_client() for _ in range(clients)))
    seconds = perf_counter() - started
    return {"seconds": seconds, "requests": len(requests), "rps": len(requests) / seconds, "statuses": statuses}


async def serve(app: Any, skus: list[str], reads: int, buys: int, clients: int) -> dict[str, Any]:
    """The reads' and purchases' figures of ``app`` (and the loop's lag during each)."""
    import httpx

    rng = random.Random(SEED)
    read_requests = [("GET", f"/products/{rng.choice(skus)}", None) for _ in range(reads)]
    buy_requests = [
        ("POST", f"/products/{rng.choice(skus)}/orders", {"customer": f"c{i % 50}", "quantity": QUANTITY})
        for i in range(buys)
    ]
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
            await send_all(client, read_requests[:WARMUP], clients)
            ticker = Ticker()
            ticking = asyncio.create_task(ticker.run())
            stats = getattr(getattr(app.state, "db", None), "stats", dict)
            before = dict(stats())
            try:
                with Steps() as steps:
                    read = {**await send_all(client, read_requests, clients), "lag_s": ticker.take(),
                            "longest_step_s": steps.take()}
                    buy = {**await send_all(client, buy_requests, clients), "lag_s": ticker.take(),
                           "longest_step_s": steps.take()}
            finally:
                ticker.running = False
                await ticking
            counters = {k: v - before.get(k, 0) for k, v in dict(stats()).items() if isinstance(v, int)}
            sold = 0
            for sku in skus:
                sold += (await client.get(f"/products/{sku}")).json()["sold"]
    return {"read": read, "buy": buy, "sold": sold, "stats": counters}


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    system = ASYNC_SYSTEMS[spec["system"]]
    skus = shop_skus(spec["products"])
    location = system.location(spec["dir"], spec.get("url"))
    Path(spec["dir"]).mkdir(parents=True, exist_ok=True)
    system.populate(location, skus, spec["buys"] * QUANTITY)
    figures = asyncio.run(serve(system.app(location, spec["clients"]), skus, spec["reads"], spec["buys"], spec["clients"]))
    expected = {"read": "200", "buy": "201"}
    for phase, status in expected.items():
        wrong = {s: n for s, n in figures[phase]["statuses"].items() if s != status}
        if wrong:
            raise AssertionError(f"{phase}: answers other than {status}: {wrong}")
    if figures["sold"] != spec["buys"] * QUANTITY:
        raise AssertionError(f"{figures['sold']} units sold, {spec['buys'] * QUANTITY} bought")
    return {"ok": True, **figures}


def worker_main(spec: dict[str, Any]) -> int:
    """A worker's entry point (see :mod:`copal.bench.workers`)."""
    return run_and_report(lambda: measure(spec))
