"""Version 2 of the application's classes: the evolution declarations say how to read
version 1's records."""

from __future__ import annotations

import copal

from crm import Client


class Account(copal.Persistent):
    # Field `owner` is now called `holder`.
    __copal_renamed__ = {"owner": "holder"}
    # Field `fax` is gone: not set on loaded objects, dropped from a record when it is written.
    __copal_removed__ = ("fax",)

    # Field `currency` is new: records without it get the default of this parameter.
    def __init__(self, holder: Client, balance: int, currency: str = "EUR") -> None:
        self.holder = holder
        self.balance = balance
        self.currency = currency
