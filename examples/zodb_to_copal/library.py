"""The same application's classes on copal: same names and fields, copal.Persistent as base.

zodb_to_copal.py --module zodb_app=library stores each zodb_app.X object as a library.X.
"""

from __future__ import annotations

from datetime import date

import copal


class Author(copal.Persistent):
    def __init__(self, name: str, born: int) -> None:
        self.name = name
        self.born = born
        self.books = copal.PersistentList()


class Book(copal.Persistent):
    __copal_indexes__ = [copal.Index("isbn", unique=True)]

    def __init__(self, isbn: str, title: str, author: Author, published: date, tags: list[str]) -> None:
        self.isbn = isbn
        self.title = title
        self.author = author
        self.published = published
        self.tags = tags
        author.books.append(self)


class Library(copal.Persistent):
    def __init__(self, name: str) -> None:
        self.name = name
        self.books = copal.PersistentDict()  # was an OOBTree
        self.loans: dict[str, str] = {}
