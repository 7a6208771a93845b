"""Version 2 of the application: reads and updates the data version 1 wrote.

Usage: python v2/app.py [DATABASE]   (default: migration.copal here)

Nothing converts the database ahead of time: each old record is read through the version 2
classes when it is loaded, and written in the new shape when it is next changed.
"""

from __future__ import annotations

import sys

import copal

from crm import Client
from models import Account


def show(tx: copal.Transaction) -> None:
    for a in tx.root["accounts"]:
        print(
            f"  {type(a).__name__}(holder={type(a.holder).__name__} {a.holder.name}, "
            f"balance={a.balance}, currency={a.currency}, has fax: {hasattr(a, 'fax')})"
        )


def main(path: str) -> int:
    db = copal.open(path)
    print("v2 reads the records of v1:")
    with db.transaction() as tx:
        show(tx)
        print(f"  {tx.query(Client).count()} Client objects (stored as models.Customer)")
    leftover = db.gc_schema()
    print(f"  records still holding a removed field: {leftover['records']}")

    with db.transaction() as tx:
        accounts = tx.root["accounts"]
        accounts[0].balance += 10  # written back as a v2 record: holder, balance, currency
        accounts[2].currency = "USD"
        accounts[0].holder.phone = "+33 6 11 22 33 44"  # a moved class's object, updated in place
    print("v2 updated accounts 0 and 2 and the Client Ann; after a new open:")
    db.close()

    db = copal.open(path)
    with db.transaction() as tx:
        show(tx)
        accounts = list(tx.root["accounts"])
        ann = accounts[0].holder
        ok = (
            [a.balance for a in accounts] == [110, 250, 75]
            and [a.currency for a in accounts] == ["EUR", "EUR", "USD"]
            and accounts[1].holder is ann  # the shared customer is still one object
            and isinstance(ann, Client) and ann.phone == "+33 6 11 22 33 44"
            and not any(hasattr(a, "fax") for a in accounts)
        )
    report = db.gc_schema(purge=True)  # the one unchanged account still holds its fax: drop it
    print(f"  gc --schema --purge rewrote {report['purged']} record(s); now {db.gc_schema()['records']} hold a removed field")
    ok = ok and db.gc_schema()["records"] == 0 and not db.verify()["problems"]
    db.close()
    print(f"check: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "migration.copal"))
