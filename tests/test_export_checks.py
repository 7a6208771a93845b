"""What an import refuses (docs/EXPORT.md): damaged bytes anywhere in an entry of a binary
export, records with ids no stored object can have or out of oid order, LZ4 frames without their
end mark; and the exports of version 1 it still reads."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

import copal

from test_transfer import _exported, _fill, assert_same_database

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _import(tmp_path: Path, data: bytes, name: str = "target") -> dict[str, int]:
    with copal.open(tmp_path / name) as db:
        report: dict[str, int] = db.import_from(io.BytesIO(data))
        return report


def test_a_damaged_object_id_in_a_binary_export_is_refused(tmp_path: Path) -> None:
    data = _exported(tmp_path / "source", accounts=3)
    assert data[:6] == b"CPLX\x02\x00"
    # The oid of the first account (class 4, sequence 0), little-endian in its record entry.
    oid = (4 << 48).to_bytes(8, "little")
    assert data.count(oid) == 1
    at = data.index(oid)
    damaged = data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]
    with pytest.raises(copal.CorruptRecordError, match=r"entry \d+ \(record\): its checksum does not match .*\[BadChecksum\]"):
        _import(tmp_path, damaged)
    # So is a damaged descriptor, and an entry of a kind the format does not have.
    at = data.index(b"test_transfer.Account")
    with pytest.raises(copal.CorruptRecordError, match=r"entry 4 \(descriptor\): its checksum does not match"):
        _import(tmp_path, data[:at] + b"X" + data[at + 1 :], "descriptor")


def test_a_version_1_binary_export_is_still_imported(tmp_path: Path) -> None:
    """tests/fixtures/export_binary_v1.cplx is `_fill(accounts=5)` exported by copal before
    version 2 of the binary encoding (no entry checksums but the records'), frozen."""
    frozen = (FIXTURES / "export_binary_v1.cplx").read_bytes()
    assert frozen[:6] == b"CPLX\x01\x00"
    with copal.open(tmp_path / "expected") as expected:
        _fill(expected, accounts=5)
    assert _import(tmp_path, frozen, "imported")["records"] == 5 + 6
    assert assert_same_database(tmp_path / "expected", tmp_path / "imported") == 5 + 6


def _json_export_with_record_id(tmp_path: Path, oid: str, first: bool = False) -> bytes:
    """A JSON export whose last record is given the id `oid`, and moved before the others if
    `first`."""
    lines = _exported(tmp_path / "source", accounts=3, format="json").split(b"\n")
    records = [i for i, line in enumerate(lines) if b'"oid":"0x' in line]
    last = lines.pop(records[-1])
    old = last[last.index(b'"oid":"') : last.index(b'",', last.index(b'"oid":"'))]
    lines.insert(records[0] if first else records[-1], last.replace(old, b'"oid":"' + oid.encode(), 1))
    return b"\n".join(lines)


@pytest.mark.parametrize(
    ("oid", "why"),
    [
        ("0x0", "no descriptor of the export has its class, 0"),
        ("0xffffffffffffffff", "no descriptor of the export has its class, 65535"),
        ("0x3e8000000000000", "no descriptor of the export has its class, 1000"),
    ],
    ids=["zero", "max", "undeclared-class"],
)
def test_records_with_ids_no_object_of_the_export_can_have_are_refused(tmp_path: Path, oid: str, why: str) -> None:
    data = _json_export_with_record_id(tmp_path, oid, first=oid == "0x0")
    with pytest.raises(copal.CorruptRecordError, match=rf"entry \d+ \(record {oid}\): {why} \[BadOid\]"):
        _import(tmp_path, data)


def test_records_out_of_oid_order_are_refused(tmp_path: Path) -> None:
    data = _json_export_with_record_id(tmp_path, "0x1000000000000")
    with pytest.raises(copal.CorruptRecordError, match=r"\(record 0x1000000000000\): records must come in ascending oid order.*\[OutOfOrder\]"):
        _import(tmp_path, data)


def test_copal_import_reports_a_refused_record_in_one_line(tmp_path: Path) -> None:
    export = tmp_path / "bad.jsonl"
    export.write_bytes(_json_export_with_record_id(tmp_path, "0xffffffffffffffff"))
    done = subprocess.run([sys.executable, "-m", "copal", "import", str(tmp_path / "db"), str(export)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done
    assert done.stderr.count("\n") == 1 and "(record 0xffffffffffffffff)" in done.stderr and "[BadOid]" in done.stderr, done.stderr


def test_an_lz4_export_cut_before_its_end_mark_is_refused(tmp_path: Path) -> None:
    data = _exported(tmp_path / "source", accounts=3, compress="lz4")
    assert _import(tmp_path, data, "whole")["records"] == 3 + 6
    # Without its content checksum and end mark (8 bytes): the blocks hold the whole export.
    with pytest.raises(copal.CorruptRecordError, match="the LZ4 frame ends before its end mark"):
        _import(tmp_path, data[:-8])


def test_a_line_of_a_text_export_that_does_not_read_names_its_entry_and_line(tmp_path: Path) -> None:
    lines = _exported(tmp_path / "source", accounts=3, format="json").split(b"\n")
    lines[2] = lines[2][:-5]
    with pytest.raises(copal.CorruptRecordError, match=r"entry 2 \(line 3\): it does not decode \(.*\) \[BadPayload\]"):
        _import(tmp_path, b"\n".join(lines))


def test_a_line_of_a_text_export_whose_trees_would_outgrow_max_size_is_too_large(tmp_path: Path) -> None:
    """A line shorter than ``max_size`` but not laid out as copal writes it is read through
    parse trees, which take far more memory than its bytes: they are held to ``max_size`` too,
    and the import names the entry as too large, not as damaged."""
    lines = _exported(tmp_path / "source", accounts=3, format="json").split(b"\n")
    assert lines[0].startswith(b'{"$copal":2,"value":{"copal_export":')
    lines[0] = lines[0].replace(b'"value":{', b'"value":{"padding":[' + b"[]," * 10_000 + b"[]],", 1)
    max_size = 64 * 1024
    assert len(lines[0]) < max_size
    with copal.open(tmp_path / "target") as db:
        with pytest.raises(copal.CorruptRecordError, match=r"entry 0 \(line 1\): it is not laid out as copal writes it.*max_size = 65536.*\[TooLarge\]"):
            db.import_from(io.BytesIO(b"\n".join(lines)), max_size=max_size)
