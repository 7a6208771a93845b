"""A writer for tests/test_gc.py: makes objects unreachable and reachable again while a garbage
collection runs in another process.

Usage: gc_churn.py DB_PATH SECONDS GO_FILE

Creates GO_FILE.ready.<pid>, waits for GO_FILE, then until SECONDS have passed commits transactions
that each append a new Item to root["live"], move one live Item out of every root (keeping the
Python object) and link back one Item it moved out earlier. A link back whose Item was
collected meanwhile fails with ConflictError: the transaction is counted and not retried.
Prints "commits N relinked N refused N" at the end.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import copal
from copal import ConflictError
from helpers.child_ops import wait_for_go
from helpers.models import Item


def main() -> int:
    path, seconds, go_file = sys.argv[1], float(sys.argv[2]), Path(sys.argv[3])
    wait_for_go(go_file)
    db = copal.open(path)
    rng = random.Random(7)
    moved_out: list[Item] = []
    commits = relinked = refused = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        relink = moved_out.pop(0) if moved_out and rng.random() < 0.5 else None
        try:
            with db.transaction() as tx:
                live = tx.root["live"]
                live.append(Item(f"new-{commits}", commits))
                dropped = live.pop(rng.randrange(len(live) - 1))
                if relink is not None:
                    live.append(relink)
        except ConflictError:
            refused += 1
            continue
        commits += 1
        relinked += relink is not None
        moved_out.append(dropped)
    db.close()
    print(f"commits {commits} relinked {relinked} refused {refused}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
