"""The async suite's shop on copal: two endpoints of examples/fastapi_shop, written twice.

``GET /products/{sku}`` reads a product in a read-only transaction; ``POST
/products/{sku}/orders`` buys one: it takes the quantity from the product's stock and adds an
order, in a read-write transaction retried after a conflict. :func:`async_app` writes them as
the example does, ``async def`` endpoints on copal's asyncio API (``async with
db.transaction(readonly=True)``, ``await db.arun(...)``); :func:`thread_pool_app` as sync copal
code in ``def`` endpoints, which FastAPI runs in its thread pool. The suite's other systems
(:mod:`copal.bench.async_sqlalchemy`) serve the same requests with the same answers.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import FastAPI, HTTPException
import copal
from copal.bench.async_shop import NewOrder, order_out, product_name, product_out, product_price, take_stock
from copal.bench.systems import is_postgresql

#: Conflicts a purchase retries (the example's): enough for 64 clients buying at once.
RETRIES = 100


class ShopProduct(copal.Persistent):
    __copal_type__ = "copal.bench.ShopProduct"
    __copal_indexes__ = [copal.Index("sku", unique=True)]

    def __init__(self, sku: str, name: str, price: int, stock: int) -> None:
        self.sku = sku
        self.name = name
        self.price = price  # in cents
        self.stock = stock
        self.sold = 0


class ShopOrder(copal.Persistent):
    __copal_type__ = "copal.bench.ShopOrder"

    def __init__(self, product: ShopProduct, customer: str, quantity: int) -> None:
        self.product = product
        self.customer = customer
        self.quantity = quantity
        self.total = product.price * quantity


def populate(location: str, skus: list[str], stock: int) -> None:
    """Creates the products ``skus`` (each with ``stock`` units) in the database at
    ``location``."""
    db = copal.open(location)
    try:
        with db.transaction() as tx:
            for i, sku in enumerate(skus):
                tx.add(ShopProduct(sku, product_name(sku), product_price(i), stock))
    finally:
        db.close()


def _copal_product(product: ShopProduct) -> dict[str, Any]:
    return product_out(product.sku, product.name, product.price, product.stock, product.sold)


def _take(product: ShopProduct | None, sku: str, new: NewOrder) -> ShopOrder:
    """The order of ``new`` for ``product``, taken from its stock (404 or 409 if it cannot)."""
    take_stock(product, sku, new.quantity)
    assert product is not None
    return ShopOrder(product, new.customer, new.quantity)


def _copal_order(placed: tuple[ShopOrder, NewOrder, int], sku: str) -> dict[str, Any]:
    """The answer to a purchase, after its commit: the order's id is given at commit, its other
    values were read in the transaction (the object's connection may serve another transaction
    by now)."""
    order, new, total = placed
    assert order._p_oid is not None, "the order is committed"
    return order_out(order._p_oid, sku, new.customer, new.quantity, total)


def _shop(location: str, connections: int) -> FastAPI:
    """An application that opens the database at ``location`` when it starts (with up to
    ``connections`` server connections on PostgreSQL) and closes it when it stops."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.db = copal.open(location, max_connections=connections if is_postgresql(location) else None)
        try:
            yield
        finally:
            await app.state.db.aclose()

    return FastAPI(lifespan=lifespan)


def async_app(location: str, connections: int) -> FastAPI:
    """The shop on copal's asyncio API, on the database at ``location``."""
    app = _shop(location, connections)

    @app.get("/products/{sku}")
    async def get_product(sku: str) -> dict[str, Any]:
        db: copal.Database = app.state.db
        async with db.transaction(readonly=True) as tx:
            product = await tx.query(ShopProduct).where(sku=sku).afirst()
            if product is None:
                raise HTTPException(404, f"no product {sku}")
            return _copal_product(product)

    @app.post("/products/{sku}/orders", status_code=201)
    async def buy(sku: str, new: NewOrder) -> dict[str, Any]:
        db: copal.Database = app.state.db

        async def take_from_stock(tx: copal.Transaction) -> tuple[ShopOrder, NewOrder, int]:
            order = _take(await tx.query(ShopProduct).where(sku=sku).afirst(), sku, new)
            tx.add(order)
            return order, new, order.total

        return _copal_order(await db.arun(take_from_stock, retries=RETRIES), sku)

    return app


def thread_pool_app(location: str, connections: int) -> FastAPI:
    """The shop in sync copal code, in ``def`` endpoints that FastAPI runs in its thread pool,
    on the database at ``location``."""
    app = _shop(location, connections)

    @app.get("/products/{sku}")
    def get_product(sku: str) -> dict[str, Any]:
        db: copal.Database = app.state.db
        with db.transaction(readonly=True) as tx:
            product = tx.query(ShopProduct).where(sku=sku).first()
            if product is None:
                raise HTTPException(404, f"no product {sku}")
            return _copal_product(product)

    @app.post("/products/{sku}/orders", status_code=201)
    def buy(sku: str, new: NewOrder) -> dict[str, Any]:
        db: copal.Database = app.state.db

        def take_from_stock(tx: copal.Transaction) -> tuple[ShopOrder, NewOrder, int]:
            order = _take(tx.query(ShopProduct).where(sku=sku).first(), sku, new)
            tx.add(order)
            return order, new, order.total

        return _copal_order(db.run(take_from_stock, retries=RETRIES), sku)

    return app
