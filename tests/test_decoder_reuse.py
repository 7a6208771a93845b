"""What the decoder keeps between and within decodings, and the hazards that come with it.

crates/copal-py/src/decode/mod.rs and standalone.rs keep three things to make ``copal.loads`` cheaper
(docs/ARCHITECTURE.md "Decoding reuses what it can"): the descriptor tables of recent streams,
with their interned field names (``RECENT_TABLES``); each descriptor's class, looked up once per
decoding instead of once per object; and the decoder's buffers, emptied and kept per thread for
the next decoding. Each test here pins a way that reuse could go wrong.
"""

from __future__ import annotations

import pickle
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import copal  # noqa: E402
from copal.errors import CorruptRecordError  # noqa: E402
from helpers.stream_bytes import entry, stream, table, varint  # noqa: E402

MODULE = "copal_decoder_reuse_test_module"


@pytest.fixture
def module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A module in ``sys.modules`` (for the test only) where streams find classes by name."""
    mod = types.ModuleType(MODULE)
    monkeypatch.setitem(sys.modules, MODULE, mod)
    return mod


def define(module: types.ModuleType, name: str, namespace: dict[str, Any] | None = None) -> type:
    cls = type(name, (), {"__module__": MODULE, **(namespace or {})})
    setattr(module, name, cls)
    return cls


def instance(cls: type, **fields: Any) -> Any:
    obj = cls()
    obj.__dict__.update(fields)
    return obj


def stream_body(data: bytes) -> bytes:
    """The body of an uncompressed stream (docs/STREAM.md section 2)."""
    at = 6
    while data[at] & 0x80:
        at += 1
    return data[at + 1 :]


def test_a_remembered_table_is_not_read_into_a_stream_of_another_version(module: types.ModuleType) -> None:
    # A version 3 table is followed by its field kinds, whose bytes are value tags: here the
    # INT kind of field "x" is the byte of the INT tag. A version 2 stream with the same table and
    # the int 5 as its value starts with the bytes of the remembered version 3 table and kinds;
    # read as that table, its value would lose its tag.
    cls = define(module, "Counter")
    v3 = copal.dumps(instance(cls, x=1))
    assert copal.loads(v3).x == 1  # remembers the version 3 table
    counters = table(entry(f"{MODULE}.Counter", ["x"]))
    assert stream_body(v3).startswith(counters + b"\x03")  # the table, then the INT kind
    assert copal.loads(stream(counters + b"\x03" + varint(10), version=2)) == 5  # INT, zigzag(5)


def test_tables_beyond_those_remembered_still_load(module: types.ModuleType) -> None:
    streams = []
    for i in range(20):  # more shapes than RECENT_TABLES
        cls = define(module, f"Shape{i}")
        obj = instance(cls, **{f"field_{i}_{j}": j for j in range(i % 4 + 1)})
        streams.append((cls, vars(obj), copal.dumps(obj)))
    for _ in range(3):
        for cls, fields, data in streams:
            back = copal.loads(data)
            assert type(back) is cls and vars(back) == fields


def test_a_table_too_large_to_remember_loads_every_time(module: types.ModuleType) -> None:
    cls = define(module, "Wide")
    fields = {f"a_rather_long_field_name_number_{i:04}": i for i in range(300)}  # > 4 KiB of names
    data = copal.dumps(instance(cls, **fields))
    for _ in range(2):
        assert vars(copal.loads(data)) == fields


def test_a_remembered_table_resolves_its_classes_again(module: types.ModuleType) -> None:
    first = define(module, "Item")
    data = copal.dumps([instance(first, n=1), instance(first, n=2)])
    assert all(type(item) is first for item in copal.loads(data))
    second = define(module, "Item")
    assert all(type(item) is second for item in copal.loads(data))


def test_a_decoding_inside_a_decoding_keeps_its_own_buffers(module: types.ModuleType) -> None:
    # Hashing a dict key runs its class's __hash__ while the outer decoder is half done; a
    # decoding there takes its own buffers and gives them back, and the outer one must go on
    # with its memo and string slots intact.
    inner = copal.dumps([["shared"] * 3, {"k": "shared"}])

    def loading_hash(self: Any) -> int:
        assert copal.loads(inner) == [["shared"] * 3, {"k": "shared"}]
        return hash(self.name)

    key_class = define(module, "Key", {"__hash__": loading_hash, "__eq__": lambda self, other: self.name == other.name})
    shared = ["a list met twice"]
    outer = {"before": shared, "table": {instance(key_class, name="k1"): "one"}, "after": shared, "text": "shared"}
    back = copal.loads(copal.dumps(outer))
    assert back["before"] is back["after"] == ["a list met twice"]
    assert [(k.name, v) for k, v in back["table"].items()] == [("k1", "one")]
    assert back["text"] == "shared"


def test_a_failed_decoding_leaves_nothing_for_the_next() -> None:
    good = copal.dumps([["x"] * 2, "y", "y"])
    bad = good[:-1]
    with pytest.raises(CorruptRecordError):
        copal.loads(bad)
    back = copal.loads(good)
    assert back == [["x"] * 2, "y", "y"] and back[1] is back[2]


@dataclass
class Leaf:
    label: str


@dataclass
class Branch:
    name: str
    leaf: Leaf
    leaves: list[Leaf]


def test_objects_of_one_class_in_one_decoding_are_full_instances() -> None:
    # The class of each descriptor is looked up once per decoding; every object still gets its
    # own instance with the class's compact attribute storage and behaves as built by __init__.
    data = [Branch(f"b{i}", Leaf(f"l{i}"), [Leaf("x"), Leaf(f"y{i}")]) for i in range(50)]
    back = copal.loads(copal.dumps(data))
    assert back == data
    assert len({id(b.leaf) for b in back}) == 50
    first = back[0]
    assert vars(first) == {"name": "b0", "leaf": Leaf("l0"), "leaves": [Leaf("x"), Leaf("y0")]}
    first.extra = 1
    del first.name
    assert vars(first) == {"leaf": Leaf("l0"), "leaves": [Leaf("x"), Leaf("y0")], "extra": 1}
    assert pickle.loads(pickle.dumps(back[1])) == back[1]


def test_embedded_objects_of_a_record_are_full_instances(db: Any) -> None:
    # Records build embedded plain objects with object's constructor called directly.
    with db.transaction() as tx:
        tx.root["branches"] = [Branch(f"b{i}", Leaf(f"l{i}"), [Leaf("x")]) for i in range(3)]
    with db.transaction() as tx:
        branches = tx.root["branches"]
        assert branches == [Branch(f"b{i}", Leaf(f"l{i}"), [Leaf("x")]) for i in range(3)]
        leaf = branches[2].leaf
        leaf.more = 2
        assert vars(leaf) == {"label": "l2", "more": 2}
        assert pickle.loads(pickle.dumps(leaf)) == leaf


def test_text_of_every_length_and_position_of_non_ascii_loads_exactly(module: types.ModuleType) -> None:
    # Fresh ASCII strings are copied after a word-at-a-time check (strings.rs `new_string`), other
    # text goes through CPython's UTF-8 decoder: the boundaries of both, in tagged values and in
    # the typed str fields of an OBJECT_LIST.
    texts = [""]
    for length in range(1, 20):
        ascii_text = "".join(chr(ord("a") + i % 26) for i in range(length))
        texts.append(ascii_text)
        texts.extend(ascii_text[:at] + "é" + ascii_text[at + 1 :] for at in range(length))
        texts.append(ascii_text[:-1] + "\x7f")
    cls = define(module, "Text")
    loaded = copal.loads(copal.dumps([texts, [instance(cls, text=text) for text in texts]]))
    assert loaded[0] == texts
    assert [obj.text for obj in loaded[1]] == texts
    assert all(type(text) is str for text in loaded[0])
