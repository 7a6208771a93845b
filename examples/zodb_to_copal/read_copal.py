"""The library application after the move: reads and updates the copal database.

Usage: python read_copal.py [library.copal]
"""

from __future__ import annotations

import sys

import copal

from library import Book, Library


def main(path: str) -> int:
    db = copal.open(path)
    with db.transaction() as tx:
        library: Library = tx.root["library"]
        print(f"{library.name}: {len(library.books)} books, loans {library.loans}")
        book = tx.query(Book).where(isbn="978-0-14-143951-8").one()  # through the new index
        print(f"{book.title} ({book.published.year}) by {book.author.name}, who also wrote "
              f"{[b.title for b in book.author.books if b is not book]}")
        month = tx.root["book_of_the_month"]
        print(f"book of the month: {month.title}; the same object as in the library: "
              f"{month is library.books[month.isbn]}")
        month.tags.append("book of the month")
    with db.transaction() as tx:
        orwell = tx.root["authors"]["George Orwell"]
        ok = (
            tx.query(Book).count() == 5
            and orwell.books[0].tags == ["novel", "dystopia", "book of the month"]
            and all(b.author is orwell for b in orwell.books)  # the cycle Author -> Book -> Author
            and not db.verify()["problems"]
        )
    db.close()
    print(f"check: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "library.copal"))
