"""``query.to_arrow(*paths)``: columns built in Rust from the records, read through the Arrow
PyCapsule interface by pyarrow and polars, holding what ``values()`` gives (on both stores)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import polars
import pyarrow
import pytest

import copal
from copal import Persistent, PersistentList

from conftest import Store


class Shop(Persistent):
    def __init__(self, name: str) -> None:
        self.name = name


class Sale(Persistent):
    def __init__(self, item: str, units: Any, price: Any, day: Any, at: Any, shop: Shop | None, paid: Any, note: Any = None) -> None:
        self.item = item
        self.units = units
        self.price = price
        self.day = day
        self.at = at
        self.shop = shop
        self.paid = paid
        self.note = note


UTC = dt.timezone.utc


def _sales(db: Any, n: int = 50) -> None:
    shops = [Shop("north"), Shop("south")]
    sales = [
        Sale(
            f"item{i % 7}",
            None if i % 10 == 3 else i,
            i * 1.25,
            dt.date(2024, 1, 1) + dt.timedelta(days=i),
            dt.datetime(2024, 1, 1, 12, tzinfo=UTC) + dt.timedelta(hours=i),
            None if i % 5 == 0 else shops[i % 2],
            i % 3 == 0,
            b"\x00note" if i % 4 == 0 else None,
        )
        for i in range(n)
    ]
    with db.transaction() as tx:
        tx.root["sales"] = PersistentList(sales)


COLUMNS = ("item", "units", "price", "day", "at", "shop.name", "paid", "note", "nowhere")


def test_columns_hold_what_values_gives(store: Store) -> None:
    db = store.open()
    _sales(db)
    db = store.reopen(db)
    with db.transaction() as tx:
        q = tx.query(Sale).where(copal.field("price") >= 5).order_by("units", descending=True)
        table = pyarrow.table(q.to_arrow(*COLUMNS))
        assert table.column_names == list(COLUMNS)
        assert [str(t) for t in table.schema.types] == [
            "large_string", "int64", "double", "date32[day]", "timestamp[us, tz=UTC]", "large_string", "bool", "large_binary", "null",
        ]
        rows = q.values(*COLUMNS)
        assert table.num_rows == len(rows) == 46
        assert [tuple(row.values()) for row in table.to_pylist()] == rows


def test_polars_reads_the_columns(store: Store) -> None:
    db = store.open()
    _sales(db)
    with db.transaction() as tx:
        stream = tx.query(Sale).order_by("item", "price").to_arrow("item", "price", "shop.name")
        assert stream.num_rows == 50
        frame = polars.DataFrame(stream)
        assert frame.columns == ["item", "price", "shop.name"]
        assert frame.rows() == tx.query(Sale).order_by("item", "price").values("item", "price", "shop.name")
        assert frame.group_by("item").len().sort("item").rows()[0] == ("item0", 8)


def test_references_ints_among_floats_naive_datetimes(store: Store) -> None:
    db = store.open()
    with db.transaction() as tx:
        shop = Shop("east")
        tx.root["sales"] = PersistentList(
            [Sale("a", 1, 2, None, dt.datetime(2024, 5, 1, 8, 30), shop, True), Sale("b", 2, 2.5, None, None, None, False)]
        )
    with db.transaction() as tx:
        table = pyarrow.table(tx.query(Sale).to_arrow("shop", "price", "at"))
        assert table.column("shop").to_pylist() == [tx.root["sales"][0].shop._p_oid, None]
        assert table.column("price").to_pylist() == [2.0, 2.5]
        assert str(table.schema.field("at").type) == "timestamp[us]"
        assert table.column("at").to_pylist() == [dt.datetime(2024, 5, 1, 8, 30), None]


def test_the_transactions_changes_and_empty_results(store: Store) -> None:
    db = store.open()
    _sales(db, n=5)
    with db.transaction() as tx:
        tx.add(Sale("new", 100, 1.0, None, None, None, False))
        tx.query(Sale).where(item="item0").one().units = -1
        table = pyarrow.table(tx.query(Sale).to_arrow("item", "units"))
        assert table.column("units").to_pylist() == [-1, 1, 2, None, 4, 100]
        nothing = pyarrow.table(tx.query(Sale).where(item="nobody").to_arrow("item", "units"))
        assert (nothing.num_rows, nothing.column_names) == (0, ["item", "units"])
        assert pyarrow.table(tx.query(Shop).where(name="x").to_arrow("name")).num_rows == 0


class Never(Persistent):
    """Never stored."""


def test_a_stream_is_read_again_and_bad_columns_are_type_errors(store: Store) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["sales"] = PersistentList([Sale("a", 1, Decimal("1.5"), None, None, None, [1]), Sale("b", "two", 1, None, None, None, 1)])
    with db.transaction() as tx:
        stream = tx.query(Sale).to_arrow("item")
        # Read as often as asked, from the same columns (DuckDB asks twice).
        assert pyarrow.table(stream).num_rows == pyarrow.table(stream).num_rows == 2
        assert polars.DataFrame(stream).rows() == [("a",), ("b",)]
        with pytest.raises(TypeError, match=r'column "units" holds int and str values'):
            tx.query(Sale).to_arrow("units")
        with pytest.raises(TypeError, match=r'column "price" holds a value of a type .* \(Decimal\): read it with values\(\)'):
            tx.query(Sale).to_arrow("price")
        with pytest.raises(TypeError, match=r"\(container\)"):
            tx.query(Sale).to_arrow("paid")
        with pytest.raises(TypeError, match="at least one path"):
            tx.query(Sale).to_arrow()
        assert pyarrow.table(tx.query(Never).to_arrow("x")).num_rows == 0


def test_a_stream_never_read_frees_its_columns(store: Store) -> None:
    """A capsule dropped without a reader releases the stream (no leak, no crash), and so does
    a stream object never asked for its capsule."""
    db = store.open()
    _sales(db, n=20)
    with db.transaction() as tx:
        for _ in range(50):
            tx.query(Sale).to_arrow("item", "price").__arrow_c_stream__()
            tx.query(Sale).to_arrow("item")
