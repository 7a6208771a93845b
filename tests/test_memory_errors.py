"""Running out of memory while decoding or encoding is a MemoryError, never corrupt data, a
panic or an unraisable warning.

Each test fails one allocation at a time with ``_testcapi.set_nomemory(n, n + 1)``, the technique
of CPython's own tests (Lib/test/test_capi), for every allocation of the call: the call must
either return the right value or raise MemoryError."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import io
import json
import sys
import traceback
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest

import copal

from helpers.models import Holder, Item, Tagged, TaggedDict, TaggedSet, TaggedTuple
from helpers.procs import run_helper

_testcapi = pytest.importorskip("_testcapi")

#: Calls in a row that succeed after which every allocation of the call has been failed once.
QUIET_RUN = 100

#: CPython 3.12 and 3.13 free a code object once too often when the function object that
#: MAKE_FUNCTION makes cannot be allocated (python/cpython#122752), and crash later: the sweeps
#: that run copal's own Python code (a generator expression is a function) cannot run there.
sweeps_python_code = pytest.mark.skipif(
    sys.implementation.name == "cpython" and sys.version_info[:2] in ((3, 12), (3, 13)),
    reason="python/cpython#122752: a failed MAKE_FUNCTION frees its code object twice",
)


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    label: str


class Plain:
    def __init__(self) -> None:
        self.items = [1, 2**70]
        self.text = "plain é"


def _representative() -> dict[str, Any]:
    shared = [10**30, "shared text"]
    return {
        "ints": [0, 1, 300, -7, 2**40, 2**100, -(2**70)] + [5] * 20,
        "strs": ["abc", "abc", "é", "x" * 40, "日本", "", "\udc80"] + ["repeated"] * 20,
        # A tuple longer than CPython keeps free lists for: decoding it allocates.
        "nested": [(1, 2, frozenset({3})), tuple(range(30)), {4, 5}, {"k": [b"bytes", bytearray(b"ba")]}],
        "points": [Point(i, f"p{i}") for i in range(3)],
        "plain": Plain(),
        "shared": (shared, shared),
        "numbers": [1.5, complex(1, 2), decimal.Decimal("1.25")],
        "times": [datetime.datetime(2024, 5, 1, 12, tzinfo=datetime.timezone.utc), datetime.date(2024, 5, 1), datetime.timedelta(3)],
        "other": [uuid.UUID(int=7), Colour.RED, None, True],
    }


def _dropped_transaction(unraisable: Any) -> bool:
    """Whether `unraisable` is the ResourceWarning of a transaction dropped before its end."""
    return isinstance(unraisable.exc_value, ResourceWarning) and "copal transaction was dropped" in str(unraisable.exc_value)


def _each_allocation_failing(
    call: Callable[[], Any], check: Callable[[Any], None], before_each: Callable[[], None] | None = None
) -> Counter[str]:
    """Calls `call` with its n-th allocation failing, for n = 0, 1, ... until QUIET_RUN calls in a
    row succeed; `check` checks each value returned. Returns how the calls ended.
    `before_each` runs before each call, with nothing failing (a new handle to read through).

    One call runs first with nothing failing: what a process makes once (interned names, the
    types imported for decoding) is then made, and each failing allocation is one of the call's
    own. (Those first allocations raise MemoryError too, but a sweep cannot reach them all:
    each call that fails after one of them keeps it, and moves the next ones.)"""
    if before_each is not None:
        before_each()
    check(call())
    unraisable: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    outcomes: Counter[str] = Counter()
    try:
        n, quiet = 0, 0
        while quiet < QUIET_RUN:
            if before_each is not None:
                before_each()
            _testcapi.set_nomemory(n, n + 1)
            try:
                result = call()
            except MemoryError:
                result = MemoryError
            except BaseException as error:
                raise AssertionError(f"allocation {n} failing raised {error!r}") from error
            finally:
                _testcapi.remove_mem_hooks()
            if result is MemoryError:
                outcomes["MemoryError"] += 1
                quiet = 0
            else:
                check(result)
                outcomes["value"] += 1
                quiet += 1
            # A `with db.transaction()` that fails to enter (its allocation failing) drops its
            # transaction unended: it is aborted, with a ResourceWarning, as it must be.
            unraisable[:] = [u for u in unraisable if not _dropped_transaction(u)]
            assert not unraisable, (
                f"allocation {n} failing printed {unraisable[0].exc_value!r} as unraisable, from\n"
                + "".join(traceback.format_tb(unraisable[0].exc_traceback))
            )
            # Freed here, not while the next call's allocation fails: CPython 3.13 allocates to
            # free an instance whose dict was made (the checks encode the value) and reports
            # that failure as unraisable.
            result = None
            n += 1
    finally:
        sys.unraisablehook = hook
    assert outcomes["MemoryError"] > 0
    return outcomes


def _check_decoded(expected: bytes) -> Callable[[Any], None]:
    """A check that a decoded value is the one encoded as `expected` (encoding it again gives the
    same bytes: values, types and shared objects)."""

    def check(value: Any) -> None:
        assert copal.dumps(value) == expected

    return check


def _check_equal(expected: Any) -> Callable[[Any], None]:
    """A check that a call wrote or returned exactly `expected`."""

    def check(written: Any) -> None:
        assert written == expected

    return check


def test_loads_raises_memory_error_or_returns_the_value() -> None:
    data = copal.dumps(_representative())
    _each_allocation_failing(lambda: copal.loads(data), _check_decoded(data))


def test_loads_of_a_version_1_body_raises_memory_error_or_returns_the_value() -> None:
    # A JSON document is decoded through a version 1 body: no shared strings, a string cache.
    value = _representative()
    del value["strs"]  # JSON has no lone surrogates
    document = copal.dumps(value, format="json")
    _each_allocation_failing(lambda: copal.loads(document), _check_decoded(copal.dumps(copal.loads(document))))


@pytest.mark.parametrize("compress", ["zstd", "gzip"])
def test_loads_of_compressed_data_raises_memory_error_or_returns_the_value(compress: str) -> None:
    # gzip is inflated by zlib's objects: a MemoryError there was reported as damaged data.
    value = _representative()
    data = copal.dumps(value, compress=compress)
    _each_allocation_failing(lambda: copal.loads(data), _check_decoded(copal.dumps(value)))


def test_load_raises_memory_error_or_returns_the_value() -> None:
    data = copal.dumps(_representative())
    _each_allocation_failing(lambda: copal.load(io.BytesIO(data)), _check_decoded(data))


def test_archive_items_raise_memory_error_or_return_the_value() -> None:
    value = _representative()
    archive = copal.Archive(copal.pack_many([1, value, "last"]))
    _each_allocation_failing(lambda: archive[1], _check_decoded(copal.dumps(value)))


@sweeps_python_code
def test_records_read_by_a_connection_raise_memory_error_or_return_the_value(tmp_path: Path) -> None:
    value = _representative()
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["holder"] = Holder(value=value)
    expected = copal.dumps(value)

    def read() -> Any:
        with db.transaction() as tx:
            return tx.root["holder"].value

    try:
        _each_allocation_failing(read, _check_decoded(expected))
    finally:
        db.close()


@sweeps_python_code
def test_a_class_first_checked_while_memory_runs_out_is_not_taken_for_broken(tmp_path: Path) -> None:
    # Each read is the first of a new handle, which checks the stored classes again (whether
    # rebuilding them could run code); a check that ran out of memory raises, and is not kept
    # as "the class is not plain" (its objects then loaded as BrokenObject).
    value = [Point(1, "a"), Plain(), Point(2, "b")]
    with copal.open(tmp_path / "db") as db, db.transaction() as tx:
        tx.root["holder"] = Holder(value=value)
    expected = copal.dumps(value)
    readers: list[copal.Database] = []

    def new_reader() -> None:
        while readers:
            readers.pop().close()
        readers.append(copal.open(tmp_path / "db"))

    def read() -> Any:
        with readers[0].transaction() as tx:
            return tx.root["holder"].value

    try:
        _each_allocation_failing(read, _check_decoded(expected), before_each=new_reader)
    finally:
        for reader in readers:
            reader.close()


@sweeps_python_code
def test_queries_raise_memory_error_or_return_the_objects(tmp_path: Path) -> None:
    with copal.open(tmp_path / "db") as db, db.transaction() as tx:
        tx.root["items"] = [Item(f"i{k}", value=k) for k in range(6)]
    db = copal.open(tmp_path / "db")

    def query() -> list[str]:
        with db.transaction() as tx:
            found = tx.query(Item).where(copal.field("value").in_([1, 4, 5]) | (copal.field("name") == "i0"))
            return sorted(item.name for item in found)

    def check(names: list[str]) -> None:
        assert names == ["i0", "i1", "i4", "i5"]

    try:
        _each_allocation_failing(query, check)
    finally:
        db.close()


def test_dumps_raises_memory_error_or_returns_the_stream() -> None:
    value = _representative()
    expected = copal.dumps(value)
    _each_allocation_failing(lambda: copal.dumps(value), _check_equal(expected))


@pytest.mark.parametrize("text_format", ["json", "xml"])
def test_text_dumps_raises_memory_error_or_returns_the_document(text_format: str) -> None:
    # The JSON writer writes most graphs itself (json_writer.rs) and leaves the rest, such as
    # lone surrogates, to the transcoder, like XML's.
    value = _representative()
    del value["strs"]  # JSON and XML have no lone surrogates
    expected = copal.dumps(value, format=text_format)
    _each_allocation_failing(lambda: copal.dumps(value, format=text_format), _check_equal(expected))


def test_json_dumps_of_lone_surrogates_raises_memory_error_or_returns_the_document() -> None:
    # A str that is not UTF-8 is written as {"$surrogates": base64}: a failed allocation while
    # its UTF-8 form is tried is not taken for lone surrogates.
    value = ["plain", "a\udc80b", {"k": "\udc81", "j": "é"}] * 3
    expected = copal.dumps(value, format="json")
    _each_allocation_failing(lambda: copal.dumps(value, format="json"), _check_equal(expected))


def test_pack_many_raises_memory_error_or_returns_the_archive() -> None:
    values = [1, _representative(), "last"]
    expected = copal.pack_many(values)
    _each_allocation_failing(lambda: copal.pack_many(values), _check_equal(expected))


@sweeps_python_code
def test_commit_raises_memory_error_or_stores_the_record(tmp_path: Path) -> None:
    # The records of a commit are written by the connection's encoder, with its own sink; the
    # record is read back through a second handle, which decodes it afresh.
    value = _representative()
    expected = copal.dumps(value)
    db, reader = copal.open(tmp_path / "db"), copal.open(tmp_path / "db")

    def commit() -> None:
        with db.transaction() as tx:
            tx.root["holder"] = Holder(value=value)

    def check(_: None) -> None:
        with reader.transaction() as tx:
            assert copal.dumps(tx.root["holder"].value) == expected

    try:
        _each_allocation_failing(commit, check)
    finally:
        reader.close()
        db.close()


def _container_subclasses() -> list[Any]:
    ordered = collections.OrderedDict(a=[1], b=2**70)
    ordered.move_to_end("a")
    default = collections.defaultdict(list, {"k": ["v"]})
    deque = collections.deque([1, "two", ordered], maxlen=5)
    tagged = Tagged([1, "x", [2]])
    tagged.note = "kept"  # type: ignore[attr-defined]
    return [
        ordered, default, deque, collections.defaultdict(collections.OrderedDict), deque,
        tagged, TaggedSet({3, "y"}), TaggedTuple((4, "z")), TaggedDict(k=[5]),
    ]


def test_subclasses_of_containers_raise_memory_error_or_round_trip() -> None:
    # SUBCLASS values: Python subclasses of the built-in containers, and the containers of
    # `collections` read and rebuilt through their C types' own methods (known_containers.rs).
    value = _container_subclasses()
    data = copal.dumps(value)
    _each_allocation_failing(lambda: copal.dumps(value), _check_equal(data))
    _each_allocation_failing(lambda: copal.loads(data), _check_decoded(data))
    document = copal.dumps(value, format="json")
    _each_allocation_failing(lambda: copal.loads(document), _check_decoded(data))


class Buffer(bytearray):
    pass


class SlottedBuffer(bytearray):
    __slots__ = ("tag",)


def test_bytearray_subclasses_raise_memory_error_or_round_trip() -> None:
    # SUBCLASS values of base BYTEARRAY (stream version 4, and text documents): the instance is
    # made by bytearray.__new__ and filled by a resize, either of which may fail.
    shared = Buffer(b"shared bytes" * 4)
    shared.me = shared  # type: ignore[attr-defined]
    slotted = SlottedBuffer(b"s")
    slotted.tag = [shared]
    value = [shared, slotted, Buffer(), shared]
    data = copal.dumps(value)
    _each_allocation_failing(lambda: copal.dumps(value), _check_equal(data))
    _each_allocation_failing(lambda: copal.loads(data), _check_decoded(data))
    for text_format in ("json", "xml"):
        document = copal.dumps(value, format=text_format)
        _each_allocation_failing(lambda: copal.dumps(value, format=text_format), _check_equal(document))
        _each_allocation_failing(lambda: copal.loads(document), _check_decoded(data))



def _stored(path: Path) -> Path:
    with copal.open(path) as db, db.transaction() as tx:
        tx.root["holder"] = Holder(value=_representative())
    return path


@pytest.mark.parametrize("compress", [None, "zstd", "gzip"])
def test_exports_raise_memory_error_or_write_the_export(tmp_path: Path, compress: str | None) -> None:
    # The export's chunks go to the file as bytes made by the binding (pyo3's `PyBytes::new`
    # panicked); gzip compresses through zlib's objects.
    db = copal.open(_stored(tmp_path / "db"))

    def export() -> bytes:
        out = io.BytesIO()
        db.export(out, format="json", compress=compress)
        return out.getvalue()

    try:
        _each_allocation_failing(export, _check_equal(export()))
    finally:
        db.close()


@pytest.mark.parametrize("compress", [None, "zstd", "gzip"])
def test_imports_raise_memory_error_or_import_the_export(tmp_path: Path, compress: str | None) -> None:
    # A MemoryError while gzip data is inflated was reported as damaged data (CorruptRecordError).
    with copal.open(_stored(tmp_path / "db")) as db:
        out = io.BytesIO()
        db.export(out, compress=compress)
    data = out.getvalue()
    targets: list[copal.Database] = []

    def new_target() -> None:
        # Opened with nothing failing: a new database's locks are CPython's, which raise
        # RuntimeError when they cannot be allocated.
        while targets:
            targets.pop().close()
        targets.append(copal.open(str(tmp_path / f"copy{len(list(tmp_path.iterdir()))}")))

    def import_() -> dict[str, Any]:
        return targets[0].import_from(io.BytesIO(data))

    new_target()
    expected = import_()

    def check(report: dict[str, Any]) -> None:
        assert report == expected
        with targets[0].transaction() as tx:
            assert copal.dumps(tx.root["holder"].value) == copal.dumps(_representative())

    try:
        _each_allocation_failing(import_, check, before_each=new_target)
    finally:
        for target in targets:
            target.close()


def test_an_archive_file_opened_while_memory_runs_out_raises_memory_error(tmp_path: Path) -> None:
    value = _representative()
    (tmp_path / "archive").write_bytes(copal.pack_many([1, value, "last"]))
    expected = copal.dumps(value)

    def check(archive: copal.Archive) -> None:
        assert len(archive) == 3
        _check_decoded(expected)(archive[1])

    # A str path: CPython's own os.fspath turns a MemoryError met on a Path into a TypeError.
    _each_allocation_failing(lambda: copal.Archive(str(tmp_path / "archive")), check)


@sweeps_python_code
def test_database_reports_raise_memory_error_or_return_the_report(tmp_path: Path) -> None:
    # Their dicts, ints and strs were made by pyo3's conversions, which panicked.
    with copal.open(_stored(tmp_path / "db")) as db:
        for report in (db.stats, db.verify, db.schema, db.gc_schema, db.disk_size):
            _each_allocation_failing(report, _check_equal(report()))


@pytest.mark.parametrize("what", ["loads", "dumps"])
@pytest.mark.parametrize("text_format", ["copal", "json", "xml"])
def test_first_calls_of_a_process_raise_memory_error_or_succeed(what: str, text_format: str) -> None:
    # What the binding makes once per process (the classes it imports, the datetime C API)
    # is made by the first call, which the sweeps above never reach: their process is warm.
    # pyo3 made both with conversions that panic when CPython cannot allocate.
    outcomes = json.loads(run_helper("memory_first_use.py", what, text_format, timeout=120))
    assert outcomes["value"] == 1 and outcomes["MemoryError"] > 0
