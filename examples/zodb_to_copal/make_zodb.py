"""Creates a small ZODB FileStorage to move to copal.

Usage: python make_zodb.py [library.fs]
"""

from __future__ import annotations

import sys
from datetime import date
from pathlib import Path

import ZODB
import ZODB.FileStorage
from persistent.mapping import PersistentMapping

from zodb_app import Author, Book, Library

BOOKS = [
    ("978-0-14-118776-1", "Nineteen Eighty-Four", "George Orwell", date(1949, 6, 8), ["novel", "dystopia"]),
    ("978-0-14-118270-4", "Animal Farm", "George Orwell", date(1945, 8, 17), ["novella"]),
    ("978-0-14-143951-8", "Middlemarch", "George Eliot", date(1871, 12, 1), ["novel"]),
    ("978-0-19-953556-9", "Silas Marner", "George Eliot", date(1861, 4, 2), ["novel"]),
    ("978-0-14-044913-6", "Crime and Punishment", "Fyodor Dostoevsky", date(1866, 1, 1), ["novel", "classic"]),
]
BORN = {"George Orwell": 1903, "George Eliot": 1819, "Fyodor Dostoevsky": 1821}


def main(path: str) -> int:
    for leftover in Path(path).parent.glob(Path(path).name + "*"):
        leftover.unlink()  # library.fs and its .index, .lock, .tmp files
    db = ZODB.DB(ZODB.FileStorage.FileStorage(path))
    with db.transaction() as conn:
        root = conn.root()
        authors = PersistentMapping({name: Author(name, born) for name, born in BORN.items()})
        library = Library("Town library")
        for isbn, title, author, published, tags in BOOKS:
            library.books[isbn] = Book(isbn, title, authors[author], published, tags)
        library.loans["978-0-14-143951-8"] = "ann"
        root["authors"] = authors
        root["library"] = library
        # A shared object: the same Book is reachable from the library, its author and here.
        root["book_of_the_month"] = library.books["978-0-14-118776-1"]
    db.close()
    print(f"wrote {path}: {len(BORN)} authors, {len(BOOKS)} books, 1 library")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "library.fs"))
