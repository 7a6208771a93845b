"""Shared fixtures for the copal test suite.

The tests directory is put on ``sys.path`` so that ``helpers.models`` is importable under the
same name by the tests and by the child processes (copal stores classes by module name).

Every test that uses the ``store`` (or ``db``) fixture runs against both stores: the embedded
LMDB store in a temporary directory, and a fresh database on a throwaway PostgreSQL cluster that
is started once per session (``helpers/pgserver.py``) and stopped at its end.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

import copal  # noqa: E402
from helpers.pgserver import PgServer, start_server  # noqa: E402

STORES = ["lmdb", "postgresql"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak",
        action="store_true",
        help="run the fuzzing and concurrency tests at their long sizes (a nightly run) instead "
        "of the sizes that keep the suite within its time budget",
    )


@pytest.fixture
def soak(request: pytest.FixtureRequest) -> bool:
    """Whether the run asked for the long sizes (``--soak``)."""
    return bool(request.config.getoption("--soak"))


class Store:
    """Opens copal databases on one location (a directory or a PostgreSQL URL) and closes
    whatever is still open at teardown."""

    def __init__(self, path: Path | str, kind: str = "lmdb") -> None:
        self.path = path
        self.kind = kind
        self._open: list[Any] = []

    def open(self, **options: Any) -> Any:
        if self.kind == "postgresql":
            # The size of LMDB's map has no meaning for a PostgreSQL database (and is refused).
            options.pop("map_size", None)
        db = copal.open(str(self.path), **options)
        self._open.append(db)
        return db

    def close(self, db: Any) -> None:
        self._open.remove(db)
        db.close()

    def reopen(self, db: Any, **options: Any) -> Any:
        """Closes ``db`` and opens a fresh Database object (with an empty cache) on the path."""
        self.close(db)
        return self.open(**options)

    def close_all(self) -> None:
        """Closes every database still open, then reports the first failure.

        A Rust panic arrives as ``pyo3_runtime.PanicException``, a BaseException that pytest's
        teardown does not catch: it would skip the remaining finalizers and leave ``tmp_path``
        cached, so that the next test silently reuses this test's database. Re-raise it as an
        ordinary error after every database is closed.
        """
        failures: list[BaseException] = []
        while self._open:
            try:
                self._open.pop().close()
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as error:  # noqa: BLE001
                failures.append(error)
        if failures:
            raise RuntimeError(f"closing a database failed: {failures[0]!r}") from failures[0]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The session's PostgreSQL cluster; its URL is also exported as COPAL_TEST_POSTGRES_URL
    for the Rust integration tests run from this session."""
    try:
        server = start_server()
    except FileNotFoundError as error:
        pytest.skip(f"PostgreSQL is not installed: {error}")
    os.environ["COPAL_TEST_POSTGRES_URL"] = server.url()
    yield server
    os.environ.pop("COPAL_TEST_POSTGRES_URL", None)
    server.destroy()


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "lmdb":
        s = Store(tmp_path / "db")
    else:
        server: PgServer = request.getfixturevalue("pg_server")
        s = Store(server.create_database(), "postgresql")
    yield s
    s.close_all()


@pytest.fixture
def db(store: Store) -> Any:
    return store.open()
