"""Hypothesis strategies for values that copal stores inside a persistent object's record."""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from helpers.models import (
    Color,
    Level,
    Node,
    Point,
    Tagged,
    TaggedBytes,
    TaggedComplex,
    TaggedDict,
    TaggedFloat,
    TaggedInt,
    TaggedStr,
    Vector,
)

# Text including surrogates and other characters that UTF-8 cannot encode.
any_text = st.text(st.characters(exclude_categories=()), max_size=20)

fixed_offsets = st.builds(
    datetime.timezone, st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: datetime.timedelta(minutes=m))
)
timezones = st.none() | st.just(datetime.timezone.utc) | fixed_offsets

big_ints = st.integers() | st.integers(-(2**300), 2**300)


def hashable_leaves() -> st.SearchStrategy[Any]:
    """Leaves that may be dict keys and set elements and compare equal to their copies."""
    return st.one_of(
        st.none(),
        st.booleans(),
        big_ints,
        st.floats(allow_nan=False),
        any_text,
        st.binary(max_size=20),
        st.decimals(allow_nan=False),
        st.uuids(),
        st.dates(),
        st.datetimes(timezones=timezones),
        st.times(timezones=timezones),
        st.timedeltas(),
        st.sampled_from([Color.RED, Color.GREEN, Level.LOW, Level.HIGH]),
        st.complex_numbers(allow_nan=False),
    )


#: Instances of subclasses of the scalar built-ins, hashable and equal to their copies.
scalar_subclass_instances = st.one_of(
    big_ints.map(TaggedInt),
    st.floats(allow_nan=False).map(TaggedFloat),
    st.complex_numbers(allow_nan=False).map(TaggedComplex),
    any_text.map(TaggedStr),
    st.binary(max_size=20).map(TaggedBytes),
)


def leaves() -> st.SearchStrategy[Any]:
    """All leaves, including NaNs, which never compare equal (use assert_same)."""
    return hashable_leaves() | st.floats() | st.decimals() | st.builds(bytearray, st.binary(max_size=20))


def values(leaf: st.SearchStrategy[Any] | None = None) -> st.SearchStrategy[Any]:
    """Nested trees of containers and embedded objects (no sharing, no NaN): comparable with ==."""
    base = leaf if leaf is not None else (hashable_leaves() | st.builds(bytearray, st.binary(max_size=8)))
    keys = hashable_leaves()

    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            st.lists(children, max_size=5),
            st.lists(children, max_size=5).map(tuple),
            st.dictionaries(keys, children, max_size=5),
            st.sets(keys, max_size=5),
            st.frozensets(keys, max_size=5),
            st.builds(Point, children, children),
            st.builds(Vector, children, children, st.lists(st.text(max_size=5), max_size=3)),
            st.lists(children, max_size=3).map(Tagged),
        )

    return st.recursive(base, extend, max_leaves=25)


@st.composite
def value_graphs(draw: st.DrawFn, recursive_tuples: bool = False, scalar_subclasses: bool = False) -> list[Any]:
    """A list of nodes where later nodes contain earlier ones (shared references), and mutable
    nodes may then be made to contain any node, including themselves or later ones (cycles).
    With `recursive_tuples`, cycles may also pass through tuples (a tuple containing itself
    through a mutable container), and with `scalar_subclasses` nodes may be instances of
    subclasses of int, float, complex, str and bytes holding earlier nodes in an attribute: both
    only binary streams can hold."""
    nodes: list[Any] = []
    hashable: list[bool] = []
    for _ in range(draw(st.integers(1, 12))):
        containers = ["list", "tuple", "dict", "set", "frozenset", "point", "node", "tagged", "tdict"]
        kinds = ["leaf", "hleaf"] + (containers + (["scalar"] if scalar_subclasses else []) if nodes else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "leaf":
            nodes.append(draw(leaves()))
            hashable.append(False)
            continue
        if kind == "hleaf":
            nodes.append(draw(hashable_leaves()))
            hashable.append(True)
            continue
        picks = draw(st.lists(st.integers(0, len(nodes) - 1), max_size=5))
        children = [nodes[i] for i in picks]
        hashable_children = [nodes[i] for i in picks if hashable[i]]
        if kind == "list":
            nodes.append(children)
            hashable.append(False)
        elif kind == "scalar":
            scalar = draw(scalar_subclass_instances)
            scalar.children = children
            nodes.append(scalar)
            hashable.append(True)
        elif kind == "tagged":
            obj = Tagged(children)
            obj.tag = draw(st.text(max_size=5))
            nodes.append(obj)
            hashable.append(False)
        elif kind == "tuple":
            nodes.append(tuple(children))
            hashable.append(all(hashable[i] for i in picks))
        elif kind in ("dict", "tdict"):
            d = TaggedDict() if kind == "tdict" else {}
            for i, child in enumerate(children):
                d[f"k{i}"] = child
            for child in hashable_children:
                d[child] = len(d)
            nodes.append(d)
            hashable.append(False)
        elif kind == "set":
            nodes.append(set(hashable_children))
            hashable.append(False)
        elif kind == "frozenset":
            nodes.append(frozenset(hashable_children))
            hashable.append(True)
        elif kind == "point":
            nodes.append(Point(children[0] if children else None, children[-1] if children else None))
            hashable.append(False)
        else:
            node = Node(draw(st.text(max_size=5)))
            node.next = children[0] if children else None
            nodes.append(node)
            hashable.append(False)
    # Back edges: containers pointing at any node, themselves included.
    for i, j in draw(st.lists(st.tuples(st.integers(0, len(nodes) - 1), st.integers(0, len(nodes) - 1)),
                              max_size=4)):
        _point_back(nodes[i], nodes[j])
    if recursive_tuples:
        # Cycles through tuples are rare from random back edges: every tuple is made to contain
        # itself through one of its items that can hold it.
        for node in nodes:
            holders = [item for item in node if _can_point_back(item)] if isinstance(node, tuple) else []
            if holders:
                _point_back(draw(st.sampled_from(holders)), node)
    # Databases, archives and text documents refuse (with a TypeError) a tuple or frozenset
    # that contains itself through a mutable container (docs/FORMAT.md section 7).
    if not recursive_tuples:
        assume(not any(isinstance(n, (tuple, frozenset)) and _reaches(n, n) for n in nodes))
    return nodes


def _can_point_back(target: Any) -> bool:
    return isinstance(target, (list, dict, Point, Node))


def _point_back(target: Any, value: Any) -> None:
    """Makes `target`, if it is a mutable node, hold `value` too."""
    if isinstance(target, list):
        target.append(value)
    elif isinstance(target, dict):
        target[f"back{len(target)}"] = value
    elif isinstance(target, (Point, Node)):
        target.back = value


def _children(value: Any) -> list[Any]:
    found: list[Any] = []
    if isinstance(value, dict):
        found += list(value.keys()) + list(value.values())
    elif isinstance(value, (list, tuple, set, frozenset)):
        found += list(value)
    if hasattr(value, "__dict__") and not isinstance(value, type):
        found += list(vars(value).values())
    return found


def _reaches(start: Any, target: Any) -> bool:
    """Whether ``target`` is reachable from the children of ``start``."""
    seen: set[int] = set()
    stack = _children(start)
    while stack:
        value = stack.pop()
        if value is target:
            return True
        if id(value) in seen:
            continue
        seen.add(id(value))
        stack += _children(value)
    return False


__all__ = ["any_text", "hashable_leaves", "leaves", "value_graphs", "values"]
