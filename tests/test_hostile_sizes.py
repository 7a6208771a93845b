"""Small compressed inputs cannot take memory beyond a small multiple of ``max_size``
(docs/explanation/safety.md): not by inflating, not through the objects they decode to, not
through the trees a JSON or XML document is read through, not through one large entry of an
export. Each load runs in a child process whose memory is limited: it loads, or it raises
copal's CorruptRecordError, never MemoryError."""

from __future__ import annotations

import base64
import io
import zlib
from pathlib import Path

import pytest

import copal
from copal import _core

from helpers.models import Holder
from helpers.procs import run_helper
from helpers.stream_bytes import varint

CODES = {"zstd": 1, "gzip": 2, "lz4": 3}
MIB = 1 << 20


def _compressed(data: bytes, codec: str) -> bytes:
    return _core.compress_text_raw(data, CODES[codec], None)


def _stream(body: bytes, codec: str) -> bytes:
    """A version 3 stream of `body` (docs/STREAM.md), its payload compressed with `codec`."""
    payload = _compressed(body, codec)
    return b"CPL1" + bytes([3, CODES[codec]]) + varint(len(payload)) + payload


def _empty_lists(size: int) -> bytes:
    """A stream body of `size` bytes: a list of empty lists, 80 bytes of objects per 2 bytes."""
    count = (size - 12) // 2
    return b"\x00\x0b" + varint(count) + b"\x0b\x00" * count


def _bounded(tmp_path: Path, data: bytes, max_size: int, limit_mib: int = 512, mode: str = "loads", kind: str = "as") -> str:
    path = tmp_path / "input"
    path.write_bytes(data)
    return run_helper("bounded_load.py", kind, limit_mib, mode, path, max_size, timeout=120).strip()


@pytest.mark.parametrize("codec", ["zstd", "gzip", "lz4"])
def test_the_objects_of_a_compressed_stream_are_held_to_max_size(tmp_path: Path, codec: str) -> None:
    # 24 MiB of empty lists compress to a few kilobytes and decode to 1 GB of lists.
    bomb = _stream(_empty_lists(24 * MIB), codec)
    assert len(bomb) < 120_000
    outcome = _bounded(tmp_path, bomb, max_size=32 * MIB)
    assert outcome.startswith("CorruptRecordError") and "its objects would take more than max_size = 33554432" in outcome, outcome


def test_a_stream_under_the_default_max_size_stays_within_a_gigabyte(tmp_path: Path) -> None:
    bomb = _stream(_empty_lists(copal.serialize.DEFAULT_MAX_SIZE - 64), "zstd")
    assert len(bomb) < 30_000
    outcome = _bounded(tmp_path, bomb, max_size=copal.serialize.DEFAULT_MAX_SIZE, limit_mib=1024)
    assert outcome.startswith("CorruptRecordError") and "its objects would take more than max_size" in outcome, outcome


@pytest.mark.parametrize(
    "document",
    [
        b'{"$copal":2,"value":[' + b"[]," * (8 * MIB) + b"[]]}",
        # Laid out otherwise than copal writes it: read through trees.
        b'{"value":[' + b"[]," * (8 * MIB) + b'[]],"$copal":2}',
        b'<copal version="1"><list>' + b"<set/>" * (4 * MIB) + b"</list></copal>",
        b'<copal version="1"><!-- read through trees --><list>' + b"<list/>" * (3 * MIB) + b"</list></copal>",
    ],
    ids=["json", "json-tree", "xml", "xml-tree"],
)
def test_a_compressed_document_is_held_to_max_size(tmp_path: Path, document: bytes) -> None:
    outcome = _bounded(tmp_path, _compressed(document, "zstd"), max_size=32 * MIB)
    assert outcome.startswith("CorruptRecordError") and "max_size" in outcome, outcome


def test_what_fits_loads_and_uncompressed_input_is_not_held(tmp_path: Path) -> None:
    people = [{"name": f"p{i}", "age": i, "tags": ["a", "b"]} for i in range(100_000)]
    assert _bounded(tmp_path, copal.dumps(people, compress="zstd"), max_size=64 * MIB) == "loaded"
    assert _bounded(tmp_path, copal.dumps(people, format="json", compress="gzip"), max_size=64 * MIB) == "loaded"
    # Uncompressed, its objects are bounded by its own length: max_size does not apply.
    lists = [[] for _ in range(100_000)]
    assert copal.loads(copal.dumps(lists), max_size=1000) == lists
    with pytest.raises(copal.CorruptRecordError, match="its objects would take more than max_size = 250000"):
        copal.loads(copal.dumps(lists, compress="lz4"), max_size=250_000)


def _entry(kind: int, payload: bytes) -> bytes:
    """An entry of a binary export (docs/EXPORT.md section 2), with its CRC-32."""
    framed = bytes([kind]) + varint(len(payload)) + payload
    return framed + zlib.crc32(framed).to_bytes(4, "little")


def _export_with_a_large_record(tmp_path: Path, size: int, format: str) -> bytes:
    """An export of a database holding one object whose bytes attribute is `size` zero bytes."""
    with copal.open(tmp_path / "source") as db:
        with db.transaction() as tx:
            tx.root["holder"] = Holder(value=b"\x07" * 16)
        out = io.BytesIO()
        db.export(out, format=format)
    small = b"\x09\x10" + b"\x07" * 16
    if format == "json":
        written = b'"$bytes":"' + base64.b64encode(b"\x07" * 16) + b'"'
        assert written in out.getvalue()
        return out.getvalue().replace(written, b'"$bytes":"' + b"A" * (size // 3 * 4) + b'"')
    data, at, export = out.getvalue(), 6, bytearray(out.getvalue()[:6])
    while at < len(data):
        kind, length, start = data[at], 0, at + 1
        shift = 0
        while True:
            byte = data[start]
            start, length, shift = start + 1, length | (byte & 0x7F) << shift, shift + 7
            if not byte & 0x80:
                break
        payload = data[start : start + length]
        export += _entry(kind, payload.replace(small, b"\x09" + varint(size) + bytes(size)))
        at = start + length + 4
    return bytes(export)


@pytest.mark.parametrize(("format", "codec"), [("copal", "zstd"), ("copal", "gzip"), ("json", "zstd")])
def test_an_import_refuses_an_entry_beyond_max_size_before_reading_it(tmp_path: Path, format: str, codec: str) -> None:
    export = _export_with_a_large_record(tmp_path, 300 * MIB, format)
    bomb = _compressed(export, codec)
    assert len(bomb) < 400_000
    outcome = _bounded(tmp_path, bomb, max_size=copal.serialize.DEFAULT_MAX_SIZE, limit_mib=512, mode="import", kind="data")
    assert outcome.startswith("CorruptRecordError") and "more than max_size = 268435456" in outcome, outcome


def test_an_import_of_a_large_record_within_max_size_stays_within_a_few_copies(tmp_path: Path) -> None:
    export = _compressed(_export_with_a_large_record(tmp_path, 64 * MIB, "copal"), "zstd")
    outcome = _bounded(tmp_path, export, max_size=copal.serialize.DEFAULT_MAX_SIZE, limit_mib=400, mode="import", kind="data")
    assert outcome == "imported", outcome
    outcome = _bounded(tmp_path, export, max_size=32 * MIB, limit_mib=400, mode="import", kind="data")
    assert outcome.startswith("CorruptRecordError") and "more than max_size = 33554432" in outcome, outcome


def test_the_values_of_a_compressed_archive_are_held_to_max_size(tmp_path: Path) -> None:
    """As for a compressed stream: a value of a compressed archive whose objects would take
    more than ``max_size`` is refused, though its bytes are within it; an uncompressed archive's
    values are bounded by their bytes, and load."""
    lists = [[] for _ in range(200_000)]  # 400 KB of bytes, 16 MB of objects
    max_size = 2 * MIB
    compressed, plain = tmp_path / "compressed.cpa", tmp_path / "plain.cpa"
    compressed.write_bytes(copal.pack_many([lists, "small"], compress="zstd"))
    plain.write_bytes(copal.pack_many([lists, "small"]))
    archive = copal.Archive(compressed, max_size=max_size)
    with pytest.raises(copal.CorruptRecordError, match="its objects would take more than max_size"):
        archive[0]
    assert archive[1] == "small"
    assert copal.Archive(plain, max_size=max_size)[0] == lists
