"""copal.pack_many / copal.Archive: many values with random access (docs/STREAM.md section 10).

Round trips in every compression, indexing (negative, out of range, slices, iteration), the
independence of values (one damaged value does not affect the others), files (memory-mapped),
malformed archives (always CorruptRecordError), the decompression bound, and the test vector of
STREAM.md section 10, checked against copal's writer and an independent reader of the section
layout written from the document (values decoded by ``tests/reference_decoder.py``).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import copal  # noqa: E402
import reference_decoder as rd  # noqa: E402
from copal import CorruptRecordError, SchemaError  # noqa: E402
from helpers.compare import assert_same  # noqa: E402
from helpers.fuzz_alloc_limit import zstd_zeros  # noqa: E402
from helpers.models import Color, Item, Point, Tagged  # noqa: E402
from helpers.stream_bytes import varint  # noqa: E402
from test_stream_vectors import VPoint, _varint  # noqa: E402

ARCHIVE_MAGIC = b"CPA1"


def sample() -> list[Any]:
    shared = [1, 2]
    cycle: list[Any] = []
    cycle.append(cycle)
    return [
        None,
        "text",
        {"p": Point(1.5, "x"), "e": Color.GREEN, "t": Tagged([1]), "i": Item("a")},
        {"a": shared, "b": shared},
        cycle,
        [b"bytes", {2, 3}, frozenset({4})],
        Point(2, [Point(3, "nested")]),
    ]


@pytest.mark.parametrize("compress", [None, "zstd", "gzip", "lz4", ("zstd", 19)], ids=str)
def test_every_value_reads_back_alone(compress: copal.serialize.Compression) -> None:
    values = sample()
    archive = copal.Archive(copal.pack_many(values, compress=compress))
    assert len(archive) == len(values)
    for k in reversed(range(len(values))):
        assert_same(values[k], archive[k])
    back = archive[3]
    assert back["a"] is back["b"]
    cycle = archive[4]
    assert cycle[0] is cycle


def test_negative_indexes_slices_and_iteration() -> None:
    archive = copal.Archive(copal.pack_many(range(10)))
    assert archive[-1] == 9 and archive[-10] == 0
    assert archive[2:5] == [2, 3, 4]
    assert archive[::-3] == [9, 6, 3, 0]
    assert archive[8:100] == [8, 9] and archive[5:2] == []
    assert list(archive) == list(range(10))
    iterator = iter(archive)
    assert next(iterator) == 0 and list(iterator) == list(range(1, 10))
    assert list(iterator) == []


@pytest.mark.parametrize("k", [10, -11, 2**70, -(2**70)])
def test_out_of_range_is_index_error(k: int) -> None:
    archive = copal.Archive(copal.pack_many(range(10)))
    with pytest.raises(IndexError, match="holds 10 values"):
        archive[k]


def test_bad_index_type() -> None:
    archive = copal.Archive(copal.pack_many([1]))
    with pytest.raises(TypeError, match="integers or slices"):
        archive["0"]
    with pytest.raises(TypeError, match="bytes or a file path"):
        copal.Archive(42)  # type: ignore[arg-type]


def test_empty_archive() -> None:
    archive = copal.Archive(copal.pack_many([]))
    assert len(archive) == 0 and list(archive) == [] and archive[:] == []
    with pytest.raises(IndexError):
        archive[0]


def test_values_do_not_share_objects_and_each_read_builds_new_ones() -> None:
    shared = Point(1, 2)
    archive = copal.Archive(copal.pack_many([shared, shared]))
    assert archive[0] is not archive[1]
    assert archive[0] is not archive[0]
    assert_same(archive[1], shared)


def test_descriptors_are_stored_once_for_the_archive() -> None:
    data = copal.pack_many([Point(i, "x") for i in range(100)])
    assert data.count(b"helpers.models.Point") == 1
    assert len(data) < len(copal.dumps(Point(0, "x"))) * 100 / 2


def test_a_damaged_value_does_not_affect_the_others() -> None:
    """Value k is decoded from its own bytes only: damaging value 1 leaves 0 and 2 readable."""
    data = bytearray(copal.pack_many(["first", "second", "third"]))
    offsets = index_of(bytes(data))
    section_at = len(data) - len(read_header_any(bytes(data))["payload"])
    data[section_at + offsets[1]] = 0x7F  # an unknown tag
    archive = copal.Archive(bytes(data))
    assert archive[0] == "first" and archive[2] == "third"
    with pytest.raises(CorruptRecordError, match="archive value 1"):
        archive[1]


def test_mutable_buffers_are_copied() -> None:
    data = bytearray(copal.pack_many(["x", "y"]))
    archive = copal.Archive(data)
    data[:] = b"\x00" * len(data)
    assert archive[1] == "y"
    assert copal.Archive(memoryview(copal.pack_many([1])))[0] == 1


@pytest.mark.parametrize("as_str", [False, True])
def test_archive_file_is_memory_mapped(tmp_path: Path, as_str: bool) -> None:
    path = tmp_path / "rows.cpa"
    path.write_bytes(copal.pack_many([{"row": i} for i in range(1000)]))
    archive = copal.Archive(str(path) if as_str else path)
    assert len(archive) == 1000 and archive[-1] == {"row": 999}
    assert archive[500:502] == [{"row": 500}, {"row": 501}]


def test_a_mapped_file_cut_while_open_is_corrupt_not_a_crash(tmp_path: Path) -> None:
    """Another process truncating a mapped archive file (more than 4 MiB: smaller ones are read
    when opened): the next read is CorruptRecordError (without the size check it is a SIGBUS).
    Run in a child process, where a crash cannot end the test run. A file that grows stays
    readable."""
    path = tmp_path / "rows.cpa"
    path.write_bytes(copal.pack_many([{"row": i, "pad": "x" * 100} for i in range(50_000)]))
    assert path.stat().st_size > 4 << 20
    child = """
import os, sys
import copal
archive = copal.Archive(sys.argv[1])
assert archive[49999]["row"] == 49999
with open(sys.argv[1], "ab") as grown:
    grown.write(b"more")
assert archive[49998]["row"] == 49998
os.truncate(sys.argv[1], 4096)
for read in (lambda: archive[49999], lambda: archive[0], lambda: archive[1:3], lambda: next(iter(archive))):
    try:
        read()
    except copal.CorruptRecordError as error:
        print(error)
print("done")
"""
    done = subprocess.run([sys.executable, "-c", child, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done
    lines = done.stdout.splitlines()
    assert lines[-1] == "done" and len(lines) == 5, done.stdout
    for line in lines[:4]:
        assert line.startswith("corrupt archive: its file was cut to 4096 bytes while it was open (it had "), line


def test_a_small_file_is_read_when_opened(tmp_path: Path) -> None:
    """An archive file of up to 4 MiB is read into memory when opened: cutting the file
    afterwards changes nothing for the open archive."""
    path = tmp_path / "rows.cpa"
    path.write_bytes(copal.pack_many([{"row": i} for i in range(1000)]))
    archive = copal.Archive(path)
    os.truncate(path, 16)
    assert archive[999] == {"row": 999} and archive[0:2] == [{"row": 0}, {"row": 1}]


def test_compressed_archive_file(tmp_path: Path) -> None:
    path = tmp_path / "rows.cpa"
    path.write_bytes(copal.pack_many(["v"] * 1000, compress="zstd"))
    assert path.stat().st_size < len(copal.pack_many(["v"] * 1000)) / 2
    assert copal.Archive(path)[999] == "v"


def test_empty_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(CorruptRecordError, match="empty"):
        copal.Archive(tmp_path / "empty")
    with pytest.raises(FileNotFoundError):
        copal.Archive(tmp_path / "missing")


def test_unknown_class_is_a_schema_error_when_its_value_is_read() -> None:
    data = copal.pack_many([1, Point(1, 2)]).replace(b"helpers.models.Point", b"helpers.models.Gone!")
    archive = copal.Archive(data)
    assert archive[0] == 1
    with pytest.raises(SchemaError):
        archive[1]


# -- malformed archives -------------------------------------------------------------------------


def archive_of(section: bytes, flags: int = 0) -> bytes:
    return ARCHIVE_MAGIC + bytes([1, flags]) + varint(len(section)) + section


def index_section(values: list[bytes], offsets: list[int] | None = None, count: int | None = None) -> bytes:
    table = b"\x00"
    at = len(table)
    if offsets is None:
        offsets = [at]
        for value in values:
            at += len(value)
            offsets.append(at)
    index = b"".join(struct.pack("<I", o) for o in offsets)
    return table + b"".join(values) + index + struct.pack("<Q", len(values) if count is None else count)


def test_hand_built_section_reads_back() -> None:
    archive = copal.Archive(archive_of(index_section([b"\x03\x02", b"\x00"])))
    assert list(archive) == [1, None]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (copal.dumps([1]), "not a copal archive"),
        (b"CPA", "truncated"),
        (archive_of(index_section([])).replace(b"CPA1\x01", b"CPA1\x02"), "version 2"),
        (archive_of(index_section([]), flags=0x08), "flags"),
        (archive_of(b"\x00\x00\x00\x00"), "truncated"),
        (archive_of(index_section([b"\x00"], count=2)), "length"),
        (archive_of(index_section([b"\x00"], count=2**64 - 1)), "length"),
        (archive_of(index_section([b"\x00"], offsets=[1, 1])), "last offset"),
        (archive_of(index_section([b"\x00"]), flags=0x02), "gzip"),
        (archive_of(index_section([b"\x00"])) + b"\x00", "unexpected bytes"),
    ],
    ids=[
        "stream",
        "short",
        "version",
        "reserved_flag",
        "no_count",
        "count_too_large",
        "count_overflow",
        "bad_last_offset",
        "not_gzip",
        "trailing",
    ],
)
def test_malformed_archives_fail_when_opened(data: bytes, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        copal.Archive(data)


@pytest.mark.parametrize(
    "offsets",
    [[0, 3, 4], [1, 5, 4], [3, 1, 4]],
    ids=["start_inside_the_table", "end_past_the_index", "decreasing"],
)
def test_bad_offsets_fail_when_their_value_is_read(offsets: list[int]) -> None:
    archive = copal.Archive(archive_of(index_section([b"\x03\x02", b"\x00"], offsets=offsets)))
    with pytest.raises(CorruptRecordError, match="outside the values"):
        archive[0]


def test_value_ending_before_its_next_offset_is_trailing_bytes() -> None:
    archive = copal.Archive(archive_of(index_section([b"\x00\x00"], offsets=[1, 3])))
    with pytest.raises(CorruptRecordError, match="unexpected bytes"):
        archive[0]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_damaged_archives_fail_cleanly(data: st.DataObject) -> None:
    raw = bytearray(copal.pack_many(sample()[:4] + [Point(1, "p")]))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(7, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        archive = copal.Archive(bytes(raw))
    except CorruptRecordError:
        return
    for k in range(len(archive)):
        try:
            archive[k]
        except (CorruptRecordError, SchemaError):
            pass


def test_max_size_bounds_a_compressed_archive() -> None:
    data = copal.pack_many([bytes(100_000)], compress="gzip")
    assert copal.Archive(data, max_size=200_000)[0] == bytes(100_000)
    with pytest.raises(CorruptRecordError, match="max_size = 1000 "):
        copal.Archive(data, max_size=1000)
    bomb = ARCHIVE_MAGIC + bytes([1, 1]) + varint(len(payload := zstd_zeros(300 << 20))) + payload
    with pytest.raises(CorruptRecordError, match="max_size"):
        copal.Archive(bomb)
    with pytest.raises(TypeError, match="max_size"):
        copal.Archive(data, max_size="1")  # type: ignore[arg-type]


# -- the test vector of STREAM.md section 10 ------------------------------------------------------

VECTOR = bytes.fromhex(
    "43504131010052"
    "01001b" + b"copal_stream_vectors.VPoint".hex() + "0201780179"
    "0302" "070161" "18000302070162" "18000304070163"
    "23000000" "25000000" "28000000" "2f000000" "36000000"
    "0400000000000000"
)


def read_header_any(data: bytes) -> dict[str, Any]:
    """The header of section 2 with the archive magic and the WIDE flag of section 10."""
    assert data[:4] == ARCHIVE_MAGIC and data[4] == 1 and data[5] & ~0x07 == 0
    length, at = _varint(data, 6)
    assert at + length == len(data)
    return {"wide": bool(data[5] & 0x04), "payload": data[at:]}


def index_of(data: bytes) -> list[int]:
    """Section 10, written from the document: the offsets of an uncompressed archive."""
    header = read_header_any(data)
    section, width = header["payload"], 8 if header["wide"] else 4
    (count,) = struct.unpack("<Q", section[-8:])
    index_start = len(section) - 8 - (count + 1) * width
    fmt = "<" + ("Q" if width == 8 else "I") * (count + 1)
    offsets = list(struct.unpack(fmt, section[index_start : len(section) - 8]))
    assert offsets[-1] == index_start
    return offsets


def read_archive(data: bytes) -> tuple[list[dict[str, Any]], list[Any]]:
    """An independent reader of section 10: the table (as in section 4) and the tagged values."""
    section = read_header_any(data)["payload"]
    offsets = index_of(data)
    count, at = _varint(section, 0)
    table = []
    for _ in range(count):
        flags = section[at]
        name_len, at = _varint(section, at + 1)
        name = section[at : at + name_len].decode()
        n, at = _varint(section, at + name_len)
        fields = []
        for _ in range(n):
            field_len, at = _varint(section, at)
            fields.append(section[at : at + field_len].decode())
            at += field_len
        table.append({"flags": flags, "type": name, "fields": fields})
    assert at == offsets[0]
    descriptors = {i: d["fields"] for i, d in enumerate(table)}
    values = [rd.decode_value(section[a:b], descriptors) for a, b in zip(offsets, offsets[1:])]
    return table, values


def test_vector_is_what_copal_writes_and_reads() -> None:
    assert copal.pack_many([1, "a", VPoint(1, "b"), VPoint(2, "c")]) == VECTOR
    archive = copal.Archive(VECTOR)
    assert archive[0] == 1 and archive[1] == "a"
    assert (archive[3].x, archive[3].y) == (2, "c") and type(archive[2]) is VPoint


def test_vector_decodes_with_the_independent_reader() -> None:
    table, values = read_archive(VECTOR)
    assert table == [{"flags": 0, "type": "copal_stream_vectors.VPoint", "fields": ["x", "y"]}]
    assert values == [
        {"int": 1},
        {"str": "a"},
        {"object": {"descriptor": 0, "fields": [{"int": 1}, {"str": "b"}]}},
        {"object": {"descriptor": 0, "fields": [{"int": 2}, {"str": "c"}]}},
    ]


def test_independent_reader_agrees_on_a_larger_archive() -> None:
    values = [[i, f"s{i}", {"k": i}] for i in range(300)]
    table, decoded = read_archive(copal.pack_many(values))
    assert table == [] and len(decoded) == 300
    assert decoded[299] == {"list": [{"int": 299}, {"str": "s299"}, {"dict": [[{"str": "k"}, {"int": 299}]]}]}
