"""The white paper's SerTest application on copal: store, lazy read, closure, update one.

Usage: python sertest.py [DATABASE]   (default: a new directory sertest.copal here)

Each SerTest refers to a SerCollection of 100 PSerTest. Every object is a record of its own,
so reading one SerTest's attribute reads one record, and updating one object writes one.
The counters printed after each step are the database's own (``db.stats()``).
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta

import copal

N = 10  # SerTest objects
RELATIONS = 100  # PSerTest in each one's collection
START = datetime(2010, 6, 1, 12, 0, 0)


class PSerTest(copal.Persistent):
    def __init__(self, time: datetime) -> None:
        self.time = time
        self.attribute = "value"


class SerCollection(copal.Persistent):
    def __init__(self, serial: int) -> None:
        self.id = "cValue"
        self.relations = copal.PersistentList(
            PSerTest(START + timedelta(seconds=serial, microseconds=j + 1)) for j in range(RELATIONS)
        )


class SerTest(copal.Persistent):
    def __init__(self, serial: int) -> None:
        self.time = START + timedelta(seconds=serial)
        self.attribute = "value"
        self.serial = serial
        self.reference = SerCollection(serial)


class Counters:
    """Prints what the database read and wrote since the previous step."""

    KEYS = ("records_read", "records_written", "commits")

    def __init__(self, db: copal.Database) -> None:
        self.db = db
        self.last = db.stats()

    def step(self, what: str) -> dict[str, int]:
        now = self.db.stats()
        delta = {key: now[key] - self.last[key] for key in self.KEYS}
        self.last = now
        print(f"{what:<34} " + "  ".join(f"{key}={value}" for key, value in delta.items()))
        return delta


def main(path: str) -> int:
    # 1. Store N SerTest, each with its collection of PSerTest, in one commit.
    db = copal.open(path)
    counters = Counters(db)
    with db.transaction() as tx:
        tx.root["sertests"] = copal.PersistentList(SerTest(serial) for serial in range(N))
    stored = counters.step(f"store {N} SerTest x {RELATIONS} PSerTest")
    db.close()

    # 2. Lazy read from a cold cache: one SerTest's attribute reads that object, not its graph.
    db = copal.open(path)
    counters = Counters(db)
    with db.transaction() as tx:
        one = tx.root["sertests"][5]
        print(f"  SerTest {one.serial}: attribute={one.attribute!r}, reference is {one.reference._p_status}")
    lazy = counters.step("lazy read of SerTest 5")

    # 3. Load the closure: everything reachable from that SerTest, in batches.
    with db.transaction() as tx:
        one = tx.root["sertests"][5]
        loaded = tx.load_closure([one])
        times = [p.time for p in one.reference.relations]
        print(f"  load_closure loaded {loaded} objects; {len(times)} PSerTest, last time {times[-1]}")
    closure = counters.step("closure of SerTest 5")

    # 4. Update one object: only its record is written.
    with db.transaction() as tx:
        tx.root["sertests"][5].reference.relations[42].attribute = "changed"
    update = counters.step("update one PSerTest")
    db.close()

    # 5. Check from a new open that the change is there and nothing else moved.
    db = copal.open(path)
    with db.transaction() as tx:
        changed = [
            (t.serial, j)
            for t in tx.root["sertests"]
            for j, p in enumerate(t.reference.relations)
            if p.attribute != "value"
        ]
    db.close()
    ok = (
        stored["records_written"] == 2 + N * (3 + RELATIONS)  # root, list; each SerTest, collection, its list, PSerTests
        and update["records_written"] == 1
        and lazy["records_read"] <= 4  # root (2 reads), the list, SerTest 5
        and changed == [(5, 42)]
    )
    print(f"check: changed objects {changed}: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "sertest.copal"))
