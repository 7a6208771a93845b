"""Objects changed while copal.dumps writes them: Python code run mid-write (an enum's
``_name_``, here through ``helpers.models.Hooked``) that adds, removes or replaces attributes, or
makes an instance's ``__dict__``. The encoder writes the object as it read it or refuses it with
its error, and never reads freed memory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import pytest

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import copal  # noqa: E402
from helpers.compare import READS_INSTANCE_VALUES, has_made_dict  # noqa: E402
from helpers.models import Color, Hooked, Point, hooked  # noqa: E402
from test_serialize import _Pair  # noqa: E402


def test_an_object_changed_before_its_turn_in_an_object_list_is_written_as_it_is_then() -> None:
    """The objects of an OBJECT_LIST are checked one at a time, each just before it is written:
    Python code run while an earlier one is written (here by an enum's ``_name_``) that removes
    a later object's attribute makes that object no longer fit, and the list is written as a
    LIST whose objects have the attributes they had when written."""
    pairs = [_Pair(Hooked.ONLY, 1), _Pair(None, 2)]
    with hooked(lambda: delattr(pairs[1], "b")):
        loaded = copal.loads(copal.dumps(pairs))
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
    with hooked(lambda: change(target)):
        with pytest.raises(TypeError, match="changed while it was being written"):
            copal.dumps(value)


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
    with hooked(lambda: vars(target)):
        (loaded,) = copal.loads(copal.dumps([target]))
    assert has_made_dict(target)
    assert vars(loaded) == {"x": Hooked.ONLY, "y": 2}


def test_an_attribute_added_with_the_dict_made_while_the_object_is_written_is_refused() -> None:
    target = Point(Hooked.ONLY, 2)

    def change() -> None:
        vars(target)
        target.z = 3  # type: ignore[attr-defined]

    with hooked(change):
        with pytest.raises(TypeError, match="changed while it was being written"):
            copal.dumps([target])


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
    with hooked(lambda: setattr(target, "z", 3)):
        with pytest.raises(TypeError, match="changed while it was being written"):
            copal.dumps([target])


def test_an_attribute_replaced_while_its_object_is_written_is_written_as_it_was_read() -> None:
    """An object's fields are read once, before its body is written (encode/fields.rs `with_fields`):
    Python code run while an earlier field is written (an enum's ``_name_``) that replaces a
    later field's value does not change what is written for this object, and the typed body
    stays consistent with the kinds its values were checked against (a str replaced by an int
    failed the string field before)."""
    target = Point(Hooked.ONLY, "text")
    with hooked(lambda: setattr(target, "y", 5)):
        (loaded,) = copal.loads(copal.dumps([target]))
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
