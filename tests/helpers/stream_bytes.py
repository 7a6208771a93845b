"""Hand-made standalone streams (docs/STREAM.md): the header, varints, strings and descriptor
tables that tests write byte by byte to reach the decoder's checks."""

from __future__ import annotations

MAGIC = b"CPL1"
#: The first bytes of a compressed payload's frame, by codec (gzip's are checked apart).
FRAME_MAGIC = {"zstd": "28b52ffd", "lz4": "04224d18"}


def stream(body: bytes, flags: int = 0, version: int = 1) -> bytes:
    """A stream with the given (uncompressed) payload."""
    return MAGIC + bytes([version, flags]) + varint(len(body)) + body


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def utf8(text: str) -> bytes:
    data = text.encode()
    return varint(len(data)) + data


def entry(type_name: str, fields: list[str], flags: int = 0) -> bytes:
    """One entry of a stream's descriptor table."""
    return bytes([flags]) + utf8(type_name) + varint(len(fields)) + b"".join(utf8(f) for f in fields)


def table(*entries: bytes) -> bytes:
    return varint(len(entries)) + b"".join(entries)
