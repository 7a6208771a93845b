"""The FastAPI example (examples/fastapi_shop/app.py), served in process through httpx's ASGI
transport on both stores: every endpoint, its 404s and validation errors, and many clients
buying the same product at once.

On PostgreSQL, the suite's warnings are errors, so an endpoint that touched an object not loaded
on the event loop's thread (copal.BlockingReadWarning) fails its request.
"""

from __future__ import annotations

import asyncio
import re
import sys
import textwrap
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import pytest

import copal
from conftest import Store

pytest.importorskip("fastapi", reason="FastAPI is not installed (pip install 'copaldb[test]')")
httpx = pytest.importorskip("httpx", reason="httpx is not installed (pip install 'copaldb[test]')")

ROOT = Path(__file__).resolve().parent.parent
HOWTO = ROOT / "docs" / "howto" / "async.md"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.fastapi_shop import app as shop  # noqa: E402

Client = Any  # httpx.AsyncClient


@asynccontextmanager
async def serve(app: Any) -> AsyncIterator[tuple[Client, copal.Database]]:
    """A client of ``app``, which runs its lifespan around the requests (as uvicorn does), and
    the application's Database."""
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shop") as client:
            yield client, app.state.db


def run_app(store: Store, *tests: Callable[[Client, copal.Database], Awaitable[None]]) -> None:
    """Runs each of ``tests`` against the application on ``store``, restarted for each: a new
    Database, with nothing loaded yet."""

    async def main() -> None:
        for test in tests:
            async with serve(shop.create_app(str(store.path))) as (client, db):
                await test(client, db)

    asyncio.run(main())


def product(sku: str, price: int = 100, stock: int = 10, name: str = "") -> dict[str, Any]:
    return {"sku": sku, "name": name or f"product {sku}", "price": price, "stock": stock}


async def create(client: Client, *products: dict[str, Any]) -> None:
    for body in products:
        response = await client.post("/products", json=body)
        assert response.status_code == 201, response.text


def test_products_are_created_read_changed_and_deleted(store: Store) -> None:
    async def test(client: Client, db: copal.Database) -> None:
        response = await client.post("/products", json=product("MUG-1", price=850, stock=3, name="mug"))
        assert response.status_code == 201
        assert response.json() == {"sku": "MUG-1", "name": "mug", "price": 850, "stock": 3, "sold": 0}
        assert (await client.post("/products", json=product("MUG-1"))).status_code == 409

        assert (await client.get("/products/MUG-1")).json()["name"] == "mug"
        response = await client.patch("/products/MUG-1", json={"price": 900, "stock": 5})
        assert response.json() == {"sku": "MUG-1", "name": "mug", "price": 900, "stock": 5, "sold": 0}
        assert (await client.patch("/products/MUG-1", json={})).json()["price"] == 900
        assert (await client.get("/products/MUG-1")).json() == response.json()

        response = await client.delete("/products/MUG-1")
        assert response.status_code == 204 and response.content == b""
        for missing in [client.get("/products/MUG-1"), client.patch("/products/MUG-1", json={"price": 1}),
                        client.delete("/products/MUG-1"), client.post("/products/MUG-1/orders", json={"customer": "ann", "quantity": 1})]:
            response = await missing
            assert response.status_code == 404 and response.json() == {"detail": "no product MUG-1"}
        async with db.transaction(readonly=True) as tx:
            assert await tx.query(shop.Product).acount() == 0

    run_app(store, test)


def test_clients_creating_the_same_product_at_once_create_it_once(store: Store) -> None:
    async def test(client: Client, db: copal.Database) -> None:
        responses = await asyncio.gather(*(client.post("/products", json=product("DUP", price=i)) for i in range(10)))
        assert sorted(response.status_code for response in responses) == [201] + [409] * 9
        assert {response.json()["detail"] for response in responses if response.status_code == 409} == {"product DUP exists"}
        created = next(response.json() for response in responses if response.status_code == 201)
        assert (await client.get("/products/DUP")).json() == created
        async with db.transaction(readonly=True) as tx:
            assert await tx.query(shop.Product).acount() == 1

    run_app(store, test)


def test_invalid_requests_are_refused_with_422(store: Store) -> None:
    async def test(client: Client, db: copal.Database) -> None:
        await create(client, product("PEN"))
        refused = [
            client.post("/products", json=product("lower-case")),
            client.post("/products", json=product("PEN-2", price=-1)),
            client.post("/products", json={"sku": "PEN-2", "name": "pen"}),
            client.patch("/products/PEN", json={"stock": -1}),
            client.get("/products/pen"),
            client.get("/products", params={"limit": 0}),
            client.get("/products", params={"limit": 101}),
            client.get("/products", params={"min_price": -5}),
            client.post("/products/PEN/orders", json={"customer": "ann", "quantity": 0}),
            client.post("/products/PEN/orders", json={"customer": "", "quantity": 1}),
            client.get("/orders"),
            client.get("/orders/-1"),
            client.get(f"/orders/{2**64}"),
            client.delete("/orders/abc"),
        ]
        for request in refused:
            response = await request
            assert response.status_code == 422, (response.request.url, response.text)
        assert (await client.get("/products/PEN")).json() == {**product("PEN"), "sold": 0}
        async with db.transaction(readonly=True) as tx:
            assert await tx.query(shop.Product).acount() == 1 and await tx.query(shop.Order).acount() == 0

    run_app(store, test)


def test_products_are_filtered_and_paged(store: Store) -> None:
    catalogue = [product(f"P{i:02}", price=100 * (i % 7), stock=i % 3) for i in range(30)]
    catalogue += [product(f"Q{i}", price=250, stock=1) for i in range(3)]

    async def test(client: Client, db: copal.Database) -> None:
        await create(client, *catalogue)

        async def skus(**params: Any) -> tuple[int, list[str]]:
            response = await client.get("/products", params={"limit": 100, **params})
            assert response.status_code == 200
            page = response.json()
            return page["total"], [item["sku"] for item in page["items"]]

        def expected(keep: Callable[[dict[str, Any]], bool]) -> tuple[int, list[str]]:
            chosen = sorted(p["sku"] for p in catalogue if keep(p))
            return len(chosen), chosen

        assert await skus() == expected(lambda p: True)
        assert await skus(min_price=200, max_price=400) == expected(lambda p: 200 <= p["price"] <= 400)
        assert await skus(in_stock=True) == expected(lambda p: p["stock"] > 0)
        assert await skus(sku_prefix="Q") == expected(lambda p: p["sku"].startswith("Q"))
        assert await skus(sku_prefix="P1", in_stock=True, max_price=300) == expected(
            lambda p: p["sku"].startswith("P1") and p["stock"] > 0 and p["price"] <= 300)
        assert await skus(min_price=10_000) == (0, [])

        pages = []
        for offset in range(0, 40, 7):
            response = (await client.get("/products", params={"offset": offset, "limit": 7, "in_stock": True})).json()
            assert response["total"] == expected(lambda p: p["stock"] > 0)[0] and response["offset"] == offset
            assert len(response["items"]) <= 7
            pages += [item["sku"] for item in response["items"]]
        assert pages == expected(lambda p: p["stock"] > 0)[1]
        first = (await client.get("/products", params={"sku_prefix": "P"})).json()
        assert first["total"] == 30 and len(first["items"]) == 20  # the default page

    run_app(store, test)


def test_orders_are_placed_listed_read_and_cancelled(store: Store) -> None:
    placed: list[dict[str, Any]] = []

    async def place(client: Client, db: copal.Database) -> None:
        await create(client, product("LAMP", price=2500, stock=5), product("BULB", price=300, stock=50))
        response = await client.post("/products/LAMP/orders", json={"customer": "ann", "quantity": 2})
        assert response.status_code == 201
        lamp_order = response.json()
        assert lamp_order == {"id": lamp_order["id"], "sku": "LAMP", "customer": "ann", "quantity": 2, "total": 5000}
        response = await client.post("/products/LAMP/orders", json={"customer": "bob", "quantity": 4})
        assert response.status_code == 409 and response.json() == {"detail": "3 of LAMP in stock"}
        bulbs = [(await client.post("/products/BULB/orders", json={"customer": "ann", "quantity": n})).json() for n in range(1, 6)]
        assert (await client.get("/products/LAMP")).json() == {**product("LAMP", 2500, 3), "sold": 2}
        assert (await client.get("/products/BULB")).json()["stock"] == 35
        placed.extend([lamp_order, *bulbs])

    async def read_and_cancel(client: Client, db: copal.Database) -> None:
        # A restarted application: the orders' products are loaded by aload_closure, not cached.
        lamp_order, *bulbs = placed
        assert (await client.get(f"/orders/{lamp_order['id']}")).json() == lamp_order
        listed = (await client.get("/orders", params={"customer": "ann"})).json()
        assert listed == [lamp_order, *bulbs]  # in id order, which is the order they were placed in
        paged = (await client.get("/orders", params={"customer": "ann", "offset": 2, "limit": 3})).json()
        assert paged == listed[2:5]
        assert (await client.get("/orders", params={"customer": "bob"})).json() == []

        response = await client.delete("/products/LAMP")
        assert response.status_code == 409 and response.json() == {"detail": "product LAMP has orders"}
        assert (await client.delete(f"/orders/{lamp_order['id']}")).status_code == 204
        assert (await client.get("/products/LAMP")).json()["stock"] == 5
        async with db.transaction(readonly=True) as tx:
            product_id = (await tx.query(shop.Product).where(sku="LAMP").aone())._p_oid
        for missing in [lamp_order["id"], product_id, 12345]:  # cancelled, not an order, never stored
            for response in [await client.get(f"/orders/{missing}"), await client.delete(f"/orders/{missing}")]:
                assert response.status_code == 404 and response.json() == {"detail": f"no order {missing}"}
        assert (await client.delete("/products/LAMP")).status_code == 204

    run_app(store, place, read_and_cancel)


def test_concurrent_buyers_never_oversell_and_conflicts_are_retried(store: Store) -> None:
    buyers, stock = 50, 30

    async def test(client: Client, db: copal.Database) -> None:
        await create(client, product("TICKET", price=4000, stock=stock))
        responses = await asyncio.gather(*(
            client.post("/products/TICKET/orders", json={"customer": f"c{i % 5}", "quantity": 1}) for i in range(buyers)
        ))
        statuses = sorted(response.status_code for response in responses)
        assert statuses == [201] * stock + [409] * (buyers - stock)
        ids = {response.json()["id"] for response in responses if response.status_code == 201}
        assert len(ids) == stock
        assert (await client.get("/products/TICKET")).json() == {**product("TICKET", 4000, 0), "sold": stock}
        async with db.transaction(readonly=True) as tx:
            orders = await tx.query(shop.Order).aall()
            assert {order._p_oid for order in orders} == ids
            assert sum(order.quantity for order in orders) == stock
        stats = db.stats()
        assert stats["conflicts"] > 0 and stats["retries"] == stats["conflicts"]

    run_app(store, test)


def test_a_buyer_whose_conflicts_outlast_the_retries_gets_503_and_buys_nothing(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shop, "RETRIES", 0)

    async def test(client: Client, db: copal.Database) -> None:
        await create(client, product("TICKET", stock=100))
        responses = await asyncio.gather(*(
            client.post("/products/TICKET/orders", json={"customer": "ann", "quantity": 1}) for _ in range(20)
        ))
        bought = sum(response.status_code == 201 for response in responses)
        refused = [response.json() for response in responses if response.status_code != 201]
        assert bought >= 1 and refused and all(body == {"detail": "too many concurrent changes, try again"} for body in refused)
        assert {response.status_code for response in responses} == {201, 503}
        assert (await client.get("/products/TICKET")).json() == {**product("TICKET", stock=100 - bought), "sold": bought}
        assert len((await client.get("/orders", params={"customer": "ann", "limit": 100})).json()) == bought
        assert db.stats()["retries"] == 0

    run_app(store, test)


def test_the_application_opens_the_database_named_by_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    async def start_and_stop(expected: Path) -> None:
        async with serve(shop.app) as (client, db):
            assert Path(db.path) == expected
            await create(client, product("X"))
        with pytest.raises(RuntimeError, match="closed"):
            db.transaction()

    monkeypatch.delenv("SHOP_DATABASE", raising=False)
    asyncio.run(start_and_stop(Path("shop.copal")))
    assert (tmp_path / "shop.copal").is_dir()
    monkeypatch.setenv("SHOP_DATABASE", str(tmp_path / "elsewhere"))
    asyncio.run(start_and_stop(tmp_path / "elsewhere"))
    assert (tmp_path / "elsewhere").is_dir()


def test_the_how_to_page_shows_the_example_as_it_is() -> None:
    excerpt = re.search(r"<!-- no-run: an excerpt of examples/fastapi_shop/app.py.*?-->\n```python\n(.*?)```", HOWTO.read_text(), re.S)
    assert excerpt, "docs/howto/async.md shows an excerpt of the example"
    assert textwrap.indent(excerpt.group(1), "    ") in Path(shop.__file__).read_text()
