"""copal.dumps(obj, format="json"|"xml") and copal.loads of them (docs/TEXT_FORMATS.md).

Round trips of every value type run in tests/test_serialize.py (parametrized over the formats);
this file pins the mapping itself (what other languages read: plain JSON where it fits, the
documented tags elsewhere), format detection, argument checks, and malformed documents
(always CorruptRecordError).
"""

from __future__ import annotations

import datetime
import decimal
import gzip
import json
from xml.etree import ElementTree
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import copal  # noqa: E402
from copal import CorruptRecordError, SchemaError  # noqa: E402
from helpers import other_models  # noqa: E402
from helpers.models import Color, Item, Point, Tagged, TaggedDict  # noqa: E402

#: The version of the JSON mapping copal writes.
JSON_VERSION = 2


def doc(value: Any) -> Any:
    """The ``value`` member of the JSON document of ``value``, as any JSON reader sees it."""
    text = copal.dumps(value, format="json")
    parsed = json.loads(text)
    assert set(parsed) == {"$copal", "value"} and parsed["$copal"] == JSON_VERSION
    return parsed["value"]


def test_plain_json_where_json_has_the_type() -> None:
    value = {"name": "ann", "n": [1, -2, 2**70, 1.5, 1.0, None, True, False], "nested": {"é": "\u2603\n\""}}
    assert doc(value) == value
    assert copal.dumps(1.0, format="json") == b'{"$copal":2,"value":1.0}'


@pytest.mark.parametrize(
    ("value", "tagged"),
    [
        ((1, "a"), {"$tuple": [1, "a"]}),
        ({3, 1, 2}, {"$set": [1, 2, 3]}),
        (frozenset({"x"}), {"$frozenset": ["x"]}),
        (b"\x00\xff", {"$bytes": "AP8="}),
        (bytearray(b"ab"), {"$bytearray": "YWI="}),
        (float("nan"), {"$float": "nan"}),
        (float("-inf"), {"$float": "-inf"}),
        (1 - 2j, {"$complex": [1.0, -2.0]}),
        (datetime.date(2024, 2, 29), {"$date": "2024-02-29"}),
        (datetime.datetime(2024, 1, 2, 3, 4, 5, 6), {"$datetime": "2024-01-02T03:04:05.000006"}),
        (
            datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone(datetime.timedelta(hours=-5, minutes=-30))),
            {"$datetime": "2024-01-02T00:00:00-05:30"},
        ),
        (datetime.time(23, 59, fold=1), {"$time": "23:59:00", "$fold": 1}),
        (datetime.timedelta(days=-1, seconds=5, microseconds=6), {"$timedelta": [-1, 5, 6]}),
        (decimal.Decimal("-1.50"), {"$decimal": "-1.50"}),
        (uuid.UUID(int=1), {"$uuid": "00000000-0000-0000-0000-000000000001"}),
        ({1: "a"}, {"$dict": [[1, "a"]]}),
        ({"$type": 1, "$$x": 2}, {"$$type": 1, "$$$x": 2}),
        (Point(1, "a"), {"$type": "helpers.models.Point", "x": 1, "y": "a"}),
        (Color.GREEN, {"$enum": "helpers.models.Color", "$member": "GREEN"}),
        (Tagged([1]), {"$subclass": "helpers.models.Tagged", "$base": [1]}),
        (Item("pen", 3), {"$persistent": "helpers.models.Item", "name": "pen", "value": 3, "payload": {"$bytes": ""}}),
    ],
    ids=lambda v: type(v).__name__,
)
def test_tags_where_json_cannot_express_the_type(value: Any, tagged: Any) -> None:
    assert doc(value) == tagged


def test_a_class_named_before_is_named_by_its_number() -> None:
    value = [Point(1, 2), Color.RED, Point(3, 4), Color.GREEN, [Point(5, 6)]]
    assert doc(value) == [
        {"$type": "helpers.models.Point", "x": 1, "y": 2},
        {"$enum": "helpers.models.Color", "$member": "RED"},
        {"$type": 0, "x": 3, "y": 4},
        {"$enum": 1, "$member": "GREEN"},
        [{"$type": 0, "x": 5, "y": 6}],
    ]
    assert copal.loads(copal.dumps(value, format="json")) == value
    # Readers take members in any order, and a name repeated in full.
    text = '{"$copal": 2, "value": [{"$type": "helpers.models.Point", "x": 1, "y": 2}, {"y": 4, "$type": 0, "x": 3}, {"$type": "helpers.models.Point", "x": 5, "y": 6}]}'
    assert copal.loads(text) == [Point(1, 2), Point(3, 4), Point(5, 6)]


def test_classes_with_the_same_unqualified_name_have_their_own_numbers() -> None:
    value = [Point(1, 2), other_models.Point(3), other_models.Color.RED, Color.RED, other_models.Point(4), Point(5, 6), Color.RED]
    assert doc(value) == [
        {"$type": "helpers.models.Point", "x": 1, "y": 2},
        {"$type": "helpers.other_models.Point", "z": 3},
        {"$enum": "helpers.other_models.Color", "$member": "RED"},
        {"$enum": "helpers.models.Color", "$member": "RED"},
        {"$type": 1, "z": 4},
        {"$type": 0, "x": 5, "y": 6},
        {"$enum": 3, "$member": "RED"},
    ]
    back = copal.loads(copal.dumps(value, format="json"))
    assert back == value and [type(v) for v in back] == [type(v) for v in value]


def test_shared_objects_and_cycles_use_id_and_ref() -> None:
    shared = [1]
    graph: dict[str, Any] = {"a": shared, "b": shared}
    graph["self"] = graph
    assert doc(graph) == {"$id": 0, "a": {"$id": 1, "$list": [1]}, "b": {"$ref": 1}, "self": {"$ref": 0}}
    back = copal.loads(copal.dumps(graph, format="json"))
    assert back["a"] is back["b"] and back["self"] is back


def test_subclass_instances_shared_and_in_cycles() -> None:
    tags = Tagged([1])
    tags.append(tags)
    tags.label = "t"
    shared = [2]
    graph = [tags, TaggedDict(a=shared), shared, tags]
    back = copal.loads(copal.dumps(graph, format="json"))
    assert back[0] is back[3] and back[0][1] is back[0] and back[0].label == "t"
    assert back[1]["a"] is back[2] and type(back[1]) is TaggedDict


def test_ids_are_any_numbers_and_documents_may_be_written_by_hand() -> None:
    text = '{"value": {"$id": 42, "$list": [{"$ref": 42}, {"$type": "helpers.models.Point", "y": 2, "x": 1}]}, "$copal": 1}'
    back = copal.loads(text)
    assert back[0] is back
    assert (back[1].x, back[1].y) == (1, 2)


def test_equal_short_strings_of_a_document_load_as_one_object() -> None:
    """Text has no shared strings: the decoder's short-string cache makes equal strings one object
    again, and tells apart the many distinct ones that take the same slots before them."""
    words = [f"word-{i % 7}" for i in range(2_000)]
    runs = [f"run-{i // 50}" for i in range(500)] + ["é"] * 3 + ["run-9"] * 3
    distinct = [f"id-{i}" for i in range(5_000)] + ["é-ü", "ü-é"]
    for form in ("json", "xml"):
        back = copal.loads(copal.dumps(distinct + words + runs, format=form))
        assert back == distinct + words + runs
        assert len({id(s) for s in back[len(distinct):-len(runs)]}) == 7
        assert len({id(s) for s in back[-len(runs):]}) == 11


@pytest.mark.parametrize("prefix", ["", " \n\t"])
def test_loads_detects_json_in_str_and_bytes(prefix: str) -> None:
    document = prefix.encode() + copal.dumps({"k": (1, 2)}, format="json")
    assert copal.loads(document) == {"k": (1, 2)}
    assert copal.loads(document.decode()) == {"k": (1, 2)}
    assert copal.loads(bytearray(document)) == {"k": (1, 2)}
    assert copal.loads(memoryview(document)) == {"k": (1, 2)}


def test_text_documents_are_utf8_bytes() -> None:
    value = {"é": ["\u2603", "\U0001f600", "x"]}
    for form in ("json", "xml"):
        document = copal.dumps(value, format=form)
        assert type(document) is bytes and "\u2603".encode() in document
        assert copal.loads(document) == value
    with pytest.raises(CorruptRecordError, match="corrupt JSON document: not UTF-8"):
        copal.loads(b'{"$copal":2,"value":"\xff"}')


def test_format_arguments() -> None:
    with pytest.raises(ValueError, match="unknown format 'yaml'"):
        copal.dumps(1, format="yaml")  # type: ignore[call-overload]
    # The binary format is named as the export's is.
    assert copal.dumps([1], format="copal") == copal.dumps([1])
    with pytest.raises(ValueError, match="zstd compression level 99"):
        copal.dumps(1, format="json", compress=("zstd", 99))
    with pytest.raises(ValueError, match="unknown compression 'bz2'"):
        copal.dumps(1, format="xml", compress="bz2")  # type: ignore[arg-type]


@pytest.mark.parametrize("form", ["json", "xml"])
@pytest.mark.parametrize("compress", ["gzip", "zstd", "lz4", ("gzip", 9), ("zstd", 19)], ids=str)
def test_text_documents_compress_whole_in_the_standard_frame(form: str, compress: Any) -> None:
    value = {"names": ["Ann"] * 500, "when": datetime.date(2024, 5, 1), "tags": {"x"}}
    plain = copal.dumps(value, format=form)
    packed = copal.dumps(value, format=form, compress=compress)
    assert len(packed) < len(plain) / 5
    codec = compress if isinstance(compress, str) else compress[0]
    magic = {"gzip": b"\x1f\x8b", "zstd": b"\x28\xb5\x2f\xfd", "lz4": b"\x04\x22\x4d\x18"}[codec]
    assert packed.startswith(magic)
    if codec == "gzip":
        assert gzip.decompress(packed) == plain  # what gunzip reads
    assert copal.loads(packed) == value
    assert copal.loads(memoryview(packed)) == value


def test_a_compressed_document_is_bounded_by_max_size() -> None:
    packed = copal.dumps(["x" * 100_000], format="json", compress="zstd")
    assert len(packed) < 1_000
    with pytest.raises(CorruptRecordError, match="max_size = 50000"):
        copal.loads(packed, max_size=50_000)
    assert copal.loads(packed, max_size=200_000) == ["x" * 100_000]


def test_damaged_compressed_documents_are_refused() -> None:
    packed = copal.dumps({"a": 1}, format="json", compress="gzip")
    with pytest.raises(CorruptRecordError, match="gzip"):
        copal.loads(packed[:-6])
    with pytest.raises(CorruptRecordError, match="gzip"):
        copal.loads(packed + b"trailing")
    with pytest.raises(CorruptRecordError, match="not a copal stream"):
        copal.loads(gzip.compress(b"neither JSON nor XML"))


def test_a_gzipped_stream_loads_too() -> None:
    # A stream file compressed by gzip on the command line.
    assert copal.loads(gzip.compress(copal.dumps({"k": (1, 2)}))) == {"k": (1, 2)}


@pytest.mark.parametrize("compress", [None, "gzip"])
def test_dump_and_load_of_a_document_read_to_the_end_of_the_file(tmp_path: Path, compress: Any) -> None:
    path = tmp_path / "doc"
    with path.open("wb") as out:
        copal.dump({"x": [1.5, None]}, out, format="xml", compress=compress)
    with path.open("rb") as source:
        assert copal.load(source) == {"x": [1.5, None]}
        assert source.read() == b""


def test_unstorable_values_are_refused_as_in_binary() -> None:
    with pytest.raises(TypeError, match=r"value\[0\]"):
        copal.dumps([lambda: None], format="json")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "malformed text"),
        ('{"$copal": 1, "value": [1,]}', "malformed text"),
        ('{"$copal": 1, "value": 1} 2', "text after the document"),
        ('{"$copal": 3, "value": 1}', "version 3"),
        ('{"$copal": 0, "value": 1}', "version 0"),
        ('{"$copal": 1, "value": {"$type": 0}}', "needs a class name"),
        ('{"$copal": 2, "value": {"$type": 0}}', "not the number of a class named earlier"),
        ('{"$copal": 2, "value": [{"$enum": "helpers.models.Color", "$member": "RED"}, {"$enum": 1, "$member": "RED"}]}', "not the number"),
        ('{"$copal": 2, "value": {"$type": 0.0}}', "not the number"),
        ('{"$copal": 2, "value": {"$type": null}}', "needs a class name"),
        ('{"value": 1}', "no \"\\$copal\""),
        ('{"$copal": 1}', "no \"value\""),
        ('{"$copal": 1, "value": 1, "x": 2}', "unexpected member"),
        ('{"$copal": 1, "value": {"$ref": 0}}', "names no earlier"),
        ('{"$copal": 1, "value": {"$tuple": [], "$set": []}}', "unexpected"),
        ('{"$copal": 1, "value": {"$tuple": 1}}', "must be an array"),
        ('{"$copal": 1, "value": {"$bytes": "A"}}', "base64"),
        ('{"$copal": 1, "value": {"$date": "2023-02-29"}}', "ISO 8601"),
        ('{"$copal": 1, "value": {"$datetime": "2023-01-01T00:00:00+01:00", "$zone": "UTC"}}', "both"),
        ('{"$copal": 1, "value": {"$uuid": "xyz"}}', "8-4-4-4-12"),
        ('{"$copal": 1, "value": {"$float": "1.5"}}', "nan"),
        ('{"$copal": 1, "value": {"$mystery": 1}}', "unexpected"),
        ('{"$copal": 1, "value": {"$id": 1, "$list": [], "$id": 1}}', "twice"),
        ('{"$copal": 1, "value": {"$id": 1, "$list": [{"$id": 1, "$list": []}]}}', "twice"),
        ('{"$copal": 1, "value": {' + ", ".join(f'"k{i}": {i}' for i in range(20)) + ', "k3": 0}}', "twice"),
        ('{"$copal": 1, "value": {"$decimal": "one"}}', "decimal"),
        ('{"$copal": 1, "value": {"$subclass": "helpers.models.Tagged", "$base": 1}}', "must be a list"),
        ('{"$copal": 1, "value": {"$subclass": "helpers.models.Tagged", "$base": {"$id": 0, "$list": []}}}', "cannot carry"),
        ('{"$copal": 1, "value": "\\ud800"}', "surrogate"),
        (b'{"$copal": 1, "value": "\xff"}', "UTF-8"),
    ],
)
def test_malformed_documents_are_corrupt(text: str | bytes, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        copal.loads(text)


def test_unknown_class_is_a_schema_error() -> None:
    with pytest.raises(SchemaError):
        copal.loads('{"$copal": 1, "value": {"$type": "nowhere.Gone", "x": 1}}')


def test_deep_nesting_is_refused_without_crashing() -> None:
    text = '{"$copal": 1, "value": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(CorruptRecordError, match="nested too deeply"):
        copal.loads(text)
    text = '{"$copal": 1, "value": ' + "[" * 300 + "]" * 300 + "}"
    with pytest.raises(CorruptRecordError, match="deeper"):
        copal.loads(text)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_damaged_documents_fail_cleanly(data: st.DataObject) -> None:
    value = {"p": Point(1, [2.5, "x"]), "s": {1, 2}, "t": (b"a",), 3: None, "q": Point(Color.RED, Color.GREEN)}
    text = bytearray(copal.dumps(value, format="json"))
    for _ in range(data.draw(st.integers(1, 3))):
        text[data.draw(st.integers(0, len(text) - 1))] = data.draw(st.sampled_from(b'{}[]",:$0123456789abc\\ '))
    try:
        copal.loads(bytes(text))
    except (CorruptRecordError, SchemaError):
        pass


# -- XML ------------------------------------------------------------------------------------------


def xml_root(value: Any) -> ElementTree.Element:
    """The root element of the XML document of ``value``, as ElementTree reads it."""
    root = ElementTree.fromstring(copal.dumps(value, format="xml"))
    assert root.tag == "copal" and root.attrib == {"version": "1"} and len(root) == 1
    return root[0]


def test_xml_is_one_element_per_value() -> None:
    value = {"a": [1, 2.5, None, True], 3: (b"\x00", {"s"})}
    assert copal.dumps(value, format="xml") == (
        b'<copal version="1"><dict><str>a</str><list><int>1</int><float>2.5</float><none/><true/></list>'
        b"<int>3</int><tuple><bytes>AA==</bytes><set><str>s</str></set></tuple></dict></copal>"
    )


def test_xml_objects_shared_references_and_text_escapes() -> None:
    point = Point("<&>\r\n\t", 1)
    graph = [point, point, Item("pen")]
    root = xml_root(graph)
    first = root[0]
    assert first.tag == "object" and first.get("type") == "helpers.models.Point" and first.get("id") == "1"
    assert [f.get("name") for f in first] == ["x", "y"] and first[0][0].text == "<&>\r\n\t"
    assert root[1].tag == "ref" and root[1].get("id") == "1"
    assert root[2].get("persistent") == "1"
    back = copal.loads(copal.dumps(graph, format="xml"))
    assert back[0] is back[1] and back[0].x == "<&>\r\n\t"


def test_xml_strings_outside_xml_1_0_are_base64() -> None:
    assert xml_root("a\x01b").attrib == {"base64": "1"}
    assert copal.loads(copal.dumps("a\x01b", format="xml")) == "a\x01b"


def test_xml_accepts_a_declaration_comments_and_whitespace() -> None:
    text = '<?xml version="1.0" encoding="utf-8"?>\n<!-- hand written -->\n<copal version="1">\n  <list>\n    <int>1</int>\n  </list>\n</copal>\n'
    assert copal.loads(text) == [1]
    assert copal.loads(text.encode()) == [1]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<copal", "malformed text"),
        ('<copal version="2"><none/></copal>', "version 2"),
        ('<other version="1"><none/></copal>', "malformed text"),
        ('<other version="1"><none/></other>', "not <copal>"),
        ('<copal version="1"><none/><none/></copal>', "exactly one value"),
        ('<copal version="1"><mystery/></copal>', "unknown element"),
        ('<copal version="1"><int>1.5</int></copal>', "integer"),
        ('<copal version="1"><list x="1"/></copal>', "unexpected attribute"),
        ('<copal version="1"><ref id="0"/></copal>', "no earlier id"),
        ('<copal version="1"><dict><int>1</int></dict></copal>', "pairs"),
        ('<!DOCTYPE copal [<!ENTITY e "x">]><copal version="1"><none/></copal>', "DTD"),
        ('<copal version="1"><str>&e;</str></copal>', "unknown reference"),
        ('<copal version="1"><list id="1"><list id="1"/></list></copal>', "twice"),
        ('<copal version="1"><str>&#0;</str></copal>', "XML 1.0 does not allow"),
        ('<copal version="1"><str>&#1;</str></copal>', "XML 1.0 does not allow"),
        ('<?xml-stylesheet href="a.xsl"?><copal version="1"><none/></copal>', "processing instructions"),
    ],
)
def test_malformed_xml_documents_are_corrupt(text: str, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        copal.loads(text)


def test_deep_xml_is_refused_without_crashing() -> None:
    text = '<copal version="1">' + "<list>" * 100_000 + "</list>" * 100_000 + "</copal>"
    with pytest.raises(CorruptRecordError, match="nested too deeply"):
        copal.loads(text)


@pytest.mark.parametrize("format", ["json", "xml"])
@pytest.mark.parametrize("cut", [3, 4], ids=["end-mark-cut", "end-mark-missing"])
def test_an_lz4_document_without_its_frame_end_is_corrupt(format: str, cut: int) -> None:
    """A text document's LZ4 frame must end with its end mark: the decoder alone takes the end of
    the input for the end of the frame, so a document cut there would load."""
    data = copal.dumps({"a": [1, 2, 3]}, format=format, compress="lz4")  # type: ignore[arg-type]
    assert copal.loads(data) == {"a": [1, 2, 3]}
    with pytest.raises(copal.CorruptRecordError, match="end mark"):
        copal.loads(data[:-cut])
