"""An independent reader of the copal record format, written from docs/FORMAT.md alone.

It does not import copal: it exists to show that the specification is complete and language
independent. It turns bytes into the tagged JSON form of FORMAT.md section 12 and raises
:class:`DecodeError` (a ``ValueError``) on anything the specification says a reader must reject,
with ``kind`` set to the error kind of FORMAT.md section 1.

>>> decode_value(bytes.fromhex("0b020b0103021a01"), {})
{'list': [{'list': [{'int': 1}]}, {'backref': 1}]}
>>> decode_record(bytes.fromhex("1001000d00"), {1: ["data"]})["header"]
{'version': 1, 'flags': 0, 'descriptor': 1, 'tid': 0}
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

__all__ = ["DecodeError", "decode_value", "decode_record", "decode_descriptor"]

# Section 6: tags.
NONE, FALSE, TRUE, INT, BIGINT, FLOAT, COMPLEX, STR, STR_SURROGATES, BYTES = range(0x00, 0x0A)
BYTEARRAY, LIST, TUPLE, DICT, SET, FROZENSET = range(0x0A, 0x10)
DATETIME, DATE, TIME, TIMEDELTA, DECIMAL, UUID, ENUM, REF, OBJECT, SUBCLASS, BACKREF = range(0x10, 0x1B)
# docs/STREAM.md section 5: a string written earlier in a stream of version 2 or 3, and the
# typed objects of version 3, whose fields are written in the forms of their field kinds (a kind
# is the tag of the type it stands for, or ANY for a tagged value).
STRREF = 0x1B
TYPED_OBJECT, OBJECT_LIST = 0x1C, 0x1D
# docs/STREAM.md section 5, version 4: a copy of a tuple or frozenset superseded by a copy of it
# written inside its items (as a value, or as the base of a SUBCLASS), whose slot follows them.
SUPERSEDED_TUPLE, SUPERSEDED_FROZENSET = 0x1E, 0x1F
SUPERSEDED = {SUPERSEDED_TUPLE: "superseded_tuple", SUPERSEDED_FROZENSET: "superseded_frozenset"}
ANY = 0x00
FIELD_KINDS = {ANY, INT, FLOAT, STR, LIST}
LIST_ITEMS, LIST_OBJECTS, LIST_BACKREF = range(3)
MEMO_TAGS = {BYTEARRAY, LIST, TUPLE, DICT, SET, FROZENSET, OBJECT, SUBCLASS, TYPED_OBJECT, OBJECT_LIST, *SUPERSEDED}
ITEM_TAGS = {LIST: "list", TUPLE: "tuple", SET: "set", FROZENSET: "frozenset"}
# The value a superseded copy stands for.
SUPERSEDED_BASES = {SUPERSEDED_TUPLE: TUPLE, SUPERSEDED_FROZENSET: FROZENSET}
SUBCLASS_BASES = {LIST, TUPLE, DICT, SET, FROZENSET}
# docs/STREAM.md section 5, version 4: SUBCLASS bases that are scalar values, read from their tag
# on as the value they are (a string base takes no string slot).
SCALAR_SUBCLASS_BASES = {INT, BIGINT, FLOAT, COMPLEX, STR, STR_SURROGATES, BYTES}
# docs/STREAM.md section 5, version 4: a SUBCLASS base BYTEARRAY, a blob that takes no memo slot of
# its own (the SUBCLASS took the instance's).

# Section 6.5: time-zone flags and ranges.
TZ_FOLD, TZ_OFFSET, TZ_NAMED = 0x01, 0x02, 0x04
MICROS_PER_DAY = 86_400_000_000
MIN_DAYS, MAX_DAYS = -719_162, 2_932_896
MIN_DATETIME, MAX_DATETIME = MIN_DAYS * MICROS_PER_DAY, (MAX_DAYS + 1) * MICROS_PER_DAY - 1

# Section 8: limits.
MAX_DEPTH = 256
MAX_BIGINT_BYTES = 1 << 20

# Section 4: record header.
FORMAT_VERSION = 1
FLAG_MUTABLE_STATE = 0x1

# Section 6.6: the numeric-string syntax of DECIMAL text.
_DECIMAL = re.compile(
    r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf(?:inity)?|s?nan[0-9]*)",
    re.IGNORECASE,
)


class DecodeError(ValueError):
    """Bytes that are not valid copal data; ``kind`` is one of FORMAT.md's error kinds."""

    def __init__(self, kind: str, offset: int, detail: str = "") -> None:
        super().__init__(f"{kind} at byte {offset}" + (f": {detail}" if detail else ""))
        self.kind = kind
        self.offset = offset


_UNFINISHED = object()


class _Reader:
    def __init__(
        self,
        data: bytes,
        descriptors: Mapping[int, Sequence[str]],
        shared_strings: bool = False,
        kinds: Mapping[int, Sequence[int]] | None = None,
        type_names: Mapping[int, str] | None = None,
    ) -> None:
        self.data = data
        self.pos = 0
        self.descriptors = descriptors
        # Streams of version 2 and 3 only: the number of strings read so far (string slots).
        self.strings: int | None = 0 if shared_strings else None
        # Streams of version 3 only: the field kinds of each descriptor.
        self.kinds = kinds
        # Streams of version 4 only: the type name of each descriptor (superseded copies); it also
        # marks the version whose SUBCLASS bases may be scalar values or BYTEARRAY.
        self.type_names = type_names
        # One entry per memo slot taken: True once the value exists, False while an immutable
        # container (tuple, frozenset, or a subclass of them) is still reading its items.
        self.slots: list[bool] = []
        # The type of the value of each slot of a tuple or frozenset (or a subclass of one), once
        # it exists: what a superseded copy's slot is checked against.
        self.immutable_types: dict[int, Any] = {}

    # -- primitives (section 1) -------------------------------------------------------------
    def fail(self, kind: str, offset: int | None = None, detail: str = "") -> DecodeError:
        return DecodeError(kind, self.pos if offset is None else offset, detail)

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int) -> bytes:
        if n > self.remaining():
            raise self.fail("Truncated", detail=f"{n} bytes needed, {self.remaining()} left")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def varint(self) -> int:
        start = self.pos
        value = 0
        for i in range(10):
            byte = self.u8()
            if i == 9 and byte > 0x01:
                raise self.fail("BadVarint", start)
            value |= (byte & 0x7F) << (7 * i)
            if byte & 0x80 == 0:
                return value
        raise AssertionError("unreachable: the 10th byte is at most 0x01")

    def zigzag(self) -> int:
        u = self.varint()
        return (u >> 1) ^ -(u & 1)

    def length(self, min_size: int = 1) -> int:
        offset = self.pos
        n = self.varint()
        if n * min_size > self.remaining():
            raise self.fail("LengthTooLarge", offset, f"{n} does not fit")
        return n

    def blob(self) -> bytes:
        return self.take(self.length())

    def utf8(self) -> str:
        offset = self.pos
        try:
            return self.blob().decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("BadUtf8", offset) from None

    def descriptor_id(self) -> int:
        offset = self.pos
        value = self.varint()
        if value > 0xFFFF_FFFF:
            raise self.fail("OutOfRange", offset, "descriptor id")
        return value

    def field_count(self, descriptor: int, offset: int) -> int:
        if descriptor not in self.descriptors:
            raise self.fail("UnknownDescriptor", offset, str(descriptor))
        return len(self.descriptors[descriptor])

    # -- values (section 6) -----------------------------------------------------------------
    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self.fail("TooDeep")
        offset = self.pos
        tag = self.u8()
        slot = None
        if tag in MEMO_TAGS:
            slot = len(self.slots)
            self.slots.append(True)
        if tag == NONE:
            return None
        if tag in (FALSE, TRUE):
            return tag == TRUE
        if tag == INT:
            return {"int": self.zigzag()}
        if tag == BIGINT:
            payload = self.blob()
            if len(payload) > MAX_BIGINT_BYTES:
                raise self.fail("OutOfRange", offset, "integer size")
            return {"bigint": str(int.from_bytes(payload, "little", signed=True))}
        if tag == FLOAT:
            return {"float": self.take(8)[::-1].hex()}
        if tag == COMPLEX:
            return {"complex": [self.take(8)[::-1].hex(), self.take(8)[::-1].hex()]}
        if tag == STR:
            text = self.utf8()
            if self.strings is not None:
                self.strings += 1
            return {"str": text}
        if tag == STRREF and self.strings is not None:
            index = self.varint()
            if index >= self.strings:
                raise self.fail("BadBackRef", offset, f"string slot {index}")
            return {"strref": index}
        if tag == STR_SURROGATES:
            return {"str_surrogates": self.generalized_utf8()}
        if tag == BYTES:
            return {"bytes": self.blob().hex()}
        if tag == BYTEARRAY:
            return {"bytearray": self.blob().hex()}
        if tag in ITEM_TAGS or tag == DICT:
            out = self.container(tag, slot, depth)
            if tag in (TUPLE, FROZENSET):
                self.immutable_types[slot] = tag
            return out
        if tag in SUPERSEDED and self.type_names is not None:
            assert slot is not None
            return self.superseded(tag, slot, SUPERSEDED_BASES[tag], depth)
        if tag == DATETIME:
            flags = self.tz_flags()
            micros = self.zigzag()
            tz = self.tz_suffix(flags)
            if not MIN_DATETIME <= micros <= MAX_DATETIME:
                raise self.fail("OutOfRange", offset, "datetime")
            return {"datetime": {"micros": micros, "tz": tz, "fold": bool(flags & TZ_FOLD)}}
        if tag == DATE:
            days = self.zigzag()
            if not MIN_DAYS <= days <= MAX_DAYS:
                raise self.fail("OutOfRange", offset, "date")
            return {"date": {"days": days}}
        if tag == TIME:
            flags = self.tz_flags()
            micros = self.varint()
            tz = self.tz_suffix(flags)
            if micros >= MICROS_PER_DAY:
                raise self.fail("OutOfRange", offset, "time of day")
            return {"time": {"micros": micros, "tz": tz, "fold": bool(flags & TZ_FOLD)}}
        if tag == TIMEDELTA:
            days, seconds, micros = self.zigzag(), self.varint(), self.varint()
            if abs(days) > 999_999_999 or seconds >= 86_400 or micros >= 1_000_000:
                raise self.fail("OutOfRange", offset, "timedelta")
            return {"timedelta": {"days": days, "seconds": seconds, "micros": micros}}
        if tag == DECIMAL:
            text = self.utf8()
            if not _DECIMAL.fullmatch(text):
                raise self.fail("OutOfRange", offset, "decimal")
            return {"decimal": text}
        if tag == UUID:
            h = self.take(16).hex()
            return {"uuid": f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"}
        if tag == ENUM:
            at = self.pos
            descriptor = self.descriptor_id()
            self.field_count(descriptor, at)
            return {"enum": {"descriptor": descriptor, "member": self.utf8()}}
        if tag == REF:
            class_no, seq = self.varint(), self.varint()
            if class_no > 0xFFFF or seq >= 1 << 48:
                raise self.fail("OutOfRange", offset, "object id")
            return {"ref": {"class": class_no, "seq": seq}}
        if tag == OBJECT:
            at = self.pos
            descriptor = self.descriptor_id()
            count = self.field_count(descriptor, at)
            return {"object": {"descriptor": descriptor, "fields": [self.value(depth + 1) for _ in range(count)]}}
        if tag == SUBCLASS:
            at = self.pos
            descriptor = self.descriptor_id()
            count = self.field_count(descriptor, at)
            base_at = self.pos
            base = self.u8()
            if base in SUPERSEDED and self.type_names is not None:
                body = self.superseded(base, slot, self.subclass_type(descriptor, SUPERSEDED_BASES[base]), depth)
            elif base in SCALAR_SUBCLASS_BASES and self.type_names is not None:
                self.pos = base_at
                strings, self.strings = self.strings, None
                body = self.value(depth)
                self.strings = strings
            elif base == BYTEARRAY and self.type_names is not None:
                body = {"bytearray": self.blob().hex()}
            elif base not in SUBCLASS_BASES:
                raise self.fail("UnknownTag", base_at, f"0x{base:02x} is not a SUBCLASS base")
            else:
                body = self.container(base, slot, depth)
                if base in (TUPLE, FROZENSET):
                    self.immutable_types[slot] = self.subclass_type(descriptor, base)
            fields = [self.value(depth + 1) for _ in range(count)]
            return {"subclass": {"descriptor": descriptor, "base": body, "fields": fields}}
        if tag == BACKREF:
            return self.backref(self.varint(), offset)
        if tag == TYPED_OBJECT and self.kinds is not None:
            at = self.pos
            descriptor = self.descriptor_id()
            self.field_count(descriptor, at)
            return self.typed_object(descriptor, depth)
        if tag == OBJECT_LIST and self.kinds is not None:
            return self.object_list(self.length(1), depth)
        raise self.fail("UnknownTag", offset, f"0x{tag:02x}")

    def subclass_type(self, descriptor: int, base: int) -> Any:
        """The type of a SUBCLASS value: its descriptor's type name (where known) and base."""
        return ("subclass", descriptor if self.type_names is None else self.type_names[descriptor], base)

    def superseded(self, tag: int, slot: int, expected: Any, depth: int) -> Any:
        """A superseded copy after its tag (or SUBCLASS base), standing for a value of type
        `expected`: its items, then the slot whose value it is, which must have been taken inside
        the copy and hold a finished value of that type."""
        self.slots[slot] = False
        items = [self.value(depth + 1) for _ in range(self.length(1))]
        offset = self.pos
        by = self.varint()
        if not (slot < by < len(self.slots) and self.slots[by] and self.immutable_types.get(by) == expected):
            raise self.fail("BadBackRef", offset, f"slot {by} holds no finished copy of the value")
        self.slots[slot] = True
        self.immutable_types[slot] = expected
        return {SUPERSEDED[tag]: {"items": items, "by": by}}

    def backref(self, index: int, offset: int) -> Any:
        if index >= len(self.slots) or not self.slots[index]:
            raise self.fail("BadBackRef", offset, f"slot {index}")
        return {"backref": index}

    # -- typed objects (docs/STREAM.md section 5): decoded as the OBJECT and LIST they stand for
    def typed_object(self, descriptor: int, depth: int) -> Any:
        """The fields of a TYPED_OBJECT, whose memo slot is taken."""
        assert self.kinds is not None
        fields = [self.typed_field(kind, depth + 1) for kind in self.kinds[descriptor]]
        return {"object": {"descriptor": descriptor, "fields": fields}}

    def object_list(self, count: int, depth: int) -> Any:
        """An OBJECT_LIST (or a typed list of objects) after its count; the list's slot is taken."""
        at = self.pos
        descriptor = self.descriptor_id()
        self.field_count(descriptor, at)
        if count and depth + 1 > MAX_DEPTH:
            raise self.fail("TooDeep")
        if count and not self.descriptors[descriptor]:
            # Objects without fields take no bytes: the length rule does not bound their count.
            raise self.fail("LengthTooLarge", at, "objects without fields")
        items = []
        for _ in range(count):
            self.slots.append(True)
            items.append(self.typed_object(descriptor, depth + 1))
        return {"list": items}

    def typed_field(self, kind: int, depth: int) -> Any:
        if kind == ANY:
            return self.value(depth)
        if depth > MAX_DEPTH:
            raise self.fail("TooDeep")
        if kind == INT:
            return {"int": self.zigzag()}
        if kind == FLOAT:
            return {"float": self.take(8)[::-1].hex()}
        offset = self.pos
        head = self.varint()
        if kind == STR:
            assert self.strings is not None
            if head & 1:
                if head >> 1 >= self.strings:
                    raise self.fail("BadBackRef", offset, f"string slot {head >> 1}")
                return {"strref": head >> 1}
            if head >> 1 > self.remaining():
                raise self.fail("LengthTooLarge", offset)
            try:
                text = self.take(head >> 1).decode("utf-8")
            except UnicodeDecodeError:
                raise self.fail("BadUtf8", offset) from None
            self.strings += 1
            return {"str": text}
        mode, count = head & 3, head >> 2
        if mode == LIST_BACKREF:
            return self.backref(count, offset)
        if mode not in (LIST_ITEMS, LIST_OBJECTS):
            raise self.fail("OutOfRange", offset, "list form")
        if count > self.remaining():
            raise self.fail("LengthTooLarge", offset)
        self.slots.append(True)
        if mode == LIST_ITEMS:
            return {"list": [self.value(depth + 1) for _ in range(count)]}
        return self.object_list(count, depth)

    def container(self, tag: int, slot: int | None, depth: int) -> Any:
        """The body of a container; `slot` is the memo slot of the value it belongs to."""
        immutable = tag in (TUPLE, FROZENSET)
        if immutable and slot is not None:
            self.slots[slot] = False
        if tag == DICT:
            n = self.length(2)
            out: Any = {"dict": [[self.value(depth + 1), self.value(depth + 1)] for _ in range(n)]}
        else:
            n = self.length(1)
            out = {ITEM_TAGS[tag]: [self.value(depth + 1) for _ in range(n)]}
        if immutable and slot is not None:
            self.slots[slot] = True
        return out

    def generalized_utf8(self) -> list[int]:
        """Section 6.3: UTF-8 in which each surrogate code point is its own 3-byte sequence."""
        offset = self.pos
        try:
            text = self.blob().decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise self.fail("BadUtf8", offset) from None
        return [ord(c) for c in text]

    def tz_flags(self) -> int:
        offset = self.pos
        flags = self.u8()
        if flags & ~(TZ_FOLD | TZ_OFFSET | TZ_NAMED) or (flags & TZ_OFFSET and flags & TZ_NAMED):
            raise self.fail("OutOfRange", offset, "time-zone flags")
        return flags

    def tz_suffix(self, flags: int) -> Any:
        if flags & TZ_OFFSET:
            offset = self.pos
            micros = self.zigzag()
            if abs(micros) >= MICROS_PER_DAY:
                raise self.fail("OutOfRange", offset, "UTC offset")
            return {"offset": micros}
        if flags & TZ_NAMED:
            return {"zone": self.utf8()}
        return None

    def expect_end(self) -> None:
        if self.remaining():
            raise self.fail("TrailingBytes")


def decode_value(
    data: bytes,
    descriptors: Mapping[int, Sequence[str]],
    shared_strings: bool = False,
    kinds: Mapping[int, Sequence[int]] | None = None,
    type_names: Mapping[int, str] | None = None,
) -> Any:
    """One standalone value (memo slots from 0, depth 0); `descriptors` maps id -> field names.
    With `shared_strings` (the value of a stream of version 2 or later, docs/STREAM.md section
    5), every STR takes the next string slot and STRREF refers to one as ``{"strref": slot}``.
    With `kinds` (version 3 and later: id -> field kinds), TYPED_OBJECT and OBJECT_LIST are read,
    as the ``object`` and ``list`` they stand for. With `type_names` (version 4: id -> type
    name), SUPERSEDED_TUPLE and SUPERSEDED_FROZENSET are read, as values and SUBCLASS bases, as
    ``{"superseded_tuple": {"items": [...], "by": slot}}`` (and ``superseded_frozenset``), and so
    are SUBCLASS bases that are scalar values, as the value (``{"int": 5}``, ``{"str": "a"}``),
    and BYTEARRAY, as ``{"bytearray": hex}``."""
    r = _Reader(data, descriptors, shared_strings, kinds, type_names)
    out = r.value(0)
    r.expect_end()
    return out


def decode_record(data: bytes, descriptors: Mapping[int, Sequence[str]]) -> dict[str, Any]:
    """A record (section 4): its header and one value per field of its descriptor."""
    r = _Reader(data, descriptors)
    first = r.u8()
    version, flags = first >> 4, first & 0x0F
    if version != FORMAT_VERSION:
        raise r.fail("UnsupportedVersion", 0, str(version))
    if flags & ~FLAG_MUTABLE_STATE:
        raise r.fail("OutOfRange", 0, "record flags")
    at = r.pos
    descriptor = r.descriptor_id()
    tid = r.varint()
    count = r.field_count(descriptor, at)
    fields = [r.value(0) for _ in range(count)]
    r.expect_end()
    header = {"version": version, "flags": flags, "descriptor": descriptor, "tid": tid}
    return {"header": header, "fields": fields}


def decode_descriptor(data: bytes) -> dict[str, Any]:
    """A class descriptor (section 5): class number, type name and field names."""
    r = _Reader(data, {})
    offset = r.pos
    class_no = r.varint()
    if class_no > 0xFFFF:
        raise r.fail("OutOfRange", offset, "class number")
    type_name = r.utf8()
    fields = [r.utf8() for _ in range(r.length(1))]
    r.expect_end()
    return {"class": class_no, "type": type_name, "fields": fields}
