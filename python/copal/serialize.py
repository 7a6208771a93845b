"""Standalone serialization: object graphs as self-contained bytes, without a database.

A stream (specified in docs/STREAM.md) holds one value in copal's record format together with
the descriptors of the classes it uses, so it can be read by any copal, in any process, that has
the same classes imported. Shared references and cycles are kept. Persistent objects are written
by value and come back as new, unsaved persistent objects, so ``loads(dumps(graph))`` is an
equal graph independent of any database. As with the database, reading never imports modules or
runs code named by the data: classes are looked up among already-imported modules.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, Protocol, TypeAlias

from . import _core
from .errors import CorruptRecordError

__all__ = ["dumps", "loads", "dump", "load", "pack_many", "Archive", "Compression", "Format", "DEFAULT_MAX_SIZE"]

Codec: TypeAlias = Literal["zstd", "gzip", "lz4"]
#: The ``format`` argument of :func:`dumps`.
Format: TypeAlias = Literal["copal", "json", "xml"]
#: The ``compress`` argument: a codec name, a ``(codec, level)`` pair, or ``None``.
Compression: TypeAlias = Codec | tuple[Codec, int] | None

# docs/STREAM.md section 2: the flags' compression codes, and the header before the length.
_CODES: dict[str, int] = {"zstd": 1, "gzip": 2, "lz4": 3}
_MAGIC = b"CPL1"
_FIXED_HEADER = len(_MAGIC) + 2
_MAX_VARINT = 10
_CHUNK = 1 << 20

#: The default ``max_size`` of :func:`loads`, :func:`load` and :class:`Archive` (256 MiB): the
#: most bytes a compressed payload may inflate to (docs/STREAM.md section 3).
DEFAULT_MAX_SIZE: int = _core.DEFAULT_MAX_SIZE

#: A read-only sequence over the values of an archive written by :func:`pack_many`.
Archive = _core.Archive


class SupportsWrite(Protocol):
    """A binary file or stream opened for writing."""

    def write(self, data: bytes, /) -> object: ...


class SupportsRead(Protocol):
    """A binary file or stream opened for reading."""

    def read(self, size: int = -1, /) -> bytes: ...


def _compression(compress: Compression) -> tuple[int, int | None]:
    if compress is None:
        return 0, None
    if isinstance(compress, tuple):
        if len(compress) != 2:
            raise ValueError(f"compress must be a codec name or a (codec, level) pair, not {compress!r}")
        codec, level = compress
        if isinstance(level, bool) or not isinstance(level, int):
            raise TypeError(f"the compression level must be an int, not {type(level).__name__}")
    else:
        codec, level = compress, None
    code = _CODES.get(codec) if isinstance(codec, str) else None
    if code is None:
        raise ValueError(f"unknown compression {codec!r}: use 'zstd', 'gzip' or 'lz4'")
    return code, level


def dumps(obj: Any, *, compress: Compression = None, format: Format = "copal") -> bytes:
    """Serializes the object graph of ``obj`` into a standalone stream.

    Everything a copal record can hold may appear in the graph (docs/FORMAT.md section 10),
    persistent objects included: they are written by value (their stored attributes, not their
    ``_v_`` and ``_p_`` ones; ghosts are loaded first). Each object reachable along several
    paths, and each cycle, is written once and comes back shared the same way.

    Args:
        obj: The root of the graph.
        compress: ``"zstd"`` (level 3), ``"gzip"`` (level 6) or ``"lz4"`` (the LZ4 frame
            format, fastest to decompress, no levels) to compress the payload, or a ``(codec,
            level)`` pair: zstd accepts -131072 to 22 (negative levels are faster), gzip 0 to 9.
            :func:`loads` detects the compression by itself. A stream compresses its payload
            (its header stays readable); a JSON or XML document is compressed whole, in the
            codec's standard frame, so ``gunzip``, ``zstd -d`` and ``lz4 -d`` read it too.
        format: ``"copal"`` (the stream of docs/STREAM.md), ``"json"`` or ``"xml"``: a
            document (docs/TEXT_FORMATS.md) that other languages can read; JSON uses JSON's own
            types where they fit and ``$``-tagged objects elsewhere (``{"$set": [...]}``,
            ``{"$type": "mod.Class", ...fields}``, ``{"$ref": n}`` for shared objects), XML one
            element per value (``<set>``, ``<object type="mod.Class">``, ``<ref id="n"/>``).
            :func:`loads` detects the format by itself.

    Returns:
        bytes: The stream, made of the magic bytes ``b"CPL1"``, a version and flags byte, the payload
        length, and the payload (the class descriptors, then the value, in which each distinct
        string is written once: stream version 3, or 4 for a tuple or frozenset that contains
        itself or an instance of a subclass of int, float, complex, str or bytes,
        docs/STREAM.md); or, with
        ``format="json"`` or ``"xml"``, the document in UTF-8 (bytes, ready for a file or a
        socket, as orjson and msgspec return them; ``.decode()`` gives the str), compressed
        whole if ``compress`` is given.

    Raises:
        TypeError: The graph holds a value copal cannot store (the message names its path:
            among them a ``collections.defaultdict`` whose ``default_factory`` is neither None
            nor a built-in type such as ``list``, docs/FORMAT.md section 6.7), or,
            with ``format="json"`` or ``"xml"``, a tuple or frozenset that contains itself
            through a mutable container or an instance of a subclass of int, float, complex,
            str or bytes (binary streams hold both).
        ValueError: Values are nested deeper than 256 levels, or ``compress`` or ``format`` is
            invalid.

    Example:
        >>> import copal
        >>> shared = [1, 2]
        >>> data = copal.dumps({"a": shared, "b": shared, "when": (2024, "x")})
        >>> data[:4]
        b'CPL1'
        >>> back = copal.loads(data)
        >>> back
        {'a': [1, 2], 'b': [1, 2], 'when': (2024, 'x')}
        >>> back["a"] is back["b"]
        True
        >>> copal.loads(copal.dumps(list(range(1000)), compress=("zstd", 9)))[-1]
        999
        >>> copal.dumps({"tags": {"x"}, "n": 1}, format="json")
        b'{"$copal":2,"value":{"tags":{"$set":["x"]},"n":1}}'
    """
    if compress is None and format == "copal":
        # The common call, without the argument handling below (a tenth of a small dumps).
        return _core.dumps_raw(obj)
    if format in ("json", "xml"):
        code, level = _compression(compress)
        document = _core.dumps_json_raw(obj) if format == "json" else None
        if document is None:
            # The direct JSON writer gives the transcoder's document several times faster; it
            # hands the graphs it does not write (docs/TEXT_FORMATS.md section 5) to the transcoder.
            document = _core.dumps_text_raw(obj, format)
        return document if code == 0 else _core.compress_text_raw(document, code, level)
    if format != "copal":
        raise ValueError(f"unknown format {format!r}: use 'copal', 'json' or 'xml'")
    code, level = _compression(compress)
    return _core.dumps_raw(obj, code, level)


def pack_many(objects: Iterable[Any], *, compress: Compression = None) -> bytes:
    """Serializes many values into one archive, from which each is read back on its own.

    Each value is encoded as by :func:`dumps`, with its own shared references and cycles (two
    values of the archive never share an object when read back); the class descriptors are
    stored once for the whole archive, and an index of offsets lets :class:`Archive` decode
    value ``k`` without reading the others (layout: docs/STREAM.md section 10).

    Args:
        objects: The values, in order (any iterable).
        compress: As for :func:`dumps`. A compressed archive is decompressed as a whole when
            opened; an uncompressed one is read in place (a file is memory-mapped).

    Returns:
        bytes: The archive, made of the magic bytes ``b"CPA1"``, a version and flags byte, the section length,
        and the section (descriptor table, values, offset index, count).

    Raises:
        TypeError, ValueError: As for :func:`dumps`.

    Example:
        >>> import copal
        >>> data = copal.pack_many([{"n": i} for i in range(1000)])
        >>> archive = copal.Archive(data)
        >>> len(archive), archive[7], archive[-1]
        (1000, {'n': 7}, {'n': 999})
        >>> archive[1:3]
        [{'n': 1}, {'n': 2}]
    """
    code, level = _compression(compress)
    return _core.pack_many_raw(objects, code, level)


def loads(data: bytes | bytearray | memoryview | str, *, max_size: int = DEFAULT_MAX_SIZE) -> Any:
    """Rebuilds the object graph of a stream or JSON document written by :func:`dumps`.

    The format is detected: a ``str``, or bytes whose first non-blank byte is ``{`` or ``<``,
    is a JSON or XML document (UTF-8); bytes in a gzip, zstd or LZ4 frame (a compressed
    document) are decompressed first; other bytes are a stream, whose compression is detected
    from its header. Classes are resolved as when loading
    from a database: persistent classes by their stored name (including
    ``__copal_aliases__``), other classes among modules already imported; nothing is imported
    and no constructor, ``__new__`` or ``__setstate__`` runs. Persistent objects come back
    unsaved (``_p_status == "unsaved"``), attached to no database.

    Args:
        data: Exactly one stream, or one JSON or XML document (compressed or not).
        max_size: The most bytes a compressed payload may inflate to (256 MiB by default,
            ``copal.serialize.DEFAULT_MAX_SIZE``). Decompression stops, and loading fails, as soon as the
            output would pass it, so a small hostile stream cannot make the process allocate
            gigabytes. It bounds a compressed document the same way. Uncompressed payloads
            are not limited: their size is that of ``data``.

    Returns:
        The root of the rebuilt graph.

    Raises:
        CorruptRecordError: ``data`` is not exactly one well-formed stream (wrong magic bytes,
            truncated, trailing bytes, damaged compression or values), or its payload inflates
            beyond ``max_size``; or it is not a JSON or XML document of docs/TEXT_FORMATS.md.
        SchemaError: A class of the stream is not imported, or names something that may not be
            rebuilt that way (a function, a class defining ``__new__``, a ``defaultdict``
            factory that is not one of the built-in types copal stores, ...).
        TypeError, ValueError: ``max_size`` is not a non-negative int.

    Example:
        >>> import copal
        >>> copal.loads(copal.dumps({"x": {1.5, 2.5}}, compress="gzip"))
        {'x': {1.5, 2.5}}
        >>> copal.loads(b"not a stream")
        Traceback (most recent call last):
        ...
        copal.errors.CorruptRecordError: corrupt stream: not a copal stream (it does not start with the magic bytes "CPL1")
    """
    return _core.loads(data, max_size)


def dump(obj: Any, file: SupportsWrite, *, compress: Compression = None, format: Format = "copal") -> None:
    """Writes the stream or document of ``obj`` (see :func:`dumps`) to a binary file or stream.

    Streams are self-delimiting, so several can be written one after the other to one file and
    read back one at a time by :func:`load`. A JSON or XML document is not: :func:`load` reads
    it to the end of the file, so write one per file.

    Args:
        obj: The root of the graph.
        file: A binary file or stream with a ``write`` method.
        compress: As for :func:`dumps`.
        format: As for :func:`dumps`.

    Example:
        >>> import copal, io
        >>> buffer = io.BytesIO()
        >>> copal.dump({"first": 1}, buffer)
        >>> copal.dump(["second"], buffer, compress="zstd")
        >>> _ = buffer.seek(0)
        >>> copal.load(buffer), copal.load(buffer)
        ({'first': 1}, ['second'])
    """
    file.write(dumps(obj, compress=compress, format=format))


def load(file: SupportsRead, *, max_size: int = DEFAULT_MAX_SIZE) -> Any:
    """Reads one stream or document from a binary file or stream and rebuilds its graph (see
    :func:`loads`).

    It reads exactly the bytes of one stream (the header gives its length), so it works on
    pipes and sockets and leaves the file positioned after the stream. Anything else (a JSON or
    XML document, compressed or not) is read to the end of the file.

    Args:
        file: A binary file or stream with a ``read`` method.
        max_size: As for :func:`loads`.

    Returns:
        The root of the rebuilt graph.

    Raises:
        EOFError: The file is at its end before the first byte of a stream.
        CorruptRecordError: The bytes are not a well-formed stream or document, or the file ends
            inside a stream.
        SchemaError: As for :func:`loads`.

    Example:
        >>> import copal, io
        >>> buffer = io.BytesIO(copal.dumps([1, "two"]))
        >>> copal.load(buffer)
        [1, 'two']
    """
    head = _read(file, _FIXED_HEADER)
    if not head:
        raise EOFError("no copal stream: the file is at its end")
    if head[: len(_MAGIC)] != _MAGIC[: len(head)]:
        # A document runs to the end of the file. Anything else is refused at once, without
        # waiting for the end of a pipe or socket that sends garbage.
        if _core.payload_kind(head) == "binary":
            raise CorruptRecordError('corrupt stream: not a copal stream (it does not start with the magic bytes "CPL1")')
        return loads(head + _read_to_end(file), max_size=max_size)
    if len(head) < _FIXED_HEADER:
        return loads(head)  # reports the truncation
    # The payload length: an unsigned LEB128 varint of at most 10 bytes.
    length_bytes = bytearray()
    length = 0
    while len(length_bytes) < _MAX_VARINT:
        byte = _read(file, 1)
        if not byte:
            return loads(head + bytes(length_bytes))  # reports the truncation
        length_bytes += byte
        length |= (byte[0] & 0x7F) << (7 * (len(length_bytes) - 1))
        if not byte[0] & 0x80:
            break
    else:
        return loads(head + bytes(length_bytes))  # reports the malformed varint
    return loads(head + bytes(length_bytes) + _read(file, length), max_size=max_size)


def _read_to_end(file: SupportsRead) -> bytes:
    parts: list[bytes] = []
    while part := _read(file, _CHUNK):
        parts.append(part)
    return b"".join(parts)


def _read(file: SupportsRead, size: int) -> bytes:
    """Up to ``size`` bytes (fewer only at the end of the file), read in bounded chunks so that
    a damaged length cannot make it allocate more than the file holds."""
    parts: list[bytes] = []
    remaining = size
    while remaining > 0:
        part = file.read(min(remaining, _CHUNK))
        if not isinstance(part, (bytes, bytearray)):
            kind = type(part).__name__
            raise TypeError(f"copal.load needs a binary file, whose read() returns bytes, not {kind}")
        if not part:
            break
        parts.append(part)
        remaining -= len(part)
    return b"".join(parts)

