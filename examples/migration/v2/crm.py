"""Version 2 moved the customer class here and renamed it Client."""

from __future__ import annotations

import copal


class Client(copal.Persistent):
    # Objects stored by version 1 under "models.Customer" load as Client (and are queried,
    # indexed and written back as Client, keeping their ids).
    __copal_aliases__ = ("models.Customer",)

    def __init__(self, name: str, phone: str) -> None:
        self.name = name
        self.phone = phone
