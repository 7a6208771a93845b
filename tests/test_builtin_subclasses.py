"""Subclasses of built-in containers: stored when the container's own constructor rebuilds
them, refused otherwise (a struct sequence such as ``os.stat_result``, a subclass of a C
container such as ``collections.OrderedDict``), instead of a stream that cannot be read back or
an object that comes back empty."""

from __future__ import annotations

import collections
import os
import time
from pathlib import Path
from typing import NamedTuple

import pytest

import copal


class OrderedSub(collections.OrderedDict):  # type: ignore[type-arg]
    pass


class DefaultSub(collections.defaultdict):  # type: ignore[type-arg]
    pass


class Tagged:
    tag = "mixin"


class TaggedList(Tagged, list):  # type: ignore[type-arg]
    pass


class Pair(NamedTuple):
    left: int
    right: str


class Tally(collections.Counter):  # type: ignore[type-arg]
    pass


@pytest.mark.parametrize(
    "value",
    [os.stat_result(tuple(range(10))), time.gmtime(0), OrderedSub(a=1), DefaultSub(list, a=[1])],
    ids=["stat_result", "struct_time", "OrderedDict subclass", "defaultdict subclass"],
)
def test_containers_their_base_cannot_rebuild_are_refused(value: object) -> None:
    with pytest.raises(TypeError, match="cannot be stored"):
        copal.dumps(value)
    with pytest.raises(TypeError, match="cannot be stored"):
        copal.dumps({"inside": [value]}, format="json")


def test_python_subclasses_still_round_trip() -> None:
    tagged = TaggedList([1, 2])
    tagged.note = "kept"  # type: ignore[attr-defined]
    back = copal.loads(copal.dumps([tagged, Pair(1, "x"), Tally("aab")]))
    assert type(back[0]) is TaggedList and back[0] == [1, 2] and back[0].note == "kept"
    assert back[1] == Pair(1, "x") and type(back[1]) is Pair
    assert back[2] == Tally("aab") and type(back[2]) is Tally


def test_a_database_refuses_them_and_stays_readable(tmp_path: Path) -> None:
    db = copal.open(tmp_path / "db")
    with db.transaction() as tx:
        tx.root["kept"] = 1
    with pytest.raises(TypeError, match="cannot be stored"):
        with db.transaction() as tx:
            tx.root["stat"] = os.stat(tmp_path)
    with db.transaction() as tx:
        assert dict(tx.root) == {"kept": 1}
    db.close()


def test_a_stream_naming_a_struct_sequence_is_refused_clearly() -> None:
    # What an earlier copal wrote for os.stat_result(range(10)): a SUBCLASS of TUPLE.
    written = bytes.fromhex(
        "43504c3103002a01000e6f732e737461745f726573756c740019000c0a03000302030403060308030a030c030e03100312"
    )
    with pytest.raises(copal.SchemaError, match="os.stat_result.*cannot be rebuilt"):
        copal.loads(written)
