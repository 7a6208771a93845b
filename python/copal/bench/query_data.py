"""The query benchmark's queries and data (:mod:`copal.bench.queries` runs the suite).

:data:`QUERIES` lists what the suite measures. The data is deterministic: person number ``i``
of ``n`` is a pure function of both (:func:`person_row`), and the parameters of each query in
each round are drawn from a fixed seed (:func:`query_params`), so every system stores the same
people and answers the same queries.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator

#: People per commit while loading.
LOAD_BATCH = 50_000
#: How many people share a name on average (Q3's expected number of matches).
NAME_MULTIPLICITY = 5
SEED = 20261122
#: Bumped whenever the generated data changes (kept stores carry it).
DATA_VERSION = 1


@dataclass(frozen=True)
class QuerySpec:
    """One query of the suite.

    Attributes:
        id: ``"Q1"`` ... ``"Q4b"``.
        title: the row label of the result table.
        method: the adapter method that runs one query (it takes the parameter).
        per_round: how many queries a round runs, as a function of ``--lookups``.
        indexed: whether the predicate has an index (for the targets).
        scan: whether it reads the whole extent (rate in records/s).
        against_sqlite: whether "copal at least as fast as SQLite" covers it (not the object
            iteration that projections are measured against).
    """

    id: str
    title: str
    method: str
    per_round: Callable[[int], int]
    indexed: bool
    scan: bool
    against_sqlite: bool = True


QUERIES: tuple[QuerySpec, ...] = (
    QuerySpec("Q1", "Q1 find one by unique index (email == e)", "q1",
              lambda lookups: lookups, True, False),
    QuerySpec("Q2", "Q2 indexed range, order, limit (age >= a by age, first 10)", "q2",
              lambda lookups: max(1, lookups // 5), True, False),
    QuerySpec("Q3", "Q3 unindexed scan (name == n, ~5 matches)", "q3",
              lambda lookups: 1, False, True),
    QuerySpec("Q4a", "Q4a count, indexed (a <= age <= a+9, ~14% of N)", "q4a",
              lambda lookups: max(1, lookups // 1000), True, False),
    QuerySpec("Q4b", "Q4b count, unindexed scan (city == c, ~1% of N)", "q4b",
              lambda lookups: 1, False, True),
    QuerySpec("Q5", "Q5 two fields of everyone (projection: name, age)", "q5",
              lambda lookups: 1, False, True),
    QuerySpec("Q5o", "Q5o the same, read from every object", "q5o",
              lambda lookups: 1, False, True, against_sqlite=False),
    QuerySpec("Q6a", "Q6a count per city (group by)", "q6a",
              lambda lookups: 1, False, True),
    QuerySpec("Q6b", "Q6b sum of ages", "q6b",
              lambda lookups: 1, False, True),
    QuerySpec("Q7", "Q7 three columns of everyone into an Arrow table (name, age, city)", "q7",
              lambda lookups: 1, False, True),
    QuerySpec("Q8", "Q8 reverse join: zip codes of the addresses of people aged a..a+4 (~7% of N)", "q8",
              lambda lookups: max(1, lookups // 1000), True, False),
)
QUERIES_BY_ID = {q.id: q for q in QUERIES}

_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64 of ``x``: a well-spread 64-bit hash (deterministic, no global state)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


_SYLLABLES = (
    "ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "da", "fe", "go", "ha", "ji", "ko", "le",
    "ma", "no", "pa", "ri", "se", "ta", "ul", "va", "we", "xa", "yo", "ze", "bi", "ce", "du",
    "en", "or",
)


def _word(k: int, syllables: int) -> str:
    parts = []
    for _ in range(syllables):
        parts.append(_SYLLABLES[k % 32])
        k //= 32
    return "".join(parts).capitalize()


FIRST_NAMES = tuple(_word(k, 2) + ("a" if k >= 1024 else "") for k in range(256))
LAST_NAMES = tuple(_word(k, 3) for k in range(1024))
CITIES = tuple(_word(k * 37 + 5, 3) + " City" for k in range(100))
STREETS = tuple(_word(k * 11 + 3, 2) for k in range(64))
MIN_AGE, MAX_AGE = 18, 89

Row = tuple[str, str, int, str, str, str]


def person_row(i: int, n: int) -> Row:
    """Person number ``i`` of ``n``: (name, email, age, city, street, zip_code).

    Names are drawn from ``n // 5`` first+last combinations, so a name matches about 5 people
    at any scale; emails are unique; ages are 18..89, cities one of 100.
    """
    h = _mix(SEED * 1_000_003 + i)
    groups = max(1, n // NAME_MULTIPLICITY)
    k = h % groups
    first = FIRST_NAMES[k % 256]
    last = LAST_NAMES[(k // 256) % 1024]
    h2 = _mix(h)
    age = MIN_AGE + h2 % (MAX_AGE - MIN_AGE + 1)
    city = CITIES[(h2 >> 8) % 100]
    street = f"{(h2 >> 16) % 9999 + 1} {STREETS[(h2 >> 32) % 64]} Street"
    zip_code = f"{(h2 >> 40) % 100000:05d}"
    email = f"{first}.{last}.{i}@example.com".lower()
    return (f"{first} {last}", email, age, city, street, zip_code)


def param_rng(query_id: str, round_no: int) -> random.Random:
    """The random numbers of a query's parameters in one round (0 is the warm-up)."""
    return random.Random(f"{SEED}:{query_id}:{round_no}")


def query_params(query_id: str, round_no: int, count: int, n: int) -> list[Any]:
    """The parameters of ``count`` queries ``query_id`` in round ``round_no``."""
    rng = param_rng(query_id, round_no)
    if query_id == "Q1":
        return [person_row(rng.randrange(n), n)[1] for _ in range(count)]
    if query_id == "Q2":
        return [rng.randint(MIN_AGE, MAX_AGE) for _ in range(count)]
    if query_id == "Q3":
        return [person_row(rng.randrange(n), n)[0] for _ in range(count)]
    if query_id == "Q4a":
        return [rng.randint(MIN_AGE, MAX_AGE - 9) for _ in range(count)]
    if query_id == "Q8":
        return [rng.randint(MIN_AGE, MAX_AGE - 4) for _ in range(count)]
    if query_id == "Q4b":
        return [CITIES[rng.randrange(len(CITIES))] for _ in range(count)]
    if query_id in QUERIES_BY_ID:
        return [None] * count  # over everyone: no parameter
    raise KeyError(query_id)


def batches(n: int) -> Iterator[range]:
    """The people of each commit while loading: ranges of :data:`LOAD_BATCH` numbers."""
    for start in range(0, n, LOAD_BATCH):
        yield range(start, min(n, start + LOAD_BATCH))
