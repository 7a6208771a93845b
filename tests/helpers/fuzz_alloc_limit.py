"""Child process of tests/test_fuzz_decoding.py: loads one large record under an address-space
limit (RLIMIT_AS), so that a decoder that asks for memory out of proportion to the record makes
this process fail (a Rust allocation failure aborts it) instead of going unnoticed.

Usage: fuzz_alloc_limit.py DB_DIR LIMIT_MB KIND SIZE

KIND "benign": a Holder whose one field is BYTES of about SIZE bytes (must load within the
limit); "nested-tuples": 256 nested TUPLEs, each claiming as many items as bytes remain (the
length rule allows it), then zero padding to SIZE bytes (must fail with CorruptRecordError,
without the decoder pre-allocating 256 x SIZE item slots); "nested-lists": the same with LISTs. Streams (``copal.loads``, no
database): "stream-benign", a valid zstd stream of BYTES of SIZE zeros; "zstd-bomb", a stream
whose zstd payload (RLE blocks, 4 bytes per 128 KiB) inflates to SIZE zeros, a body invalid from
its third byte (must fail with CorruptRecordError without inflating all of it first). Prints
the outcome.
"""

from __future__ import annotations

import resource
import sys

import copal
from copal import CorruptRecordError

from helpers.models import Holder


def varint4(value: int) -> bytes:
    """`value` as a 4-byte (non-minimal) varint, so every level has the same layout."""
    return bytes(((value >> (7 * i)) & 0x7F) | (0x80 if i < 3 else 0) for i in range(4))


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def zstd_zeros(size: int) -> bytes:
    """A Zstandard frame (RFC 8878) of `size` zero bytes (a multiple of 128 KiB) in RLE blocks,
    without a declared content size."""
    blocks = size // (128 << 10)
    frame = bytearray(b"\x28\xb5\x2f\xfd")  # magic number 0xFD2FB528, little-endian
    frame += bytes([0x00, 0x38])  # frame header: no content size, no checksum; window 128 KiB
    for i in range(blocks):
        last = 1 if i == blocks - 1 else 0
        frame += (last | 1 << 1 | (128 << 10) << 3).to_bytes(3, "little") + b"\x00"  # RLE block
    return bytes(frame)


def load_stream(limit_mb: int, kind: str, size: int) -> int:
    if kind == "stream-benign":
        stream = copal.dumps(bytes(size), compress="zstd")
    else:
        payload = zstd_zeros(size)
        stream = b"CPL1" + bytes([1, 1]) + varint(len(payload)) + payload  # version 1, zstd
    resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, limit_mb << 20))
    try:
        copal.loads(stream)
        print("loaded")
    except CorruptRecordError:
        print("CorruptRecordError")
    return 0


def main() -> int:
    path, limit_mb, kind, size = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    if kind.startswith("stream") or kind == "zstd-bomb":
        return load_stream(limit_mb, kind, size)
    db = copal.open(path, map_size=256 << 20)
    with db.transaction() as tx:
        holder = Holder(value=None)
        tx.root["h"] = holder
    oid = holder._p_oid
    record = bytearray(db._debug_raw_record(oid)[:3])
    if kind == "benign":
        record += b"\x09" + varint4(size - len(record) - 5)
    else:
        tag = b"\x0b" if kind == "nested-lists" else b"\x0c"
        for _ in range(256):
            record += tag + varint4(size - len(record) - 5)
    record += bytes(size - len(record))
    db._debug_put_raw_record(oid, bytes(record))
    db.close()

    db = copal.open(path, map_size=256 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, limit_mb << 20))
    try:
        with db.transaction() as tx:
            vars(tx.get(oid))
        print("loaded")
    except CorruptRecordError:
        print("CorruptRecordError")
    return 0


if __name__ == "__main__":
    sys.exit(main())
