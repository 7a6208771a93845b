"""The ``__slots__`` of a class that copal stores as fields of its objects.

An object stored by value (an OBJECT, docs/FORMAT.md "Values") has as fields the slots that
are set, in the order of its class's MRO with bases first, then its ``__dict__`` if it has one.
Each slot is read and written through its member descriptor, as ``copy`` and ``pickle`` do, so
that no ``__setattr__`` of the class runs (a frozen dataclass raises in its own).

>>> class Point:
...     __slots__ = ("x", "y")
>>> [name for name, _ in stored_slots(Point)]
['x', 'y']
"""

from __future__ import annotations

from types import MemberDescriptorType
from typing import Any
from . import _core

_NOT_FOUND: Any = object()

# A class's MRO, namespace and names, read through ``type``'s own descriptors (C code) rather
# than attribute lookup, so that no metaclass ``__getattribute__`` runs while copal inspects a
# class (docs/explanation/safety.md).
_mro_of: Any = type.__dict__["__mro__"].__get__
_namespace_of: Any = type.__dict__["__dict__"].__get__
_name_of: Any = type.__dict__["__name__"].__get__
_qualname_of: Any = type.__dict__["__qualname__"].__get__
_module_of: Any = type.__dict__["__module__"].__get__


def stored_slots(cls: type) -> tuple[tuple[str, Any], ...]:
    """(attribute name, member descriptor) of every slot of ``cls``'s instances, bases first.

    Names are the attribute names, mangled as the class statement mangles them (``__x`` in
    class ``C`` is ``_C__x``). ``__dict__`` and ``__weakref__`` are not slots that hold values.

    Raises:
        TypeError: a slot is shadowed in ``cls``'s MRO by another attribute of its name (a
            property, say): which of the two holds the object's value cannot be told.
    """
    slots: list[tuple[str, Any]] = []
    # Members that no __slots__ declares (os.stat_result's fields, say) are their type's to
    # fill, not slots.
    for klass in reversed(_mro_of(cls)):
        for name, member in _own_slots(klass):
            found = _class_attribute(cls, name)
            if found is not member:
                raise TypeError(
                    f"cannot store instances of {_module_of(cls)}.{_qualname_of(cls)}: its slot {name!r} "
                    f"(declared by {_qualname_of(klass)}) is shadowed by {_name_of(type(found))} "
                    f"{name!r}, so copal cannot tell where the value lives; rename one of them"
                )
            slots.append((name, member))
    return tuple(slots)


def stored_state(obj: Any) -> dict[str, Any]:
    """The fields an object stored by value has: its slots that are set, then its ``__dict__``."""
    state = {name: value for name, member in stored_slots(type(obj)) if (value := _slot_value(obj, member)) is not _NOT_FOUND}
    state.update(getattr(obj, "__dict__", {}))
    return state


def _slot_value(obj: Any, member: Any) -> Any:
    try:
        return member.__get__(obj, type(obj))
    except AttributeError:
        return _NOT_FOUND


def _own_slots(klass: type) -> list[tuple[str, Any]]:
    """The member descriptors ``klass`` itself made for its ``__slots__``, in declared order."""
    namespace = _namespace_of(klass)
    if "__slots__" not in namespace:
        return []
    members = {
        name: value
        for name, value in namespace.items()
        if type(value) is MemberDescriptorType and value.__objclass__ is klass
    }
    declared = namespace.get("__slots__", ())
    names = [declared] if isinstance(declared, str) else list(declared) if isinstance(declared, (tuple, list, dict)) else []
    ordered = [mangled for name in names if (mangled := _mangle(_name_of(klass), name)) in members]
    # Members the declaration no longer lists (it was an iterator, now spent) follow in the
    # order the class statement made them.
    ordered += [name for name in members if name not in ordered]
    return [(name, members[name]) for name in ordered]


def _class_attribute(cls: type, name: str) -> Any:
    for klass in _mro_of(cls):
        namespace = _namespace_of(klass)
        if name in namespace:
            return namespace[name]
    return _NOT_FOUND


def _mangle(class_name: str, name: str) -> str:
    """``name`` as the class statement of ``class_name`` stores it (CPython's ``_Py_Mangle``)."""
    stripped = class_name.lstrip("_")
    if not name.startswith("__") or name.endswith("__") or "." in name or not stripped:
        return name
    return f"_{stripped}{name}"


# The binding reads slots as this function finds them; it is handed it here and never imports
# this module.
_core.install_hooks(stored_slots=stored_slots)
