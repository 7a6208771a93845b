"""Lists as the decoder builds them (crates/copal-py/src/list_builder.rs): made with room for
their items, runs of small ints and shared strings stored without a call per item, and their
reference counts raised once per run. Values, identities and reference counts must be exactly
those of lists built item by item."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import copal
from copal import CorruptRecordError

from helpers.models import Holder

# Ints at the edges of the shared small ints (-5 to 256) and of one- and two-byte varints.
EDGE_INTS = [-8193, -8192, -257, -65, -64, -6, -5, -1, 0, 1, 63, 64, 255, 256, 257, 8191, 8192, 2**40, -(2**62)]


def _stream(value_hex: str) -> bytes:
    """A version 3 stream of no descriptors whose value is `value_hex`."""
    body = b"\x00" + bytes.fromhex(value_hex)
    length = bytearray()
    remaining = len(body)
    while remaining >= 0x80:
        length.append(remaining & 0x7F | 0x80)
        remaining >>= 7
    length.append(remaining)
    return b"CPL1" + bytes([3, 0]) + bytes(length) + body


def test_lists_of_ints_round_trip_with_small_ints_shared() -> None:
    value = EDGE_INTS * 3 + [None, "x", 1.5] + EDGE_INTS
    back = copal.loads(copal.dumps(value))
    assert back == value
    for item, original in zip(back, value):
        assert type(item) is type(original)
        if type(original) is int and -5 <= original <= 256:
            assert item is original


def test_lists_of_shared_strings_round_trip_across_varint_lengths() -> None:
    # Slots past 127 and 16383 are referred to with two- and three-byte varints.
    distinct = [f"s{i}" for i in range(20_000)]
    repeats = [distinct[i] for i in (0, 1, 127, 128, 200, 16_383, 16_384, 19_999, 0, 0, 5)]
    value = distinct + repeats + [3, distinct[128], -2, distinct[16_384]]
    back = copal.loads(copal.dumps(value))
    assert back == value
    assert back[-1] is back[16_384] and back[20_000] is back[0]


def test_reference_counts_of_shared_items_are_exact() -> None:
    # Counts are read into variables first: pytest's rewritten asserts keep their operands.
    text, seven = "repeated text", 7
    data = copal.dumps([seven] * 1000 + [text] * 500 + [seven, 300, seven] + [text] * 2)
    copal.loads(data)  # makes the decoder's table of small ints, which holds one reference
    int_before = sys.getrefcount(seven)
    back = copal.loads(data)
    int_during = sys.getrefcount(seven)
    decoded_text = back[1000]
    text_during = sys.getrefcount(decoded_text)
    del back
    int_after, text_after = sys.getrefcount(seven), sys.getrefcount(decoded_text)
    if sys.version_info < (3, 12):  # small ints are immortal since (PEP 683): counts stay put
        assert int_during - int_before == 1002
        assert int_after == int_before
    # The list held 502 references to the string; now only `decoded_text` does.
    assert text_during - text_after == 502


def test_list_that_holds_itself_between_runs_of_ints() -> None:
    value: list[object] = [1, 2, 3]
    value.append(value)
    value += [4] * 10
    back = copal.loads(copal.dumps(value))
    assert back[3] is back
    assert back[:3] == [1, 2, 3] and back[4:] == [4] * 10


def test_lists_in_records_round_trip(tmp_path: Path) -> None:
    value = EDGE_INTS + ["a", "b", "a"] * 100 + [[0] * 50]
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["holder"] = Holder(value=value)
    db.close()
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        back = tx.root["holder"].value
        assert back == value
        zero = value[-1][0]
        assert back[-1] == [0] * 50 and all(item is zero for item in back[-1])
    db.close()


def test_int_in_a_list_past_the_depth_limit_is_refused() -> None:
    # 256 nested lists hold their int at depth 256, the deepest allowed; 257 do not.
    assert copal.loads(_stream("0b01" * 256 + "0300")) is not None
    with pytest.raises(CorruptRecordError, match="deeper"):
        copal.loads(_stream("0b01" * 257 + "0300"))


@pytest.mark.parametrize("item", ["1b05", "03", "1b", "1b80"], ids=["unknown-slot", "truncated-int", "truncated-ref", "truncated-varint"])
def test_bad_items_after_a_run_are_corrupt(item: str) -> None:
    # A shared string, then two good items and a bad one.
    with pytest.raises(CorruptRecordError):
        copal.loads(_stream("0b04" + "0702" + "6162" + "1b00" + "0300" + item))
