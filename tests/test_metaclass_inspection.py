"""Reading a stream runs no code of the classes it names, their metaclasses included:
docs/explanation/safety.md. The metaclass ``Watched`` records what is looked up on its classes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import copal
from helpers.models import Watched, WatchedPlain, WatchedSlots

HERE = Path(__file__).parent

LOADS_IN_A_FRESH_PROCESS = """
import sys
import copal
from helpers.models import Watched, WatchedPlain, WatchedSlots
data = sys.stdin.buffer.read()
Watched.armed = True
loaded = copal.loads(data)
Watched.armed = False
assert [type(v).__name__ for v in loaded] == ["WatchedPlain", "WatchedSlots"], loaded
assert loaded[0].x == 1 and loaded[1].y == 2
print(",".join(Watched.looked_up))
"""


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh-process", "classes-seen-before"])
def test_loads_looks_nothing_up_through_a_metaclass(fresh: bool) -> None:
    """Whether copal meets the classes for the first time in the process (their MRO, namespaces,
    slots, `__new__` and names are inspected) or has seen them before, no lookup goes through
    the metaclass's `__getattribute__`."""
    data = copal.dumps([WatchedPlain(1), WatchedSlots(2)])
    if fresh:
        result = subprocess.run(
            [sys.executable, "-c", LOADS_IN_A_FRESH_PROCESS], input=data, capture_output=True, cwd=HERE, timeout=60
        )
        assert result.returncode == 0, result.stderr.decode()
        assert result.stdout.decode().strip() == ""
    else:
        Watched.looked_up.clear()
        Watched.armed = True
        try:
            loaded = copal.loads(data)
        finally:
            Watched.armed = False
        assert (loaded[0].x, loaded[1].y) == (1, 2)
        assert Watched.looked_up == []
