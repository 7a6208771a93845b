"""Child process of tests/test_memory_errors.py: the first call of the process to `copal.loads`
or `copal.dumps` in one format, with its n-th allocation failing for n = 0, 1, ... until a call
succeeds. In a fresh interpreter the call first fills what the binding makes once per process
(imported classes, the datetime C API, interned names), which a warmed-up test process never
makes again; none of it may panic.

Usage: memory_first_use.py loads|dumps copal|json|xml. Prints the outcomes as JSON, or the
first other exception and exits with status 1.
"""

from __future__ import annotations

import json
import sys

import _testcapi

import copal
from test_memory_errors import _representative


def main(what: str, text_format: str) -> int:
    value = _representative()
    del value["strs"]  # JSON and XML have no lone surrogates
    if what == "loads":
        data = copal.dumps(value, format=text_format)
        call = lambda: copal.loads(data)  # noqa: E731
    else:
        call = lambda: copal.dumps(value, format=text_format)  # noqa: E731
    outcomes: dict[str, int] = {}
    n = 0
    while True:
        _testcapi.set_nomemory(n, n + 1)
        try:
            call()
            outcome = "value"
        except MemoryError:
            outcome = "MemoryError"
        except BaseException as error:  # noqa: BLE001 - reported to the test
            _testcapi.remove_mem_hooks()
            print(f"allocation {n} failing raised {error!r}")
            return 1
        finally:
            _testcapi.remove_mem_hooks()
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if outcome == "value":
            print(json.dumps(outcomes))
            return 0
        n += 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
