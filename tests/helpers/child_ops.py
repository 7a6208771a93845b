"""Child process operations on a copal database, for tests/test_processes.py.

Usage: child_ops.py DB_PATH OPERATION [ARGS...]

Operations:
  set_counter VALUE [NAME]  root["c"].value = VALUE; with NAME, also root[NAME].append(VALUE)
                            and tx.add(Item("from child"))
  increment N [GO_FILE]     N times db.run(+1 on root["c"]); with GO_FILE, first creates
                            GO_FILE.ready.<pid> and waits until GO_FILE exists; prints
                            "conflicts <n>" at the end
  add_items PREFIX N        tx.add(Item(PREFIX-i)) for i < N, in one transaction
  append NAME VALUE         root[NAME].append(VALUE)
  delete_items NAME         tx.delete every Item named NAME
  crash_loop                forever: root["c"].value += 1 and root["log"].append(Item) in one
                            transaction, then print the committed value (the parent kills us)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import copal
from helpers.models import Item


def wait_for_go(go_file: Path) -> None:
    Path(f"{go_file}.ready.{os.getpid()}").touch()
    deadline = time.monotonic() + 60
    while not go_file.exists():
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for the go file")
        time.sleep(0.005)


def main() -> int:
    path, op, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    db = copal.open(path)
    if op == "set_counter":
        with db.transaction() as tx:
            tx.root["c"].value = int(args[0])
            if len(args) > 1:
                tx.root[args[1]].append(int(args[0]))
                tx.add(Item("from child"))
    elif op == "increment":
        if len(args) > 1:
            wait_for_go(Path(args[1]))

        def increment(tx: Any) -> None:
            tx.root["c"].value += 1

        for _ in range(int(args[0])):
            db.run(increment, retries=100_000)
        print("conflicts", db.stats()["conflicts"], flush=True)
    elif op == "add_items":
        with db.transaction() as tx:
            for i in range(int(args[1])):
                tx.add(Item(f"{args[0]}-{i}", i))
    elif op == "append":
        with db.transaction() as tx:
            tx.root[args[0]].append(args[1])
    elif op == "delete_items":
        with db.transaction() as tx:
            for item in tx.query(Item).where(name=args[0]):
                tx.delete(item)
    elif op == "crash_loop":
        print("ready", flush=True)
        while True:
            with db.transaction() as tx:
                counter = tx.root["c"]
                counter.value += 1
                value = counter.value
                # Payloads of varying size make commits span one or several pages.
                tx.root["log"].append(Item(f"n{value}", value, payload=bytes([value % 256]) * (value * 37 % 5000)))
            print(value, flush=True)
    else:
        raise SystemExit(f"unknown operation {op}")
    db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
