"""What every system's shop in the async suite shares: the body of a purchase and the answers'
shape, so that all of them serve the same requests with the same JSON.

It imports nothing of copal: the SQLAlchemy systems' workers load it too.
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException
from pydantic import BaseModel, Field


class NewOrder(BaseModel):
    """The body of a purchase."""

    customer: str = Field(min_length=1, max_length=100)
    quantity: int = Field(ge=1, le=1000)


def product_out(sku: str, name: str, price: int, stock: int, sold: int) -> dict[str, Any]:
    """A product as every system answers it."""
    return {"sku": sku, "name": name, "price": price, "stock": stock, "sold": sold}


def order_out(order_id: int, sku: str, customer: str, quantity: int, total: int) -> dict[str, Any]:
    """An order as every system answers it."""
    return {"id": order_id, "sku": sku, "customer": customer, "quantity": quantity, "total": total}


def product_name(sku: str) -> str:
    return f"product {sku}"


def product_price(i: int) -> int:
    """The price in cents of the ``i``-th product created."""
    return 100 + i


def take_stock(product: Any, sku: str, quantity: int) -> None:
    """Takes ``quantity`` units of ``product`` (the one of ``sku``, None if there is none) from
    its stock into its units sold; 404 if there is no product, 409 if its stock is short."""
    if product is None:
        raise HTTPException(404, f"no product {sku}")
    if product.stock < quantity:
        raise HTTPException(409, f"{product.stock} of {sku} in stock")
    product.stock -= quantity
    product.sold += quantity
