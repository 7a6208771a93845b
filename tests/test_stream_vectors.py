"""The stream test vectors of ``tests/vectors/stream_vectors.json`` (docs/STREAM.md section 7),
checked with a small reference reader of the stream layer written from STREAM.md (values are
decoded by ``tests/reference_decoder.py``), and copal's reading and writing of them, with the
frozen vectors of earlier stream versions.

``python tests/test_stream_vectors.py --write-vectors`` regenerates the vector file from the
values and hand-made invalid streams defined below (review the diff: the file is normative).
"""

from __future__ import annotations

import collections
import datetime
import enum
import gzip
import json
import sys
import types
import zlib
import zoneinfo
from pathlib import Path
from typing import Any, Callable

import pytest

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import copal  # noqa: E402
import reference_decoder as rd  # noqa: E402
from copal import CorruptRecordError, Persistent  # noqa: E402
from helpers.compare import assert_same, persistent_state  # noqa: E402
from helpers.stream_bytes import FRAME_MAGIC, MAGIC, entry, stream, table, varint  # noqa: E402


VECTOR_FILE = Path(__file__).resolve().parent / "vectors" / "stream_vectors.json"
#: The vectors of stream version 1 as copal 0.1.0 wrote them, frozen (docs/STREAM.md section 9).
V1_VECTOR_FILE = VECTOR_FILE.with_name("stream_vectors_v1.json")
#: The vectors of stream version 2 as copal wrote them before version 3, frozen.
V2_VECTOR_FILE = VECTOR_FILE.with_name("stream_vectors_v2.json")


# -- the stream vectors ---------------------------------------------------------------------------
# The vectors' classes live in a module registered under a fixed name, so that their type names
# do not depend on how pytest imports this file.

VECTOR_MODULE = "copal_stream_vectors"
_module = types.ModuleType(VECTOR_MODULE)
sys.modules.setdefault(VECTOR_MODULE, _module)


def _in_module(cls: type) -> type:
    cls.__module__ = VECTOR_MODULE
    setattr(_module, cls.__name__, cls)
    return cls


@_in_module
class VPoint:
    def __init__(self, x: Any, y: Any) -> None:
        self.x = x
        self.y = y


@_in_module
class VColor(enum.Enum):
    RED = 1
    GREEN = 2


@_in_module
class VTags(list):  # type: ignore[type-arg]
    """A list subclass with an instance attribute ``label``."""


@_in_module
class VTuple(tuple):  # type: ignore[type-arg]
    """A tuple subclass with an instance attribute ``label``."""


@_in_module
class VInt(int):
    """An int subclass with an instance attribute ``label``."""


@_in_module
class VFloat(float):
    pass


@_in_module
class VComplex(complex):
    pass


@_in_module
class VStr(str):
    """A str subclass with an instance attribute ``label``."""


@_in_module
class VBytes(bytes):
    pass


@_in_module
class VBytearray(bytearray):
    """A bytearray subclass with an instance attribute ``label``."""


class Perm(enum.Flag):
    READ = 1
    WRITE = 2


_module.Perm = Perm
Perm.__module__ = VECTOR_MODULE


class VNote(Persistent):
    __copal_type__ = f"{VECTOR_MODULE}.VNote"

    def __init__(self, text: str) -> None:
        self.text = text


def _shared_list() -> Any:
    x = [1]
    return [x, x]


def _self_list() -> Any:
    items: list[Any] = []
    items.append(items)
    return items


def _point_cycle() -> Any:
    p = VPoint(None, "p")
    p.x = p
    return p


def _mixed() -> Any:
    tags = VTags(["a"])
    tags.label = "l"
    return [VPoint(1, 2), VColor.GREEN, tags, Perm.READ | Perm.WRITE]


def _note() -> Any:
    note = VNote("hi")
    note._v_cache = "not stored"
    return note


def _shared_note() -> Any:
    note = VNote("shared")
    return {"a": note, "b": [note]}


def _two_shapes() -> Any:
    q = VPoint(3, 4)
    q.z = 5
    return [VPoint(1, 2), q]


def _typed_fallback() -> Any:
    """The second point's values do not fit the kinds taken from the first: an OBJECT."""
    return [VPoint(1, "a"), VPoint("b", 2.5)]


def _typed_list_field() -> Any:
    """Lists in a field of kind LIST: of tagged items, of objects of one descriptor, and the
    same list again (a back-reference)."""
    shared = [None, "red"]
    return VPoint([VPoint([], "red"), VPoint([1.5], "blue")], VPoint(shared, VPoint(shared, "red")))


def _object_list_shared() -> Any:
    """A point met twice cannot be in an OBJECT_LIST: the list stays a LIST."""
    p = VPoint(1, "a")
    return [[p, VPoint(2, "b")], p]


def _recursive_tuple() -> Any:
    """A tuple whose list holds the tuple: the outer copy is superseded by the copy written
    inside the list (version 4)."""
    t: tuple[list[Any], str] = ([], "t")
    t[0].append(t)
    return t


def _recursive_tuple_twice() -> Any:
    """A tuple met again through two containers before either is written: two copies are
    superseded by the innermost one."""
    t: tuple[list[Any], dict[str, Any]] = ([], {})
    t[0].append(t)
    t[1]["t"] = t
    return t


def _recursive_frozenset() -> Any:
    p = VPoint(None, "f")
    f = frozenset([p])
    p.x = f
    return f


def _recursive_tuple_subclass() -> Any:
    t = VTuple([[]])
    t[0].append(t)
    t.label = "l"
    return t


def _int_subclass() -> Any:
    x = VInt(5)
    x.label = "l"
    return x


def _scalar_subclasses() -> Any:
    """Each scalar base (an int past 64 bits is a BIGINT, a str with a lone surrogate a
    STR_SURROGATES), one instance twice, then plain strings: the bases took no string slot, so
    a string equal to a base is a new STR, and the first plain string takes string slot 0, to
    which the last one refers."""
    shared = VFloat(1.5)
    return [VInt(-(2**64)), shared, VComplex(1, -0.0), VStr("h\u00e9"), VStr("\ud800"), VBytes(b""), shared,
            "x", "h\u00e9", "x"]


def _scalar_subclass_cycle() -> Any:
    s = VStr("s")
    s.label = [s]
    return s


def _bytearray_subclass() -> Any:
    """A bytearray subclass (version 4) met twice, whose field refers back to it: its BYTEARRAY
    base takes no memo slot of its own, so the BACKREFs name the SUBCLASS's slot 1."""
    b = VBytearray(b"ab")
    b.label = [b]
    return [b, b]


def _collections_containers() -> Any:
    """An OrderedDict whose order is not its dict table's, a defaultdict and a deque (twice):
    SUBCLASS values whose first field is the state (docs/FORMAT.md section 6.7)."""
    ordered = collections.OrderedDict(a=1, b=2)
    ordered.move_to_end("a")
    deque = collections.deque(["x"], maxlen=3)
    return [ordered, collections.defaultdict(list, {"k": [1]}), deque, deque]


# name -> (factory, compress, canonical: copal writes exactly these bytes for the value)
VALID: dict[str, tuple[Callable[[], Any], copal.serialize.Compression, bool]] = {
    "none": (lambda: None, None, True),
    "int_list": (lambda: [1, -1, 300], None, True),
    "str_and_bytes": (lambda: {"héllo": b"\x00\xff"}, None, True),
    "shared_list": (_shared_list, None, True),
    "self_cycle": (_self_list, None, True),
    "object": (lambda: VPoint(1, "a"), None, True),
    "object_cycle": (_point_cycle, None, True),
    "object_enum_subclass_flag": (_mixed, None, True),
    "one_class_two_shapes": (_two_shapes, None, True),
    "persistent_by_value": (_note, None, True),
    "persistent_shared": (_shared_note, None, True),
    "datetime_zone": (lambda: datetime.datetime(2024, 7, 1, 12, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")), None, True),
    "set_canonical": (lambda: {3, 1, 2}, None, True),
    "shared_strings": (lambda: ["red", "green", "red", {"red": "green"}], None, True),
    "object_list": (lambda: [VPoint(i, f"p{i % 2}") for i in range(3)], None, True),
    "typed_fallback": (_typed_fallback, None, True),
    "typed_list_field": (_typed_list_field, None, True),
    "object_list_shared": (_object_list_shared, None, True),
    "recursive_tuple": (_recursive_tuple, None, True),
    "recursive_tuple_twice": (_recursive_tuple_twice, None, True),
    "recursive_frozenset": (_recursive_frozenset, None, True),
    "recursive_tuple_subclass": (_recursive_tuple_subclass, None, True),
    "int_subclass": (_int_subclass, None, True),
    "scalar_subclasses": (_scalar_subclasses, None, True),
    "scalar_subclass_cycle": (_scalar_subclass_cycle, None, True),
    "collections_containers": (_collections_containers, None, True),
    "bytearray_subclass": (_bytearray_subclass, None, True),
    "zstd": (lambda: ["copal"] * 20, "zstd", False),
    "gzip": (lambda: ["copal"] * 20, "gzip", False),
    "lz4": (lambda: ["copal"] * 20, "lz4", False),
}


def _invalid() -> dict[str, tuple[bytes, str]]:
    """name -> (stream, error kind of docs/STREAM.md section 6)."""
    point = table(entry(f"{VECTOR_MODULE}.VPoint", ["x", "y"]))
    typed = point + b"\x03\x07"  # version 3: x is an INT, y a STR
    listed = table(entry(f"{VECTOR_MODULE}.VPoint", ["x"])) + b"\x0b"  # version 3: x is a LIST
    no_fields = table(entry(f"{VECTOR_MODULE}.VPoint", []))  # version 3: no kinds
    listed_no_fields = table(entry(f"{VECTOR_MODULE}.VPoint", ["x"]), entry(f"{VECTOR_MODULE}.VPoint", [])) + b"\x0b"
    gz = gzip.compress(table() + b"\x00", mtime=0)
    vtuple = table(entry(f"{VECTOR_MODULE}.VTuple", []))
    vint, vfloat, vstr = (table(entry(f"{VECTOR_MODULE}.{name}", [])) for name in ("VInt", "VFloat", "VStr"))
    vbytearray = table(entry(f"{VECTOR_MODULE}.VBytearray", []))
    labelled_bytearray = table(entry(f"{VECTOR_MODULE}.VBytearray", ["label"])) + b"\x00"  # label: ANY

    def v4(value: bytes, descriptors: bytes = table()) -> bytes:
        return stream(descriptors + value, version=4)

    return {
        "empty": (b"", "Truncated"),
        "magic_only": (MAGIC, "Truncated"),
        "bad_magic": (b"CPL2\x01\x00\x02\x00\x00", "BadMagic"),
        "pickle_is_not_a_stream": (b"\x80\x05N.", "BadMagic"),
        "version_5": (MAGIC + b"\x05\x00\x02\x00\x00", "UnsupportedVersion"),
        "reserved_stream_flag": (stream(table() + b"\x00", flags=0x04), "OutOfRange"),
        "length_past_the_end": (MAGIC + b"\x01\x00\x03\x00\x00", "Truncated"),
        "bytes_after_the_payload": (stream(table() + b"\x00") + b"\x00", "TrailingBytes"),
        "bad_length_varint": (MAGIC + b"\x01\x00" + b"\xff" * 10 + b"\x00", "BadVarint"),
        "bytes_after_the_value": (stream(table() + b"\x00\x00"), "TrailingBytes"),
        "no_value": (stream(table()), "Truncated"),
        "table_count_too_large": (stream(b"\x05\x00"), "LengthTooLarge"),
        "reserved_descriptor_flag": (stream(table(entry("a.B", [], flags=0x02)) + b"\x00"), "OutOfRange"),
        "unknown_descriptor": (stream(point + b"\x18\x01\x00\x00"), "UnknownDescriptor"),
        "ref_in_a_stream": (stream(table() + b"\x17\x01\x00"), "UnknownTag"),
        "strref_in_version_1": (stream(table() + b"\x0b\x02\x07\x01a\x1b\x00"), "UnknownTag"),
        "bad_value_tag": (stream(table() + b"\x20", version=4), "UnknownTag"),
        "superseded_tuple_in_version_3": (stream(table() + b"\x1e\x00\x00", version=3), "UnknownTag"),
        "superseded_subclass_base_in_version_3": (stream(vtuple + b"\x19\x00\x1e\x01\x0c\x00\x01", version=3), "UnknownTag"),
        # A list holding () (slot 1) and a copy superseded by it, taken before the copy (slot 2).
        "superseded_by_a_slot_before_it": (v4(b"\x0b\x02\x0c\x00\x1e\x00\x01"), "BadBackRef"),
        "superseded_by_itself": (v4(b"\x1e\x00\x00"), "BadBackRef"),
        "superseded_by_a_slot_not_taken": (v4(b"\x1e\x00\x01"), "BadBackRef"),
        "superseded_by_a_list": (v4(b"\x1e\x01\x0b\x00\x01"), "BadBackRef"),
        "superseded_by_the_unfinished_tuple_around_it": (v4(b"\x0c\x01\x1e\x00\x00"), "BadBackRef"),
        "superseded_frozenset_by_a_tuple": (v4(b"\x1f\x01\x0c\x00\x01"), "BadBackRef"),
        "superseded_subclass_by_a_plain_tuple": (v4(b"\x19\x00\x1e\x01\x0c\x00\x01", vtuple), "BadBackRef"),
        "superseded_slot_missing": (v4(b"\x1e\x00"), "Truncated"),
        "backref_inside_a_superseded_copy": (v4(b"\x1e\x02\x0c\x00\x1a\x00\x01"), "BadBackRef"),
        "scalar_subclass_base_in_version_3": (stream(vint + b"\x19\x00\x03\x0a", version=3), "UnknownTag"),
        "scalar_subclass_str_base_bad_utf8": (v4(b"\x19\x00\x07\x01\xff", vstr), "BadUtf8"),
        "scalar_subclass_float_base_truncated": (v4(b"\x19\x00\x05\x00\x00\xf8\x3f", vfloat), "Truncated"),
        "subclass_base_strref": (v4(b"\x0b\x02\x07\x01a\x19\x00\x1b\x00", vstr), "UnknownTag"),
        "subclass_base_bool": (v4(b"\x19\x00\x02", vint), "UnknownTag"),
        "bytearray_subclass_base_in_version_3": (stream(vbytearray + b"\x19\x00\x0a\x00", version=3), "UnknownTag"),
        "bytearray_subclass_blob_truncated": (v4(b"\x19\x00\x0a\x03ab", vbytearray), "LengthTooLarge"),
        "bytearray_subclass_blob_missing": (v4(b"\x19\x00\x0a", vbytearray), "Truncated"),
        # A list (slot 0) of a VBytearray (slot 1) whose label is a BACKREF to slot 2: the base
        # took no slot of its own.
        "bytearray_base_takes_no_slot": (v4(b"\x0b\x01\x19\x00\x0a\x00\x1a\x02", labelled_bytearray), "BadBackRef"),
        "typed_object_in_version_2": (stream(point + b"\x1c\x00\x02\x02a", version=2), "UnknownTag"),
        "object_list_in_version_2": (stream(point + b"\x1d\x00\x00", version=2), "UnknownTag"),
        "field_kinds_missing": (stream(point + b"\x03", version=3), "Truncated"),
        "unknown_field_kind": (stream(point + b"\x03\x18" + b"\x00", version=3), "OutOfRange"),
        "typed_object_unknown_descriptor": (stream(typed + b"\x1c\x01\x02\x02a", version=3), "UnknownDescriptor"),
        "typed_object_truncated": (stream(typed + b"\x1c\x00\x02", version=3), "Truncated"),
        "typed_str_past_the_end": (stream(typed + b"\x1c\x00\x02\x08a", version=3), "LengthTooLarge"),
        "typed_str_slot_not_taken": (stream(typed + b"\x1c\x00\x02\x01", version=3), "BadBackRef"),
        "typed_str_bad_utf8": (stream(typed + b"\x1c\x00\x02\x02\xff", version=3), "BadUtf8"),
        "object_list_count_too_large": (stream(typed + b"\x1d\x05\x00\x02\x02a", version=3), "LengthTooLarge"),
        # Objects without fields take no bytes: the length rule does not bound a count of them.
        "object_list_of_objects_without_fields": (stream(no_fields + b"\x1d\x01\x00", version=3), "LengthTooLarge"),
        "typed_list_of_objects_without_fields": (stream(listed_no_fields + b"\x1c\x00\x05\x01", version=3), "LengthTooLarge"),
        "object_list_unknown_descriptor": (stream(typed + b"\x1d\x01\x01\x02\x02a", version=3), "UnknownDescriptor"),
        "object_list_truncated": (stream(typed + b"\x1d\x02\x00\x02\x02a", version=3), "Truncated"),
        "typed_list_reserved_form": (stream(listed + b"\x1c\x00\x03", version=3), "OutOfRange"),
        "typed_list_count_too_large": (stream(listed + b"\x1c\x00\x10\x00", version=3), "LengthTooLarge"),
        "typed_list_backref_to_no_slot": (stream(listed + b"\x1c\x00\x06", version=3), "BadBackRef"),
        # 256 nested lists, then an OBJECT_LIST whose objects would be at depth 257.
        "object_list_too_deep": (stream(typed + b"\x0b\x01" * 256 + b"\x1d\x01\x00\x02\x02a", version=3), "TooDeep"),
        "strref_before_its_string": (stream(table() + b"\x0b\x02\x1b\x00\x07\x01a", version=2), "BadBackRef"),
        "strref_past_the_strings": (stream(table() + b"\x0b\x02\x07\x01a\x1b\x01", version=2), "BadBackRef"),
        "backref_to_no_slot": (stream(table() + b"\x0b\x01\x1a\x01"), "BadBackRef"),
        "zstd_garbage": (stream(b"\x28\xb5\x2f\xfd\x00garbage", flags=1), "BadCompression"),
        "gzip_truncated": (stream(gz[:-3], flags=2), "BadCompression"),
        "gzip_bytes_after_the_member": (stream(gz + b"\x00", flags=2), "BadCompression"),
        "gzip_not_gzip": (stream(table() + b"\x00", flags=2), "BadCompression"),
        "lz4_not_lz4": (stream(table() + b"\x00", flags=3), "BadCompression"),
    }


# -- a reference reader of the stream layer (docs/STREAM.md), values by reference_decoder --------


def _fail(kind: str, offset: int, detail: str = "") -> rd.DecodeError:
    return rd.DecodeError(kind, offset, detail)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = 0
    for i in range(10):
        if at + i >= len(data):
            raise _fail("Truncated", at + i)
        byte = data[at + i]
        if i == 9 and byte > 1:
            raise _fail("BadVarint", at)
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, at + i + 1
    raise _fail("BadVarint", at)


def read_header(data: bytes) -> dict[str, Any]:
    """Section 2: the header; returns the compression and the payload."""
    if data[:4] != MAGIC[: len(data[:4])]:
        raise _fail("BadMagic", 0)
    if len(data) < 5:
        raise _fail("Truncated", len(data))
    if data[4] not in (1, 2, 3, 4):
        raise _fail("UnsupportedVersion", 4)
    if len(data) < 6:
        raise _fail("Truncated", len(data))
    flags = data[5]
    if flags & ~0x03:
        raise _fail("OutOfRange", 5)
    length, at = _varint(data, 6)
    if at + length > len(data):
        raise _fail("Truncated", len(data))
    if at + length < len(data):
        raise _fail("TrailingBytes", at + length)
    return {"version": data[4], "compression": ["none", "zstd", "gzip", "lz4"][flags], "payload": data[at:]}


def decompress(compression: str, payload: bytes) -> bytes | None:
    """Section 3: the body; None for zstd without the ``zstandard`` package."""
    if compression == "none":
        return payload
    if compression == "gzip":
        d = zlib.decompressobj(31)
        try:
            body = d.decompress(payload)
        except zlib.error as e:
            raise _fail("BadCompression", 0, str(e)) from None
        if not d.eof or d.unused_data:
            raise _fail("BadCompression", len(payload))
        return body
    if compression == "lz4":
        try:
            import lz4.frame
        except ImportError:
            return None
        try:
            return bytes(lz4.frame.decompress(payload))
        except RuntimeError as e:
            raise _fail("BadCompression", 0, str(e)) from None
    try:
        import zstandard
    except ImportError:
        return None
    try:
        return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(payload))
    except zstandard.ZstdError as e:
        raise _fail("BadCompression", 0, str(e)) from None


def read_body(body: bytes, version: int) -> dict[str, Any]:
    """Section 4: the descriptor table (with field kinds from version 3), then one value
    (FORMAT.md section 6) ending the body; with shared strings (section 5) from version 2,
    typed objects from version 3 and superseded copies from version 4."""
    count, at = _varint(body, 0)
    if count > len(body) - at:
        raise _fail("LengthTooLarge", 0)
    descriptors = []
    for _ in range(count):
        if at >= len(body):
            raise _fail("Truncated", at)
        flags = body[at]
        if flags & ~0x01:
            raise _fail("OutOfRange", at)
        name, at = _utf8(body, at + 1)
        n, at = _varint(body, at)
        if n > len(body) - at:
            raise _fail("LengthTooLarge", at)
        fields = []
        for _ in range(n):
            field, at = _utf8(body, at)
            fields.append(field)
        descriptors.append({"flags": flags, "type": name, "fields": fields})
    kinds = None
    if version >= 3:
        kinds = {}
        for i, descriptor in enumerate(descriptors):
            n = len(descriptor["fields"])
            if n > len(body) - at:
                raise _fail("Truncated", len(body))
            descriptor["kinds"] = list(body[at : at + n])
            for k, kind in enumerate(descriptor["kinds"]):
                if kind not in rd.FIELD_KINDS:
                    raise _fail("OutOfRange", at + k, "field kind")
            kinds[i] = descriptor["kinds"]
            at += n
    fields = {i: d["fields"] for i, d in enumerate(descriptors)}
    type_names = {i: d["type"] for i, d in enumerate(descriptors)} if version >= 4 else None
    value = rd.decode_value(body[at:], fields, shared_strings=version >= 2, kinds=kinds, type_names=type_names)
    if _has_ref(value):
        raise _fail("UnknownTag", at, "REF")
    return {"descriptors": descriptors, "value": value}


def _utf8(data: bytes, at: int) -> tuple[str, int]:
    n, at = _varint(data, at)
    if n > len(data) - at:
        raise _fail("LengthTooLarge", at)
    try:
        return data[at : at + n].decode("utf-8"), at + n
    except UnicodeDecodeError:
        raise _fail("BadUtf8", at) from None


def _has_ref(node: Any) -> bool:
    if isinstance(node, list):
        return any(_has_ref(x) for x in node)
    if isinstance(node, dict):
        return "ref" in node or any(_has_ref(x) for x in node.values())
    return False


def read_stream(data: bytes) -> dict[str, Any]:
    header = read_header(data)
    body = decompress(header["compression"], header["payload"])
    if body is None:
        raise LookupError("zstd needs the zstandard package")
    return {"compression": header["compression"], "body": body.hex(), **read_body(body, header["version"])}


# -- vector file ----------------------------------------------------------------------------------


def build_vectors() -> dict[str, Any]:
    valid = []
    for name, (factory, compress, canonical) in VALID.items():
        data = copal.dumps(factory(), compress=compress)
        header = read_header(data)
        body = read_header(copal.dumps(factory()))["payload"]
        decoded = read_body(body, header["version"])
        valid.append({
            "name": name,
            "hex": data.hex(),
            "canonical": canonical,
            "version": header["version"],
            "compression": header["compression"],
            "body": body.hex(),
            "descriptors": decoded["descriptors"],
            "value": decoded["value"],
        })
    invalid = [{"name": name, "hex": data.hex(), "error": kind} for name, (data, kind) in _invalid().items()]
    return {
        "comment": "docs/STREAM.md section 7; generated by `python tests/test_stream_vectors.py --write-vectors`",
        "valid": valid,
        "invalid": invalid,
    }


VECTORS: dict[str, Any] = json.loads(VECTOR_FILE.read_text(encoding="utf-8")) if VECTOR_FILE.exists() else {}


def _ids(vectors: list[dict[str, Any]]) -> list[str]:
    return [v["name"] for v in vectors]


def _comparable(vectors: dict[str, Any]) -> dict[str, Any]:
    """The vectors without the bytes that a compressor library may write differently."""
    def strip(vector: dict[str, Any]) -> dict[str, Any]:
        compressed = vector.get("compression", "none") != "none" or vector["name"].startswith("gzip_")
        return {k: v for k, v in vector.items() if not (compressed and k == "hex")}

    return {k: [strip(v) for v in vs] if isinstance(vs, list) else vs for k, vs in vectors.items()}


def test_vector_file_is_current() -> None:
    assert _comparable(VECTORS) == _comparable(build_vectors()), (
        "run: python tests/test_stream_vectors.py --write-vectors (and review the diff)"
    )
    assert len(VECTORS["valid"]) >= 10 and len(VECTORS["invalid"]) >= 10


@pytest.mark.parametrize("vector", VECTORS.get("valid", []), ids=_ids(VECTORS.get("valid", [])))
def test_reference_reads_the_valid_vector(vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    header = read_header(data)
    assert header["compression"] == vector["compression"]
    assert header["version"] == vector.get("version", 1)
    body = decompress(header["compression"], header["payload"])
    if body is None:  # zstd or lz4 without its Python package: check the frame magic only
        assert header["payload"][:4] == bytes.fromhex(FRAME_MAGIC[header["compression"]])
        body = bytes.fromhex(vector["body"])
    assert body.hex() == vector["body"]
    decoded = read_body(body, header["version"])
    assert decoded["descriptors"] == vector["descriptors"]
    assert decoded["value"] == vector["value"]


#: What the vectors of recursive values must give back besides equal values: the identities.
RECURSIVE_IDENTITIES: dict[str, Callable[[Any], bool]] = {
    "recursive_tuple": lambda t: t[0][0] is t and t[1] == "t",
    "recursive_tuple_twice": lambda t: t[0][0] is t and t[1]["t"] is t,
    "recursive_frozenset": lambda f: len(f) == 1 and next(iter(f)).x is f and next(iter(f)).y == "f",
    "recursive_tuple_subclass": lambda t: type(t) is VTuple and t[0][0] is t and t.label == "l",
}


def _assert_loaded(name: str, expected: Any, loaded: Any) -> None:
    """`loaded`, read from the vector `name`, is the vector's value `expected`."""
    if name in RECURSIVE_IDENTITIES:
        assert type(loaded) is type(expected) and RECURSIVE_IDENTITIES[name](loaded)
    elif isinstance(expected, Persistent):
        assert type(loaded) is type(expected) and persistent_state(loaded) == persistent_state(expected)
    elif name == "persistent_shared":
        assert loaded["a"] is loaded["b"][0] and loaded["a"].text == "shared"
    else:
        assert_same(expected, loaded)


@pytest.mark.parametrize("vector", VECTORS.get("valid", []), ids=_ids(VECTORS.get("valid", [])))
def test_copal_reads_and_writes_the_valid_vector(vector: dict[str, Any]) -> None:
    factory, compress, canonical = VALID[vector["name"]]
    expected = factory()
    loaded = copal.loads(bytes.fromhex(vector["hex"]))
    _assert_loaded(vector["name"], expected, loaded)
    if canonical:
        assert copal.dumps(expected, compress=compress).hex() == vector["hex"]
    # Written again, what was read gives the vector's body, uncompressed.
    body = bytes.fromhex(vector["body"])
    assert copal.dumps(loaded) == MAGIC + bytes([vector["version"], 0]) + varint(len(body)) + body


#: The frozen vectors of older versions: (version, vector) pairs.
OLD_VECTORS = {version: json.loads(path.read_text(encoding="utf-8")) for version, path in ((1, V1_VECTOR_FILE), (2, V2_VECTOR_FILE))}
OLD_VALID = [(version, v) for version, vectors in OLD_VECTORS.items() for v in vectors["valid"]]
OLD_INVALID = [(version, v) for version, vectors in OLD_VECTORS.items() for v in vectors["invalid"]]


def _old_ids(pairs: list[tuple[int, dict[str, Any]]]) -> list[str]:
    return [f"v{version}-{v['name']}" for version, v in pairs]


@pytest.mark.parametrize(("version", "vector"), OLD_VALID, ids=_old_ids(OLD_VALID))
def test_older_version_vectors_are_still_read(version: int, vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    assert data[4] == version
    _assert_loaded(vector["name"], VALID[vector["name"]][0](), copal.loads(data))
    if vector["compression"] == "none":
        assert read_stream(data)["value"] == vector["value"]


@pytest.mark.parametrize(("version", "vector"), OLD_INVALID, ids=_old_ids(OLD_INVALID))
def test_older_version_invalid_vectors_are_still_rejected(version: int, vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    if vector["name"] == f"version_{version + 1}":
        # Refused by readers of `version`; this build reads the next one: the stream of None.
        assert copal.loads(data) is None
        return
    with pytest.raises(CorruptRecordError):
        copal.loads(data)


@pytest.mark.parametrize("vector", VECTORS.get("invalid", []), ids=_ids(VECTORS.get("invalid", [])))
def test_reference_rejects_the_invalid_vector(vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    if vector["name"] == "zstd_garbage":
        pytest.importorskip("zstandard")
    if vector["name"] == "lz4_not_lz4":
        pytest.importorskip("lz4.frame")
    with pytest.raises(rd.DecodeError) as caught:
        read_stream(data)
    assert caught.value.kind == vector["error"]


@pytest.mark.parametrize("vector", VECTORS.get("invalid", []), ids=_ids(VECTORS.get("invalid", [])))
def test_copal_rejects_the_invalid_vector(vector: dict[str, Any]) -> None:
    with pytest.raises(CorruptRecordError):
        copal.loads(bytes.fromhex(vector["hex"]))


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-vectors"]:
        sys.exit("usage: python tests/test_stream_vectors.py --write-vectors")
    VECTOR_FILE.write_text(json.dumps(build_vectors(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {VECTOR_FILE}")
