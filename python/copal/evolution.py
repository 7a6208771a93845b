"""Class evolution: reading records written by older versions of a class.

Rules, applied when a record's fields differ from what the class expects (docs/FORMAT.md, section 5):

1. **Renamed fields**: ``__copal_renamed__ = {"old": "new"}`` on the class; the stored ``old``
   value becomes attribute ``new``.
2. **Added fields**: a field missing from the record gets the default of the ``__init__``
   parameter of the same name (copied, so mutable defaults are not shared). A class attribute of
   that name needs nothing: attribute lookup finds it.
3. **Removed fields**: a field listed in ``__copal_removed__ = ("old",)`` (stored field names) is
   not set on loaded objects; its value stays in the record until the object is next written
   (which writes it without the field), and ``copal gc --schema`` reports such values or purges
   them (``--purge``). The declaration is stored in the database, so the command works without
   the application's classes. A field that is merely no longer used stays an attribute of the
   loaded object and is written back with it: nothing is dropped unless it is declared.
4. **Type changes**: a class annotation (``balance: float``) on a persistent class declares a
   field's type. Lossless
   conversions happen on load: int -> float (exact), float -> int (integral values), tuple <->
   list, str or int -> Enum by value. Anything else raises SchemaError naming the class, field,
   object id and both types. ``None`` is always accepted.
5. **Unknown classes**: a record whose class cannot be found loads as a :class:`Broken` object
   (read-only; ``type_name`` and ``state``), an embedded value as a :class:`BrokenObject`; both
   are written back unchanged.
"""

from __future__ import annotations

import copy
import dis
import enum
import inspect
import types
import weakref
from typing import Any, Callable, Iterable

from . import _core
from .errors import CopalError, SchemaError
from .persistent import Persistent, registry, registry_generation
from .slots import stored_slots

__all__ = ["Broken", "BrokenObject", "declared_removals", "field_default", "field_defaults", "plan", "renamed_fields"]

_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset)


class Broken(Persistent):
    """A stored persistent object whose class is not available (not imported, renamed without an
    alias, or deleted). Read-only: its record is kept as it is."""

    __copal_type__ = "copal.Broken"

    @property
    def type_name(self) -> str:
        """The type name the object was stored under."""
        name: str = self.__dict__.get("_v_copal_type", "?")
        return name

    @property
    def state(self) -> dict[str, Any]:
        """The stored attributes."""
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_v_")}

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_v_") or name.startswith("_p_"):
            super().__setattr__(name, value)
            return
        raise SchemaError(
            f"cannot change a Broken object of missing class {self.type_name!r}: import its class first, "
            f"or, if the class was renamed or moved, list {self.type_name!r} in the new class's __copal_aliases__"
        )

    def __repr__(self) -> str:
        oid = self._p_oid
        return f"<Broken {self.type_name} oid={oid:#x}>" if oid is not None else f"<Broken {self.type_name}>"


class BrokenObject:
    """An embedded (by-value) object whose class is not available; written back unchanged."""

    __slots__ = ("type_name", "state")

    def __init__(self, type_name: str, state: dict[str, Any]) -> None:
        self.type_name = type_name
        self.state = state

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BrokenObject) and (self.type_name, self.state) == (other.type_name, other.state)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<BrokenObject {self.type_name} {self.state!r}>"


def _declared_types(cls: type) -> dict[str, type]:
    types: dict[str, type] = {}
    for klass in reversed(cls.__mro__):
        for name, annotation in klass.__dict__.get("__annotations__", {}).items():
            if isinstance(annotation, str):
                annotation = {"int": int, "float": float, "str": str, "list": list, "tuple": tuple}.get(annotation)
            if isinstance(annotation, type):
                types[name] = annotation
    return types


#: `_init_defaults` per class and ``__init__`` (reading them disassembles the function).
_init_defaults_of: weakref.WeakKeyDictionary[type, tuple[Any, dict[str, Any]]] = weakref.WeakKeyDictionary()


def _init_defaults(cls: type) -> dict[str, Any]:
    """The defaults of the ``__init__`` parameters that are attributes of the instances: those
    ``__init__`` assigns to an attribute of the same name (``self.level = level``) or the class
    declares (annotations, dataclass fields). An option that is not kept (``verbose=False``,
    ``PersistentList(items=())``) must not become a field of every loaded object."""
    init = cls.__dict__.get("__init__") or getattr(cls, "__init__", None)
    known = _init_defaults_of.get(cls)
    if known is not None and known[0] is init:
        return known[1]
    defaults = _read_init_defaults(cls, init)
    try:
        _init_defaults_of[cls] = (init, defaults)
    except TypeError:  # a class that cannot be weakly referenced is read each time
        pass
    return defaults


def _read_init_defaults(cls: type, init: Any) -> dict[str, Any]:
    if init is None or init is object.__init__:
        return {}
    code = getattr(init, "__code__", None)
    attributes = (_stored_attributes(code) if code is not None else set()) | _declared_names(cls)
    if isinstance(init, types.FunctionType) and not hasattr(init, "__wrapped__"):
        # A plain function's defaults, read as `inspect.signature` would, without building it.
        positional = code.co_varnames[: code.co_argcount] if code is not None else ()
        given = init.__defaults__ or ()
        found = dict(zip(positional[len(positional) - len(given) :], given))
        found.update(init.__kwdefaults__ or {})
        return {name: value for name, value in found.items() if name in attributes}
    try:
        signature = inspect.signature(init)
    except (TypeError, ValueError):
        return {}
    return {
        name: p.default
        for name, p in signature.parameters.items()
        if p.default is not inspect.Parameter.empty and p.kind is not inspect.Parameter.VAR_KEYWORD and name in attributes
    }


def _stored_attributes(code: Any) -> set[str]:
    """The attribute names that ``code`` assigns (its STORE_ATTR instructions), read from the
    raw wordcode: building ``dis`` instruction objects costs a millisecond per ``__init__``."""
    found: set[str] = set()
    raw, extended = code.co_code, 0
    for i in range(0, len(raw), 2):
        op, arg = raw[i], raw[i + 1] | extended
        extended = arg << 8 if op == dis.EXTENDED_ARG else 0
        if op == _STORE_ATTR:
            found.add(code.co_names[arg])
    return found


_STORE_ATTR = dis.opmap["STORE_ATTR"]


def _declared_names(cls: type) -> set[str]:
    return {name for klass in cls.__mro__ for name in klass.__dict__.get("__annotations__", {})}


def _converter(cls: type, name: str, declared: type) -> Callable[[Any, Any], Any]:
    def fail(obj: Any, value: Any) -> SchemaError:
        oid = getattr(obj, "_p_oid", None)
        where = f" of object {oid:#x}" if isinstance(oid, int) else ""
        return SchemaError(
            f"{cls.__qualname__}.{name}{where}: stored {type(value).__name__} {value!r} cannot be converted "
            f"without loss to the declared {declared.__name__}"
        )

    def convert(obj: Any, value: Any) -> Any:
        if value is None or isinstance(value, declared):
            return value
        if declared is float and isinstance(value, int) and not isinstance(value, bool):
            if abs(value) <= 2**53:
                return float(value)
        elif declared is int and isinstance(value, float) and value.is_integer():
            return int(value)
        elif declared is list and isinstance(value, tuple):
            return list(value)
        elif declared is tuple and isinstance(value, list):
            return tuple(value)
        elif issubclass(declared, enum.Enum) and isinstance(value, (str, int)):
            member = declared._value2member_map_.get(value)
            if member is not None:
                return member
        raise fail(obj, value)

    return convert


def _removed_fields(cls: type) -> set[str]:
    """The stored field names ``cls`` and its bases declare removed (``__copal_removed__``)."""
    removed: set[str] = set()
    for klass in cls.__mro__:
        names = klass.__dict__.get("__copal_removed__", ())
        if isinstance(names, str) or not all(isinstance(n, str) for n in names):
            raise TypeError(f"{klass.__qualname__}.__copal_removed__ must be a tuple of field names (str)")
        removed.update(names)
    return removed


def declared_removals() -> list[tuple[str, list[str]]]:
    """Every stored type name of the registered persistent classes (aliases included) with the
    fields its class declares removed (an empty list for none, which withdraws an earlier
    declaration). The database stores them before each transaction that follows a new class."""
    return [
        (name, sorted(_removed_fields(cls)))
        for name, cls in sorted(registry.items())
        if isinstance(cls, type) and issubclass(cls, Persistent)
    ]


_renames: list[tuple[int, list[tuple[str, str, str]]]] = []


def renamed_fields() -> list[tuple[str, str, str]]:
    """(stored type name, former field name, current name) for every field renamed by a
    registered class's ``__copal_renamed__`` (its own or inherited), under each name the class
    is stored by: queries read old records under the former names."""
    if _renames and _renames[0][0] == registry_generation[0]:
        return _renames[0][1]
    generation = registry_generation[0]
    found: list[tuple[str, str, str]] = []
    for type_name, cls in list(registry.items()):
        if not isinstance(cls, type):
            continue
        found += [(type_name, str(old), str(new)) for old, new in _renames_of(cls).items()]
    _renames[:] = [(generation, found)]
    return found


def _renames_of(cls: type) -> dict[str, str]:
    """Former field name -> current name, declared by ``cls`` and its bases."""
    renamed: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        renamed.update(klass.__dict__.get("__copal_renamed__", {}))
    return renamed


#: What :func:`field_default` returns for a field that loading leaves missing.
NO_DEFAULT: Any = object()
_defaults: dict[tuple[type, str], Any] = {}
_defaults_by_name: dict[str, list[tuple[str, str, Any]]] = {}
_defaults_generation = [-1]


def _forget_defaults_of_former_registry() -> None:
    if _defaults_generation[0] != registry_generation[0]:
        _defaults.clear()
        _defaults_by_name.clear()
        _defaults_generation[0] = registry_generation[0]


def field_default(cls: type, name: str) -> Any:
    """The value that attribute ``name`` has on an object of ``cls`` loaded from a record
    without that field, or :data:`NO_DEFAULT` when the attribute is then missing. It is what
    loading gives: a class attribute of that name (found by attribute lookup; methods,
    properties and other descriptors compute their value and give none), else the ``__init__``
    default that :func:`plan` fills in. Queries evaluate a missing field as this value, so that
    they agree with what loading returns; a value that cannot be stored gives none."""
    _forget_defaults_of_former_registry()
    key = (cls, name)
    if key in _defaults:
        return _defaults[key]
    attribute = inspect.getattr_static(cls, name, NO_DEFAULT)
    if attribute is NO_DEFAULT or name in _slot_names(cls):
        default = _init_defaults(cls).get(name, NO_DEFAULT)
    elif callable(attribute) or hasattr(type(attribute), "__get__"):
        default = NO_DEFAULT
    else:
        default = attribute
    if default is not NO_DEFAULT and not _storable(default):
        default = NO_DEFAULT
    _defaults[key] = default
    return default


def _storable(value: Any) -> bool:
    from .serialize import dumps  # serialize imports the compiled core, which imports this module

    try:
        dumps(value)
    except (TypeError, ValueError, CopalError):
        return False
    return True


def _slot_names(cls: type) -> set[str]:
    try:
        return {name for name, _ in stored_slots(cls)}
    except TypeError:  # a shadowed slot: such a class is not loaded
        return set()


def _has_class_value(cls: type, name: str) -> bool:
    """Whether attribute lookup finds ``name`` on ``cls``: not so for a slot, whose member
    descriptor on the class holds no value for an object that never had it set."""
    return hasattr(cls, name) and name not in _slot_names(cls)


def field_defaults(names: Iterable[str]) -> list[tuple[str, str, Any]]:
    """(stored type name, field, default) for each field of ``names`` that a registered class
    gives a default (:func:`field_default`), under each name the class is stored by: queries
    read records without the field as holding the default."""
    _forget_defaults_of_former_registry()
    found = []
    for name in names:
        if name not in _defaults_by_name:
            _defaults_by_name[name] = [
                (type_name, name, default)
                for type_name, cls in list(registry.items())
                if isinstance(cls, type) and (default := field_default(cls, name)) is not NO_DEFAULT
            ]
        found += _defaults_by_name[name]
    return found


def plan(cls: type, stored: list[str]) -> tuple[list[str], Callable[[Any, dict[str, Any]], None] | None] | None:
    """How to load records with fields ``stored`` into instances of ``cls``: the attribute names
    (after renames) and a fix-up applying defaults and conversions, or None when the record
    needs nothing. Called once per (stored shape, class) by the decoder."""
    renamed = _renames_of(cls)
    names = [renamed.get(f, f) for f in stored]
    removed = _removed_fields(cls)
    dropped = [name for name, f in zip(names, stored) if f in removed]
    present = set(names)
    defaults = {
        name: value
        for name, value in _init_defaults(cls).items()
        if name not in present and not _has_class_value(cls, name)
    }
    # Annotations declare stored types only on persistent classes: a dataclass's annotations
    # are routinely looser than its values (``x: float = 0``), and rewriting them on load would
    # change the application's own values.
    declared = _declared_types(cls) if issubclass(cls, Persistent) else {}
    conversions = {name: _converter(cls, name, t) for name, t in declared.items() if name in present}
    if names == stored and not defaults and not conversions and not dropped:
        return None

    def fixup(obj: Any, state: dict[str, Any]) -> None:
        # `state` is the instance dict, handed over by the decoder: reading obj.__dict__ here
        # would try to load the object that is being loaded.
        for name, default in defaults.items():
            if name not in state:
                state[name] = default if isinstance(default, _IMMUTABLE) else copy.copy(default)
        for name, convert in conversions.items():
            if name in state:
                state[name] = convert(obj, state[name])
        for name in dropped:
            state.pop(name, None)

    return names, (fixup if defaults or conversions or dropped else None)


# The binding makes Broken objects and loads evolved records with these; it is handed them here
# and never imports this module.
_core.install_hooks(broken=Broken, broken_object=BrokenObject, evolution_plan=plan)
