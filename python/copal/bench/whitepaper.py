"""The white-paper workloads and the worker that runs one of them.

The data is deterministic: no clock and no random numbers are involved, so
every run of every system stores byte-for-byte the same logical graph.

- ``SerTest`` number ``serial`` (0 <= serial < N) has ``time`` =
  :func:`sertest_time` (serial) and ``attribute`` = ``"value"``;
- in the nested experiments its ``reference`` is a ``SerCollection`` with
  ``id`` = ``"cValue"`` and ``relations`` = 100 ``PSerTest`` whose times are
  :func:`psertest_time` (serial, j), j = 0..99 (W4 appends j = 100..199).

Workloads, in the order they run within one repetition:

====  ===================  =================================================
W1    store-flat           N flat SerTest, one commit
W2    read-flat            retrieve the N, touch ``.attribute``
W3a   store-nested         N SerTest x 100 PSerTest, one commit
W3b   read-nested-lazy     retrieve the N, touch ``SerTest.attribute`` only
W3c   read-nested-closure  retrieve the N, touch every PSerTest
W5    update-one           find serial == 500 from a cold open, change, commit
W4    update-all           change every SerTest and append 100 new PSerTest
                           to each collection, one commit
====  ===================  =================================================

W1/W2 use one store; W3a, W3b, W3c, W5 and W4 share another (W5 runs on the
W3a state, W4 on the W5 state, as in the reference measurements).

Each operation runs in a fresh worker process (cold object cache, GC on),
started by :mod:`copal.bench.runner` with a JSON spec; the worker times
open + work + commit + close and prints its report (:mod:`copal.bench.workers`).
"""

from __future__ import annotations

import resource
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from copal.bench.workers import run_and_report

#: Number of PSerTest in each SerCollection (and appended to it by W4).
RELATIONS_PER_COLLECTION = 100

#: The serial W5 updates (the white paper's "five hundredth instance").
TARGET_SERIAL = 500

_BASE_TIME = datetime(2010, 6, 1, 12, 0, 0)


def sertest_time(serial: int) -> datetime:
    """The deterministic ``time`` of SerTest number ``serial``."""
    return _BASE_TIME + timedelta(seconds=serial)


# The offsets of the PSerTest times from their SerTest's, built once: object
# creation is inside the timed work, so it should cost no more than a clock read.
_STEPS = tuple(timedelta(microseconds=j + 1) for j in range(2 * RELATIONS_PER_COLLECTION))


def psertest_time(serial: int, j: int) -> datetime:
    """The deterministic ``time`` of the ``j``-th PSerTest of SerTest ``serial``."""
    step = _STEPS[j] if j < len(_STEPS) else timedelta(microseconds=j + 1)
    return sertest_time(serial) + step


def collection_times(serial: int) -> list[datetime]:
    """The times of the 100 PSerTest a new SerCollection of SerTest ``serial`` holds."""
    base = sertest_time(serial)
    return [base + step for step in _STEPS[:RELATIONS_PER_COLLECTION]]


def target_serial(n: int) -> int:
    """The serial W5 updates: 500, or the middle one when N <= 500."""
    return TARGET_SERIAL if n > TARGET_SERIAL else n // 2


@dataclass(frozen=True)
class Workload:
    """One white-paper operation.

    Attributes:
        id: short id as in the reference tables (``"W3c"``).
        name: slug (``"read-nested-closure"``).
        title: the row label of the result table.
        method: the name of the adapter method that runs it
            (see :class:`copal.bench.systems.System`).
        store: which of the two stores it works on, ``"flat"`` or ``"nested"``.
        needs: the workload whose resulting state it needs, if any.
    """

    id: str
    name: str
    title: str
    method: str
    store: str
    needs: str | None


WORKLOADS: tuple[Workload, ...] = (
    Workload("W1", "store-flat", "W1 store-flat (N flat SerTest, 1 commit)",
             "store_flat", "flat", None),
    Workload("W2", "read-flat", "W2 read-flat (retrieve N, touch .attribute)",
             "read_flat", "flat", "W1"),
    Workload("W3a", "store-nested", "W3a store-nested (N SerTest x 100 PSerTest, 1 commit)",
             "store_nested", "nested", None),
    Workload("W3b", "read-nested-lazy", "W3b read-nested-lazy (touch SerTest.attribute only)",
             "read_nested_lazy", "nested", "W3a"),
    Workload("W3c", "read-nested-closure", "W3c read-nested-closure (touch every PSerTest)",
             "read_nested_closure", "nested", "W3a"),
    Workload("W5", "update-one", "W5 update-one (serial==500, from cold open)",
             "update_one", "nested", "W3a"),
    Workload("W4", "update-all", "W4 update-all (attr + 100 new PSerTest each, 1 commit)",
             "update_all", "nested", "W3a"),
)

WORKLOADS_BY_ID: dict[str, Workload] = {w.id: w for w in WORKLOADS}


def peak_rss_kb() -> int:
    """Peak resident set size of this process in KiB.

    Linux's ``ru_maxrss`` is not reset by ``execve``: a worker would inherit
    the peak of the runner that spawned it.  ``VmHWM`` in /proc/self/status
    belongs to the worker's own address space, so it is used where it exists.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss // 1024 if sys.platform == "darwin" else maxrss


def worker_main(spec: dict[str, Any]) -> int:
    """Run one workload of one system as described by ``spec`` and print its result.

    ``spec`` keys: ``system``, ``workload`` (an id), ``dir`` (the local
    directory of the store), ``key`` (a name unique to this store, for
    remote stores), ``scale``, ``target`` (the W5 serial), ``store`` (the
    ``--store`` option or None).  Prints the report
    (:func:`copal.bench.workers.run_and_report`) with
    ``seconds``, ``objects_loaded``, ``rss_kb`` (peak RSS of this process,
    see :func:`peak_rss_kb`), ``ru_maxrss`` (as reported by getrusage) and
    ``info``; returns the exit status.
    """
    from copal.bench.systems import SYSTEMS

    def work() -> dict[str, Any]:
        adapter = SYSTEMS[spec["system"]](store=spec.get("store"))
        workload = WORKLOADS_BY_ID[spec["workload"]]
        run = getattr(adapter, workload.method)
        result = run(spec["dir"], spec["key"], int(spec["scale"]), int(spec["target"]))
        return {
            "ok": True,
            "seconds": result.seconds,
            "objects_loaded": result.objects_loaded,
            "rss_kb": peak_rss_kb(),
            "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "info": result.info,
        }

    return run_and_report(work)
