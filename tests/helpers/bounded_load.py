"""Loads a stream or document, or imports an export, under a memory limit, and prints what
happened on one line: ``loaded``/``imported``, or the error's class and message.

Usage: bounded_load.py as|data MIB loads|import PATH MAX_SIZE

``as`` limits the address space (RLIMIT_AS), ``data`` the process's private memory
(RLIMIT_DATA, which a database's memory map does not count against).
"""

from __future__ import annotations

import resource
import sys
import tempfile
from pathlib import Path

kind, mib, mode, path, max_size = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
limit = resource.RLIMIT_AS if kind == "as" else resource.RLIMIT_DATA
resource.setrlimit(limit, (mib << 20, mib << 20))

import copal  # noqa: E402  (imported under the limit, as an application would be)

try:
    if mode == "loads":
        copal.loads(Path(path).read_bytes(), max_size=max_size)
        print("loaded")
    else:
        with tempfile.TemporaryDirectory() as directory, copal.open(Path(directory) / "db") as db:
            if max_size == copal.serialize.DEFAULT_MAX_SIZE:
                db.import_from(path)
            else:
                db.import_from(path, max_size=max_size)
            print("imported")
except (copal.CopalError, MemoryError) as e:
    print(f"{type(e).__name__}: {e}")
