"""The direct JSON writer (crates/copal-py/src/json_writer.rs) against the transcoder.

``copal.dumps(obj, format="json")`` writes the document straight from the objects
(``_core.dumps_json_raw``), and hands the graphs it leaves aside to the transcoder of the binary
body (``_core.dumps_text_raw``), which defines the document (docs/TEXT_FORMATS.md section 5).
Both must give the same bytes for every graph: these tests compare them over the round-trip
corpus, and pin which graphs go to the transcoder, so that neither can drift unnoticed.
"""

from __future__ import annotations

import datetime
import enum
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import copal  # noqa: E402
from copal import PersistentList, _core  # noqa: E402
from helpers import other_models  # noqa: E402
from helpers.compare import READS_INSTANCE_VALUES, has_made_dict  # noqa: E402
from helpers.models import Color, FrozenKey, Item, Level, Node, Point, Tagged, TaggedDict, Vector  # noqa: E402
from helpers.strategies import value_graphs, values  # noqa: E402
from test_roundtrip import BERLIN, CONTAINERS, SCALARS  # noqa: E402
from test_serialize import _node_cycle, _twice  # noqa: E402
from test_stream_vectors import Perm  # noqa: E402


def transcoded(value: Any) -> bytes:
    return _core.dumps_text_raw(value, "json")


#: Whether the writer reads dict tables and made dicts in place (CPython 3.11,
#: crates/copal-py/src/cpython/tables.rs): it then sees what changes while it writes, and leaves
#: some graphs to the transcoder that it writes itself elsewhere (by `PyDict_Next`).
READS_IN_PLACE = sys.version_info[:2] == (3, 11) and sys.implementation.name == "cpython"


def assert_left_to_transcoder(value: Any) -> None:
    """The direct writer leaves `value` to the transcoder where it reads in place; elsewhere it
    may write it itself, a document that reads back (of the state it read: a dict replaced
    while written is finished from the reference the writer holds)."""
    direct = _core.dumps_json_raw(value)
    if READS_IN_PLACE:
        assert direct is None
    elif direct is not None:
        copal.loads(direct)


def assert_written_directly(value: Any) -> None:
    direct = _core.dumps_json_raw(value)
    assert direct is not None, "the direct writer left this graph to the transcoder"
    assert direct == transcoded(value)
    assert copal.dumps(value, format="json") == direct


def _self_list() -> list[Any]:
    items: list[Any] = []
    items.append(items)
    return items


def _self_dict() -> dict[str, Any]:
    mapping: dict[str, Any] = {}
    mapping["self"] = mapping
    mapping["$self"] = mapping
    return mapping


def _through_tuple() -> list[Any]:
    items: list[Any] = []
    items.append((items, items))
    return items


def _fields(**fields: Any) -> Point:
    point = Point(1, 2)
    vars(point).update(fields)
    return point


def _first_field(first: str, **fields: Any) -> Point:
    point = Point(1, 2)
    vars(point).clear()
    vars(point).update({first: 0}, **fields)
    return point


def _without_fields() -> Point:
    point = Point(1, 2)
    vars(point).clear()
    return point


#: More classes than the writer's cache of recent classes has lines, met in turn.
MANY_CLASSES = [type(f"Class{n}", (), {"__module__": __name__}) for n in range(40)]


def _instances_of_many_classes() -> list[Any]:
    instances = []
    for round_ in range(3):
        for n, cls in enumerate(MANY_CLASSES):
            instance = cls()
            instance.n = n * round_
            instances.append(instance)
    return instances


#: Graphs beyond the round-trip corpus: shared values (some shared only inside the graph, which
#: the reference-count shortcut must not miss), cycles, `$` keys, field lists that change within
#: a class, and the values whose text has several forms.
GRAPHS: dict[str, Any] = {
    "objects": [Point(1, [2, 3]), Vector(1.0, -0.0, ["a"]), FrozenKey(3, "b"), Node("n")],
    "field_lists_change": [Point(1, 2), _fields(z=3), Point(4, 5), _fields(**{"$x": 1, "é\n": 2}), Point(6, 7)],
    "nested_same_class": Point(Point(Point(1, 2), 3), [Point(4, 5)]),
    "first_fields_change": [Point(1, 2), _first_field("y", x=3), Point(4, 5), _first_field("$y"), _first_field("x"), Point(6, 7)],
    "objects_without_fields_between": [Point(1, 2), _without_fields(), Point(3, 4), _without_fields()],
    "object_with_id_between_others": (lambda shared: [Point(1, 2), shared, Point(3, 4), shared, Point(5, 6)])(Point(0, 0)),
    "many_classes": _instances_of_many_classes(),
    "enums": [Color.RED, Level.LOW, Perm.READ | Perm.WRITE, Perm(0), Color.RED],
    "same_unqualified_names": [Point(1, 2), other_models.Point(3), Color.RED, other_models.Color.RED, other_models.Point(4), Point(5, 6), Color.RED],
    "classes_in_a_dict_with_other_keys": [{"k": Point(1, 2), FrozenKey(1, "a"): Node("n")}, Point(3, 4), FrozenKey(2, "b")],
    "shared_object": _twice(Point(1, 2)),
    "shared_list": _twice([1]),
    "shared_dict": _twice({"k": 1}),
    "shared_empty_dict": _twice({}),
    "shared_dict_non_str_keys": _twice({1: 2}),
    "shared_tuple": _twice((1, [2])),
    "empty_tuples": [(), (), ((),)],
    "shared_set": _twice({1, 2}),
    "shared_frozenset_in_a_set": (lambda f: [{f}, f])(frozenset({3})),
    "shared_bytearray": _twice(bytearray(b"x")),
    "node_cycle": _node_cycle(),
    "list_cycle": _self_list(),
    "dict_cycle": _self_dict(),
    "cycle_through_tuple": _through_tuple(),
    "dollar_keys": {"$type": 1, "$$x": 2, "$": {"$ref": 3}},
    "latin_1_text": ["Müller", "Hauptstraße and a run of ASCII longer than eight bytes", {"ß": "\xff\x80"}],
    "two_byte_text": ["€ 5", "ASCII first, then Ā, ÿ and é", {"€": "ü"}],
    "four_byte_text": ["😀", "ü, € and 😀 in one string", {"key": "\U0010ffff"}],
    "escapes": ["\"\\\n\r\t\x00\x1f\x7f", "\u2028\u2029", "é😀", {"k\"\\": "\x01"}],
    "surrogate_keys": {"\ud800": 1, "a": 2},
    "floats": [0.1, 1e300, 1e-7, 1e16, 123456789.0, -0.0, math.nan, -math.inf, 5e-324],
    "ints": [0, -1, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 10**40, -(10**40)],
    "ints_around_one_digit_and_eight_places": [1, 2**30 - 1, 2**30, -(2**30) + 1, -(2**30), 10**8 - 1, 10**8, -(10**8) + 1],
    "sets_of_scalars": [{3, 1, 2}, frozenset({"b", "a", "c"}), {None, 1.5, b"x", "s", False, 2}],
    "set_of_dates": {datetime.date(2024, 1, d) for d in range(1, 6)},
    "sets_of_tuples": [{(1, "a"), (0, "b"), ("a", "a"), (), (2**70,)}, frozenset({(2.5,), (None, b"x")}), {frozenset({"b", "a"}), frozenset()}],
    "tuple_in_a_set_met_again_after": (lambda t: [{t, (0,)}, t])((1, 2)),
    "times": [datetime.time(0, 0), datetime.time(12, 0, 0, 1, tzinfo=BERLIN), datetime.datetime(1, 1, 1, tzinfo=BERLIN)],
}


@pytest.mark.parametrize("value", SCALARS.values(), ids=SCALARS.keys())
def test_scalars_are_written_as_the_transcoder_writes_them(value: Any) -> None:
    assert_written_directly(value)


WRITTEN_BY_TRANSCODER = {"frozenset_nested"}


@pytest.mark.parametrize(
    "value",
    [v for k, v in CONTAINERS.items() if k not in WRITTEN_BY_TRANSCODER],
    ids=[k for k in CONTAINERS if k not in WRITTEN_BY_TRANSCODER],
)
def test_containers_are_written_as_the_transcoder_writes_them(value: Any) -> None:
    assert_written_directly(value)


@pytest.mark.parametrize("value", GRAPHS.values(), ids=GRAPHS.keys())
def test_graphs_are_written_as_the_transcoder_writes_them(value: Any) -> None:
    assert_written_directly(value)


def _runtime_keys(prefix: str, count: int) -> list[str]:
    """Distinct str objects made at run time (not interned, not shared with other tests)."""
    return ["".join([prefix, str(i)]) for i in range(count)]


#: Keys that the key cache must write as escaped_key does: escapes, `$`, text other than ASCII,
#: and keys longer than the fragments it keeps.
ODD_KEYS = ["a\"b", "back\\slash", "new\nline", "\x00", "$type", "$", "$$x", "é", "Straße", "€", "😀", "k" * 40, "\u2028"]


def test_dict_keys_met_again_are_written_as_the_transcoder_writes_them() -> None:
    keys = ODD_KEYS + _runtime_keys("key-", 600)  # more keys than the cache has slots
    records = [{key: i for key in keys[i % 7 :: 7]} for i in range(40)]
    assert_written_directly(records)
    # The same texts in other str objects, in other dicts of the same document.
    assert_written_directly([records, [{"".join(key): 1 for key in keys[::5]} for _ in range(3)]])


def test_dict_keys_are_not_confused_with_keys_of_an_earlier_document() -> None:
    """The key cache goes by the key's address: a key freed after one document may leave its
    address to a key of other text in the next one."""
    for round in range(5):
        keys = _runtime_keys(f"r{round}-", 300)
        records = [{key: round for key in keys} for _ in range(3)]
        assert_written_directly(records)
        del keys, records


def test_a_cached_key_beside_a_key_with_lone_surrogates_gives_dict_form() -> None:
    key = _runtime_keys("cached", 1)[0]
    # Enough keys first for the writer to start its key cache (small documents go without).
    warm_up = {k: 0 for k in _runtime_keys("warm-up-", 100)}
    value = [warm_up, {key: 1}, {key: 2}, {key: 3, "\ud800": 4}, {key: 5}]
    assert_written_directly(value)
    assert b'"$dict":[' in copal.dumps(value, format="json")


@pytest.mark.parametrize("first", [[1], Color.RED, Point(1, 2)], ids=["memo_slot", "class_number", "both"])
def test_a_key_with_lone_surrogates_after_values_with_numbers_goes_to_the_transcoder(first: Any) -> None:
    # The dict is written as an object until its second key, and its first value took a memo
    # slot or a class number, which the `$dict` form written again would number differently.
    value = [{"first": first, "\ud800": 1}]
    assert_left_to_transcoder(value)
    assert copal.dumps(value, format="json") == transcoded(value)
    assert_written_directly([{"first": "no number", "\ud800": 1}])


def test_field_names_follow_instance_dicts_that_change_between_documents() -> None:
    points = [Point(i, i) for i in range(3)]
    first = copal.dumps(points, format="json")
    for point in points:
        del point.x
        point.z = "z"
    assert_written_directly(points)
    assert copal.dumps(points, format="json") != first


def test_shared_values_get_their_memo_slot_as_id() -> None:
    shared = [1]
    point = Point(shared, None)
    value = {"a": shared, "b": (shared, point), "c": [point, {"p": point}]}
    text = copal.dumps(value, format="json")
    assert _core.dumps_json_raw(value) == text == transcoded(value)
    assert b'"a":{"$id":1,"$list":[1]}' in text and b'{"$ref":1}' in text


def _tuple_containing_itself() -> tuple[list[Any]]:
    t: tuple[list[Any]] = ([],)
    t[0].append(t)
    return t


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


#: Graphs the direct writer leaves to the transcoder: their text depends on more of the binary
#: encoder than the direct writer follows (see json_writer.rs).
LEFT_TO_TRANSCODER: dict[str, Any] = {
    "persistent": Item("pen", 3),
    "persistent_list": PersistentList([1]),
    "list_subclass": Tagged([1]),
    "dict_subclass": TaggedDict(a=1),
    "set_of_a_tuple_met_before": (lambda t: [t, {t, (3, 4)}])((1, 2)),
    "set_of_tuples_of_tuples": {((1,),), ((0,),)},
    "set_of_frozensets_of_frozensets": CONTAINERS["frozenset_nested"],
    "set_of_objects": {FrozenKey(1, "a"), FrozenKey(2, "b")},
    "set_of_enums": {Color.RED, Color.GREEN},
    "int_past_str_digits": 10**5000,
}


@pytest.mark.parametrize("value", LEFT_TO_TRANSCODER.values(), ids=LEFT_TO_TRANSCODER.keys())
def test_graphs_left_to_the_transcoder_are_written_by_it(value: Any) -> None:
    assert _core.dumps_json_raw(value) is None
    assert copal.dumps(value, format="json") == transcoded(value)


def test_long_ints_go_to_the_transcoder_even_without_the_str_digits_limit() -> None:
    # CPython's int-to-decimal conversion is quadratic in the length; the transcoder's splits
    # long numbers. Past 14,000 bits the writer leaves the int to it whatever the limit says.
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        assert_written_directly(2**14_000 - 1)
        assert_written_directly(-(2**14_000) + 1)
        for value in (2**14_000, 10**5000, -(10**5000)):
            assert _core.dumps_json_raw(value) is None
            assert copal.loads(copal.dumps(value, format="json")) == value
    finally:
        sys.set_int_max_str_digits(limit)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ([1, {"f": lambda: None}], TypeError, r"value\[1\]\['f'\]"),
        (_tuple_containing_itself(), TypeError, "contains itself"),
        (_deep(300), ValueError, "nested deeper"),
        (datetime.datetime(2024, 1, 1, tzinfo=datetime.tzinfo()), TypeError, "time zone"),
    ],
    ids=["unsupported", "tuple_containing_itself", "too_deep", "time_zone"],
)
def test_refused_values_raise_the_encoders_error(value: Any, error: type[Exception], message: str) -> None:
    assert _core.dumps_json_raw(value) is None
    with pytest.raises(error, match=message):
        copal.dumps(value, format="json")


def test_the_deepest_nesting_the_encoder_writes_is_written_directly() -> None:
    assert_written_directly(_deep(256))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=values())
def test_hypothesis_values_give_the_transcoders_document(value: Any) -> None:
    direct = _core.dumps_json_raw(value)
    assert direct is None or direct == transcoded(value)
    assert copal.dumps(value, format="json") == transcoded(value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=value_graphs())
def test_hypothesis_value_graphs_give_the_transcoders_document(nodes: list[Any]) -> None:
    direct = _core.dumps_json_raw(nodes)
    assert direct is None or direct == transcoded(nodes)
    assert copal.dumps(nodes, format="json") == transcoded(nodes)


def test_a_dict_with_other_keys_does_not_turn_a_later_empty_dict_into_dict_form() -> None:
    """Found by hypothesis: the transcoder remembers dicts with non-string keys by body offset,
    and its second pass (written when something is shared) read the body from another start,
    so a later dict at the remembered offset was written in ``$dict`` form."""
    shared: list[Any] = []
    mixed = {"k0": None, "k1": None, "k2": shared, "k3": shared, "k4": None, None: 5}
    graph = [None, shared, None, None, Node(""), None, mixed, None, None, {}]
    document = transcoded(graph)
    assert document.endswith(b',null,null,{}]}'), document
    assert _core.dumps_json_raw(graph) == document
    back = copal.loads(document)
    assert back[6] == mixed and back[9] == {} and back[6]["k2"] is back[1]


#: Documents of version 1 of the mapping (every class named in full), written by copal before
#: version 2 from the graphs above, frozen: they must keep reading as the same graphs.
V1_DOCUMENTS: dict[str, str] = json.loads((Path(__file__).resolve().parent / "vectors" / "json_v1_documents.json").read_text())["documents"]


@pytest.mark.parametrize("name", V1_DOCUMENTS)
def test_version_1_documents_are_still_read(name: str) -> None:
    value = {**CONTAINERS, **GRAPHS, **LEFT_TO_TRANSCODER}[name]
    assert V1_DOCUMENTS[name].startswith('{"$copal":1,')
    assert copal.dumps(copal.loads(V1_DOCUMENTS[name]), format="json") == copal.dumps(value, format="json")


# --------------------------------------------------------------------------- instance attributes
# CPython 3.11 to 3.13 keep an instance's attributes in a values array until its __dict__ is
# asked for, and the dict then made takes the array over (3.11, 3.12) or shares it (3.13); the
# writer and the binary encoder read that array (crates/copal-py/src/cpython/tables.rs) and fall
# back to the dict otherwise. Every state must give the transcoder's document.


def _points(n: int) -> list[Point]:
    return [Point(i, f"p{i}") for i in range(n)]


@pytest.mark.skipif(not READS_INSTANCE_VALUES, reason="values arrays are read on CPython 3.11 to 3.13 only")
def test_writing_an_instance_does_not_make_its_dict() -> None:
    points = _points(3)
    assert not any(has_made_dict(point) for point in points)
    assert _core.dumps_json_raw(points) is not None
    assert not any(has_made_dict(point) for point in points)
    assert_written_directly(points)
    assert not any(has_made_dict(point) for point in points)  # nor does the transcoder's encoder


def test_instances_whose_dict_was_made_are_written_from_it() -> None:
    points = _points(5)
    vars(points[1])
    points[2].__dict__["extra"] = [1]
    points[3].__dict__ = {"y": "first", "x": 3}  # a dict of its own, no shared key table
    vars(points[4])
    del points[4].x
    points[4].x = "last"
    assert_written_directly(points)
    same = _points(5)
    same[2].extra = [1]
    same[3].__dict__ = {"y": "first", "x": 3}
    del same[4].x
    same[4].x = "last"
    assert copal.dumps(points) == copal.dumps(same)
    assert copal.dumps(points, format="json") == copal.dumps(same, format="json")


def test_attributes_deleted_and_added_after_creation_keep_their_order() -> None:
    points = _points(4)
    del points[0].x
    points[0].x = "again"  # now after y
    del points[1].y
    points[2].z = 3
    points[3].y = None
    assert_written_directly(points)
    assert copal.dumps(points[0], format="json").index(b'"y"') < copal.dumps(points[0], format="json").index(b'"x"')


class Wide:
    """More attributes than a shared key table holds (30): the later ones go to a dict."""

    def __init__(self, n: int) -> None:
        for i in range(n):
            setattr(self, f"field_{i}", i)


def test_instances_with_more_than_30_attributes() -> None:
    assert_written_directly([Wide(29), Wide(31), Wide(40), Wide(2)])


class SubPoint(Point):
    def __init__(self, x: Any, y: Any, z: Any) -> None:
        super().__init__(x, y)
        self.z = z


class OtherLayout:
    """A class with a key table of its own, in another order than Point's."""

    def __init__(self) -> None:
        self.y = "y"
        self.x = "x"


def test_subclasses_and_instances_whose_class_changed() -> None:
    moved = _points(2)
    moved[0].__class__ = OtherLayout
    other = OtherLayout()
    other.__class__ = Point
    assert_written_directly([SubPoint(1, 2, 3), Point(4, 5), *moved, other, OtherLayout()])


class Meddler(enum.Enum):
    """A member whose `_name_` lookup (made by the writer) runs the changes in `MEDDLING`."""

    MEMBER = 1

    def __getattribute__(self, name: str) -> Any:
        if name == "_name_":
            for meddle in MEDDLING:
                meddle()
        return super().__getattribute__(name)


MEDDLING: list[Callable[[], None]] = []


def _meddle_with(victim: Any) -> Callable[[], None]:
    """A change of `victim` that the writer must notice while it writes it."""
    if isinstance(victim, dict):
        # A new value of the same text, and the same size: the encoder's own reading refuses a
        # dict that grows.
        return lambda: victim.__setitem__("b", [2])
    if isinstance(victim, list):
        return lambda: victim.__delitem__(slice(1, None))  # frees the items after this one
    return lambda: vars(victim)


def _made_dict_case(change: Callable[[Point], None]) -> tuple[Point, Callable[[], None]]:
    """A Point whose dict was made before it is written, and `change` of it while it is."""
    victim = Point(Meddler.MEMBER, [2])
    vars(victim)
    assert sys.version_info[:2] != (3, 11) or has_made_dict(victim)
    return victim, lambda: change(victim)


def _replace_dict(victim: Point) -> None:
    # The dict the writer was reading is freed, and with it the values it held.
    victim.__dict__ = {"x": Meddler.MEMBER, "y": [[3] * 5]}


@pytest.mark.parametrize(
    ("victim", "meddle"),
    [
        (Point(Meddler.MEMBER, 2), None),
        ({"a": Meddler.MEMBER, "b": [2]}, None),
        ([Meddler.MEMBER, [2], "x"], None),
        ([Meddler.MEMBER, [2], "x", "x", "x"], None),
        # An instance whose dict was made before: the writer reads the dict's values array
        # without holding the dict, and must see it changed or replaced.
        _made_dict_case(lambda victim: setattr(victim, "y", [[3] * 5])),
        _made_dict_case(lambda victim: victim.__dict__.pop("y", None)),
        _made_dict_case(_replace_dict),
    ],
    ids=["instance", "dict", "list", "list_with_a_run", "made_dict_set", "made_dict_deleted", "made_dict_replaced"],
)
def test_a_value_changed_while_it_is_written_goes_to_the_transcoder(victim: Any, meddle: Callable[[], None] | None) -> None:
    MEDDLING[:] = [meddle or _meddle_with(victim)]
    try:
        if isinstance(victim, list):
            assert _core.dumps_json_raw(victim) is None
        else:
            assert_left_to_transcoder(victim)
        assert json.loads(copal.dumps(victim, format="json")) == json.loads(transcoded(victim))
        if isinstance(victim, Point):
            # The binary encoder reads the same way: what it wrote is the instance as it was
            # left (each call changes it again, to the same state).
            assert vars(copal.loads(copal.dumps(victim))) == vars(victim)
    finally:
        MEDDLING.clear()


def test_a_made_dict_replaced_by_one_at_its_address_goes_to_the_transcoder() -> None:
    """The dict the writer reads is freed and a new one made at its address (CPython hands out
    the last freed dict first): the instance points to the same address, and only the dict's
    version tag tells the writers that it is another dict, whose values are elsewhere."""
    addresses: list[tuple[int, int]] = []

    def replace_at_its_address(victim: Point) -> None:
        address = id(victim.__dict__)
        victim.__dict__ = {}
        victim.__dict__ = {"x": Meddler.MEMBER, "y": [[3] * 5]}
        addresses.append((address, id(victim.__dict__)))

    def json_writer(victim: Point) -> None:
        assert_left_to_transcoder(victim)
        assert json.loads(copal.dumps(victim, format="json")) == json.loads(transcoded(victim))

    def binary_encoder(victim: Point) -> None:
        # The encoder takes its own references to the fields before it writes the first one:
        # it writes the object as it was then.
        assert vars(copal.loads(copal.dumps(victim))) == {"x": Meddler.MEMBER, "y": [2]}

    for write in (json_writer, binary_encoder):
        # A new victim each time: once replaced, its dict is no longer the split one read in place.
        victim, meddle = _made_dict_case(replace_at_its_address)
        MEDDLING[:] = [meddle]
        try:
            write(victim)
        finally:
            MEDDLING.clear()
        if READS_IN_PLACE:
            old, new = addresses[0]
            assert old == new, "the new dict was not made at the freed one's address"
        addresses.clear()


def _equal_copy(text: str) -> str:
    """A str equal to `text` (two characters at least) but another object."""
    copy = text[:1] + text[1:]
    assert copy is not text
    return copy


_SHARED_TEXT = "shared text"

#: Lists and tuples holding runs of one value (the same object, item after item), whose text
#: the writer copies rather than writes again: scalars of each kind, runs at the start, the
#: middle and the end, runs of two, runs longer than the copy's block (4096 bytes), equal
#: values that are not the same object, and containers, which take memo slots and are
#: `$ref`s when met again, so are never copied.
RUNS: dict[str, Any] = {
    "ints": [0] * 5 + [1] + [0] * 3 + [7, 7],
    "run_of_two_after_the_first_item": [1, 5, 5],
    "one_item": ["x"],
    "two_items": ["x", "x"],
    "text_with_escapes": ["é\"\n😀"] * 4,
    "floats_none_and_bools": [1.5] * 3 + [None] * 3 + [True] * 3 + [False] * 3 + [math.nan] * 3 + [-0.0] * 2,
    "big_ints": [2**100] * 3 + [-(2**64)] * 2,
    "lone_surrogates": ["\udc80"] * 3,
    "past_the_block": ["a str of twenty char"] * 5000 + [0] * 3000,
    "equal_but_not_the_same": [_SHARED_TEXT, _equal_copy(_SHARED_TEXT), _SHARED_TEXT, _SHARED_TEXT, 10**30, 10**30],
    "tuple": (0,) * 6 + ("t",) * 2,
    "lists": [[1]] * 3,
    "dicts": [{"k": 1}] * 3,
    "objects": [Point(1, 2)] * 3,
    "tuples": [(1, 2)] * 3,
    "in_fields": Point([0] * 100, [_SHARED_TEXT] * 100),
}


@pytest.mark.parametrize("value", RUNS.values(), ids=RUNS.keys())
def test_runs_of_one_value_are_written_as_the_transcoder_writes_them(value: Any) -> None:
    assert_written_directly(value)


def test_documents_longer_and_shorter_than_the_last_one_are_written_whole() -> None:
    # The writer sizes its output by the last document's length and grows it past that: each
    # size here is far from the one before, so both a large first guess and several growths of
    # a small one are taken. Past 8 MB (1,500,000 items) the room is handed out a megabyte at a
    # time (bytes_output.rs `prepare`), which single strings and runs longer than that cross.
    for count in (3, 200_000, 1, 50_000, 0, 400_000, 1_500_000, 10, 1_500_000):
        assert_written_directly([f"text {i}" for i in range(count)])
        # A run is copied with one growth for all of it.
        assert_written_directly(["a run"] * count)
    long_text = "a text longer than the room handed out at a time, " * 60_000
    assert_written_directly([long_text, [long_text] * 5, "é" * 2_000_000])


@pytest.mark.parametrize(
    "value",
    [[f"item number {i}" for i in range(3000)], ["long " * 60] + ["item"] * 3000],
    ids=["distinct_items", "a_run_after_a_growth"],
)
def test_a_document_that_cannot_grow_is_a_memory_error(value: list[str]) -> None:
    """The document is written into the bytes object returned; when that object cannot grow
    (each allocation of the call failing in turn), the call raises MemoryError, never panics, and
    the next call writes the whole document again. A run of one str is copied with one growth
    for all of it, which may fail, or be asked for once an earlier growth failed."""
    testcapi = pytest.importorskip("_testcapi")
    expected = copal.dumps(value, format="json")
    unraisable: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    outcomes = {"MemoryError": 0, "document": 0}
    try:
        for n in range(200):
            copal.dumps([1], format="json")  # sizes the next document's first room: small
            testcapi.set_nomemory(n, n + 1)
            try:
                document = copal.dumps(value, format="json")
            except MemoryError:
                outcomes["MemoryError"] += 1
                continue
            finally:
                testcapi.remove_mem_hooks()
            assert document == expected
            outcomes["document"] += 1
    finally:
        sys.unraisablehook = hook
    assert not unraisable
    assert outcomes["MemoryError"] > 0 and outcomes["document"] > 0, outcomes
    assert copal.dumps(value, format="json") == expected
