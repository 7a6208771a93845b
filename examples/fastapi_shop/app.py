"""A shop as a FastAPI application on copal's asyncio API: products and their orders.

Run it from the root of the copal checkout, with uvicorn installed (``pip install fastapi
uvicorn``)::

    uvicorn examples.fastapi_shop.app:app

The database is the directory (or PostgreSQL URL) in the environment variable SHOP_DATABASE,
by default shop.copal in the current directory. The application opens it when it starts and
closes it when it stops. Every endpoint is an ``async def`` that reads in a read-only
transaction entered with ``async with`` and writes through ``await db.arun(work, retries=...)``,
which runs ``work`` again in a new transaction after a conflict: many clients buying the same
product at once never sell more than its stock.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import Annotated, AsyncIterator

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

import copal

DEFAULT_LOCATION = "shop.copal"
# Conflicts a write retries before the client gets 503: enough for dozens of clients buying
# the same product at the same moment.
RETRIES = 100
SKU = Annotated[str, Path(pattern=r"^[A-Z0-9-]{1,32}$")]
ORDER_ID = Annotated[int, Path(ge=0, lt=2**64)]


class Product(copal.Persistent):
    # Pinned stored names, whatever module the application is imported as.
    __copal_type__ = "fastapi_shop.Product"
    __copal_indexes__ = [copal.Index("sku", unique=True), copal.Index("price")]

    def __init__(self, sku: str, name: str, price: int, stock: int) -> None:
        self.sku = sku
        self.name = name
        self.price = price  # in cents
        self.stock = stock
        self.sold = 0  # units in orders: a product with orders is not deleted


class Order(copal.Persistent):
    __copal_type__ = "fastapi_shop.Order"
    __copal_indexes__ = [copal.Index("customer")]

    def __init__(self, product: Product, customer: str, quantity: int) -> None:
        self.product = product
        self.customer = customer
        self.quantity = quantity
        self.total = product.price * quantity


# -- what clients send and receive ---------------------------------------------------------------


class NewProduct(BaseModel):
    sku: str = Field(pattern=r"^[A-Z0-9-]{1,32}$")
    name: str = Field(min_length=1, max_length=200)
    price: int = Field(ge=0)
    stock: int = Field(ge=0)


class ProductChange(BaseModel):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    price: int | None = Field(default=None, ge=0)
    stock: int | None = Field(default=None, ge=0)


class ProductOut(BaseModel):
    sku: str
    name: str
    price: int
    stock: int
    sold: int


class ProductPage(BaseModel):
    total: int
    offset: int
    items: list[ProductOut]


class NewOrder(BaseModel):
    customer: str = Field(min_length=1, max_length=100)
    quantity: int = Field(ge=1, le=1000)


class OrderOut(BaseModel):
    id: int
    sku: str
    customer: str
    quantity: int
    total: int


def product_out(product: Product) -> ProductOut:
    return ProductOut(sku=product.sku, name=product.name, price=product.price, stock=product.stock, sold=product.sold)


def order_out(order: Order) -> OrderOut:
    """The order as plain values; its product must be loaded (``aload_closure``)."""
    assert order._p_oid is not None, "the order is committed"
    return OrderOut(id=order._p_oid, sku=order.product.sku, customer=order.customer, quantity=order.quantity, total=order.total)


async def find_product(tx: copal.Transaction, sku: str) -> Product:
    product = await tx.query(Product).where(sku=sku).afirst()
    if product is None:
        raise HTTPException(404, f"no product {sku}")
    return product


async def find_order(tx: copal.Transaction, order_id: int) -> Order:
    """The order with id ``order_id``, with its product loaded."""
    try:
        order = await tx.aget(order_id)
    except copal.DanglingReference:
        order = None
    if not isinstance(order, Order):
        raise HTTPException(404, f"no order {order_id}")
    await tx.aload_closure([order], depth=1)
    return order


# -- the application -----------------------------------------------------------------------------


def create_app(location: str | None = None) -> FastAPI:
    """The shop on the database at ``location`` (default: $SHOP_DATABASE, else shop.copal),
    opened when the application starts and closed when it stops."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db = copal.open(location or os.environ.get("SHOP_DATABASE", DEFAULT_LOCATION))
        app.state.db = db
        try:
            yield
        finally:
            await db.aclose()

    app = FastAPI(title="copal shop", lifespan=lifespan)
    app.add_exception_handler(copal.ConflictError, too_many_conflicts)
    add_endpoints(app)
    return app


async def too_many_conflicts(request: Request, error: Exception) -> JSONResponse:
    """The answer to a write whose conflicts outlasted its retries."""
    return JSONResponse({"detail": "too many concurrent changes, try again"}, status_code=503)


def database(request: Request) -> copal.Database:
    db: copal.Database = request.app.state.db
    return db


DB = Annotated[copal.Database, Depends(database)]


def add_endpoints(app: FastAPI) -> None:
    @app.post("/products", status_code=201)
    async def create_product(new: NewProduct, db: DB) -> ProductOut:
        async def create(tx: copal.Transaction) -> ProductOut:
            if await tx.query(Product).where(sku=new.sku).aexists():
                raise HTTPException(409, f"product {new.sku} exists")
            product = Product(new.sku, new.name, new.price, new.stock)
            tx.add(product)
            return product_out(product)

        try:
            return await db.arun(create, retries=RETRIES)
        except copal.UniqueViolation:  # created by another client since the query
            raise HTTPException(409, f"product {new.sku} exists") from None

    @app.get("/products")
    async def list_products(
        db: DB,
        min_price: Annotated[int | None, Query(ge=0)] = None,
        max_price: Annotated[int | None, Query(ge=0)] = None,
        in_stock: bool = False,
        sku_prefix: Annotated[str, Query(max_length=32)] = "",
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
    ) -> ProductPage:
        conditions = []
        if min_price is not None:
            conditions.append(copal.field("price") >= min_price)
        if max_price is not None:
            conditions.append(copal.field("price") <= max_price)
        if in_stock:
            conditions.append(copal.field("stock") > 0)
        if sku_prefix:
            conditions.append(copal.field("sku").startswith(sku_prefix))
        async with db.transaction(readonly=True) as tx:
            matching = tx.query(Product).where(*conditions)
            total = await matching.acount()
            page = await matching.order_by("sku").offset(offset).limit(limit).aall()
            return ProductPage(total=total, offset=offset, items=[product_out(p) for p in page])

    @app.get("/products/{sku}")
    async def get_product(sku: SKU, db: DB) -> ProductOut:
        async with db.transaction(readonly=True) as tx:
            return product_out(await find_product(tx, sku))

    @app.patch("/products/{sku}")
    async def change_product(sku: SKU, change: ProductChange, db: DB) -> ProductOut:
        async def apply(tx: copal.Transaction) -> ProductOut:
            product = await find_product(tx, sku)
            for name, value in change.model_dump(exclude_none=True).items():
                setattr(product, name, value)
            return product_out(product)

        return await db.arun(apply, retries=RETRIES)

    @app.delete("/products/{sku}", status_code=204)
    async def delete_product(sku: SKU, db: DB) -> Response:
        async def delete(tx: copal.Transaction) -> None:
            product = await find_product(tx, sku)
            if product.sold:
                raise HTTPException(409, f"product {sku} has orders")
            tx.delete(product)

        await db.arun(delete, retries=RETRIES)
        return Response(status_code=204)

    @app.post("/products/{sku}/orders", status_code=201)
    async def buy(sku: SKU, new: NewOrder, db: DB) -> OrderOut:
        async def take_from_stock(tx: copal.Transaction) -> tuple[Order, int]:
            product = await find_product(tx, sku)
            if product.stock < new.quantity:
                raise HTTPException(409, f"{product.stock} of {sku} in stock")
            product.stock -= new.quantity
            product.sold += new.quantity
            order = Order(product, new.customer, new.quantity)
            tx.add(order)
            return order, order.total

        order, total = await db.arun(take_from_stock, retries=RETRIES)
        # The id is given at commit. The order's objects are not read after it: their connection
        # may serve another transaction by then.
        assert order._p_oid is not None
        return OrderOut(id=order._p_oid, sku=sku, customer=new.customer, quantity=new.quantity, total=total)

    @app.get("/orders")
    async def list_orders(
        db: DB,
        customer: Annotated[str, Query(min_length=1, max_length=100)],
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
    ) -> list[OrderOut]:
        async with db.transaction(readonly=True) as tx:
            # Without order_by, results come in id order: a stable order for pages.
            orders = await tx.query(Order).where(customer=customer).offset(offset).limit(limit).aall()
            await tx.aload_closure(orders, depth=1)  # their products, in one batch
            return [order_out(order) for order in orders]

    @app.get("/orders/{order_id}")
    async def get_order(order_id: ORDER_ID, db: DB) -> OrderOut:
        async with db.transaction(readonly=True) as tx:
            return order_out(await find_order(tx, order_id))

    @app.delete("/orders/{order_id}", status_code=204)
    async def cancel_order(order_id: ORDER_ID, db: DB) -> Response:
        async def cancel(tx: copal.Transaction) -> None:
            order = await find_order(tx, order_id)
            order.product.stock += order.quantity
            order.product.sold -= order.quantity
            tx.delete(order)

        await db.arun(cancel, retries=RETRIES)
        return Response(status_code=204)


app = create_app()
