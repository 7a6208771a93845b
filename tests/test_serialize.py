"""copal.dumps / loads / dump / load: standalone streams (docs/STREAM.md).

Round trips of every value type and of graphs with shared references and cycles (hypothesis),
persistent objects written by value, compression and its detection, malformed input (always
CorruptRecordError, never a panic), class resolution (SchemaError, nothing imported, nothing
executed), and the stream test vectors of ``tests/vectors/stream_vectors.json``, checked with a
small reference reader of the stream layer written from STREAM.md (values are decoded by
``tests/reference_decoder.py``).

``python tests/test_serialize.py --write-vectors`` regenerates the vector file from the values
and hand-made invalid streams defined below (review the diff: the file is normative).
"""

from __future__ import annotations

import collections
import datetime
import decimal
import enum
import gzip
import io
import json
import math
import os
import sys
import types
import uuid
import zlib
import zoneinfo
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import copal  # noqa: E402
import reference_decoder as rd  # noqa: E402
from copal import CorruptRecordError, Persistent, PersistentDict, PersistentList, SchemaError  # noqa: E402
from helpers.c_classes import class_made_by_c  # noqa: E402
from helpers.compare import READS_INSTANCE_VALUES, assert_same, has_made_dict  # noqa: E402
from helpers.fuzz_alloc_limit import zstd_zeros  # noqa: E402
from helpers.models import (  # noqa: E402
    HOOKED_CALLBACKS, Color, Holder, Hooked, Item, Level, Node, Point, Tagged, TaggedDict, Vector,
)
from helpers.strategies import value_graphs, values  # noqa: E402
from test_roundtrip import CONTAINERS, SCALARS  # noqa: E402

VECTOR_FILE = Path(__file__).resolve().parent / "vectors" / "stream_vectors.json"
#: The vectors of stream version 1 as copal 0.1.0 wrote them, frozen (docs/STREAM.md section 9).
V1_VECTOR_FILE = VECTOR_FILE.with_name("stream_vectors_v1.json")
#: The vectors of stream version 2 as copal wrote them before version 3, frozen.
V2_VECTOR_FILE = VECTOR_FILE.with_name("stream_vectors_v2.json")
MAGIC = b"CPL1"
COMPRESSIONS: list[copal.serialize.Compression] = [None, "zstd", "gzip", "lz4", ("zstd", 1), ("gzip", 1), ("zstd", -5)]


#: The round-trip tests run in every format (docs/TEXT_FORMATS.md for JSON and XML).
FORMATS = ["copal", "json", "xml"]


def roundtrip(value: Any, fmt: str, compress: copal.serialize.Compression = None) -> Any:
    if fmt == "copal":
        return copal.loads(copal.dumps(value, compress=compress))
    if compress is not None:
        return copal.loads(copal.dumps(value, format=fmt, compress=compress))
    document = copal.dumps(value, format=fmt)
    assert type(document) is bytes
    # A str of the document (as read from a text file) reads the same.
    back = copal.loads(document.decode())
    assert type(back) is type(value)
    return copal.loads(document)


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


# -- round trips ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", SCALARS.values(), ids=SCALARS.keys())
@pytest.mark.parametrize("fmt", FORMATS)
def test_scalar_roundtrip(value: Any, fmt: str) -> None:
    assert_same(value, roundtrip(value, fmt))


@pytest.mark.parametrize("value", CONTAINERS.values(), ids=CONTAINERS.keys())
@pytest.mark.parametrize("fmt", FORMATS)
def test_container_roundtrip(value: Any, fmt: str) -> None:
    loaded = roundtrip(value, fmt)
    assert loaded == value
    assert_same(value, loaded)


@pytest.mark.parametrize("fmt", FORMATS)
def test_embedded_objects_roundtrip(fmt: str) -> None:
    tagged = Tagged([1, 2])
    tagged.label = "tagged"
    value = [
        Point(1, [2, 3]),
        Vector(1.0, -0.0, ["a"]),
        Color.RED,
        Level.HIGH,
        tagged,
        TaggedDict(a=1),
        datetime.datetime(2024, 3, 31, 2, 30, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")),
        decimal.Decimal("-1.50"),
        uuid.UUID(int=7),
        math.pi,
    ]
    loaded = roundtrip(value, fmt)
    assert_same(value, loaded)
    assert loaded[2] is Color.RED and loaded[3] is Level.HIGH


@pytest.mark.parametrize("fmt", FORMATS)
def test_composite_flag_roundtrip(fmt: str) -> None:
    value = [Perm.READ | Perm.WRITE, Perm(0), Perm.WRITE]
    assert roundtrip(value, fmt) == value


@settings(max_examples=300, deadline=None)
@given(value=values(), compress=st.sampled_from(COMPRESSIONS))
@pytest.mark.parametrize("fmt", FORMATS)
def test_hypothesis_values_roundtrip(value: Any, compress: copal.serialize.Compression, fmt: str) -> None:
    loaded = roundtrip(value, fmt, compress)
    assert loaded == value
    assert_same(value, loaded)


@settings(max_examples=300, deadline=None)
@given(nodes=value_graphs())
@pytest.mark.parametrize("fmt", FORMATS)
def test_hypothesis_value_graphs_roundtrip(nodes: list[Any], fmt: str) -> None:
    """Shared references and cycles anywhere in the graph come back with the same shape."""
    assert_same(nodes, roundtrip(nodes, fmt))


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_memo_across_the_stream(fmt: str) -> None:
    shared = [1]
    point = Point(shared, None)
    value = {"a": shared, "b": (shared, point), "c": [point, {"p": point}]}
    loaded = roundtrip(value, fmt)
    assert loaded["a"] is loaded["b"][0] is loaded["b"][1].x
    assert loaded["b"][1] is loaded["c"][0] is loaded["c"][1]["p"]


def _twice(value: Any) -> list[Any]:
    """`value` twice in a new list, and referred to by nothing else once this returns."""
    return [value, value]


def _node_cycle() -> list[Any]:
    a, b = Node("a"), Node("b")
    a.next, b.next = b, a
    return [a]


def _shared_without_other_references() -> dict[str, Any]:
    """Values reachable twice in the graph whose only references are the graph's own: the
    encoder's reference-count shortcut (encode/mod.rs `is_unshared`) must not take them for
    unshared. Built in functions so that no local variable of the test refers to them."""
    in_dict_subclass = TaggedDict(p=Point(1, 2))
    return {
        "object": _twice(Point(1, 2)),
        "list": _twice([1]),
        "dict": _twice({"k": 1}),
        "tuple": _twice((1, [2])),
        "set": _twice({1, 2}),
        "frozenset_in_a_set": (lambda f: [{f}, f])(frozenset({3})),
        "bytearray": _twice(bytearray(b"x")),
        "list_subclass": _twice(Tagged([1])),
        "cycle": _node_cycle(),
        # The encoder reads a dict subclass through a temporary copy: one more reference.
        "through_a_dict_subclass": [in_dict_subclass, in_dict_subclass["p"]],
        "before_a_dict_subclass": (lambda d: [d["p"], d])(TaggedDict(p=Point(3, 4))),
    }


@pytest.mark.parametrize("fmt", FORMATS)
def test_values_shared_only_inside_the_graph_stay_shared(fmt: str) -> None:
    loaded = roundtrip(_shared_without_other_references(), fmt)
    for name in ("object", "list", "dict", "tuple", "set", "bytearray", "list_subclass"):
        assert loaded[name][0] is loaded[name][1], name
    assert next(iter(loaded["frozenset_in_a_set"][0])) is loaded["frozenset_in_a_set"][1]
    a = loaded["cycle"][0]
    assert a.next.next is a and a.next.label == "b"
    assert loaded["through_a_dict_subclass"][0]["p"] is loaded["through_a_dict_subclass"][1]
    assert loaded["before_a_dict_subclass"][1]["p"] is loaded["before_a_dict_subclass"][0]


def test_root_on_a_cycle_is_kept_whatever_its_reference_count() -> None:
    """The root of `dumps_raw` can be held by a borrowed reference (here the interpreter's
    stack holds the only reference besides the cycle's): it must stay in the identity map."""
    loaded = copal.loads(copal._core.dumps_raw(_self_list()))
    assert loaded[0] is loaded


def test_values_met_once_are_written_without_back_references() -> None:
    """Values no one else refers to take no identity-map entry but still their memo slot: the
    back-reference after them points to the right slot."""
    shared = [0]
    value = [[Point(i, [i]) for i in range(3)], shared, shared]
    loaded = copal.loads(copal.dumps(value))
    assert_same(value, loaded)
    assert loaded[1] is loaded[2]


@pytest.mark.parametrize("fmt", FORMATS)
def test_cycles_through_lists_dicts_and_objects(fmt: str) -> None:
    items: list[Any] = []
    items.append(items)
    mapping: dict[str, Any] = {}
    mapping["self"] = mapping
    a, b = Node("a"), Node("b")
    a.next, b.next = b, a
    through_tuple: list[Any] = []
    through_tuple.append((through_tuple,))
    loaded = roundtrip([items, mapping, a, through_tuple], fmt)
    assert loaded[0][0] is loaded[0]
    assert loaded[1]["self"] is loaded[1]
    assert loaded[2].next.next is loaded[2] and loaded[2].next.label == "b"
    assert loaded[3][0][0] is loaded[3]


def test_unsupported_values_are_refused_with_their_path() -> None:
    with pytest.raises(TypeError, match=r"value\[1\]\['f'\]"):
        copal.dumps([1, {"f": lambda: None}])


def test_too_deep_values_are_refused() -> None:
    value: list[Any] = []
    for _ in range(300):
        value = [value]
    with pytest.raises(ValueError, match="nested deeper"):
        copal.dumps(value)


def test_equal_values_make_equal_streams() -> None:
    """Streams are deterministic (sets in canonical order), so they can be compared or hashed."""
    assert copal.dumps({"s": {3, 1, 2}, "p": Point(1, 2)}) == copal.dumps({"s": {2, 3, 1}, "p": Point(1, 2)})


def test_equal_strings_are_stored_once() -> None:
    """Stream version 2 writes a string equal to an earlier one as a STRREF (docs/STREAM.md
    section 5), whether it is the same object or not."""
    long_text = "x" * 100
    copies = [long_text] * 500 + ["".join(["x"] * 100) for _ in range(500)]
    data = copal.dumps(copies)
    assert data[4] >= 2
    assert data.count(long_text.encode()) == 1
    assert len(data) < 100 + 2 * 1000 + 20  # one string, then 2-byte references
    loaded = copal.loads(data)
    assert loaded == copies
    assert all(s is loaded[0] for s in loaded)  # read back as one object


def distinct_copy(text: str) -> str:
    """An equal string that is another object (the encoder cannot find it by address)."""
    return "".join(list(text))


def test_equal_but_distinct_strings_are_stored_once_at_scale() -> None:
    """Past the size where the encoder's string table is grown straight to the size of recent
    streams (copal-core `WrittenStrings`), every distinct string is still stored once: a list of
    objects (prefetched ahead of writing, with strings in their attributes, in a nested object
    and in nested lists) whose strings all come back later as equal but distinct objects."""
    count = 12_000
    names = [f"name-{i:06d}" for i in range(count)]

    def people(texts: list[str]) -> list[Point]:
        return [Point(text, [Point(text + "-phone", Point(text + "-city", None))]) for text in texts]

    first = people(names)
    value = [first, people([distinct_copy(name) for name in names])]
    alone = copal.dumps(first)
    for _ in range(2):  # the second time, the table starts at the size of the first stream
        data = copal.dumps(value)
        # The second list adds only references: 3 strings per object, each at most 4 bytes.
        assert len(data) < len(alone) + count * (3 * 4 + 8)
        assert copal.loads(data) == value
    assert copal.loads(copal.dumps(["small", "small"])) == ["small", "small"]


def test_strings_that_are_not_utf8_in_objects_ahead_are_written_as_they_are() -> None:
    """The encoder prepares the lookups of the strings of the objects it will write next; a
    string with a lone surrogate there has no UTF-8 form and is simply passed over."""
    value = [Point(f"p{i}", [Point("\ud800" if i == 5 else f"q{i}", None)]) for i in range(10)]
    assert copal.loads(copal.dumps(value)) == value


def test_strings_are_shared_everywhere_in_the_graph() -> None:
    value = {"kind": ["kind", ("kind", Point("kind", {"kind": b"kind"}))], "other": {"kind", "x"}}
    data = copal.dumps(value)
    assert data.count(b"kind") == 2  # the string once, the bytes once
    assert_same(value, copal.loads(data))


def test_strings_are_shared_only_where_a_reference_is_shorter() -> None:
    """A STRREF is a tag and the slot number: a one-byte string past slot 127 is written again."""
    data = copal.dumps(["a", "a"])
    assert data.endswith(b"\x0b\x02\x07\x01a\x1b\x00")
    data = copal.dumps([f"s{i}" for i in range(200)] + ["s199", "x", "x"])
    assert data.endswith(b"\x1b\xc7\x01\x07\x01x\x07\x01x")  # "s199" by its slot 199; "x" (slot 200) again


def test_a_repeated_string_object_too_short_to_refer_to_is_written_each_time() -> None:
    """The encoder finds a string object met before by its address; it must still write a
    one-byte string past slot 127 again every time, each STR taking a slot of its own."""
    data = copal.dumps([f"s{i}" for i in range(200)] + ["x", "x", "x", "s199"])
    assert data.endswith(b"\x07\x01x\x07\x01x\x07\x01x\x1b\xc7\x01")  # slots 200, 201, 202
    assert copal.loads(data)[-4:] == ["x", "x", "x", "s199"]


def equal_copy(value: Any) -> Any:
    """An equal value that is another object where the type allows one (not None, a bool or a
    small int), so that a list of copies has no run of the very same object."""
    if isinstance(value, str):
        return distinct_copy(value)
    if isinstance(value, float):
        return float(repr(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return int(str(value))
    return value


@pytest.mark.parametrize("item", [0, -7, 1000, 10**30, 1.5, None, True, False, "Dummy text", "", "\ud800", Point(1, 2), [1]])
def test_runs_of_one_object_in_a_list_are_written_as_its_items_one_by_one(item: Any) -> None:
    """The encoder writes a run of the very same object in a list (``[0] * n``) at once: the
    bytes of a scalar again, one logged run of references to a string of the table. The stream
    is the one written for equal objects that are not the same (strings made shared by content
    when the body is finished), in a list and in a dataclass's typed list field, after other
    strings whose slots move down when the body is finished (a repeat of "s7" there)."""
    from copal.bench.codec_models import TargetObject

    prefix: list[Any] = [f"s{i}" for i in range(126)] + ["a", distinct_copy("s7")]
    runs = prefix + [item] * 200 + ["a", item, item] + [item] * 3
    copies = prefix + [equal_copy(item) for _ in range(200)] + ["a"] + [equal_copy(item) for _ in range(5)]
    data = copal.dumps(runs)
    assert data == copal.dumps(copies)
    assert_same(copal.loads(data), runs)
    target = TargetObject([7] * 300, [item] * 300 if isinstance(item, str) else prefix)
    assert copal.dumps(target) == copal.dumps(TargetObject([7] * 300, [equal_copy(x) for x in target.strs]))


def test_a_string_freed_during_encoding_is_not_taken_for_a_new_one() -> None:
    """The encoder's table of string objects met before is keyed by address. It holds a
    reference to each, so a string freed while the graph is encoded (here by Python code that
    runs in the middle of it) cannot leave its address to a new string of other text, which
    would then be written as a reference to the freed one."""
    old_text, new_text = "".join(["old "] * 8), "".join(["new "] * 8)
    value: list[Any] = [old_text, old_text, Hooked.ONLY, None]
    old_id = id(old_text)
    del old_text
    reused = []

    def free_and_allocate() -> None:
        value[0] = value[1] = None  # the last references the graph held
        fresh = "".join(["new "] * 8)
        reused.append(id(fresh) == old_id)
        value[3] = fresh

    HOOKED_CALLBACKS.append(free_and_allocate)
    data = copal.dumps(value)
    assert reused == [False]  # the table kept the old string alive
    assert copal.loads(data)[2:] == [Hooked.ONLY, new_text]


def test_only_strings_held_elsewhere_are_remembered_by_address() -> None:
    """A string object that only its container holds cannot be met again, so the table of
    strings met before does not take it (nor push out one that may repeat); one held elsewhere
    too is taken, with a reference. Both are stored once all the same."""
    value: list[Any] = ["".join(["alone "] * 4), "".join(["shared "] * 4), Hooked.ONLY]
    shared = value[1]
    value.append(shared)
    value.append("".join(["alone "] * 4))  # equal text, another object: found by content
    before = [sys.getrefcount(item) for item in value[:2]]
    during = []
    HOOKED_CALLBACKS.append(lambda: during.extend(sys.getrefcount(item) for item in value[:2]))
    data = copal.dumps(value)
    assert during == [before[0], before[1] + 1]
    assert copal.loads(data) == value
    assert data.count(b"alone") == data.count(b"shared") == 4


def test_objects_with_equal_but_distinct_field_names_share_a_descriptor() -> None:
    """The encoder reuses a class's last descriptor when the next object's keys are the same
    objects; equal keys that are other objects (or another order) go through the full check."""
    first = Point(1, 2)
    second = Point(3, 4)
    del second.x, second.y
    second.__dict__["".join(["x"])] = 3
    second.__dict__["".join(["y"])] = 4
    swapped = Point(5, 6)
    del swapped.x
    swapped.x = 5
    data = copal.dumps([first, second, swapped, Point(7, 8)])
    assert data.count(b"helpers.models.Point") == 2  # (x, y) once, (y, x) once
    assert [vars(p) for p in copal.loads(data)] == [{"x": 1, "y": 2}, {"x": 3, "y": 4}, {"y": 6, "x": 5}, {"x": 7, "y": 8}]


def test_strings_repeated_in_fields_of_objects_are_stored_once() -> None:
    """The encoder finds the repeats of a field's values while it writes them (a table per
    class and field, copal-core `field_texts.rs`) and the rest when the body is complete: the
    stream is the same whichever finds them, whether the strings are one object or equal copies,
    across fields (x and y of Point) and classes (Point and Node's label)."""
    cities = [f"city-{i:02d}" for i in range(40)]

    def rows(text: Callable[[str], str]) -> list[Any]:
        return [
            [Point(text(cities[i % 40]), text(cities[i * 7 % 40])) for i in range(3000)],
            [Node(text(cities[i % 31])) for i in range(3000)],
        ]

    shared, copies = rows(lambda city: city), rows(distinct_copy)
    data = copal.dumps(copies)
    assert data == copal.dumps(shared)
    assert all(data.count(city.encode()) == 1 for city in cities)
    assert_same(copies, copal.loads(data))


def test_strings_that_look_alike_in_a_field_are_told_apart() -> None:
    """A field's table finds a text by its hash, then compares its length and bytes: prefixes,
    strings a byte apart, the empty string and non-ASCII texts of one field stay themselves."""
    texts = ["ab", "abc", "abd", "", "a", "ab\u00e9", "ab\u00e8", "abc", "ab", "\u00e9", "\u00e8", "\u00e9"]
    value = [Point(distinct_copy(text), distinct_copy(text[::-1])) for text in texts * 50]
    assert_same(value, copal.loads(copal.dumps(value)))


def test_many_distinct_strings_in_fields_and_far_repeats() -> None:
    """A field whose values do not repeat stops being looked up as it is written; its rare
    repeats, far apart, are still stored once, and a vocabulary field beside it keeps its
    table."""
    count = 40_000
    value = [Point(f"distinct-{i:06d}", distinct_copy(f"word-{i * 7919 % 3000}")) for i in range(count)]
    value += [Point(distinct_copy(f"distinct-{i:06d}"), "word-1") for i in range(0, count, 1000)]
    data = copal.dumps(value)
    assert data.count(b"distinct-000000") == 1
    assert data.count(b"word-2999") == 1
    assert_same(value, copal.loads(data))


def test_sets_with_shared_strings_are_deterministic() -> None:
    """Set elements are ordered by their plain encoding, whatever strings came before."""
    first = copal.dumps(["b", {"a", "b", "c"}, {"c", "b"}])
    assert first == copal.dumps(["b", {"c", "b", "a"}, {"b", "c"}])
    assert copal.loads(first) == ["b", {"a", "b", "c"}, {"c", "b"}]


# -- typed objects (stream version 3) ------------------------------------------------------------


def test_objects_of_one_shape_are_written_without_tags() -> None:
    """A list of objects whose values keep the types of the first one is an OBJECT_LIST of
    untagged bodies (docs/STREAM.md section 5): per object only the values' own bytes."""
    rows = [Point(i, f"row-{i:04}") for i in range(1000)]
    data = copal.dumps(rows)
    per_object = (len(data) - len(copal.dumps(rows[:1]))) / 999
    assert per_object <= 2 + 1 + 8  # x: a 1- or 2-byte varint; y: its length and 8 bytes
    assert_same(rows, copal.loads(data))


def test_seed_001_shape_is_under_56_bytes_per_object() -> None:
    """The shape of the codec benchmark's seed 001 (copal bench --suite codecs)."""
    rows = [Cells([Point(i / 3, f"bar-{i}-{j}") for j in range(2)], i) for i in range(20_000)]
    for row in rows:
        row.name = f"foo-{row.count}"  # type: ignore[attr-defined]
    data = copal.dumps(rows)
    # count: 3 bytes; name: 1 + 9; cells: 1 + 1 (descriptor) + 2 x (8 + 1 + 11).
    assert len(data) / len(rows) < 55
    assert_same(rows, copal.loads(data))


@pytest.mark.parametrize(
    "odd",
    [2**70, True, "lone \udc80 surrogate", 7, Tagged([1]), (1,), None, 1.0],
    ids=["bigint", "bool", "surrogates", "int-for-float", "list-subclass", "tuple", "none", "float-for-str"],
)
@pytest.mark.parametrize("in_list", [True, False], ids=["object-list", "objects"])
def test_values_that_do_not_fit_the_field_kinds_keep_their_types(odd: Any, in_list: bool) -> None:
    """The field kinds come from the first object of a descriptor; a later object with a value of
    another type (even a subclass, or an int where a float was) is written tagged, as an OBJECT,
    whether it is an item of a list of objects or a value of its own."""
    first = Point(1.5, "text")
    first.items = [1]  # type: ignore[attr-defined]
    later = Point(odd, odd)
    later.items = odd  # type: ignore[attr-defined]
    objects = [first, later, Point(2.5, "x")]
    graph: Any = objects if in_list else dict(zip("abc", objects))
    loaded = copal.loads(copal.dumps(graph))
    assert_same(graph, loaded)
    assert [type(v) for v in vars(loaded[1] if in_list else loaded["b"]).values()] == [type(odd)] * 3


@pytest.mark.parametrize("odd", [2**70, "lone \udc80 surrogate"], ids=["bigint", "surrogates"])
@pytest.mark.parametrize("in_list", [True, False], ids=["object-list", "objects"])
def test_a_value_of_its_kinds_type_without_its_form_undoes_the_typed_body(odd: Any, in_list: bool) -> None:
    """An int beyond 64 bits or a str with lone surrogates has the type of an INT or STR field
    but not its form: the object is written as an OBJECT, and what its typed body had written
    before that value (a string taking a slot of the shared strings) is undone, so the strings
    after it still refer to the right slots."""
    def point(x: str, y: Any, n: Any) -> Point:
        made = Point(x, y)
        made.n = n  # type: ignore[attr-defined]
        return made

    first = point("first-text", "a", 1)
    later = point("text-before", odd if isinstance(odd, str) else "b", odd if isinstance(odd, int) else 2)
    after = [point("text-before", "b", 3), point("first-text", "a", 4)]
    objects = [first, later, *after]
    graph: Any = objects if in_list else {"first": first, "later": later, "after": after}
    loaded = copal.loads(copal.dumps(graph))
    assert_same(graph, loaded)


def test_objects_met_twice_keep_their_identity() -> None:
    """An OBJECT_LIST has no place for a back-reference: a list holding an object met elsewhere
    (or twice) stays a LIST, and lists shared between fields are back-references."""
    p = Point(1, "a")
    shared = [p, p]
    graph = {"twice": shared, "alone": [Point(2, "b"), Point(3, "c")], "p": p, "again": shared}
    loaded = copal.loads(copal.dumps(graph))
    assert loaded["twice"][0] is loaded["twice"][1] is loaded["p"]
    assert loaded["again"] is loaded["twice"]
    holder = Cells([], 1)
    holder.cells.append(holder)  # a cycle through a typed list field
    loaded_holder = copal.loads(copal.dumps([holder, Cells(holder.cells, 2)]))
    assert loaded_holder[0].cells[0] is loaded_holder[0] and loaded_holder[1].cells is loaded_holder[0].cells


def test_cycles_through_object_lists() -> None:
    rows: list[Any] = []
    rows.extend(Cells(rows, i) for i in range(3))
    loaded = copal.loads(copal.dumps(rows))
    assert all(row.cells is loaded for row in loaded) and [row.count for row in loaded] == [0, 1, 2]


@dataclass
class _Row:
    """An object of an OBJECT_LIST whose fields take every path of the encoder's state: an int,
    a string equal by content to others, one string object met many times, an object shared
    with the rest of the graph (identity map, BACKREF) and a list of objects (a nested
    OBJECT_LIST)."""

    n: Any
    name: str
    city: str
    tag: Any
    cells: list[Any]


_CITY = "".join(["Vie", "nna"])  # one string object, not interned


def _rows(misfit_at: int) -> dict[str, Any]:
    shared = Point(0, "shared")
    rows = [_Row(i, f"name-{i % 7}", _CITY, shared, [Point(i, f"cell-{i % 5}")]) for i in range(misfit_at + 1)]
    rows[misfit_at].n = "not an int"
    return {"rows": rows, "after": shared, "names": [f"name-{3}", _CITY, f"cell-{4}"]}


@pytest.mark.parametrize("misfit_at", [1, 999])
def test_an_object_list_abandoned_at_its_last_item_leaves_no_trace(misfit_at: int) -> None:
    """Items of an OBJECT_LIST are checked one at a time as they are written; an item that does
    not fit (here the 1000th) makes the encoder undo what it wrote for the others (their bytes,
    memo slots, identity-map entries, string slots) and write the list as a LIST. The stream must
    be the one written when the list is a LIST from its first item, which is what happens when
    something outside the graph holds that item."""
    graph = _rows(misfit_at)
    data = copal.dumps(graph)
    held = graph["rows"][0]  # noqa: F841 (the reference makes the first item shared)
    assert copal.dumps(graph) == data
    del held
    loaded = copal.loads(data)
    assert_same(graph, loaded)
    assert loaded["after"] is loaded["rows"][0].tag is loaded["rows"][-1].tag
    assert type(loaded["rows"][-1].n) is str
    header = read_header(data)
    read_body(header["payload"], header["version"])  # the reference reader reads it to its end


class _CountedName(enum.Enum):
    """An enum member that counts how often the encoder writes it (each write reads _name_)."""

    ONLY = 1

    def __getattribute__(self, name: str) -> Any:
        if name == "_name_":
            _NAME_READS.append(1)
        return super().__getattribute__(name)


_NAME_READS: list[int] = []


def test_nested_abandoned_object_lists_are_written_a_linear_number_of_times() -> None:
    """Each level holds a list whose first object holds the next level and whose second does
    not fit: every level's OBJECT_LIST is abandoned and rewritten. A list abandoned once is
    written as a LIST at once when met again, so the innermost value is written once per level,
    not 2 ** levels times."""
    levels = 16
    inner: list[Any] = [_CountedName.ONLY]
    for _ in range(levels):
        inner = [Cells(inner, 1), Cells([], "not an int")]
    _NAME_READS.clear()
    copal.dumps(inner)
    assert len(_NAME_READS) <= levels + 1


def test_a_list_that_shrinks_while_it_is_written_is_refused() -> None:
    """Python code run while a list is written (here an enum's ``_name_``) can remove its later
    items: the count already written would no longer match, so the list is refused, as an
    OBJECT_LIST and as a LIST."""
    for rows in ([_Pair(Hooked.ONLY, 1), _Pair(None, 2), _Pair(None, 3)], [Hooked.ONLY, 2, 3]):
        HOOKED_CALLBACKS.append(rows.pop)
        try:
            with pytest.raises(TypeError, match="changed size while it was being written"):
                copal.dumps(rows)
        finally:
            HOOKED_CALLBACKS.clear()


@pytest.mark.parametrize("change", ["grow", "shrink"])
def test_a_dict_that_changes_size_while_it_is_written_is_refused(change: str) -> None:
    """Python code run while a dict is written (an enum's ``_name_``) can add or remove items:
    the count already written would no longer match, so the dict is refused with TypeError
    (never a panic), in streams and in the state of a stored object."""
    def meddle(victim: dict[str, Any]) -> Callable[[], None]:
        return (lambda: victim.__setitem__("added", 1)) if change == "grow" else (lambda: victim.pop("later"))
    victim: dict[str, Any] = {"first": Hooked.ONLY, "later": 2}
    HOOKED_CALLBACKS.append(meddle(victim))
    try:
        with pytest.raises(TypeError, match="changed size while it was being written"):
            copal.dumps(victim)
    finally:
        HOOKED_CALLBACKS.clear()


def test_an_object_whose_state_changes_size_while_it_is_stored_is_refused(tmp_path: Path) -> None:
    class Holder(copal.Persistent):
        pass

    with copal.open(tmp_path / "db") as db:
        holder = Holder()
        holder.first = Hooked.ONLY
        holder.later = 2
        HOOKED_CALLBACKS.append(lambda: setattr(holder, "added", 1))
        try:
            with pytest.raises(TypeError, match="changed size while it was being written"):
                with db.transaction() as tx:
                    tx.root["holder"] = holder
        finally:
            HOOKED_CALLBACKS.clear()
        with db.transaction() as tx:
            assert "holder" not in tx.root


def test_typed_values_count_towards_the_depth_limit() -> None:
    """Untagged values nest like tagged ones: 256 levels are written and read, 257 refused."""
    def nested(levels: int) -> Any:
        value: Any = 0
        for _ in range(levels):
            value = Cells([value], 0)
        return value

    for levels in (127, 128):  # each level is an object and its list: 2 levels of nesting
        copal.loads(copal.dumps(nested(levels)))
    with pytest.raises(ValueError, match="nested deeper"):
        copal.dumps(nested(129))


def test_descriptors_are_written_once() -> None:
    data = copal.dumps([Point(i, i) for i in range(1000)])
    assert data.count(b"helpers.models.Point") == 1


@pytest.mark.parametrize("fmt", FORMATS)
def test_class_with_two_field_lists_gets_two_descriptors(fmt: str) -> None:
    p, q = Point(1, 2), Point(3, 4)
    q.z = 5
    loaded = roundtrip([p, q, Point(6, 7)], fmt)
    assert [vars(x) for x in loaded] == [{"x": 1, "y": 2}, {"x": 3, "y": 4, "z": 5}, {"x": 6, "y": 7}]
    assert copal.dumps([p, q]).count(b"helpers.models.Point") == 2


# -- persistent objects by value -----------------------------------------------------------------


def _state(obj: Persistent) -> dict[str, Any]:
    return {k: v for k, v in vars(obj).items() if not k.startswith(("_v_", "_p_"))}


@pytest.mark.parametrize("fmt", FORMATS)
def test_persistent_objects_are_written_by_value(fmt: str) -> None:
    item = Item("pen", 3, b"\x00")
    item._v_cache = "volatile"
    listing = PersistentList([item, item, 5])
    mapping = PersistentDict({"list": listing, "item": item})
    loaded = roundtrip({"root": mapping, "holder": Holder(items=listing)}, fmt)
    root = loaded["root"]
    assert type(root) is PersistentDict and type(root["list"]) is PersistentList
    new_item = root["item"]
    assert type(new_item) is Item and new_item is not item
    assert _state(new_item) == {"name": "pen", "value": 3, "payload": b"\x00"}
    assert not hasattr(new_item, "_v_cache")
    assert root["list"][0] is root["list"][1] is new_item
    assert loaded["holder"].items is root["list"]
    for obj in (root, root["list"], new_item, loaded["holder"]):
        assert obj._p_status == "unsaved" and obj._p_oid is None and obj._p_jar is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_persistent_cycles_by_value(fmt: str) -> None:
    a, b = Holder(name="a"), Holder(name="b")
    a.other, b.other = b, a
    loaded = roundtrip(a, fmt)
    assert loaded.other.other is loaded
    assert loaded.name == "a" and loaded.other.name == "b"


def test_loaded_copy_is_independent_and_can_be_stored(store: Any) -> None:
    db = store.open()
    with db.transaction() as tx:
        tx.root["items"] = PersistentList([Item(f"i{n}", n) for n in range(3)])
    db = store.reopen(db)
    with db.transaction() as tx:
        stored = tx.root["items"]
        assert stored._p_status == "ghost"
        data = copal.dumps(stored)  # a ghost and its ghost items are loaded first
        assert stored[0]._p_status == "saved"
    copy = copal.loads(data)
    assert [(i.name, i.value) for i in copy] == [("i0", 0), ("i1", 1), ("i2", 2)]
    assert all(i._p_status == "unsaved" for i in copy)
    with db.transaction() as tx:
        tx.root["copy"] = copy
    assert copy._p_oid is not None and copy._p_oid != stored._p_oid
    db = store.reopen(db)
    with db.transaction() as tx:
        assert [i.name for i in tx.root["copy"]] == ["i0", "i1", "i2"]
        assert tx.root["copy"][0]._p_oid != tx.root["items"][0]._p_oid


def test_persistent_flag_must_match_the_class() -> None:
    """The descriptor's PERSISTENT flag must agree with the class it names (SchemaError)."""
    plain_as_persistent = stream(table(entry("helpers.models.Point", ["x", "y"], flags=1)) + b"\x18\x00\x00\x00")
    with pytest.raises(SchemaError, match="not a copal.Persistent class"):
        copal.loads(plain_as_persistent)
    persistent_as_plain = stream(table(entry("helpers.models.Counter", ["value"])) + b"\x18\x00\x03\x02")
    with pytest.raises(SchemaError, match="cannot be rebuilt by value"):
        copal.loads(persistent_as_plain)


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
FRAME_MAGIC = {"zstd": "28b52ffd", "lz4": "04224d18"}


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


class Cells:
    """A plain class whose first instance makes its field kinds LIST and INT."""

    def __init__(self, cells: list[Any], count: int) -> None:
        self.cells = cells
        self.count = count


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
    import subprocess  # noqa: F401  (the module must be imported for its name to resolve)

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
        "comment": "docs/STREAM.md section 7; generated by `python tests/test_serialize.py --write-vectors`",
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
        "run: python tests/test_serialize.py --write-vectors (and review the diff)"
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
        assert type(loaded) is type(expected) and _state(loaded) == _state(expected)
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
        sys.exit("usage: python tests/test_serialize.py --write-vectors")
    VECTOR_FILE.write_text(json.dumps(build_vectors(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {VECTOR_FILE}")


@dataclass
class _Pair:
    a: Any
    b: int


def test_an_object_changed_before_its_turn_in_an_object_list_is_written_as_it_is_then() -> None:
    """The objects of an OBJECT_LIST are checked one at a time, each just before it is written:
    Python code run while an earlier one is written (here by an enum's ``_name_``) that removes
    a later object's attribute makes that object no longer fit, and the list is written as a
    LIST whose objects have the attributes they had when written."""
    pairs = [_Pair(Hooked.ONLY, 1), _Pair(None, 2)]
    HOOKED_CALLBACKS.append(lambda: delattr(pairs[1], "b"))
    try:
        loaded = copal.loads(copal.dumps(pairs))
    finally:
        HOOKED_CALLBACKS.clear()
    assert vars(loaded[0]) == {"a": Hooked.ONLY, "b": 1} and vars(loaded[1]) == {"a": None}


@pytest.mark.parametrize(
    "change",
    [lambda p: delattr(p, "y"), lambda p: setattr(p, "z", 3), lambda p: vars(p).update({f"extra{i}": i for i in range(40)})],
    ids=["removed", "added", "added_past_the_shared_keys"],
)
@pytest.mark.parametrize("typed", [True, False], ids=["typed", "tagged"])
@pytest.mark.parametrize("made_dict", [False, True], ids=["values", "made_dict"])
def test_an_object_whose_attributes_change_while_it_is_written_is_refused(change: Callable[[Point], None], typed: bool, made_dict: bool) -> None:
    """Writing a value can run Python code (here an enum's ``_name_``) that adds or removes an
    attribute of the object being written: its body would no longer match its descriptor. Both
    the TYPED_OBJECT path and the OBJECT path (a second object whose values do not fit the
    field kinds of the first) refuse it with the encoder's error, not a panic; so does the
    reading of a dict made before (whose values array is read in place on CPython 3.11, and
    freed when more names than its class's shared keys hold turn it into a combined dict)."""
    target = Point(Hooked.ONLY, 2 if typed else "not an int")
    if made_dict:
        vars(target)
        assert sys.version_info[:2] != (3, 11) or has_made_dict(target)
    value = [target] if typed else [Point(Color.RED, 1), target]
    HOOKED_CALLBACKS.append(lambda: change(target))
    try:
        with pytest.raises(TypeError, match="changed while it was being written"):
            copal.dumps(value)
    finally:
        HOOKED_CALLBACKS.clear()


@pytest.mark.skipif(not READS_INSTANCE_VALUES, reason="values arrays are read on CPython 3.11 to 3.13 only")
def test_encoding_an_instance_does_not_make_its_dict() -> None:
    """CPython 3.11 to 3.13 keep an instance's attributes in a values array until its
    ``__dict__`` is asked for; the encoder reads them there (cpython/tables.rs ``ValuesFields``)
    instead of having a dict made for every object it writes."""
    points = [Point(i, f"p{i}") for i in range(3)]
    assert not any(has_made_dict(point) for point in points)
    loaded = copal.loads(copal.dumps(points))
    assert not any(has_made_dict(point) for point in points)
    assert [vars(point) for point in loaded] == [{"x": i, "y": f"p{i}"} for i in range(3)]


def test_an_instance_whose_dict_is_made_while_it_is_written_is_written_whole() -> None:
    """Python code run while a field is written (an enum's ``_name_``) that asks for the
    object's ``__dict__`` hands its inline values to a new dict: the encoder reads the rest
    from the dict and writes the object as it was."""
    target = Point(Hooked.ONLY, 2)
    HOOKED_CALLBACKS.append(lambda: vars(target))
    try:
        (loaded,) = copal.loads(copal.dumps([target]))
    finally:
        HOOKED_CALLBACKS.clear()
    assert has_made_dict(target)
    assert vars(loaded) == {"x": Hooked.ONLY, "y": 2}


def test_an_attribute_added_with_the_dict_made_while_the_object_is_written_is_refused() -> None:
    target = Point(Hooked.ONLY, 2)

    def change() -> None:
        vars(target)
        target.z = 3  # type: ignore[attr-defined]

    HOOKED_CALLBACKS.append(change)
    try:
        with pytest.raises(TypeError, match="changed while it was being written"):
            copal.dumps([target])
    finally:
        HOOKED_CALLBACKS.clear()


def test_an_instance_dict_with_a_deleted_entry_is_read_in_order_and_checked() -> None:
    """An instance dict that is not its class's split table, with a hole where an entry was
    deleted, is read in place like the others (encode/fields.rs `FieldSource::read_all`): its fields in
    order, and the check after the last field (from the position `PyDict_Next` would give)
    still refuses an attribute added while the object is written."""
    target = Point(0, 0)
    fields: dict[str, Any] = {"x": Hooked.ONLY, "gone": 0, "y": 2}
    del fields["gone"]
    target.__dict__ = fields
    (loaded,) = copal.loads(copal.dumps([target]))
    assert list(vars(loaded).items()) == [("x", Hooked.ONLY), ("y", 2)]
    HOOKED_CALLBACKS.append(lambda: setattr(target, "z", 3))
    try:
        with pytest.raises(TypeError, match="changed while it was being written"):
            copal.dumps([target])
    finally:
        HOOKED_CALLBACKS.clear()


def test_an_attribute_replaced_while_its_object_is_written_is_written_as_it_was_read() -> None:
    """An object's fields are read once, before its body is written (encode/fields.rs `with_fields`):
    Python code run while an earlier field is written (an enum's ``_name_``) that replaces a
    later field's value does not change what is written for this object, and the typed body
    stays consistent with the kinds its values were checked against (a str replaced by an int
    failed the string field before)."""
    target = Point(Hooked.ONLY, "text")
    HOOKED_CALLBACKS.append(lambda: setattr(target, "y", 5))
    try:
        (loaded,) = copal.loads(copal.dumps([target]))
    finally:
        HOOKED_CALLBACKS.clear()
    assert vars(loaded) == {"x": Hooked.ONLY, "y": "text"} and target.y == 5


class _AnyName(str):
    """An attribute name whose ``__eq__`` calls it equal to anything."""

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        return True


def test_a_str_subclass_attribute_name_is_not_taken_for_an_equal_field_name() -> None:
    """The class cache compares attribute names by value only for str itself: a subclass's
    ``__eq__`` must not let an object be written under another object's field names."""
    odd = Point(0, 0)
    odd.__dict__.clear()
    odd.__dict__[_AnyName("a")] = 1
    odd.__dict__[_AnyName("b")] = 2
    first, second = copal.loads(copal.dumps([Point(1, 2), odd]))
    assert vars(first) == {"x": 1, "y": 2}
    assert vars(second) == {"a": 1, "b": 2}
