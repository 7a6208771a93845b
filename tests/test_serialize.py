"""copal.dumps / loads: round trips of standalone streams (docs/STREAM.md).

Round trips of every value type and of graphs with shared references and cycles (hypothesis),
in every format; strings shared by content; typed objects and object lists (stream version 3);
persistent objects written by value. What loads accepts and refuses is in
tests/test_stream_input.py, the stream test vectors in tests/test_stream_vectors.py.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import math
import sys
import uuid
import zoneinfo
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import copal  # noqa: E402
from copal import PersistentDict, PersistentList, SchemaError  # noqa: E402
from helpers.compare import assert_same, persistent_state  # noqa: E402
from helpers.models import (  # noqa: E402
    HOOKED_CALLBACKS, Color, Holder, Hooked, Item, Level, Node, Point, Tagged, TaggedDict, Vector, hooked,
)
from helpers.strategies import value_graphs, values  # noqa: E402
from helpers.stream_bytes import entry, stream, table  # noqa: E402
from test_roundtrip import CONTAINERS, SCALARS  # noqa: E402
from test_stream_vectors import Perm, _self_list, read_body, read_header  # noqa: E402


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


class Cells:
    """A plain class whose first instance makes its field kinds LIST and INT."""

    def __init__(self, cells: list[Any], count: int) -> None:
        self.cells = cells
        self.count = count


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
        with hooked(rows.pop):
            with pytest.raises(TypeError, match="changed size while it was being written"):
                copal.dumps(rows)


@pytest.mark.parametrize("change", ["grow", "shrink"])
def test_a_dict_that_changes_size_while_it_is_written_is_refused(change: str) -> None:
    """Python code run while a dict is written (an enum's ``_name_``) can add or remove items:
    the count already written would no longer match, so the dict is refused with TypeError
    (never a panic), in streams and in the state of a stored object."""
    def meddle(victim: dict[str, Any]) -> Callable[[], None]:
        return (lambda: victim.__setitem__("added", 1)) if change == "grow" else (lambda: victim.pop("later"))
    victim: dict[str, Any] = {"first": Hooked.ONLY, "later": 2}
    with hooked(meddle(victim)):
        with pytest.raises(TypeError, match="changed size while it was being written"):
            copal.dumps(victim)


def test_an_object_whose_state_changes_size_while_it_is_stored_is_refused(tmp_path: Path) -> None:
    class Holder(copal.Persistent):
        pass

    with copal.open(tmp_path / "db") as db:
        holder = Holder()
        holder.first = Hooked.ONLY
        holder.later = 2
        with hooked(lambda: setattr(holder, "added", 1)):
            with pytest.raises(TypeError, match="changed size while it was being written"):
                with db.transaction() as tx:
                    tx.root["holder"] = holder
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
    assert persistent_state(new_item) == {"name": "pen", "value": 3, "payload": b"\x00"}
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


@dataclass
class _Pair:
    a: Any
    b: int
