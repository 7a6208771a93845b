"""The async suite's shop on SQLAlchemy 2's asyncio ORM: aiosqlite (embedded) or asyncpg.

The same two endpoints as :mod:`copal.bench.async_apps`, as SQLAlchemy's documentation writes
them: an ``AsyncSession`` per request from an ``async_sessionmaker`` (``expire_on_commit=False``,
so that the answer reads no attribute after the commit), ``select(...)`` awaited through
``session.scalars``. A purchase must not sell more than the stock when many clients buy the
same product at once; each database has its own idiomatic way:

- PostgreSQL: the product is read ``FOR UPDATE`` (``with_for_update()``): concurrent purchases of
  one product wait for each other's row lock, none fails.
- SQLite: a purchase's transaction begins with ``BEGIN IMMEDIATE`` (SQLAlchemy's recipe for
  pysqlite and aiosqlite: the driver's own transaction handling off, ``BEGIN`` emitted on the
  engine's ``begin`` event), so writers take the database's write lock in turn, waiting up to
  ``busy_timeout``; reads use a second engine whose transactions begin deferred, in WAL mode so
  that they never wait for a writer.

It imports nothing of copal (its workers run without copal's native core).
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import FastAPI, HTTPException
from sqlalchemy import ForeignKey, String, event, select
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from copal.bench.async_shop import NewOrder, order_out, product_name, product_out, product_price, take_stock

#: How long a SQLite writer waits for the write lock, in milliseconds.
BUSY_TIMEOUT_MS = 60_000


class Base(DeclarativeBase):
    pass


class Product(Base):
    __tablename__ = "products"
    id: Mapped[int] = mapped_column(primary_key=True)
    sku: Mapped[str] = mapped_column(String(32), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    price: Mapped[int]
    stock: Mapped[int]
    sold: Mapped[int] = mapped_column(default=0)


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    product_id: Mapped[int] = mapped_column(ForeignKey("products.id"))
    customer: Mapped[str] = mapped_column(String(100))
    quantity: Mapped[int]
    total: Mapped[int]


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def make_engine(url: str, pool_size: int, *, begin: str = "BEGIN") -> AsyncEngine:
    """An engine on ``url`` (``sqlite+aiosqlite:///path`` or ``postgresql+asyncpg://...``)
    with ``pool_size`` connections; on SQLite, its transactions start with ``begin``."""
    engine = create_async_engine(url, pool_size=pool_size, max_overflow=0)
    if is_sqlite(url):

        @event.listens_for(engine.sync_engine, "connect")
        def on_connect(dbapi_connection: Any, record: Any) -> None:
            dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN itself
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            cursor.close()

        @event.listens_for(engine.sync_engine, "begin")
        def on_begin(connection: Any) -> None:
            connection.exec_driver_sql(begin)

    return engine


def populate(url: str, skus: list[str], stock: int) -> None:
    """Creates the tables and the products ``skus`` (each with ``stock`` units)."""

    async def create() -> None:
        engine = make_engine(url, 1)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(Base.metadata.drop_all)
                await conn.run_sync(Base.metadata.create_all)
            async with async_sessionmaker(engine)() as session, session.begin():
                session.add_all(
                    Product(sku=sku, name=product_name(sku), price=product_price(i), stock=stock, sold=0)
                    for i, sku in enumerate(skus)
                )
        finally:
            await engine.dispose()

    asyncio.run(create())


def app(url: str, pool_size: int) -> FastAPI:
    """The shop on the database at ``url``, with up to ``pool_size`` connections (per engine)."""
    sqlite = is_sqlite(url)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        readers = make_engine(url, pool_size)
        writers = make_engine(url, pool_size, begin="BEGIN IMMEDIATE") if sqlite else readers
        app.state.read = async_sessionmaker(readers, expire_on_commit=False)
        app.state.write = async_sessionmaker(writers, expire_on_commit=False)
        try:
            yield
        finally:
            await readers.dispose()
            if writers is not readers:
                await writers.dispose()

    shop = FastAPI(lifespan=lifespan)

    @shop.get("/products/{sku}")
    async def get_product(sku: str) -> dict[str, Any]:
        async with shop.state.read() as session:
            product = (await session.scalars(select(Product).where(Product.sku == sku))).first()
            if product is None:
                raise HTTPException(404, f"no product {sku}")
            return product_out(product.sku, product.name, product.price, product.stock, product.sold)

    @shop.post("/products/{sku}/orders", status_code=201)
    async def buy(sku: str, new: NewOrder) -> dict[str, Any]:
        query = select(Product).where(Product.sku == sku)
        if not sqlite:
            query = query.with_for_update()
        async with shop.state.write() as session, session.begin():
            product = (await session.scalars(query)).first()
            take_stock(product, sku, new.quantity)
            assert product is not None
            order = Order(product_id=product.id, customer=new.customer, quantity=new.quantity,
                          total=product.price * new.quantity)
            session.add(order)
        return order_out(order.id, sku, order.customer, order.quantity, order.total)

    return shop
