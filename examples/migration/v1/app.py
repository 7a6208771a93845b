"""Version 1 of the application: writes customers and accounts.

Usage: python v1/app.py [DATABASE]   (default: migration.copal here, created afresh)
"""

from __future__ import annotations

import shutil
import sys

import copal

from models import Account, Customer


def main(path: str) -> int:
    shutil.rmtree(path, ignore_errors=True)
    db = copal.open(path)
    with db.transaction() as tx:
        ann = Customer("Ann", "+33 1 23 45 67 89")
        bob = Customer("Bob", "+49 30 1234567")
        # Ann holds two accounts: one Customer object shared by both.
        tx.root["accounts"] = copal.PersistentList(
            [Account(ann, 100, "+33 1 00 00 00 00"), Account(ann, 250, ""), Account(bob, 75, "+49 30 0000000")]
        )
    with db.transaction() as tx:
        for a in tx.root["accounts"]:
            print(f"v1 wrote {type(a).__name__}(owner={a.owner.name}, balance={a.balance}, fax={a.fax!r})")
    for d in db.schema()["descriptors"]:
        print(f"  stored class {d['type_name']}: fields {d['fields']}")
    db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "migration.copal"))
