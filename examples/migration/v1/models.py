"""Version 1 of the application's classes."""

from __future__ import annotations

import copal


class Customer(copal.Persistent):
    def __init__(self, name: str, phone: str) -> None:
        self.name = name
        self.phone = phone


class Account(copal.Persistent):
    def __init__(self, owner: Customer, balance: int, fax: str) -> None:
        self.owner = owner
        self.balance = balance
        self.fax = fax
