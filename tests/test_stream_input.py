"""What copal.loads / load accept and refuse: compression and its detection, the bound on the
inflated payload, several streams in one file, malformed input (always CorruptRecordError, never
a panic), and class resolution (SchemaError, nothing imported, nothing executed)."""

from __future__ import annotations

import gzip
import io
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import copal  # noqa: E402
from copal import CorruptRecordError, SchemaError  # noqa: E402
from helpers.c_classes import class_made_by_c  # noqa: E402
from helpers.compare import assert_same  # noqa: E402
from helpers.fuzz_alloc_limit import zstd_zeros  # noqa: E402
from helpers.models import Color, Item, Point, Tagged  # noqa: E402
from helpers.stream_bytes import FRAME_MAGIC, MAGIC, entry, stream, table, utf8, varint  # noqa: E402
from test_serialize import Cells  # noqa: E402
from test_stream_vectors import read_header  # noqa: E402


COMPRESSIONS: list[copal.serialize.Compression] = [None, "zstd", "gzip", "lz4", ("zstd", 1), ("gzip", 1), ("zstd", -5)]


# -- compression ----------------------------------------------------------------------------------


@pytest.mark.parametrize("compress", COMPRESSIONS, ids=str)
def test_compression_roundtrip_and_detection(compress: copal.serialize.Compression) -> None:
    value = {"rows": [Point(i, f"row number {i}") for i in range(500)], "set": {1, 2, 3}}
    data = copal.dumps(value, compress=compress)
    assert data[:4] == MAGIC and data[4] == 3
    codec = compress[0] if isinstance(compress, tuple) else compress
    assert data[5] == {None: 0, "zstd": 1, "gzip": 2, "lz4": 3}[codec]
    assert_same(value, copal.loads(data))
    if codec is not None:
        # LZ4 trades compression ratio for speed.
        assert len(data) < len(copal.dumps(value)) * (0.75 if codec == "lz4" else 0.5)


#: The first bytes of a zstd frame (RFC 8878) and of an LZ4 frame (LZ4 frame format 1.6).


def test_compressed_payload_is_a_standard_frame() -> None:
    value = [1, "x" * 100]
    body = read_header(copal.dumps(value))["payload"]
    for codec, magic in FRAME_MAGIC.items():
        assert read_header(copal.dumps(value, compress=codec))["payload"][:4] == bytes.fromhex(magic)
    gzip_payload = read_header(copal.dumps(value, compress="gzip"))["payload"]
    assert gzip.decompress(gzip_payload) == body


@pytest.mark.parametrize(
    ("compress", "error"),
    [
        ("brotli", ValueError),
        (("lz4", 1), ValueError),
        (("zstd", 99), ValueError),
        (("gzip", 10), ValueError),
        (("gzip", -1), ValueError),
        (("zstd", "9"), TypeError),
        (("zstd", True), TypeError),
        (("zstd", 1, 2), ValueError),
        (9, ValueError),
    ],
    ids=str,
)
def test_invalid_compression_arguments(compress: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        copal.dumps([1], compress=compress)


def test_loads_accepts_bytes_like() -> None:
    data = copal.dumps({"a": 1})
    assert copal.loads(bytearray(data)) == {"a": 1}
    assert copal.loads(memoryview(data)) == {"a": 1}
    # Every form is told apart from bytes-like data as from bytes: compressed documents too.
    document = copal.dumps({"a": 1}, format="xml", compress="gzip")
    assert copal.loads(bytearray(document)) == copal.loads(memoryview(document)) == {"a": 1}


@pytest.mark.parametrize("data", [123, None, [1, 2]], ids=["int", "None", "list"])
def test_loads_of_what_is_not_bytes_like_is_a_type_error(data: Any) -> None:
    """``bytes(123)`` is 123 zero bytes: loads must not take it so."""
    with pytest.raises(TypeError, match="a bytes-like object is required"):
        copal.loads(data)


@pytest.mark.parametrize("codec", ["zstd", "gzip", "lz4"])
def test_max_size_bounds_the_inflated_payload(codec: copal.serialize.Compression) -> None:
    value = bytes(100_000)
    data = copal.dumps(value, compress=codec)
    body_size = len(read_header(copal.dumps(value))["payload"])
    assert copal.loads(data, max_size=body_size) == value
    with pytest.raises(CorruptRecordError, match=f"more than max_size = {body_size - 1} bytes"):
        copal.loads(data, max_size=body_size - 1)
    with pytest.raises(CorruptRecordError, match="max_size"):
        copal.load(io.BytesIO(data), max_size=1000)
    assert copal.load(io.BytesIO(data), max_size=body_size) == value


def test_max_size_default_refuses_a_bomb_and_does_not_limit_uncompressed_streams() -> None:
    # 300 MiB of zeros compress to about 10 KB of zstd; the default (256 MiB) stops inflating.
    bomb = MAGIC + bytes([1, 1]) + _sized(zstd_zeros(300 << 20))  # version 1, zstd
    with pytest.raises(CorruptRecordError, match=f"max_size = {copal.serialize.DEFAULT_MAX_SIZE} "):
        copal.loads(bomb)
    assert copal.loads(copal.dumps(bytes(5000)), max_size=10) == bytes(5000)


@pytest.mark.parametrize(("max_size", "error"), [("1", TypeError), (True, TypeError), (-1, ValueError)], ids=str)
def test_invalid_max_size(max_size: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="max_size"):
        copal.loads(copal.dumps(1), max_size=max_size)
    with pytest.raises(error, match="max_size"):
        copal.load(io.BytesIO(copal.dumps(1)), max_size=max_size)


def test_max_size_beyond_64_bits() -> None:
    assert copal.loads(copal.dumps([1], compress="zstd"), max_size=2**70) == [1]
    with pytest.raises(ValueError, match="max_size must not be negative"):
        copal.loads(copal.dumps(1), max_size=-(2**70))
    with pytest.raises(ValueError, match="max_size is too large"):
        copal.loads(copal.dumps(1), max_size=2**200)


def _sized(payload: bytes) -> bytes:
    return varint(len(payload)) + payload


# -- files and streams ----------------------------------------------------------------------------


def test_dump_and_load_several_streams_in_one_file(tmp_path: Path) -> None:
    path = tmp_path / "data.cpl"
    values = [{"n": 1}, [Point(1, 2)], "three", None]
    with path.open("wb") as f:
        for value, compress in zip(values, [None, "zstd", "gzip", ("zstd", 19)]):
            copal.dump(value, f, compress=compress)
    with path.open("rb") as f:
        loaded = [copal.load(f) for _ in values]
        with pytest.raises(EOFError):
            copal.load(f)
    assert loaded == values


class Trickle(io.RawIOBase):
    """A non-seekable stream that hands out at most one byte per read, like a slow pipe."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        chunk = self.data[self.pos : self.pos + min(size, 1) if size >= 0 else None]
        self.pos += len(chunk)
        return chunk


def test_load_reads_exactly_one_stream_from_a_pipe() -> None:
    data = copal.dumps(["a"] * 300) + copal.dumps({"b": 2}, compress="gzip")
    pipe = Trickle(data)
    assert copal.load(pipe) == ["a"] * 300
    assert copal.load(pipe) == {"b": 2}


def test_load_of_a_truncated_file() -> None:
    data = copal.dumps(list(range(100)))
    for cut in (1, 4, 6, 7, len(data) - 1):
        with pytest.raises(CorruptRecordError):
            copal.load(io.BytesIO(data[:cut]))
    with pytest.raises(CorruptRecordError, match="not a copal stream"):
        copal.load(io.BytesIO(b"PK\x03\x04 a zip file"))


def test_load_refuses_garbage_without_reading_to_the_end() -> None:
    class Endless(io.RawIOBase):
        """A pipe that keeps sending garbage: reading it to the end would never return."""

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            buffer[:] = b"x" * len(buffer)
            return len(buffer)

    with pytest.raises(CorruptRecordError, match="not a copal stream"):
        copal.load(Endless())


def test_load_needs_a_binary_file() -> None:
    with pytest.raises(TypeError, match="binary file"):
        copal.load(io.StringIO("CPL1"))


def test_load_of_a_huge_declared_length_does_not_allocate_it() -> None:
    data = MAGIC + b"\x01\x00" + varint(2**62) + b"\x00\x00"
    with pytest.raises(CorruptRecordError, match="truncated"):
        copal.load(io.BytesIO(data))


# -- malformed input --------------------------------------------------------------------------------


SAMPLE = {
    "p": Point(1.5, "x"),
    "e": Color.GREEN,
    "t": Tagged([1]),
    "i": Item("a"),
    "l": [b"b", {2, 3}],
    # Version 3's typed forms: an OBJECT_LIST, and lists of each kind in a LIST field.
    "rows": [Point(0.5, "x"), Point(2.5, "y")],
    "cells": Cells([Cells([], 1), Cells(["x", 2], -3)], 2**40),
}


@pytest.mark.parametrize("compress", [None, "zstd", "gzip", "lz4"], ids=str)
def test_every_truncation_is_corrupt(compress: copal.serialize.Compression) -> None:
    data = copal.dumps(SAMPLE, compress=compress)
    for cut in range(len(data)):
        with pytest.raises(CorruptRecordError):
            copal.loads(data[:cut])


@pytest.mark.parametrize("compress", [None, "zstd", "gzip", "lz4"], ids=str)
def test_trailing_bytes_are_corrupt(compress: copal.serialize.Compression) -> None:
    with pytest.raises(CorruptRecordError):
        copal.loads(copal.dumps(SAMPLE, compress=compress) + b"\x00")


def test_bytes_after_the_value_inside_the_payload_are_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="after the last value"):
        copal.loads(stream(table() + b"\x00\x00"))


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_corrupted_streams_fail_cleanly(data: st.DataObject) -> None:
    """Any damage gives CorruptRecordError or SchemaError (a mangled type name), or decodes."""
    compress = data.draw(st.sampled_from([None, None, "zstd", "gzip", "lz4"]))
    good = bytearray(copal.dumps(SAMPLE, compress=compress))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(good) - 1))
        good[at] = data.draw(st.integers(0, 255))
    try:
        copal.loads(bytes(good))
    except (CorruptRecordError, SchemaError):
        pass


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=64))
def test_random_payloads_fail_cleanly(body: bytes) -> None:
    for flags in (0, 1, 2):
        try:
            copal.loads(stream(body, flags=flags))
        except (CorruptRecordError, SchemaError):
            pass


def test_ref_is_not_allowed_in_a_stream() -> None:
    with pytest.raises(CorruptRecordError, match="unknown tag 0x17"):
        copal.loads(stream(table() + bytes.fromhex("170100")))


# -- class resolution: nothing imported, nothing executed -----------------------------------------


def test_unimported_class_is_a_schema_error() -> None:
    assert "this" not in sys.modules  # importing it would print the Zen of Python
    for name in ("this.Zen", "copal_no_such_module.Thing"):
        with pytest.raises(SchemaError, match="import the module"):
            copal.loads(stream(table(entry(name, [])) + b"\x18\x00"))
    assert "this" not in sys.modules and "copal_no_such_module" not in sys.modules


def test_a_name_resolves_in_the_longest_imported_module_on_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dotted name is looked up in the imported module with the longest name it starts with,
    then along the attributes after it; again on every call, though the stream's descriptor
    table (and what was learned about its classes) is kept from one call to the next."""
    by_attributes = type("Thing", (), {})
    by_module = type("Thing", (), {})
    package = types.ModuleType("copal_resolve_pkg")
    package.sub = types.SimpleNamespace(Thing=by_attributes)  # type: ignore[attr-defined]
    sub = types.ModuleType("copal_resolve_pkg.sub")
    sub.Thing = by_module  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "copal_resolve_pkg", package)
    monkeypatch.setitem(sys.modules, "copal_resolve_pkg.sub", sub)
    data = stream(table(entry("copal_resolve_pkg.sub.Thing", [])) + b"\x18\x00")
    assert type(copal.loads(data)) is by_module
    monkeypatch.delitem(sys.modules, "copal_resolve_pkg.sub")
    assert type(copal.loads(data)) is by_attributes
    del package.sub  # type: ignore[attr-defined]
    with pytest.raises(SchemaError, match="no class for stored type"):
        copal.loads(data)


@pytest.mark.parametrize(
    "type_name", ["os.system", "builtins.eval", "builtins.exec", "subprocess.check_output", "posix.system"]
)
@pytest.mark.parametrize("tag", ["object", "subclass", "enum"])
def test_functions_named_as_classes_are_refused(type_name: str, tag: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    argument = utf8(f"touch {marker}")
    value = {
        "object": b"\x18\x00" + b"\x07" + argument,
        "subclass": b"\x19\x00\x0b\x01\x07" + argument,
        "enum": b"\x16\x00" + argument,
    }[tag]
    fields = [] if tag == "enum" else ["arg"]
    with pytest.raises(SchemaError, match="not a class|cannot be rebuilt|not a subclass|not an Enum"):
        copal.loads(stream(table(entry(type_name, fields)) + value))
    assert not marker.exists()


@pytest.mark.parametrize(
    "type_name",
    ["builtins.type", "builtins.object", "builtins.int", "types.SimpleNamespace", "collections.OrderedDict"],
)
def test_built_in_classes_are_not_rebuilt_as_objects(type_name: str) -> None:
    with pytest.raises(SchemaError):
        copal.loads(stream(table(entry(type_name, [])) + b"\x18\x00"))


@pytest.mark.parametrize(
    ("immutable", "own_dealloc", "c_field"),
    [(True, False, False), (False, True, False), (False, False, True)],
    ids=["immutable", "own_dealloc", "c_field"],
)
def test_classes_made_by_c_code_are_neither_written_nor_rebuilt(immutable: bool, own_dealloc: bool, c_field: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    made_by_c = class_made_by_c("copal_c_made.Record", immutable=immutable, own_dealloc=own_dealloc, c_field=c_field)
    record = made_by_c()
    record.label = "state in a dict, and maybe more in C"
    with pytest.raises(TypeError, match="copal_c_made.Record"):
        copal.dumps(record)
    with pytest.raises(TypeError, match="copal_c_made.Record"):
        copal.dumps(record, format="json")
    # A stream naming it, written from a Python class of that name, is not rebuilt into it.
    module = types.ModuleType("copal_c_made")
    module.Record = type("Record", (), {"__module__": "copal_c_made"})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "copal_c_made", module)
    python_made = module.Record()  # type: ignore[attr-defined]
    python_made.label = "x"
    data, text = copal.dumps(python_made), copal.dumps(python_made, format="json")
    module.Record = made_by_c  # type: ignore[attr-defined]
    for document in (data, text):
        with pytest.raises(SchemaError, match="copal_c_made.Record"):
            copal.loads(document)


def test_open_files_are_refused() -> None:
    """Heap types since CPython 3.12, whose `__new__` is object's: still not plain objects."""
    with open(__file__, encoding="utf-8") as text, open(__file__, "rb") as binary:
        for value in (text, binary, binary.raw):
            with pytest.raises(TypeError, match="_io"):
                copal.dumps([value])


def test_finalizers_never_run_on_stream_data(tmp_path: Path) -> None:
    """tempfile's closer deletes ``name`` in ``__del__``: rebuilding one would delete any file."""
    import tempfile

    victim = tmp_path / "victim"
    victim.write_text("keep me")
    assert "__del__" in vars(tempfile._TemporaryFileCloser)
    fields = ["file", "name", "delete"]
    value = b"\x18\x00" + b"\x03\x02" + b"\x07" + utf8(str(victim)) + b"\x02"
    with pytest.raises(SchemaError, match="finalizer"):
        copal.loads(stream(table(entry("tempfile._TemporaryFileCloser", fields)) + value))
    assert victim.read_text() == "keep me"


class Guarded:
    """A plain class whose property setter must never run on decoded data."""

    calls: list[Any] = []

    @property
    def secret(self) -> Any:
        return None

    @secret.setter
    def secret(self, value: Any) -> None:
        Guarded.calls.append(value)


@pytest.mark.parametrize("field", ["secret", "__class__", "__dict__"])
def test_setters_never_run_on_stream_data(field: str) -> None:
    type_name = f"{__name__}.Guarded"
    with pytest.raises(SchemaError, match="data descriptor"):
        copal.loads(stream(table(entry(type_name, [field])) + b"\x18\x00\x03\x02"))
    assert Guarded.calls == []
    assert type(copal.loads(stream(table(entry(type_name, ["other"])) + b"\x18\x00\x03\x02"))) is Guarded


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("bad", [b"\xed\xa0\x80", b"\xc0\x80", b"\xff", b"\xf4\x90\x80\x80"], ids=["surrogate", "overlong", "ff", "above_max"])
@pytest.mark.parametrize("padding", [0, 40], ids=["short", "long"])
def test_invalid_utf8_strings_are_corrupt(version: int, bad: bytes, padding: int) -> None:
    """Short strings (at most 32 bytes, cached in version 1) and the others, checked by one
    decoder: the same strings are refused."""
    text = b"x" * padding + bad
    with pytest.raises(CorruptRecordError, match="invalid UTF-8"):
        copal.loads(stream(table() + b"\x07" + varint(len(text)) + text, version=version))


def test_unknown_descriptor_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="unknown class descriptor 1"):
        copal.loads(stream(table(entry("helpers.models.Point", ["x", "y"])) + b"\x18\x01\x00\x00"))
