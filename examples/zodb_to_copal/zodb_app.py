"""The classes of a small ZODB application (a library), as an existing ZODB user has them."""

from __future__ import annotations

from datetime import date

import persistent
from BTrees.OOBTree import OOBTree
from persistent.list import PersistentList


class Author(persistent.Persistent):
    def __init__(self, name: str, born: int) -> None:
        self.name = name
        self.born = born
        self.books = PersistentList()  # back references: Author -> Book -> Author is a cycle


class Book(persistent.Persistent):
    def __init__(self, isbn: str, title: str, author: Author, published: date, tags: list[str]) -> None:
        self.isbn = isbn
        self.title = title
        self.author = author
        self.published = published
        self.tags = tags  # a plain list, stored inside the book's pickle
        author.books.append(self)


class Library(persistent.Persistent):
    def __init__(self, name: str) -> None:
        self.name = name
        self.books = OOBTree()  # isbn -> Book
        self.loans: dict[str, str] = {}  # isbn -> reader, a plain dict
