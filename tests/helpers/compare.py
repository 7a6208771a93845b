"""Deep comparison of decoded values with the values that were stored.

``==`` is not enough to check a round trip: it treats ``1 == 1.0 == True``, ``b"" == bytearray()``
and ``0.0 == -0.0`` as the same, ignores ``datetime.fold`` and tzinfo identity, never holds for
NaN, and recurses forever on cycles. ``assert_same`` compares exact types, floats bit for bit
(NaN with NaN), Decimals by their string form, datetimes by wall time, offset, fold and zone,
and checks that the *shape* of sharing is kept: two paths that reach one mutable object in the
stored value reach one object in the decoded value, and distinct ones stay distinct.
"""

from __future__ import annotations

import collections
import ctypes
import datetime
import decimal
import enum
import gc
import math
import sys
import sysconfig
import uuid
from typing import Any

from copal import Persistent

# Mutable values (and plain instances) whose identity a round trip must keep.
_IDENTITY_TYPES = (list, dict, set, bytearray, collections.deque)


def assert_same(expected: Any, actual: Any, path: str = "value") -> None:
    """Assert that ``actual`` is a faithful copy of ``expected`` (see the module docstring)."""
    _Comparer().same(expected, actual, path)


class _Comparer:
    def __init__(self) -> None:
        self.forward: dict[int, Any] = {}
        self.backward: dict[int, Any] = {}
        # Keep the objects alive so that their ids cannot be reused during the comparison.
        self.keep: list[Any] = []

    def _tracks_identity(self, value: Any) -> bool:
        if isinstance(value, (enum.Enum, Persistent)):
            return False
        if isinstance(value, _IDENTITY_TYPES):
            return True
        return hasattr(value, "__dict__") and not isinstance(value, type)

    def same(self, e: Any, a: Any, path: str) -> None:
        if type(e) is not type(a):
            raise AssertionError(f"{path}: type {type(a).__name__} ({a!r:.200}), expected "
                                 f"{type(e).__name__} ({e!r:.200})")
        if self._tracks_identity(e):
            seen = self.forward.get(id(e))
            if seen is not None:
                assert seen is a, f"{path}: a shared object was decoded as two different objects"
                return
            assert id(a) not in self.backward, (
                f"{path}: two distinct stored objects were decoded as one object")
            self.forward[id(e)] = a
            self.backward[id(a)] = e
            self.keep += [e, a]
        self._same_value(e, a, path)

    def _same_value(self, e: Any, a: Any, path: str) -> None:
        if isinstance(e, enum.Enum):
            assert a is e, f"{path}: {a!r} is not the enum member {e!r}"
            return
        if isinstance(e, Persistent):
            assert a._p_oid == e._p_oid, f"{path}: reference to oid {a._p_oid}, expected {e._p_oid}"
            return
        if isinstance(e, float):
            assert _same_float(e, a), f"{path}: {a!r} != {e!r}"
        elif isinstance(e, complex):
            assert _same_float(e.real, a.real) and _same_float(e.imag, a.imag), f"{path}: {a!r} != {e!r}"
        elif isinstance(e, decimal.Decimal):
            assert str(e) == str(a), f"{path}: Decimal {str(a)!r} != {str(e)!r}"
        elif isinstance(e, datetime.datetime):
            _same_datetime(e, a, path)
        elif isinstance(e, datetime.time):
            assert (e.hour, e.minute, e.second, e.microsecond, e.fold) == (
                a.hour, a.minute, a.second, a.microsecond, a.fold), f"{path}: {a!r} != {e!r}"
            _same_tzinfo(e.tzinfo, a.tzinfo, path, None)
        elif isinstance(e, (type(None), bool, int, str, bytes, bytearray, datetime.date,
                            datetime.timedelta, uuid.UUID)):
            assert e == a, f"{path}: {a!r:.300} != {e!r:.300}"
        elif isinstance(e, (list, tuple, collections.deque)):
            assert len(e) == len(a), f"{path}: length {len(a)}, expected {len(e)}"
            if isinstance(e, collections.deque):
                assert e.maxlen == a.maxlen, f"{path}: maxlen {a.maxlen}, expected {e.maxlen}"
            for i, (x, y) in enumerate(zip(e, a)):
                self.same(x, y, f"{path}[{i}]")
        elif isinstance(e, dict):
            assert len(e) == len(a), f"{path}: {len(a)} keys, expected {len(e)}"
            if isinstance(e, collections.defaultdict):
                assert e.default_factory is a.default_factory, f"{path}: default_factory {a.default_factory!r}"
            for i, ((k1, v1), (k2, v2)) in enumerate(zip(e.items(), a.items())):
                self.same(k1, k2, f"{path}.keys()[{i}]")
                self.same(v1, v2, f"{path}[{k1!r}]")
        elif isinstance(e, (set, frozenset)):
            assert len(e) == len(a), f"{path}: {len(a)} elements, expected {len(e)}"
            by_value = {y: y for y in a}
            for x in e:
                assert x in by_value, f"{path}: element {x!r} missing from {a!r}"
                self.same(x, by_value[x], f"{path}{{{x!r}}}")
        elif not hasattr(e, "__dict__"):
            raise AssertionError(f"{path}: assert_same cannot compare {type(e).__name__}")
        # Instance attributes: of plain objects, dataclasses, and container subclasses.
        if hasattr(e, "__dict__") and not isinstance(e, type):
            ev, av = vars(e), vars(a)
            assert sorted(ev) == sorted(av), f"{path}: attributes {sorted(av)}, expected {sorted(ev)}"
            for name in ev:
                self.same(ev[name], av[name], f"{path}.{name}")


def _same_float(x: float, y: float) -> bool:
    if math.isnan(x):
        return math.isnan(y)
    return x == y and math.copysign(1.0, x) == math.copysign(1.0, y)


def _same_datetime(e: datetime.datetime, a: datetime.datetime, path: str) -> None:
    assert e.replace(tzinfo=None) == a.replace(tzinfo=None), f"{path}: {a!r} != {e!r}"
    assert e.fold == a.fold, f"{path}: fold {a.fold}, expected {e.fold} ({a!r})"
    _same_tzinfo(e.tzinfo, a.tzinfo, path, e)


def _same_tzinfo(e: Any, a: Any, path: str, when: datetime.datetime | None) -> None:
    assert type(e) is type(a), f"{path}: tzinfo {a!r}, expected {e!r}"
    if e is None:
        return
    key = getattr(e, "key", None)
    if key is not None:  # zoneinfo.ZoneInfo
        assert getattr(a, "key", None) == key, f"{path}: zone {a!r}, expected {e!r}"
    else:
        assert e == a, f"{path}: tzinfo {a!r}, expected {e!r}"
    if when is not None:
        assert e.utcoffset(when) == a.utcoffset(when), f"{path}: utcoffset differs"


def persistent_state(obj: Any) -> dict[str, Any]:
    """The stored attributes of persistent `obj`: all but volatile (``_v_``) and persistence
    (``_p_``) ones."""
    return {k: v for k, v in vars(obj).items() if not k.startswith(("_v_", "_p_"))}


#: Whether the encoders read an instance's attributes where CPython keeps them (its values array,
#: crates/copal-py/src/cpython/) without having its ``__dict__`` made: CPython 3.11 to 3.13 with
#: the GIL.
READS_INSTANCE_VALUES = (
    sys.implementation.name == "cpython" and (3, 11) <= sys.version_info[:2] <= (3, 13) and not sysconfig.get_config_var("Py_GIL_DISABLED")
)


def has_made_dict(obj: Any) -> bool:
    """Whether CPython made `obj`'s ``__dict__`` (since 3.11 an instance keeps its attributes in a
    values array until then). With a managed dict (`Py_TPFLAGS_MANAGED_DICT`), read where
    CPython 3.11 to 3.13 keep the dict, the third pointer before the object (the GC visits the
    values instead while they are inline, which on 3.13 outlasts the dict; 3.12 keeps the values
    pointer there until then, tagged by its lowest bit); else, whether the GC visits a dict."""
    if type(obj).__flags__ & (1 << 4) and sys.implementation.name == "cpython" and (3, 11) <= sys.version_info < (3, 14):
        pointer = ctypes.c_void_p.from_address(id(obj) - 3 * ctypes.sizeof(ctypes.c_void_p)).value
        return pointer is not None and pointer & 1 == 0
    return any(type(referent) is dict for referent in gc.get_referents(obj))
