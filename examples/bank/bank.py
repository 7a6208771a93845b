"""A bank: worker processes transfer money between accounts concurrently on one database.

Usage: python bank.py [LOCATION] [--workers 4] [--transfers 50]

LOCATION is a directory (default: bank.copal here, created afresh) or a PostgreSQL URL
(postgresql://user@host/dbname, an empty database). The workers are separate processes that
share nothing but the database. Two transfers that touch the same account at the same time
conflict: the second commit raises ConflictError, writes nothing, and the worker retries with
fresh balances. At the end the total must be what it was: the program exits 1 if not.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import copal

ACCOUNTS = 5  # few accounts, so that concurrent transfers often touch the same one
OPENING_BALANCE = 1_000
MAX_RETRIES = 1_000  # per transfer: a bound, so that a bug cannot make a worker loop forever


class Account(copal.Persistent):
    # Pinned type name: the class lives in the script run as __main__, whatever its file name.
    __copal_type__ = "bank.Account"

    def __init__(self, number: int, balance: int) -> None:
        self.number = number
        self.balance = balance


class Tally(copal.Persistent):
    """What one worker has done: one object per worker, so that the tallies never conflict."""

    __copal_type__ = "bank.Tally"

    def __init__(self) -> None:
        self.transfers = 0


def transfer(db: copal.Database, rng: random.Random, worker: int) -> int:
    """Moves a random amount between two random accounts; returns how many retries it took."""
    source, target = rng.sample(range(ACCOUNTS), 2)
    amount = rng.randint(1, 50)
    retries = 0
    while True:
        try:
            with db.transaction() as tx:
                accounts = tx.root["accounts"]
                accounts[source].balance -= amount
                time.sleep(0.002)  # think time: other workers commit meanwhile
                accounts[target].balance += amount
                tx.root["tallies"][worker].transfers += 1
            return retries
        except copal.ConflictError:
            # Nothing was written; the next transaction sees the other worker's commit.
            retries += 1
            if retries > MAX_RETRIES:
                raise


def worker(location: str, number: int, transfers: int) -> None:
    db = copal.open(location)
    rng = random.Random(number)
    retries = sum(transfer(db, rng, number) for _ in range(transfers))
    conflicts = db.stats()["conflicts"]  # the database's own count of failed commits
    db.close()
    print(json.dumps({"worker": number, "transfers": transfers, "retries": retries, "conflicts": conflicts}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("location", nargs="?", default="bank.copal")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--transfers", type=int, default=50, help="transfers per worker")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # set in the child processes
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.location, args.worker, args.transfers)
        return 0

    if not args.location.startswith(("postgresql://", "postgres://")):
        shutil.rmtree(args.location, ignore_errors=True)
    db = copal.open(args.location)
    with db.transaction() as tx:
        tx.root["accounts"] = copal.PersistentList(Account(n, OPENING_BALANCE) for n in range(ACCOUNTS))
        tx.root["tallies"] = copal.PersistentList(Tally() for _ in range(args.workers))
    expected = ACCOUNTS * OPENING_BALANCE
    print(f"{ACCOUNTS} accounts, total {expected}; {args.workers} workers x {args.transfers} transfers")

    # Fresh interpreters, started after the setup commit; none inherits an open database.
    command = [sys.executable, str(Path(__file__).resolve()), args.location, "--transfers", str(args.transfers)]
    children = [subprocess.Popen([*command, "--worker", str(n)], stdout=subprocess.PIPE, text=True) for n in range(args.workers)]
    retries = conflicts = 0
    for child in children:
        out, _ = child.communicate()
        if child.returncode != 0:
            print(f"a worker failed with exit code {child.returncode}")
            return 1
        report = json.loads(out.splitlines()[-1])
        retries += report["retries"]
        conflicts += report["conflicts"]
        print(f"worker {report['worker']}: {report['transfers']} transfers, {report['retries']} conflict retries")

    with db.transaction() as tx:
        balances = [a.balance for a in tx.root["accounts"]]
        done = sum(t.transfers for t in tx.root["tallies"])
    db.close()
    total = sum(balances)
    ok = total == expected and done == args.workers * args.transfers and retries == conflicts
    print(f"balances {balances}")
    print(f"{done} transfers committed, {retries} conflict retries ({conflicts} conflicts counted by db.stats())")
    print(f"check: total {total}, expected {expected}: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
