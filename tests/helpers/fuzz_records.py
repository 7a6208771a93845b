"""Child process: mutates stored records at random and checks that loading them either works or
raises CorruptRecordError (or SchemaError, see below).

Usage: fuzz_records.py DB_PATH SEED ITERATIONS. Prints one line per unexpected outcome and a
last line starting with "ok" (all outcomes acceptable) or "FAILED". Runs in its own process so
that a crash of the decoder shows up as this process dying, not as the test run dying.
"""

from __future__ import annotations

import random
import sys
import traceback
from collections import Counter
from typing import Any

import copal
from copal import CorruptRecordError, Persistent, SchemaError

import helpers.models  # noqa: F401  (copal resolves stored type names among imported classes)


def walk(value: Any, seen: set[int], depth: int = 0) -> None:
    """Touches every value of a decoded state (without loading referenced persistent objects)."""
    if depth > 50 or id(value) in seen or isinstance(value, Persistent):
        return
    seen.add(id(value))
    repr(type(value))
    if isinstance(value, dict):
        for k, v in list(value.items()):
            walk(k, seen, depth + 1)
            walk(v, seen, depth + 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in list(value):
            walk(v, seen, depth + 1)
    if hasattr(value, "__dict__") and not isinstance(value, type):
        for v in list(vars(value).values()):
            walk(v, seen, depth + 1)


def mutate(raw: bytes, rng: random.Random) -> bytes:
    data = bytearray(raw)
    kind = rng.randrange(5)
    if kind == 0 and data:  # flip bits of one to three bytes
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == 1 and data:  # replace one byte with an extreme value
        data[rng.randrange(len(data))] = rng.choice([0x00, 0x7F, 0x80, 0xFF])
    elif kind == 2:  # truncate
        del data[rng.randrange(len(data) + 1):]
    elif kind == 3:  # insert bytes
        pos = rng.randrange(len(data) + 1)
        data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
    else:  # delete a range
        if data:
            start = rng.randrange(len(data))
            del data[start:start + rng.randint(1, 8)]
    return bytes(data)


def main() -> int:
    path, seed, iterations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    db = copal.open(path)
    with db.transaction() as tx:
        oids = [tx.root[name]._p_oid for name in sorted(tx.root.keys())]
    originals = {oid: db._debug_raw_record(oid) for oid in oids}
    outcomes: Counter[str] = Counter()
    failures = 0
    for i in range(iterations):
        oid = rng.choice(oids)
        bad = mutate(originals[oid], rng)
        db._debug_put_raw_record(oid, bad)
        db.close()
        db = copal.open(path)
        try:
            with db.transaction() as tx:
                obj = tx.get(oid)
                walk(obj.__dict__, set())
            outcomes["loaded"] += 1
        except CorruptRecordError:
            outcomes["CorruptRecordError"] += 1
        except SchemaError:
            # A flipped descriptor id can make a record name a class that exists but does not
            # fit (an Item where an Enum was stored): indistinguishable from a changed class.
            outcomes["SchemaError"] += 1
        except BaseException as error:  # noqa: BLE001 (a panic is a BaseException)
            failures += 1
            outcomes[type(error).__name__] += 1
            print(f"iteration {i}: oid {oid} record {bad.hex()} (original {originals[oid].hex()})"
                  f" raised {type(error).__name__}: {error}")
            traceback.print_exc(file=sys.stdout)
        db._debug_put_raw_record(oid, originals[oid])
    db.close()
    print(("FAILED " if failures else "ok ") + repr(dict(outcomes)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
