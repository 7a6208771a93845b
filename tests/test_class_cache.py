"""What copal learns about a class is kept across calls only while the class is unchanged.

``copal.dumps`` / ``copal.loads`` remember per class (crates/copal-py/src/class_cache.rs) its
stored type name, its field lists and the outcome of the safety checks that loading runs before
rebuilding an instance. Each test first makes the cache learn a class with one successful call,
then changes the class (or replaces it) and checks that the next call behaves exactly as the
first call on a class defined that way from the start. Without the invalidation the stale fact
would be used: the loads would succeed, or the old name or shape would be written.
"""

from __future__ import annotations

import gc
import sys
import types
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

import copal
from copal.errors import SchemaError
from helpers.c_classes import class_made_by_c

MODULE = "copal_class_cache_test_module"


@pytest.fixture
def module() -> Iterator[types.ModuleType]:
    """A module in ``sys.modules`` where streams find the test's classes by name."""
    mod = types.ModuleType(MODULE)
    sys.modules[MODULE] = mod
    yield mod
    del sys.modules[MODULE]


def define(module: types.ModuleType, name: str, namespace: dict[str, Any] | None = None, bases: tuple[type, ...] = ()) -> type:
    cls = type(name, bases, {"__module__": MODULE, **(namespace or {})})
    setattr(module, name, cls)
    return cls


def learned(cls: type, **fields: Any) -> bytes:
    """A stream of one instance of ``cls``, written and loaded once so the cache knows ``cls``."""
    obj = cls()
    obj.__dict__.update(fields)
    data = copal.dumps(obj)
    back = copal.loads(data)
    assert type(back) is cls and back.__dict__ == fields
    return data


def test_a_finalizer_added_after_loading_is_refused(module: types.ModuleType) -> None:
    cls = define(module, "Closer")
    data = learned(cls, name="x")
    cls.__del__ = lambda self: None  # type: ignore[attr-defined]
    with pytest.raises(SchemaError, match="finalizer"):
        copal.loads(data)


def test_a_finalizer_added_to_a_base_is_refused(module: types.ModuleType) -> None:
    """A change to a base invalidates the subclass: CPython clears the version tags of both."""
    base = define(module, "Base")
    cls = define(module, "Derived", bases=(base,))
    data = learned(cls, name="x")
    base.__del__ = lambda self: None  # type: ignore[attr-defined]
    with pytest.raises(SchemaError, match="finalizer"):
        copal.loads(data)


def test_a_property_added_for_a_field_is_refused(module: types.ModuleType) -> None:
    calls: list[Any] = []
    cls = define(module, "Account")
    data = learned(cls, balance=1)
    cls.balance = property(lambda self: 0, lambda self, value: calls.append(value))  # type: ignore[attr-defined]
    with pytest.raises(SchemaError, match="data descriptor"):
        copal.loads(data)
    assert calls == []


class Lazy:
    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return self


@pytest.mark.parametrize("made_by", ["python", "c"])
def test_a_descriptor_class_that_gains_a_setter_is_refused(module: types.ModuleType, made_by: str) -> None:
    """The class itself does not change when the type of its attribute gains ``__set__``, so a
    pass that depended on a descriptor type that can change (a Python class, or a C class not
    marked immutable) is never cached."""
    calls: list[Any] = []
    descriptor_class = type("Lazy", (Lazy,), {}) if made_by == "python" else class_made_by_c("copal_c_made.Lazy", immutable=False, own_dealloc=True, c_field=False)
    cls = define(module, "Holder", {"value": descriptor_class()})
    data = learned(cls, value=1)
    descriptor_class.__set__ = lambda self, obj, value: calls.append(value)  # type: ignore[attr-defined]
    with pytest.raises(SchemaError, match="data descriptor"):
        copal.loads(data)
    assert calls == []


def test_setstate_added_after_loading_is_never_called(module: types.ModuleType) -> None:
    """Loading never calls ``__setstate__`` (it sets the fields), cached or not."""
    calls: list[Any] = []
    cls = define(module, "Restored")
    data = learned(cls, x=1)
    cls.__setstate__ = lambda self, state: calls.append(state)  # type: ignore[attr-defined]
    back = copal.loads(data)
    assert back.__dict__ == {"x": 1} and calls == []


def test_a_new_base_with_a_finalizer_is_refused(module: types.ModuleType) -> None:
    """Assigning ``__bases__`` changes the MRO, and so the version tag."""
    cls = define(module, "Rebased", bases=(define(module, "Plain"),))
    data = learned(cls, x=1)
    cls.__bases__ = (define(module, "Finalized", {"__del__": lambda self: None}),)
    with pytest.raises(SchemaError, match="finalizer"):
        copal.loads(data)


def test_own_new_added_after_loading_is_refused(module: types.ModuleType) -> None:
    cls = define(module, "Built")
    data = learned(cls, x=1)
    cls.__new__ = staticmethod(lambda klass: object.__new__(klass))  # type: ignore[assignment]
    with pytest.raises(SchemaError, match="defines __new__"):
        copal.loads(data)


def test_a_container_subclass_given_its_own_new_is_refused(module: types.ModuleType) -> None:
    """Whether a subclass of a built-in container is rebuilt by its base is kept per class
    (``encode::rebuilt_by_base``); a ``__new__`` written later makes both writing and reading
    refuse it, as for a class defined with one."""
    cls = define(module, "Tagged", bases=(list,))
    data = copal.dumps(cls([1, 2]))
    assert copal.loads(data) == [1, 2]
    cls.__new__ = lambda klass, *args: list.__new__(klass)  # type: ignore[assignment]
    with pytest.raises(TypeError, match="own __new__"):
        copal.dumps(cls([1, 2]))
    with pytest.raises(SchemaError, match="own __new__"):
        copal.loads(data)


def test_a_redefined_class_is_used(module: types.ModuleType) -> None:
    old = define(module, "Point")
    data = learned(old, x=1)
    new = define(module, "Point")
    back = copal.loads(data)
    assert type(back) is new and back.__dict__ == {"x": 1}


def test_a_redefined_class_with_a_finalizer_is_refused(module: types.ModuleType) -> None:
    data = learned(define(module, "Point"), x=1)
    define(module, "Point", {"__del__": lambda self: None})
    with pytest.raises(SchemaError, match="finalizer"):
        copal.loads(data)


def test_a_changed_shape_is_written(module: types.ModuleType) -> None:
    cls = define(module, "Shape")
    learned(cls, x=1, y=2)
    for fields in [{"x": 1, "y": 2, "z": 3}, {"y": 2}, {"y": 2, "x": 1}]:
        obj = cls()
        obj.__dict__.update(fields)
        back = copal.loads(copal.dumps(obj))
        assert list(back.__dict__.items()) == list(fields.items())


@pytest.mark.parametrize("attribute", ["__copal_type__", "__qualname__", "__module__"])
def test_a_renamed_class_is_written_under_its_new_name(module: types.ModuleType, attribute: str) -> None:
    """The stored type name is remembered per class; renaming the class must change it."""
    cls = define(module, "Named")
    learned(cls, x=1)
    renamed = define(module, "Renamed")
    if attribute == "__module__":
        other = types.ModuleType("copal_class_cache_other_module")
        other.Named = renamed  # type: ignore[attr-defined]
        sys.modules[other.__name__] = other
        cls.__module__ = other.__name__
    elif attribute == "__qualname__":
        cls.__qualname__ = "Renamed"
    else:
        cls.__copal_type__ = f"{MODULE}.Renamed"  # type: ignore[attr-defined]
    try:
        obj = cls()
        obj.x = 1
        assert type(copal.loads(copal.dumps(obj))) is renamed
    finally:
        sys.modules.pop("copal_class_cache_other_module", None)


def test_classes_are_not_kept_alive(module: types.ModuleType) -> None:
    """The cache keys classes by address and version tag and holds no reference to them."""
    cls = define(module, "Transient")
    learned(cls, x=1)
    ref = weakref.ref(cls)
    delattr(module, "Transient")
    del cls
    gc.collect()
    assert ref() is None
